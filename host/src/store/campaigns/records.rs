//! A campaign's records: its job kinds and payloads, its row, its counts and the ledger's
//! statuses.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use crate::domain::campaign::{Audience, CampaignContent, CampaignStatus};
use crate::domain::campaign_ab::AbTest;
use crate::domain::contact::Contact;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{CampaignId, ContactId, ProjectId, SegmentId, TopicId};
use crate::domain::locale::LocaleVariants;
use crate::store::StoreError;
use crate::store::jobs::{JobPayload, NewJob};

/// Contacts one snapshot transaction takes (and one delivery batch holds).
pub const SNAPSHOT_CHUNK: i64 = 2000;

/// The job that starts a campaign's send (at once, or at `scheduledAt`) and snapshots its
/// audience.
pub const SEND_KIND: &str = "campaigns.send";
/// The job that renders and queues one batch of a campaign's recipients.
pub const BATCH_KIND: &str = "campaigns.batch";
/// The job that marks a campaign `SENT` once every recipient's email is final.
pub const FINISH_KIND: &str = "campaigns.finish";
/// The job that chooses an A/B test's winner once its duration is over and sends it to the
/// rest of the audience.
pub const WINNER_KIND: &str = "campaigns.ab_winner";

/// Statuses of a ledger row.
pub mod recipient {
    /// Snapshotted, no email yet.
    pub const PENDING: &str = "pending";
    /// Its email is written (and queued for delivery).
    pub const QUEUED: &str = "queued";
    /// Unsubscribed since the snapshot, or on the project's suppression list: recorded as a
    /// suppressed email, never sent.
    pub const SUPPRESSED: &str = "suppressed";
    /// The contact was deleted since the snapshot.
    pub const SKIPPED: &str = "skipped";
    /// The campaign was cancelled before its email was written.
    pub const CANCELLED: &str = "cancelled";
    /// Its email could not be built (the reason is in the log).
    pub const FAILED: &str = "failed";
}

pub(super) const COLUMNS: &str = "id, project_id, name, description, subject, body, from_email, from_name, \
     reply_to, audience_type, segment_id, audience_filter, status, scheduled_at, started_at, \
     finished_at, failure_reason, snapshot_after, snapshot_done, batches, recipient_count, \
     locale_variants, created_at, updated_at, ab_test, ab_decide_at, ab_winner, ab_decided_at, local_send_at, topic_id";

/// The batches of a campaign (`$1`) with pending ledger rows, in order: what a resume or an A/B
/// test's winner queues a batch job for.
pub(super) const PENDING_BATCHES: &str = "SELECT DISTINCT batch FROM campaign_recipients \
     WHERE campaign_id = $1 AND status = 'pending' ORDER BY batch";

/// The payload of a `campaigns.send` job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendPayload {
    pub campaign_id: String,
    /// The `scheduledAt` the job was queued for; a job of an earlier schedule finds it changed
    /// and does nothing.
    pub scheduled_at: Option<i64>,
}
impl JobPayload for SendPayload {}

/// The payload of a `campaigns.batch` job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPayload {
    pub campaign_id: String,
    /// The chunk of the snapshot it delivers.
    pub batch: i32,
}
impl JobPayload for BatchPayload {}

/// The payload of a `campaigns.finish` job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishPayload {
    pub campaign_id: String,
}
impl JobPayload for FinishPayload {}

/// The payload of a `campaigns.ab_winner` job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WinnerPayload {
    pub campaign_id: String,
}
impl JobPayload for WinnerPayload {}

/// A job of campaign `id` of `project`: `kind` with `payload`, due at `run_at`.
fn campaign_job(
    kind: &str,
    project: &ProjectId,
    payload: &impl JobPayload,
    max_attempts: i32,
    run_at: i64,
) -> Result<NewJob, StoreError> {
    Ok(NewJob {
        kind: kind.to_string(),
        project_id: Some(project.clone()),
        payload: payload.to_json()?,
        input: None,
        max_attempts,
        run_at,
    })
}

/// The `campaigns.send` job of a campaign: for `scheduled_at`, or at once (`None`).
pub(super) fn send_job(
    project: &ProjectId,
    id: &CampaignId,
    scheduled_at: Option<i64>,
    max_attempts: i32,
    now: i64,
) -> Result<NewJob, StoreError> {
    let payload = SendPayload {
        campaign_id: id.as_str().to_string(),
        scheduled_at,
    };
    let run_at = scheduled_at.unwrap_or(now);
    campaign_job(SEND_KIND, project, &payload, max_attempts, run_at)
}

/// The `campaigns.batch` job of a campaign's batch `batch`, due now.
pub(super) fn batch_job(
    project: &ProjectId,
    id: &CampaignId,
    batch: i32,
    max_attempts: i32,
    now: i64,
) -> Result<NewJob, StoreError> {
    let payload = BatchPayload {
        campaign_id: id.as_str().to_string(),
        batch,
    };
    campaign_job(BATCH_KIND, project, &payload, max_attempts, now)
}

/// The `campaigns.finish` job of a campaign, due now.
pub(super) fn finish_job(
    project: &ProjectId,
    id: &CampaignId,
    max_attempts: i32,
    now: i64,
) -> Result<NewJob, StoreError> {
    let payload = FinishPayload {
        campaign_id: id.as_str().to_string(),
    };
    campaign_job(FINISH_KIND, project, &payload, max_attempts, now)
}

/// The `campaigns.ab_winner` job of a campaign, due at `run_at`.
pub(super) fn winner_job(
    project: &ProjectId,
    id: &CampaignId,
    max_attempts: i32,
    run_at: i64,
) -> Result<NewJob, StoreError> {
    let payload = WinnerPayload {
        campaign_id: id.as_str().to_string(),
    };
    campaign_job(WINNER_KIND, project, &payload, max_attempts, run_at)
}

/// Where a campaign's A/B test stands (its settings are `content.ab`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbProgress {
    /// When the winner is chosen: set when the whole test group is in the ledger.
    pub decide_at: Option<i64>,
    /// The winning variant (0-based), once chosen.
    pub winner: Option<usize>,
    /// When it was chosen.
    pub decided_at: Option<i64>,
}

/// A stored campaign.
#[derive(Clone, Debug)]
pub struct Campaign {
    pub id: CampaignId,
    pub project_id: ProjectId,
    pub content: CampaignContent,
    pub status: CampaignStatus,
    /// When a scheduled send starts (or started), unix ms.
    pub scheduled_at: Option<i64>,
    /// When sending started.
    pub started_at: Option<i64>,
    /// When it became `SENT`, `CANCELLED` or `FAILED`.
    pub finished_at: Option<i64>,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// The snapshot's checkpoint: the last contact id taken.
    pub snapshot_after: Option<String>,
    /// Whether the whole audience is in the ledger.
    pub snapshot_done: bool,
    /// Chunks snapshotted (each one delivery batch).
    pub batches: i32,
    /// Rows of the ledger.
    pub recipient_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// Its A/B test's progress (nothing without a test).
    pub ab_progress: AbProgress,
    /// For a send at each contact's local time: the wall-clock time of `scheduledFor`, as unix
    /// ms read in UTC (`scheduled_at` is then the start, `MAX_AHEAD_MS` earlier).
    pub local_send_at: Option<i64>,
}

#[derive(FromRow)]
pub(super) struct CampaignRow {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    subject: String,
    body: String,
    from_email: String,
    from_name: Option<String>,
    reply_to: Option<String>,
    audience_type: String,
    segment_id: Option<String>,
    audience_filter: Option<Json<Value>>,
    status: String,
    scheduled_at: Option<i64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    failure_reason: Option<String>,
    snapshot_after: Option<String>,
    snapshot_done: bool,
    batches: i32,
    recipient_count: i64,
    locale_variants: Option<Json<LocaleVariants>>,
    created_at: i64,
    updated_at: i64,
    ab_test: Option<Json<AbTest>>,
    ab_decide_at: Option<i64>,
    ab_winner: Option<i32>,
    ab_decided_at: Option<i64>,
    local_send_at: Option<i64>,
    topic_id: Option<String>,
}

impl TryFrom<CampaignRow> for Campaign {
    type Error = StoreError;

    fn try_from(r: CampaignRow) -> Result<Campaign, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("campaign {}: {what}", r.id));
        let audience = match (r.audience_type.as_str(), &r.segment_id, &r.audience_filter) {
            ("ALL", _, _) => Audience::All,
            ("SEGMENT", Some(s), _) => Audience::Segment(SegmentId::from_trusted(s.clone())),
            ("FILTERED", _, Some(f)) => Audience::Filtered(f.0.clone()),
            _ => return Err(corrupt("audience")),
        };
        let status = CampaignStatus::parse(&r.status).ok_or_else(|| corrupt("status"))?;
        Ok(Campaign {
            id: CampaignId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            content: CampaignContent {
                name: r.name,
                description: r.description,
                subject: r.subject,
                body: r.body,
                from_email: EmailAddress::from_trusted(r.from_email),
                from_name: r.from_name,
                reply_to: r.reply_to.map(EmailAddress::from_trusted),
                audience,
                locale_variants: r.locale_variants.map(|v| v.0).unwrap_or_default(),
                ab: r.ab_test.map(|t| t.0),
                topic: r.topic_id.map(TopicId::from_trusted),
            },
            status,
            scheduled_at: r.scheduled_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            failure_reason: r.failure_reason,
            snapshot_after: r.snapshot_after,
            snapshot_done: r.snapshot_done,
            batches: r.batches,
            recipient_count: r.recipient_count,
            created_at: r.created_at,
            updated_at: r.updated_at,
            ab_progress: AbProgress {
                decide_at: r.ab_decide_at,
                winner: r.ab_winner.and_then(|w| usize::try_from(w).ok()),
                decided_at: r.ab_decided_at,
            },
            local_send_at: r.local_send_at,
        })
    }
}

/// A campaign's email counts (test sends excluded): distinct emails, a click also an open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromRow)]
pub struct CampaignCounts {
    /// Handed to the transport.
    pub sent: i64,
    /// Accepted by the recipient's server (as the transport reports it).
    pub delivered: i64,
    /// Opened (or clicked).
    pub opened: i64,
    pub clicked: i64,
    pub bounced: i64,
    pub complained: i64,
    /// Never handed to the transport: the contact unsubscribed between the snapshot and the
    /// hand-off, or the campaign was cancelled first.
    pub suppressed: i64,
    /// Could not be delivered.
    pub failed: i64,
    /// Still waiting for the transport.
    pub queued: i64,
    /// Recipients who unsubscribed after their email was sent.
    #[sqlx(skip)]
    pub unsubscribed: i64,
}

/// One step of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotStep {
    /// A chunk of this many contacts entered the ledger (and its batch job was queued).
    Took(i64),
    /// The audience is all in the ledger; the finish job is queued.
    Done,
    /// The campaign is no longer sending, or another worker moved the checkpoint: stop.
    Stopped,
}

/// A pending ledger row of a batch with its contact (`None`: the contact was deleted) and its
/// A/B test variant (`None`: not in a test group).
pub type PendingRecipient = (ContactId, Option<Contact>, Option<usize>);

/// What a batch commit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchCommit {
    /// Rows moved out of `pending` (others had moved already).
    Wrote(usize),
    /// The campaign is paused: nothing written, its rows stay pending for the resume.
    Paused,
    /// The campaign is no longer sending (cancelled, failed, sent): nothing written.
    Stopped,
}

/// What an audience preview counts: the contacts of a campaign's audience now, each once,
/// by the first rule that keeps it from the send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromRow)]
pub struct AudienceCounts {
    /// Subscribed and not on the suppression list: a send would mail them.
    pub recipients: i64,
    /// Not subscribed (`subscribed: false`) and not pending.
    pub unsubscribed: i64,
    /// Not subscribed, waiting for the confirmation of their subscription (confirmed opt-in).
    pub pending: i64,
    /// Subscribed, but their address is on the project's suppression list.
    /// Subscribed, but not to the campaign's topic (always 0 without a topic).
    pub not_in_topic: i64,
    /// Subscribed (and to the topic), but their address is on the project's suppression list.
    pub suppressed: i64,
}

/// A campaign's variants by language as stored: `NULL` for none.
pub(super) fn stored_variants(c: &CampaignContent) -> Option<Json<&LocaleVariants>> {
    (!c.locale_variants.is_empty()).then_some(Json(&c.locale_variants))
}

pub(super) fn campaign_row_binds(c: &CampaignContent) -> (Option<&str>, Option<Json<&Value>>) {
    match &c.audience {
        Audience::All => (None, None),
        Audience::Segment(s) => (Some(s.as_str()), None),
        Audience::Filtered(f) => (None, Some(Json(f))),
    }
}
