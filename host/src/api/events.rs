//! `/events`: reading, summarising and deleting a project's events.

use std::collections::BTreeMap;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;

use super::ApiTags;
use super::error::ApiError;
use super::extract::SecretKeyAuth;
use super::state::AppState;
use super::timestamp::Timestamp;
use super::usage::UsageBody;
use crate::domain::event::{EventName, StoredEvent, is_reserved};
use crate::domain::ids::{ContactId, EventId};
use crate::domain::pagination::PageRequest;
use crate::store::events::EventFilter;
use crate::store::usage::UsageOf;

/// An event.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EventBody {
    /// Its id (`evt_…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The contact it is about.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// The contact's address.
    #[oai(nullable)]
    pub email: Option<String>,
    /// Its data.
    pub data: BTreeMap<String, Value>,
    /// When it happened.
    pub created_at: Timestamp,
}

impl From<StoredEvent> for EventBody {
    fn from(e: StoredEvent) -> EventBody {
        EventBody {
            id: e.id.into_string(),
            name: e.name,
            contact_id: e.contact_id.map(ContactId::into_string),
            email: e.contact_email,
            data: e.data.into_iter().collect(),
            created_at: Timestamp(e.created_at),
        }
    }
}

/// One page of events.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EventPage {
    /// Events, newest first.
    pub data: Vec<EventBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Matching events in all (first page only; 0 on later pages).
    pub total: i64,
}

/// A distinct event name.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EventNameBody {
    /// The name.
    pub name: String,
    /// Events with it.
    pub count: i64,
    /// When it was last recorded.
    pub last_seen_at: Timestamp,
}

/// `{ names }`.
#[derive(Object)]
pub struct EventNames {
    /// Names, most used first.
    pub names: Vec<EventNameBody>,
}

/// Aggregated statistics.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EventStats {
    /// Events in all.
    pub total: i64,
    /// Events in the last 24 hours.
    pub last_24_hours: i64,
    /// Events in the last 7 days.
    pub last_7_days: i64,
    /// Distinct contacts with events.
    pub unique_contacts: i64,
    /// Distinct names.
    pub unique_names: i64,
    /// The most used names (up to 10).
    pub top_events: Vec<EventNameBody>,
}

/// Where an event name is referenced.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EventUsage {
    /// The name.
    pub event_name: String,
    /// Events recorded with it.
    pub count: i64,
    /// The segments, campaigns and workflows that use it.
    #[oai(flatten)]
    pub usage: UsageBody,
}

/// The result of deleting events.
#[derive(Object)]
pub struct EventsDeleted {
    /// Events deleted.
    pub deleted: u64,
    /// Events of the name kept because the workflow engine has not taken them yet; delete
    /// again in a moment to remove them too.
    pub pending: u64,
}

fn name_body(n: crate::store::events::EventNameCount) -> EventNameBody {
    EventNameBody {
        name: n.name,
        count: n.count,
        last_seen_at: Timestamp(n.last_seen_at),
    }
}

fn page_request(limit: Option<u32>, cursor: Option<&str>) -> Result<PageRequest, ApiError> {
    Ok(PageRequest::new(limit, cursor, |id| {
        EventId::parse(id).is_some()
    })?)
}

fn event_name(name: &str) -> Result<EventName, ApiError> {
    EventName::parse_any(name)
        .map_err(|e| ApiError::invalid_field("eventName", "invalid", e.to_string()))
}

/// The events endpoints.
#[derive(Default)]
pub struct EventsApi;

#[OpenApi(tag = "ApiTags::Events")]
impl EventsApi {
    /// List events
    ///
    /// Recent events of the project, newest first, optionally of one name.
    #[oai(path = "/events", method = "get", operation_id = "listEvents")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Only events with this name.
        name: Query<Option<String>>,
    ) -> Result<Json<EventPage>, ApiError> {
        let page = page_request(limit.0, cursor.0.as_deref())?;
        let filter = EventFilter {
            name: name.0.filter(|n| !n.is_empty()),
            contact: None,
        };
        let page = state
            .store()
            .list_events(auth.0.project_id(), &filter, &page)
            .await?;
        Ok(Json(EventPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Event statistics
    #[oai(path = "/events/stats", method = "get", operation_id = "eventStats")]
    async fn stats(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<EventStats>, ApiError> {
        let project = auth.0.project_id();
        let totals = state.store().event_totals(project).await?;
        let names = state.store().event_names(project).await?;
        Ok(Json(EventStats {
            total: totals.total,
            last_24_hours: totals.last_24h,
            last_7_days: totals.last_7d,
            unique_contacts: totals.contacts,
            unique_names: names.len() as i64,
            top_events: names.into_iter().take(10).map(name_body).collect(),
        }))
    }

    /// Events of a contact
    #[oai(
        path = "/events/contact/:contactId",
        method = "get",
        operation_id = "contactEvents"
    )]
    async fn of_contact(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        #[oai(name = "contactId")]
        contact_id: Path<String>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<EventPage>, ApiError> {
        let project = auth.0.project_id();
        let id = ContactId::parse(&contact_id).ok_or_else(|| ApiError::not_found("contact"))?;
        state
            .store()
            .contact(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "contact"))?;
        let page = page_request(limit.0, cursor.0.as_deref())?;
        let filter = EventFilter {
            name: None,
            contact: Some(id),
        };
        let page = state.store().list_events(project, &filter, &page).await?;
        Ok(Json(EventPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Event names
    ///
    /// Distinct event names of the project with their counts, most used first.
    #[oai(path = "/events/names", method = "get", operation_id = "eventNames")]
    async fn names(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<EventNames>, ApiError> {
        let names = state.store().event_names(auth.0.project_id()).await?;
        Ok(Json(EventNames {
            names: names.into_iter().map(name_body).collect(),
        }))
    }

    /// Where an event name is used
    ///
    /// How many events have the name, and the segments, campaigns and workflows (with the step)
    /// that reference it: segment filters, workflow triggers, `WAIT_FOR_EVENT` steps and
    /// `CONDITION` filters.
    #[oai(
        path = "/events/:eventName/usage",
        method = "get",
        operation_id = "eventUsage"
    )]
    async fn usage(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The event name.
        #[oai(name = "eventName")]
        event_name_param: Path<String>,
    ) -> Result<Json<EventUsage>, ApiError> {
        let name = event_name(&event_name_param)?;
        let project = auth.0.project_id();
        let count = state
            .store()
            .count_events_named(project, name.as_str())
            .await?;
        let usage = state
            .store()
            .usage(project, UsageOf::Event(name.as_str()))
            .await?;
        Ok(Json(EventUsage {
            event_name: name.as_str().to_string(),
            count,
            usage: usage.into(),
        }))
    }

    /// Delete events by name
    ///
    /// Deletes every event of the project with this name that has been handed to the workflow
    /// engine; events still waiting for it are kept (`pending`). The service's own events
    /// (`contact.subscribed`, `contact.unsubscribed`, `email.*`, `segment.*`) are the record of
    /// consent and delivery and cannot be deleted (422).
    #[oai(
        path = "/events/:eventName",
        method = "delete",
        operation_id = "deleteEvents"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The event name.
        #[oai(name = "eventName")]
        event_name_param: Path<String>,
    ) -> Result<Json<EventsDeleted>, ApiError> {
        let name = event_name(&event_name_param)?;
        if is_reserved(name.as_str()) {
            return Err(ApiError::invalid_field(
                "eventName",
                "reserved",
                format!(
                    "`{}` is emitted by the service itself and kept as the record of consent and delivery; only events your application tracks can be deleted",
                    name.as_str()
                ),
            ));
        }
        let (deleted, pending) = state
            .store()
            .delete_events_named(auth.0.project_id(), name.as_str())
            .await?;
        Ok(Json(EventsDeleted { deleted, pending }))
    }
}
