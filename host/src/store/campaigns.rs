//! Campaigns, their recipients ledger and their counts.
//!
//! A send moves a campaign to `SENDING` (or `SCHEDULED`) and queues its `campaigns.send` job in
//! one transaction. That job snapshots the audience into `campaign_recipients` in chunks of
//! [`SNAPSHOT_CHUNK`] contacts, keyset-paginated by contact id: each chunk is one transaction
//! that inserts the rows, moves the checkpoint (`snapshot_after`) and queues the chunk's
//! `campaigns.batch` job, guarded by the checkpoint it started from, so that a crash or a second
//! worker never takes a chunk twice. A batch job renders its recipients' emails and writes each
//! with its ledger row's move out of `pending`, in one transaction per group, so each recipient
//! gets at most one email. Counts come from the emails themselves (`campaign_id`), so they can
//! never disagree with `/emails/:id`.

use std::collections::HashMap;

use herald_filter::{Scope, SqlValue};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::contacts::{COLUMNS as CONTACT_COLUMNS, ContactRow};
use super::dialect::{BeginWrite, for_update, placeholders};
use super::emails::{EmailInsert, NewEmail, status as email_status};
use super::jobs::{JobPayload, Lease, NewJob};
use super::segments::bind_all;
use super::statements::Statements;
use super::{Store, StoreError, StoreResult, on_db, on_db_write};
use crate::domain::campaign::{Audience, CampaignContent, CampaignStatus};
use crate::domain::contact::Contact;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{CampaignId, ContactId, ProjectId, SegmentId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;

/// Contacts one snapshot transaction takes (and one delivery batch holds).
pub const SNAPSHOT_CHUNK: i64 = 2000;

/// The job that starts a campaign's send (at once, or at `scheduledAt`) and snapshots its
/// audience.
pub const SEND_KIND: &str = "campaigns.send";
/// The job that renders and queues one batch of a campaign's recipients.
pub const BATCH_KIND: &str = "campaigns.batch";
/// The job that marks a campaign `SENT` once every recipient's email is final.
pub const FINISH_KIND: &str = "campaigns.finish";

/// Statuses of a ledger row.
pub mod recipient {
    /// Snapshotted, no email yet.
    pub const PENDING: &str = "pending";
    /// Its email is written (and queued for delivery).
    pub const QUEUED: &str = "queued";
    /// Unsubscribed since the snapshot: recorded as a suppressed email, never sent.
    pub const SUPPRESSED: &str = "suppressed";
    /// The contact was deleted since the snapshot.
    pub const SKIPPED: &str = "skipped";
    /// The campaign was cancelled before its email was written.
    pub const CANCELLED: &str = "cancelled";
    /// Its email could not be built (the reason is in the log).
    pub const FAILED: &str = "failed";
}

const COLUMNS: &str = "id, project_id, name, description, subject, body, from_email, from_name, \
     reply_to, audience_type, segment_id, audience_filter, status, scheduled_at, started_at, \
     finished_at, failure_reason, snapshot_after, snapshot_done, batches, recipient_count, \
     created_at, updated_at";

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
}

#[derive(FromRow)]
struct CampaignRow {
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
    created_at: i64,
    updated_at: i64,
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

/// A pending ledger row of a batch with its contact (`None`: the contact was deleted).
pub type PendingRecipient = (ContactId, Option<Contact>);

/// What a batch commit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchCommit {
    /// Rows moved out of `pending` (others had moved already).
    Wrote(usize),
    /// The campaign is no longer sending: nothing written.
    Stopped,
}

fn campaign_row_binds(c: &CampaignContent) -> (Option<&str>, Option<Json<&Value>>) {
    match &c.audience {
        Audience::All => (None, None),
        Audience::Segment(s) => (Some(s.as_str()), None),
        Audience::Filtered(f) => (None, Some(Json(f))),
    }
}

impl Store {
    /// Adds a campaign in `DRAFT`.
    #[tracing::instrument(level = "debug", skip(self, c))]
    pub async fn insert_campaign(
        &self,
        project: &ProjectId,
        c: &CampaignContent,
    ) -> StoreResult<Campaign> {
        let id = CampaignId::generate();
        let (segment, filter) = campaign_row_binds(c);
        let sql = format!(
            "INSERT INTO campaigns (id, project_id, name, description, subject, body, from_email, \
             from_name, reply_to, audience_type, segment_id, audience_filter, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'DRAFT', $13, $13) RETURNING {COLUMNS}"
        );
        let row: CampaignRow = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(project.as_str())
                .bind(&c.name)
                .bind(c.description.as_deref())
                .bind(&c.subject)
                .bind(&c.body)
                .bind(c.from_email.as_str())
                .bind(c.from_name.as_deref())
                .bind(c.reply_to.as_ref().map(|r| r.as_str()))
                .bind(c.audience.kind())
                .bind(segment)
                .bind(filter)
                .bind(now_ms())
                .fetch_one(pool)
                .await?
        });
        row.try_into()
    }

    /// A campaign of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn campaign(&self, project: &ProjectId, id: &CampaignId) -> StoreResult<Campaign> {
        let sql = format!("SELECT {COLUMNS} FROM campaigns WHERE project_id = $1 AND id = $2");
        let row: Option<CampaignRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// A campaign by id alone (for its jobs); `None` once deleted.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn campaign_by_id(&self, id: &str) -> StoreResult<Option<Campaign>> {
        let sql = format!("SELECT {COLUMNS} FROM campaigns WHERE id = $1");
        let row: Option<CampaignRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?
        });
        row.map(Campaign::try_from).transpose()
    }

    /// One page of a project's campaigns, newest first, optionally of one status.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_campaigns(
        &self,
        project: &ProjectId,
        status: Option<CampaignStatus>,
        page: &PageRequest,
    ) -> StoreResult<Page<Campaign>> {
        let mut filter = String::from("project_id = $1");
        if status.is_some() {
            filter.push_str(" AND status = $2");
        }
        let mut sql = format!("SELECT {COLUMNS} FROM campaigns WHERE {filter}");
        if page.after.is_some() {
            let n = if status.is_some() { 3 } else { 2 };
            sql.push_str(&format!(" AND id < ${n}"));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) FROM campaigns WHERE {filter}");
        let status = status.map(CampaignStatus::as_str);
        let (rows, total): (Vec<CampaignRow>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
            if let Some(s) = status {
                q = q.bind(s);
                c = c.bind(s);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() { c.fetch_one(pool).await? } else { 0 };
            (rows, total)
        });
        let items = rows
            .into_iter()
            .map(Campaign::try_from)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page::from_rows(items, page, total, |c| c.id.as_str()))
    }

    /// Replaces a campaign's content and audience while it is `DRAFT` or `SCHEDULED`; `None`
    /// when it is in another status (`NotFound` when it does not exist).
    #[tracing::instrument(level = "debug", skip(self, c))]
    pub async fn replace_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
        c: &CampaignContent,
    ) -> StoreResult<Option<Campaign>> {
        let (segment, filter) = campaign_row_binds(c);
        let sql = format!(
            "UPDATE campaigns SET name = $3, description = $4, subject = $5, body = $6, from_email = $7, \
             from_name = $8, reply_to = $9, audience_type = $10, segment_id = $11, audience_filter = $12, \
             updated_at = $13 WHERE project_id = $1 AND id = $2 AND status IN ('DRAFT', 'SCHEDULED') \
             RETURNING {COLUMNS}"
        );
        let row: Option<CampaignRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(&c.name)
                .bind(c.description.as_deref())
                .bind(&c.subject)
                .bind(&c.body)
                .bind(c.from_email.as_str())
                .bind(c.from_name.as_deref())
                .bind(c.reply_to.as_ref().map(|r| r.as_str()))
                .bind(c.audience.kind())
                .bind(segment)
                .bind(filter)
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        match row {
            Some(row) => Ok(Some(row.try_into()?)),
            None => self.campaign(project, id).await.map(|_| None),
        }
    }

    /// Deletes a campaign unless it is `SENDING`; `false` when it is (`NotFound` when it does
    /// not exist). Its ledger goes with it; its emails stay (they were sent).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_campaign(&self, project: &ProjectId, id: &CampaignId) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM campaigns WHERE project_id = $1 AND id = $2 AND status <> 'SENDING'")
                .bind(project.as_str())
                .bind(id.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 1 {
            return Ok(true);
        }
        self.campaign(project, id).await.map(|_| false)
    }

    /// Moves a `DRAFT` or `SCHEDULED` campaign to `SENDING` (`scheduled_at` `None`) or
    /// `SCHEDULED`, and queues its send job for then, in one transaction. `None` when the
    /// campaign is in another status.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn send_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
        scheduled_at: Option<i64>,
        max_attempts: i32,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let (status, started) = match scheduled_at {
            Some(_) => (CampaignStatus::Scheduled, None),
            None => (CampaignStatus::Sending, Some(now)),
        };
        let job = NewJob {
            kind: SEND_KIND.to_string(),
            project_id: Some(project.clone()),
            payload: SendPayload {
                campaign_id: id.as_str().to_string(),
                scheduled_at,
            }
            .to_json()?,
            input: None,
            max_attempts,
            run_at: scheduled_at.unwrap_or(now),
        };
        let sql = format!(
            "UPDATE campaigns SET status = $3, scheduled_at = $4, started_at = $5, updated_at = $6 \
             WHERE project_id = $1 AND id = $2 AND status IN ('DRAFT', 'SCHEDULED') RETURNING {COLUMNS}"
        );
        let row: Option<CampaignRow> = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<CampaignRow> = sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(status.as_str())
                .bind(scheduled_at)
                .bind(started)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            if row.is_some() {
                tx.insert_job(&job, now).await?;
            }
            tx.commit().await?;
            row
        });
        match row {
            Some(row) => Ok(Some(row.try_into()?)),
            None => self.campaign(project, id).await.map(|_| None),
        }
    }

    /// Cancels a `SCHEDULED` or `SENDING` campaign; `None` when it is in another status. In
    /// the same transaction, its emails still waiting for the transport (no hand-off started)
    /// become `suppressed` with the reason, so no delivery hands them off; the
    /// remaining batches see the status and stop.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let sql = format!(
            "UPDATE campaigns SET status = 'CANCELLED', finished_at = $3, updated_at = $3 \
             WHERE project_id = $1 AND id = $2 AND status IN ('SCHEDULED', 'SENDING') RETURNING {COLUMNS}"
        );
        let row: Option<CampaignRow> = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<CampaignRow> = sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            if row.is_some() {
                sqlx::query(
                    "UPDATE emails SET status = 'suppressed', raw = NULL, draft = NULL, updated_at = $2, \
                     error = 'the campaign was cancelled before this email was handed to the transport' \
                     WHERE campaign_id = $1 AND status = 'queued' AND handed_off_at IS NULL",
                )
                .bind(id.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            row
        });
        match row {
            Some(row) => Ok(Some(row.try_into()?)),
            None => self.campaign(project, id).await.map(|_| None),
        }
    }

    /// Starts a scheduled campaign whose time has come: `SCHEDULED` (for exactly
    /// `scheduled_at`) to `SENDING`. False when it was cancelled, sent or rescheduled since.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn start_scheduled_campaign(&self, id: &str, scheduled_at: i64) -> StoreResult<bool> {
        let now = now_ms();
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaigns SET status = 'SENDING', started_at = $3, updated_at = $3 \
                 WHERE id = $1 AND status = 'SCHEDULED' AND scheduled_at = $2",
            )
            .bind(id)
            .bind(scheduled_at)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Marks a sending campaign `FAILED` with the reason.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn fail_campaign(&self, id: &str, reason: &str) -> StoreResult<bool> {
        let now = now_ms();
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaigns SET status = 'FAILED', failure_reason = $2, finished_at = $3, updated_at = $3 \
                 WHERE id = $1 AND status = 'SENDING'",
            )
            .bind(id)
            .bind(reason)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// The `FROM contacts c … WHERE …` of a campaign's audience (all contacts, not only the
    /// subscribed) and its binds (`$1` the project); `None` when its segment no longer exists.
    async fn audience_from(
        &self,
        c: &Campaign,
        now: i64,
    ) -> StoreResult<Option<(String, Vec<SqlValue>)>> {
        let project = &c.project_id;
        match &c.content.audience {
            Audience::All => Ok(Some((
                "FROM contacts c WHERE c.project_id = $1".to_string(),
                vec![SqlValue::Text(project.as_str().to_string())],
            ))),
            Audience::Segment(id) => match self.segment(project, id).await {
                Ok(segment) => self.members_from(&segment, now).map(Some),
                Err(StoreError::NotFound) => Ok(None),
                Err(e) => Err(e),
            },
            Audience::Filtered(f) => {
                let filter = herald_filter::parse(f, Scope::Contacts)
                    .map_err(|_| StoreError::Corrupt(format!("campaign {} filter", c.id)))?;
                let (expr, binds) = self.compile(project, None, &filter, now)?;
                Ok(Some((
                    format!("FROM contacts c WHERE c.project_id = $1 AND ({expr})"),
                    binds,
                )))
            }
        }
    }

    /// Subscribed contacts in a campaign's audience now (what a send would snapshot); `None`
    /// when its segment no longer exists.
    #[tracing::instrument(level = "debug", skip(self, c))]
    pub async fn count_audience(&self, c: &Campaign) -> StoreResult<Option<i64>> {
        let Some((from, binds)) = self.audience_from(c, now_ms()).await? else {
            return Ok(None);
        };
        let sql = format!("SELECT COUNT(*) {from} AND c.subscribed");
        let n: i64 = on_db!(self.db(), pool => {
            bind_all!(sqlx::query_scalar(&sql), &binds).fetch_one(pool).await?
        });
        Ok(Some(n))
    }

    /// Takes the next chunk of a sending campaign's audience into its ledger: the subscribed
    /// contacts after the checkpoint, in id order, with the checkpoint's move and the chunk's
    /// batch job, in one transaction guarded by the checkpoint `c` was read with. When nothing
    /// is left, marks the snapshot done, queues the finish job and completes `lease`'s job.
    /// `Err(NotFound)` when the campaign's segment was deleted.
    #[tracing::instrument(level = "debug", skip_all, fields(campaign = %c.id, batch = c.batches))]
    pub async fn snapshot_chunk(
        &self,
        c: &Campaign,
        lease: &Lease,
        max_attempts: i32,
    ) -> StoreResult<SnapshotStep> {
        let now = now_ms();
        // The filter's clock is the send's start, so every chunk sees the same audience rules.
        let Some((from, mut binds)) = self.audience_from(c, c.started_at.unwrap_or(now)).await?
        else {
            return Err(StoreError::NotFound);
        };
        let n = binds.len();
        binds.push(SqlValue::Text(c.id.as_str().to_string()));
        binds.push(SqlValue::Int(i64::from(c.batches)));
        binds.push(SqlValue::Text(c.snapshot_after.clone().unwrap_or_default()));
        let insert = format!(
            "INSERT INTO campaign_recipients (campaign_id, contact_id, batch, status) \
             SELECT ${}, c.id, ${}, 'pending' {from} AND c.subscribed AND c.id > ${} \
             ORDER BY c.id LIMIT {SNAPSHOT_CHUNK} RETURNING contact_id",
            n + 1,
            n + 2,
            n + 3
        );
        let guard = format!(
            "SELECT 1 FROM campaigns WHERE id = $1 AND status = 'SENDING' AND NOT snapshot_done \
             AND batches = $2 AND COALESCE(snapshot_after, '') = $3{}",
            for_update(self.db().backend())
        );
        let batch_job = |batch: i32| -> StoreResult<NewJob> {
            Ok(NewJob {
                kind: BATCH_KIND.to_string(),
                project_id: Some(c.project_id.clone()),
                payload: BatchPayload {
                    campaign_id: c.id.as_str().to_string(),
                    batch,
                }
                .to_json()?,
                input: None,
                max_attempts,
                run_at: now,
            })
        };
        let batch = batch_job(c.batches)?;
        let finish = NewJob {
            kind: FINISH_KIND.to_string(),
            project_id: Some(c.project_id.clone()),
            payload: FinishPayload {
                campaign_id: c.id.as_str().to_string(),
            }
            .to_json()?,
            input: None,
            max_attempts,
            run_at: now,
        };
        let after = c.snapshot_after.clone().unwrap_or_default();
        let step = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let current: Option<i32> = sqlx::query_scalar(&guard)
                .bind(c.id.as_str())
                .bind(c.batches)
                .bind(&after)
                .fetch_optional(&mut *tx)
                .await?;
            if current.is_none() {
                tx.rollback().await?;
                return Ok(SnapshotStep::Stopped);
            }
            let taken: Vec<String> = bind_all!(sqlx::query_scalar(&insert), &binds)
                .fetch_all(&mut *tx)
                .await?;
            match taken.iter().max() {
                Some(last) => {
                    sqlx::query(
                        "UPDATE campaigns SET snapshot_after = $2, batches = batches + 1, \
                         recipient_count = recipient_count + $3, updated_at = $4 WHERE id = $1",
                    )
                    .bind(c.id.as_str())
                    .bind(last)
                    .bind(taken.len() as i64)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    tx.insert_job(&batch, now).await?;
                    tx.commit().await?;
                    SnapshotStep::Took(taken.len() as i64)
                }
                None => {
                    sqlx::query("UPDATE campaigns SET snapshot_done = TRUE, updated_at = $2 WHERE id = $1")
                        .bind(c.id.as_str())
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    tx.insert_job(&finish, now).await?;
                    let result = serde_json::json!({ "recipients": c.recipient_count, "batches": c.batches });
                    if !tx.complete_job(lease, &result, now).await? {
                        tx.rollback().await?;
                        return Ok(SnapshotStep::Stopped);
                    }
                    tx.commit().await?;
                    SnapshotStep::Done
                }
            }
        });
        Ok(step)
    }

    /// Up to `limit` pending ledger rows of a batch, in contact id order, with their contacts.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn pending_recipients(
        &self,
        campaign: &CampaignId,
        batch: i32,
        limit: usize,
    ) -> StoreResult<Vec<PendingRecipient>> {
        let ids: Vec<String> = on_db!(self.db(), pool => {
            sqlx::query_scalar(&format!(
                "SELECT contact_id FROM campaign_recipients WHERE campaign_id = $1 AND batch = $2 \
                 AND status = 'pending' ORDER BY contact_id LIMIT {limit}"
            ))
            .bind(campaign.as_str())
            .bind(batch)
            .fetch_all(pool)
            .await?
        });
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {CONTACT_COLUMNS} FROM contacts WHERE id IN ({})",
            placeholders(1, ids.len())
        );
        let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for id in &ids {
                q = q.bind(id);
            }
            q.fetch_all(pool).await?
        });
        let mut contacts: HashMap<String, Contact> = rows
            .into_iter()
            .map(Contact::from)
            .map(|c| (c.id.as_str().to_string(), c))
            .collect();
        Ok(ids
            .into_iter()
            .map(|id| {
                let contact = contacts.remove(&id);
                (ContactId::from_trusted(id), contact)
            })
            .collect())
    }

    /// Writes a group of a batch in one transaction: each email (unless suppressed, due for
    /// delivery at once) only with its ledger row's move out of `pending`, so a recipient whose row
    /// moved already (a second run of the batch) gets nothing; and the rows in `closed` with
    /// their final status (`skipped` for a deleted contact, `failed`). Nothing is written when the campaign is no longer sending.
    #[tracing::instrument(level = "debug", skip_all, fields(campaign = %campaign, emails = emails.len()))]
    pub async fn commit_campaign_batch(
        &self,
        project: &ProjectId,
        campaign: &CampaignId,
        emails: &[NewEmail],
        closed: &[(ContactId, &str)],
    ) -> StoreResult<BatchCommit> {
        let now = now_ms();
        // A plain read, no row lock: the snapshot locks the campaign row for each chunk, and
        // batch commits waiting on it (or holding it) would serialise the two. A cancel that
        // commits while this group is being written is seen by the next group ("within one
        // batch"); the emails of this group are not suppressed by it and go out.
        let status_sql = "SELECT status FROM campaigns WHERE id = $1";
        let mark = "UPDATE campaign_recipients SET status = $3, email_id = $4 \
                    WHERE campaign_id = $1 AND contact_id = $2 AND status = 'pending'";
        let commit = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let status: Option<String> = sqlx::query_scalar(status_sql)
                .bind(campaign.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            if status.as_deref() != Some(CampaignStatus::Sending.as_str()) {
                tx.rollback().await?;
                return Ok(BatchCommit::Stopped);
            }
            let mut wrote = 0;
            for e in emails {
                let (row_status, status) = if e.suppressed.is_some() {
                    (recipient::SUPPRESSED, email_status::SUPPRESSED)
                } else {
                    (recipient::QUEUED, email_status::QUEUED)
                };
                let moved = sqlx::query(mark)
                    .bind(campaign.as_str())
                    .bind(e.contact_id.as_str())
                    .bind(row_status)
                    .bind(e.id.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if moved == 0 {
                    continue;
                }
                wrote += 1;
                tx.insert_email(&EmailInsert {
                    project: project.as_str(),
                    email: e,
                    contact_id: Some(e.contact_id.as_str()),
                    status,
                    campaign_id: Some(campaign.as_str()),
                    test: false,
                    due_at: e.suppressed.is_none().then_some(now),
                    now,
                })
                .await?;
            }
            for (contact, row_status) in closed {
                wrote += sqlx::query(mark)
                    .bind(campaign.as_str())
                    .bind(contact.as_str())
                    .bind(*row_status)
                    .bind(None::<&str>)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected() as usize;
            }
            tx.commit().await?;
            BatchCommit::Wrote(wrote)
        });
        Ok(commit)
    }

    /// Marks a batch's pending rows `cancelled` (the campaign stopped before their turn).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_pending_recipients(
        &self,
        campaign: &CampaignId,
        batch: i32,
    ) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaign_recipients SET status = 'cancelled' \
                 WHERE campaign_id = $1 AND batch = $2 AND status = 'pending'",
            )
            .bind(campaign.as_str())
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Marks a sending campaign `SENT` when its snapshot is done, no ledger row is pending and
    /// none of its emails waits for the transport; false otherwise (look again later).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn finish_campaign_if_done(&self, id: &str) -> StoreResult<bool> {
        let now = now_ms();
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaigns SET status = 'SENT', finished_at = $2, updated_at = $2 \
                 WHERE id = $1 AND status = 'SENDING' AND snapshot_done \
                 AND NOT EXISTS (SELECT 1 FROM campaign_recipients r WHERE r.campaign_id = $1 AND r.status = 'pending') \
                 AND NOT EXISTS (SELECT 1 FROM emails e WHERE e.campaign_id = $1 AND e.status = 'queued')",
            )
            .bind(id)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// The email counts of campaigns of a project, by campaign id (absent: no email yet).
    #[tracing::instrument(level = "debug", skip(self, ids))]
    pub async fn campaign_counts(
        &self,
        project: &ProjectId,
        ids: &[&str],
    ) -> StoreResult<HashMap<String, CampaignCounts>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let list = placeholders(2, ids.len());
        let sql = format!(
            "SELECT campaign_id, COUNT(sent_at) AS sent, COUNT(delivered_at) AS delivered, \
             COUNT(CASE WHEN opened_at IS NOT NULL OR clicked_at IS NOT NULL THEN 1 END) AS opened, \
             COUNT(clicked_at) AS clicked, COUNT(bounced_at) AS bounced, COUNT(complained_at) AS complained, \
             COUNT(CASE WHEN status = 'suppressed' THEN 1 END) AS suppressed, \
             COUNT(CASE WHEN status = 'failed' THEN 1 END) AS failed, \
             COUNT(CASE WHEN status = 'queued' THEN 1 END) AS queued \
             FROM emails WHERE project_id = $1 AND campaign_id IN ({list}) AND NOT test GROUP BY campaign_id"
        );
        let unsubscribed_sql = format!(
            "SELECT e.campaign_id, COUNT(DISTINCT e.contact_id) FROM emails e \
             WHERE e.project_id = $1 AND e.campaign_id IN ({list}) AND e.sent_at IS NOT NULL AND NOT e.test \
             AND EXISTS (SELECT 1 FROM events v WHERE v.contact_id = e.contact_id \
             AND v.name = 'contact.unsubscribed' AND v.created_at >= e.sent_at) GROUP BY e.campaign_id"
        );
        #[derive(FromRow)]
        struct Row {
            campaign_id: String,
            #[sqlx(flatten)]
            counts: CampaignCounts,
        }
        let (rows, unsubscribed): (Vec<Row>, Vec<(String, i64)>) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            let mut u = sqlx::query_as(&unsubscribed_sql).bind(project.as_str());
            for id in ids {
                q = q.bind(*id);
                u = u.bind(*id);
            }
            (q.fetch_all(pool).await?, u.fetch_all(pool).await?)
        });
        let mut counts: HashMap<String, CampaignCounts> = rows
            .into_iter()
            .map(|r| (r.campaign_id, r.counts))
            .collect();
        for (id, n) in unsubscribed {
            counts.entry(id).or_default().unsubscribed = n;
        }
        Ok(counts)
    }

    /// Inserts a test send of a campaign (queued, never counted); `contact` when the address
    /// is a contact of the project.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn insert_test_email(
        &self,
        project: &ProjectId,
        email: &NewEmail,
        contact: Option<&ContactId>,
    ) -> StoreResult<()> {
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            tx.insert_email(&EmailInsert {
                project: project.as_str(),
                email,
                contact_id: contact.map(ContactId::as_str),
                status: email_status::QUEUED,
                campaign_id: None,
                test: true,
                due_at: Some(now),
                now,
            })
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// A project's campaigns that started sending in `[from, to)`, newest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn campaigns_started_between(
        &self,
        project: &ProjectId,
        from: i64,
        to: i64,
    ) -> StoreResult<Vec<Campaign>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM campaigns WHERE project_id = $1 \
             AND started_at >= $2 AND started_at < $3 ORDER BY id DESC"
        );
        let rows: Vec<CampaignRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(from).bind(to).fetch_all(pool).await?
        });
        rows.into_iter().map(Campaign::try_from).collect()
    }

    /// One page (from 1) of a project's campaigns that have started sending, newest first, with
    /// their total.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn started_campaigns_page(
        &self,
        project: &ProjectId,
        page: u32,
        page_size: u32,
    ) -> StoreResult<(Vec<Campaign>, i64)> {
        let offset = u64::from(page.saturating_sub(1)) * u64::from(page_size);
        let sql = format!(
            "SELECT {COLUMNS} FROM campaigns WHERE project_id = $1 AND started_at IS NOT NULL \
             ORDER BY id DESC LIMIT {page_size} OFFSET {offset}"
        );
        let (rows, total): (Vec<CampaignRow>, i64) = on_db!(self.db(), pool => {
            let rows = sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?;
            let total = sqlx::query_scalar(
                "SELECT COUNT(*) FROM campaigns WHERE project_id = $1 AND started_at IS NOT NULL",
            )
            .bind(project.as_str())
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        let campaigns = rows
            .into_iter()
            .map(Campaign::try_from)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok((campaigns, total))
    }

    /// A project's scheduled campaigns, soonest first, up to `limit`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn scheduled_campaigns(
        &self,
        project: &ProjectId,
        limit: u32,
    ) -> StoreResult<Vec<Campaign>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM campaigns WHERE project_id = $1 AND status = 'SCHEDULED' \
             ORDER BY scheduled_at, id LIMIT {limit}"
        );
        let rows: Vec<CampaignRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?
        });
        rows.into_iter().map(Campaign::try_from).collect()
    }

    /// The active (`SCHEDULED` or `SENDING`) campaigns of a project whose audience is a
    /// segment, as `(id, name)`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn active_campaigns_using_segment(
        &self,
        project: &ProjectId,
        id: &SegmentId,
    ) -> StoreResult<Vec<(String, String)>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, name FROM campaigns WHERE project_id = $1 AND segment_id = $2 \
                 AND status IN ('SCHEDULED', 'SENDING') ORDER BY id",
            )
            .bind(project.as_str())
            .bind(id.as_str())
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The `FILTERED` campaigns of a project with their filters, newest first (for usage).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn campaign_filters(
        &self,
        project: &ProjectId,
    ) -> StoreResult<Vec<(String, String, Value)>> {
        let rows: Vec<(String, String, Json<Value>)> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, name, audience_filter FROM campaigns WHERE project_id = $1 \
                 AND audience_type = 'FILTERED' AND audience_filter IS NOT NULL ORDER BY id DESC",
            )
            .bind(project.as_str())
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(|(i, n, f)| (i, n, f.0)).collect())
    }
}
