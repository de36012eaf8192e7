//! `/contacts`: list, upsert, read, patch and delete a project's contacts.

use std::collections::BTreeMap;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::ApiTags;
use super::error::ApiError;
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::EmailText;
use super::state::AppState;
use super::timestamp::Timestamp;
use super::topics::{ContactTopic, TopicSetting, choices_from, contact_topics};
use crate::domain::contact::{Contact, ContactChange, ContactUpsert};
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::ContactId;
use crate::domain::pagination::PageRequest;
use crate::domain::topic::Topic;
use crate::store::{Conflict, StoreError};

/// A contact.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ContactBody {
    /// Assigned by the service (`cnt_…`).
    pub id: String,
    /// The address, unique in the project (stored lower-case).
    pub email: EmailText,
    /// Whether the contact receives marketing mail.
    pub subscribed: bool,
    /// Whether the contact waits for the confirmation of a subscription it asked for
    /// (confirmed opt-in, the project's `doubleOptIn`): it is not subscribed until it confirms
    /// by the mailed link, or the wait expires (`contacts.pending_days`).
    pub subscription_pending: bool,
    /// Since when it is pending (when its confirmation was first mailed); null when it is not.
    #[oai(nullable)]
    pub pending_since: Option<Timestamp>,
    /// Custom data.
    pub data: BTreeMap<String, Value>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
}

impl ContactBody {
    /// The body with the contact's pending subscription, if it has one.
    fn pending(mut self, since: Option<i64>) -> ContactBody {
        self.subscription_pending = since.is_some();
        self.pending_since = since.map(Timestamp);
        self
    }
}

/// The bodies of `contacts` of `project`, each with its pending subscription (one read for all).
pub(super) async fn bodies(
    state: &AppState,
    project: &crate::domain::ids::ProjectId,
    contacts: Vec<Contact>,
) -> Result<Vec<ContactBody>, ApiError> {
    let ids: Vec<&ContactId> = contacts.iter().map(|c| &c.id).collect();
    let pending = state
        .store()
        .pending_since(project, &ids, crate::domain::time::now_ms())
        .await?;
    Ok(contacts
        .into_iter()
        .map(|c| {
            let since = pending.get(c.id.as_str()).copied();
            ContactBody::from(c).pending(since)
        })
        .collect())
}

/// The body of one contact, with its pending subscription.
async fn contact_body(state: &AppState, contact: Contact) -> Result<ContactBody, ApiError> {
    let project = contact.project_id.clone();
    let mut one = bodies(state, &project, vec![contact]).await?;
    one.pop()
        .ok_or_else(|| ApiError::internal("a contact's body was lost"))
}

impl From<Contact> for ContactBody {
    fn from(c: Contact) -> ContactBody {
        ContactBody {
            id: c.id.into_string(),
            email: EmailText(c.email.to_string()),
            subscribed: c.subscribed,
            subscription_pending: false,
            pending_since: None,
            data: c.data.into_iter().collect(),
            created_at: Timestamp(c.created_at),
            updated_at: Timestamp(c.updated_at),
        }
    }
}

/// What an upsert did.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UpsertMeta {
    /// The call created the contact.
    pub is_new: bool,
    /// The call changed an existing contact (false when it matched one and changed nothing).
    pub is_update: bool,
}

/// A contact with its state for every topic of the project.
#[derive(Object)]
pub struct ContactDetail {
    #[oai(flatten)]
    contact: ContactBody,
    /// Every topic of the project with the contact's state: its own choice when it made one,
    /// else the topic's default.
    topics: Vec<ContactTopic>,
}

/// A contact with what the upsert did.
#[derive(Object)]
pub struct ContactWithMeta {
    #[oai(flatten)]
    contact: ContactBody,
    /// Every topic of the project with the contact's state (as on `GET /contacts/:id`).
    topics: Vec<ContactTopic>,
    /// What the call did.
    #[oai(rename = "_meta")]
    meta: UpsertMeta,
}

/// One page of contacts.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ContactPage {
    /// The contacts, newest first.
    pub data: Vec<ContactBody>,
    /// Pass as `cursor` to get the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Matching contacts in all; filled on the first page only, 0 on later pages.
    pub total: i64,
}

/// Create or update a contact by email.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateContact {
    /// The address; an existing contact with it is updated.
    pub email: EmailText,
    /// Subscription state; new contacts default to `true`, existing ones keep theirs. With the
    /// project's `doubleOptIn` at `ALL`, a subscription asked (`true`, or a new contact's
    /// default) leaves the contact unsubscribed and pending, and mails it a confirmation.
    #[oai(nullable)]
    pub subscribed: Option<bool>,
    /// Custom data, applied as a patch by the custom data rules.
    #[oai(nullable)]
    pub data: Option<BTreeMap<String, Value>>,
    /// Topic choices to make; topics not named keep the contact's state. An unknown topic is
    /// 422 at `topics[i].id`.
    #[oai(nullable)]
    pub topics: Option<Vec<TopicSetting>>,
}

/// Change a contact; every field is optional.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateContact {
    /// A new address (409 if another contact of the project has it).
    #[oai(nullable)]
    pub email: Option<EmailText>,
    /// A new subscription state. With the project's `doubleOptIn` at `ALL`, `true` leaves an
    /// unsubscribed contact unsubscribed and pending, and mails it a confirmation.
    #[oai(nullable)]
    pub subscribed: Option<bool>,
    /// Custom data patch.
    #[oai(nullable)]
    pub data: Option<BTreeMap<String, Value>>,
    /// Topic choices to make; topics not named keep the contact's state. An unknown topic is
    /// 422 at `topics[i].id`.
    #[oai(nullable)]
    pub topics: Option<Vec<TopicSetting>>,
}

/// A field usable in filters and templates.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct FieldDescriptor {
    /// Standard names are bare (`email`); custom ones carry the prefix `data.`, with a `.` in
    /// the key written `\.` and a `\` written `\\` (the name filters and the field endpoints
    /// take).
    pub field: String,
    /// `string`, `number`, `boolean` or `date` (nested values: `object`, `array`).
    #[oai(rename = "type")]
    pub field_type: String,
    /// Whether this is a custom data field.
    pub is_custom: bool,
    /// Share of the project's contacts that have the field set, 0 to 1.
    pub coverage: f64,
}

/// `{ fields }`.
#[derive(Object)]
pub struct FieldList {
    /// Standard fields first, then custom ones by name.
    pub fields: Vec<FieldDescriptor>,
}

#[derive(ApiResponse)]
enum UpsertResponse {
    /// The contact was created.
    #[oai(status = 201)]
    Created(Json<ContactWithMeta>),
    /// The contact existed; it was updated when anything changed.
    #[oai(status = 200)]
    Updated(Json<ContactWithMeta>),
}

#[derive(ApiResponse)]
enum Deleted {
    /// Deleted.
    #[oai(status = 204)]
    NoContent,
}

fn parse_email(field: &str, s: &str) -> Result<EmailAddress, ApiError> {
    EmailAddress::parse(s)
        .map_err(|e| ApiError::invalid_field(field, "invalid_email", e.to_string()))
}

/// Applies the custom data rules to a request's `data`.
pub fn parse_data(data: Option<BTreeMap<String, Value>>) -> Result<DataPatch, ApiError> {
    let map: Map<String, Value> = data.unwrap_or_default().into_iter().collect();
    DataPatch::parse(map).map_err(|e| {
        if e.too_many {
            ApiError::invalid_field("data", "too_many_keys", e.message)
        } else {
            ApiError::invalid_field(&format!("data.{}", e.key), "invalid_key", e.message)
        }
    })
}

/// Re-evaluates a written contact's tracked dynamic segments at once (entry and exit events),
/// since a data-only change emits no event for the outbox consumer to react to, and wakes the
/// dispatcher when that fired any. The write has committed, so a failure here is logged, not
/// answered: the next event of the contact or the next compute catches up.
async fn live_segments(state: &AppState, contact: &Contact) {
    if let Err(err) = state
        .live_segments()
        .after_contact_write(&contact.project_id, &contact.id)
        .await
    {
        tracing::warn!(error = %err, contact_id = %contact.id, "could not re-evaluate tracked segments");
    }
}

/// A contact with its state for every topic of its project.
async fn detail(state: &AppState, contact: Contact) -> Result<Json<ContactDetail>, ApiError> {
    let topics = state.store().list_topics(&contact.project_id).await?;
    detail_with(state, contact, &topics).await
}

/// [`detail`] with the project's topics read already.
async fn detail_with(
    state: &AppState,
    contact: Contact,
    topics: &[Topic],
) -> Result<Json<ContactDetail>, ApiError> {
    Ok(Json(ContactDetail {
        topics: contact_topics(topics, &contact.topics),
        contact: contact_body(state, contact).await?,
    }))
}

fn contact_id(id: &str) -> Result<ContactId, ApiError> {
    ContactId::parse(id).ok_or_else(|| ApiError::not_found("contact"))
}

/// The contacts endpoints.
#[derive(Default)]
pub struct ContactsApi;

#[OpenApi(tag = "ApiTags::Contacts")]
impl ContactsApi {
    /// List contacts
    ///
    /// Cursor-paginated, newest first. `search` matches a case-insensitive substring of the
    /// address.
    #[oai(path = "/contacts", method = "get", operation_id = "listContacts")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Case-insensitive substring of the address.
        search: Query<Option<String>>,
    ) -> Result<Json<ContactPage>, ApiError> {
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            ContactId::parse(id).is_some()
        })?;
        let search = search.0.filter(|s| !s.trim().is_empty());
        let page = state
            .store()
            .list_contacts(auth.0.project_id(), &page, search.as_deref())
            .await?;
        Ok(Json(ContactPage {
            data: bodies(&state, auth.0.project_id(), page.items).await?,
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Create or update a contact
    ///
    /// Upserts by email. New contacts are subscribed unless `subscribed` says otherwise;
    /// `data` follows the custom data rules. Answers 201 when the contact was created.
    #[oai(path = "/contacts", method = "post", operation_id = "upsertContact")]
    async fn upsert(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateContact>,
    ) -> Result<UpsertResponse, ApiError> {
        let body = body.0;
        // With confirmed opt-in for every path (`ALL`), as `/v1/track` does.
        let opt_in = super::confirm::opt_in_applies(&auth.0);
        let asked = body.subscribed;
        let project = auth.0.project_id();
        // Read once: to check the choices sent and to answer every topic's state.
        let topics = state.store().list_topics(project).await?;
        let upsert = ContactUpsert {
            email: parse_email("email", body.email.as_str())?,
            subscribed: if opt_in && asked == Some(true) {
                None
            } else {
                asked
            },
            subscribed_default: !opt_in,
            resubscribe: true,
            data: parse_data(body.data)?,
            topics: choices_from(&topics, "topics", body.topics.as_deref())?,
        };
        let write = crate::store::group_commit::GroupedUpsert {
            project: auth.0.project_id().clone(),
            upsert,
            source: crate::domain::event::SubscriptionSource::Api,
            event: None,
            idempotency: None,
        };
        let (outcome, _) = state
            .store()
            .upsert_contact_grouped(write)
            .await
            .map_err(|e| ApiError::from_store(e, "contact"))?;
        if outcome.created || outcome.updated {
            live_segments(&state, &outcome.contact).await;
        }
        if opt_in && (asked == Some(true) || (asked.is_none() && outcome.created)) {
            super::confirm::ask_confirmation(&state, &auth.0, &outcome.contact).await;
        } else if asked == Some(false) {
            super::confirm::cancel_confirmation(&state, &auth.0, &outcome.contact.id).await;
        }
        let meta = UpsertMeta {
            is_new: outcome.created,
            is_update: outcome.updated,
        };
        let body = ContactWithMeta {
            topics: contact_topics(&topics, &outcome.contact.topics),
            contact: contact_body(&state, outcome.contact).await?,
            meta,
        };
        Ok(if outcome.created {
            UpsertResponse::Created(Json(body))
        } else {
            UpsertResponse::Updated(Json(body))
        })
    }

    /// List contact fields
    ///
    /// The standard fields and every custom field with the type inferred from its first
    /// non-null value and its coverage. A custom field is named as filters and the field
    /// endpoints take it: `data.<key>` with a `.` in the key written `\.` and a `\` written `\\`.
    #[oai(
        path = "/contacts/fields",
        method = "get",
        operation_id = "listContactFields"
    )]
    async fn fields(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<FieldList>, ApiError> {
        let project = auth.0.project_id();
        let total = state.store().count_contacts(project).await?;
        let custom = state.store().custom_fields(project).await?;
        let share = |n: i64| {
            if total == 0 {
                0.0
            } else {
                n as f64 / total as f64
            }
        };
        let standard = [
            ("email", "string"),
            ("subscribed", "boolean"),
            ("createdAt", "date"),
            ("updatedAt", "date"),
        ];
        let mut fields: Vec<FieldDescriptor> = standard
            .iter()
            .map(|(f, t)| FieldDescriptor {
                field: f.to_string(),
                field_type: t.to_string(),
                is_custom: false,
                coverage: share(total),
            })
            .collect();
        fields.extend(custom.into_iter().map(|c| FieldDescriptor {
            field: format!("data.{}", herald_filter::escape_key(&c.key)),
            field_type: c.field_type,
            is_custom: true,
            coverage: share(c.contacts),
        }));
        Ok(Json(FieldList { fields }))
    }

    /// Get a contact
    #[oai(path = "/contacts/:id", method = "get", operation_id = "getContact")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        id: Path<String>,
    ) -> Result<Json<ContactDetail>, ApiError> {
        let project = auth.0.project_id();
        let contact = state
            .store()
            .contact(project, &contact_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "contact"))?;
        detail(&state, contact).await
    }

    /// Update a contact
    ///
    /// Changes only what is sent. `data` is a patch (`null` deletes a key). Changing `email` to
    /// one another contact of the project has is 409.
    #[oai(
        path = "/contacts/:id",
        method = "patch",
        operation_id = "updateContact"
    )]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        id: Path<String>,
        body: JsonBody<UpdateContact>,
    ) -> Result<Json<ContactDetail>, ApiError> {
        let id = contact_id(&id)?;
        let body = body.0;
        // With confirmed opt-in for every path (`ALL`), `subscribed: true` makes an
        // unsubscribed contact pending instead.
        let opt_in = super::confirm::opt_in_applies(&auth.0);
        let asked = body.subscribed;
        let project_topics = state.store().list_topics(auth.0.project_id()).await?;
        let topics = choices_from(&project_topics, "topics", body.topics.as_deref())?;
        let change = ContactChange {
            email: body
                .email
                .as_ref()
                .map(|e| parse_email("email", e.as_str()))
                .transpose()?,
            subscribed: if opt_in && asked == Some(true) {
                None
            } else {
                asked
            },
            data: parse_data(body.data)?,
            topics,
        };
        let outcome = state
            .store()
            .update_contact(auth.0.project_id(), &id, &change, SubscriptionSource::Api)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(Conflict::Email) => {
                    ApiError::conflict("another contact in this project already uses this email")
                        .suggest("merge the two contacts or pick another address")
                }
                other => ApiError::from_store(other, "contact"),
            })?;
        if outcome.updated {
            live_segments(&state, &outcome.contact).await;
        }
        if opt_in && asked == Some(true) {
            super::confirm::ask_confirmation(&state, &auth.0, &outcome.contact).await;
        } else if asked == Some(false) {
            super::confirm::cancel_confirmation(&state, &auth.0, &outcome.contact.id).await;
        }
        detail_with(&state, outcome.contact, &project_topics).await
    }

    /// Delete a contact
    #[oai(
        path = "/contacts/:id",
        method = "delete",
        operation_id = "deleteContact"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        id: Path<String>,
    ) -> Result<Deleted, ApiError> {
        state
            .store()
            .delete_contact(auth.0.project_id(), &contact_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "contact"))?;
        Ok(Deleted::NoContent)
    }
}
