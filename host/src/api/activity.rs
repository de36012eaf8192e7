//! `/activity`: the feed of what happened to a project's emails, with counts for charts.

use std::collections::BTreeMap;

use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::SecretKeyAuth;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::ids::ActivityId;
use crate::domain::pagination::PageRequest;
use crate::domain::time::{now_ms, to_rfc3339};
use crate::store::activity::ActivityItem;

/// The kinds of the feed.
const KINDS: [&str; 11] = [
    "sent",
    "deferred",
    "delivered",
    "opened",
    "clicked",
    "bounced",
    "soft_bounced",
    "complained",
    "failed",
    "suppressed",
    "inbound",
];

/// One entry of the feed.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivityBody {
    /// Its id (`act_…`).
    pub id: String,
    /// `sent`, `deferred` (the transport could not take it now, or every transport of its
    /// failover chain failed transiently: retried later; `detail` is the transport's answer),
    /// `delivered`, `opened`, `clicked`, `bounced`, `soft_bounced`, `complained`, `failed`,
    /// `suppressed` (never sent: the recipient is on the project's suppression list, or
    /// marketing mail to an unsubscribed contact; `detail` says which) or `inbound`.
    #[oai(rename = "type")]
    pub kind: String,
    /// The email (`eml_…`).
    #[oai(nullable)]
    pub email_id: Option<String>,
    /// The contact.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// The recipient; of `inbound`, the sender.
    #[oai(nullable)]
    pub email: Option<String>,
    /// The email's subject (of `inbound`, the subject of the email it replies to, if any).
    #[oai(nullable)]
    pub subject: Option<String>,
    /// The clicked link, the bounce reason or the provider's answer; of `inbound`, the received
    /// message's subject.
    #[oai(nullable)]
    pub detail: Option<String>,
    /// When it happened.
    pub created_at: Timestamp,
}

impl From<ActivityItem> for ActivityBody {
    fn from(a: ActivityItem) -> ActivityBody {
        ActivityBody {
            id: a.id,
            kind: a.kind,
            email_id: a.email_id,
            contact_id: a.contact_id,
            email: a.to_address,
            subject: a.subject,
            detail: a.detail,
            created_at: Timestamp(a.created_at),
        }
    }
}

/// One page of the feed.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivityPage {
    /// Entries, newest first.
    pub data: Vec<ActivityBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Entries in all (first page only; 0 on later pages).
    pub total: i64,
}

/// Counts of one day.
#[derive(Object)]
pub struct ActivityDay {
    /// The day, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// Count per kind.
    pub counts: BTreeMap<String, i64>,
}

/// Counts for charts.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ActivityStats {
    /// The period, in days.
    pub days: u32,
    /// Count per kind over the period.
    pub totals: BTreeMap<String, i64>,
    /// Of the emails sent in the period, the share opened (a click counts as an open), from 0
    /// to 1: distinct emails, however often each was opened (0 when nothing was sent).
    pub open_rate: f64,
    /// Of the emails sent in the period, the share clicked, from 0 to 1.
    pub click_rate: f64,
    /// Of the emails sent in the period, the share that bounced, from 0 to 1.
    pub bounce_rate: f64,
    /// Count per kind, day by day (days without activity are left out).
    pub daily: Vec<ActivityDay>,
}

/// A count over a recent window.
#[derive(Object)]
pub struct RecentCount {
    /// Entries in the window.
    pub count: i64,
    /// The window, in minutes.
    pub minutes: u32,
    /// Its start.
    pub since: String,
}

/// The kinds present.
#[derive(Object)]
pub struct ActivityTypes {
    /// Kinds present in the project's feed.
    pub types: Vec<String>,
}

/// An email waiting to go out.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UpcomingSend {
    /// The email's id.
    pub email_id: String,
    /// The recipient.
    pub email: String,
    /// The subject.
    pub subject: String,
    /// When it was queued.
    pub queued_at: Timestamp,
}

/// What is about to happen.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct Upcoming {
    /// Emails waiting in the queue (throttled or being retried), oldest first, up to 50.
    pub emails: Vec<UpcomingSend>,
    /// Emails waiting in all.
    pub queued_emails: i64,
    /// Scheduled campaigns, soonest first, up to 50.
    pub scheduled_campaigns: Vec<UpcomingCampaign>,
    /// Active (running or waiting) workflow executions, oldest first, up to 50.
    pub active_executions: Vec<UpcomingExecution>,
    /// Active executions in all.
    pub active_execution_count: i64,
}

/// A scheduled campaign.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UpcomingCampaign {
    /// The campaign (`cmp_…`).
    pub id: String,
    pub name: String,
    pub subject: String,
    /// When it starts.
    pub scheduled_at: Timestamp,
}

/// An active workflow execution.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UpcomingExecution {
    /// The execution (`exe_…`).
    pub id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub contact_id: String,
    /// `RUNNING` or `WAITING`.
    pub status: String,
    /// The step it is at or due to run next.
    #[oai(nullable)]
    pub current_step_id: Option<String>,
    /// The event it waits for, if it waits for one.
    #[oai(nullable)]
    pub waiting_for_event: Option<String>,
    pub started_at: crate::api::timestamp::Timestamp,
}

fn rate(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0
    }
}

/// The activity endpoints.
#[derive(Default)]
pub struct ActivityApi;

#[OpenApi(tag = "ApiTags::Activity")]
impl ActivityApi {
    /// Activity feed
    ///
    /// Sends, deferrals, deliveries, opens, clicks, bounces, complaints, failures and inbound
    /// mail, newest first, optionally of one `type`.
    #[oai(path = "/activity", method = "get", operation_id = "activity")]
    async fn feed(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Only entries of this type.
        #[oai(name = "type")]
        kind: Query<Option<String>>,
    ) -> Result<Json<ActivityPage>, ApiError> {
        if let Some(k) = kind.0.as_deref()
            && !KINDS.contains(&k)
        {
            return Err(ApiError::bad_request(format!(
                "`type` must be one of {}",
                KINDS.join(", ")
            ))
            .with_errors(vec![FieldError::new("type", "invalid", "unknown type")]));
        }
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            ActivityId::parse(id).is_some()
        })?;
        let page = state
            .store()
            .activity(auth.0.project_id(), kind.0.as_deref(), &page)
            .await?;
        Ok(Json(ActivityPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Activity statistics
    ///
    /// Counts per type over the last `days` (default 30), in all and day by day, with rates.
    #[oai(
        path = "/activity/stats",
        method = "get",
        operation_id = "activityStats"
    )]
    async fn stats(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The period in days, 1 to 365 (default 30).
        #[oai(validator(minimum(value = "1"), maximum(value = "365")))]
        days: Query<Option<u32>>,
    ) -> Result<Json<ActivityStats>, ApiError> {
        let days = days.0.unwrap_or(30);
        let since = now_ms() - i64::from(days) * 86_400_000;
        let project = auth.0.project_id();
        let totals: BTreeMap<String, i64> = state
            .store()
            .activity_counts(project, since)
            .await?
            .into_iter()
            .map(|k| (k.kind, k.count))
            .collect();
        let mut daily: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
        for d in state.store().activity_daily(project, since).await? {
            daily.entry(d.day).or_default().insert(d.kind, d.count);
        }
        let e = state.store().engagement_counts(project, since).await?;
        Ok(Json(ActivityStats {
            days,
            open_rate: rate(e.opened, e.sent),
            click_rate: rate(e.clicked, e.sent),
            bounce_rate: rate(e.bounced, e.sent),
            totals: totals.clone(),
            daily: daily
                .into_iter()
                .map(|(day, counts)| ActivityDay {
                    date: to_rfc3339(day * 86_400_000)[..10].to_string(),
                    counts,
                })
                .collect(),
        }))
    }

    /// Recent activity count
    #[oai(
        path = "/activity/recent-count",
        method = "get",
        operation_id = "activityRecentCount"
    )]
    async fn recent_count(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The window in minutes, 1 to 10080 (default 60).
        #[oai(validator(minimum(value = "1"), maximum(value = "10080")))]
        minutes: Query<Option<u32>>,
    ) -> Result<Json<RecentCount>, ApiError> {
        let minutes = minutes.0.unwrap_or(60);
        let since = now_ms() - i64::from(minutes) * 60_000;
        let count = state
            .store()
            .activity_counts(auth.0.project_id(), since)
            .await?
            .into_iter()
            .map(|k| k.count)
            .sum();
        Ok(Json(RecentCount {
            count,
            minutes,
            since: to_rfc3339(since),
        }))
    }

    /// Activity types
    #[oai(
        path = "/activity/types",
        method = "get",
        operation_id = "activityTypes"
    )]
    async fn types(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<ActivityTypes>, ApiError> {
        Ok(Json(ActivityTypes {
            types: state.store().activity_kinds(auth.0.project_id()).await?,
        }))
    }

    /// Upcoming sends
    ///
    /// Emails waiting in the queue, scheduled campaigns and active workflow executions.
    #[oai(
        path = "/activity/upcoming",
        method = "get",
        operation_id = "activityUpcoming"
    )]
    async fn upcoming(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Upcoming>, ApiError> {
        let (emails, total) = state
            .store()
            .upcoming_emails(auth.0.project_id(), 50)
            .await?;
        let campaigns = state
            .store()
            .scheduled_campaigns(auth.0.project_id(), 50)
            .await?;
        let (executions, active) = state
            .store()
            .active_executions(auth.0.project_id(), 50)
            .await?;
        Ok(Json(Upcoming {
            emails: emails
                .into_iter()
                .map(|e| UpcomingSend {
                    email_id: e.id,
                    email: e.to_address,
                    subject: e.subject,
                    queued_at: Timestamp(e.created_at),
                })
                .collect(),
            queued_emails: total,
            scheduled_campaigns: campaigns
                .into_iter()
                .map(|c| UpcomingCampaign {
                    scheduled_at: Timestamp(c.scheduled_at.unwrap_or(c.updated_at)),
                    id: c.id.into_string(),
                    name: c.content.name,
                    subject: c.content.subject,
                })
                .collect(),
            active_executions: executions
                .into_iter()
                .map(|e| UpcomingExecution {
                    id: e.id,
                    workflow_id: e.workflow_id,
                    workflow_name: e.workflow_name,
                    contact_id: e.contact_id,
                    status: e.status,
                    current_step_id: e.current_step_id,
                    waiting_for_event: e.waiting_event,
                    started_at: crate::api::timestamp::Timestamp(e.created_at),
                })
                .collect(),
            active_execution_count: active,
        }))
    }
}
