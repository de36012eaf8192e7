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

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::{BeginWrite, placeholders};
use super::emails::{EmailInsert, NewEmail, status as email_status};
use super::statements::Statements;
use super::{Store, StoreError, StoreResult, on_db, on_db_write};
use crate::domain::campaign::{CampaignContent, CampaignStatus};
use crate::domain::ids::{CampaignId, ContactId, ProjectId, SegmentId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;

pub(in crate::store) mod ab;
pub(in crate::store) mod batches;
pub(in crate::store) mod pause;
pub(in crate::store) mod records;
pub(in crate::store) mod snapshot;

pub use ab::{VariantTally, winner_result};
pub use records::{
    AbProgress, AudienceCounts, BATCH_KIND, BatchCommit, BatchPayload, Campaign, CampaignCounts,
    FINISH_KIND, FinishPayload, PendingRecipient, SEND_KIND, SNAPSHOT_CHUNK, SendPayload,
    SnapshotStep, WINNER_KIND, WinnerPayload, recipient,
};
use records::{COLUMNS, CampaignRow, campaign_row_binds, send_job, stored_variants};

impl Store {
    /// The campaign a guarded move (an `UPDATE … RETURNING`) answered, or `None` when the move
    /// did not apply to its status (`NotFound` when there is no such campaign).
    async fn moved(
        &self,
        row: Option<CampaignRow>,
        project: &ProjectId,
        id: &CampaignId,
    ) -> StoreResult<Option<Campaign>> {
        match row {
            Some(row) => Ok(Some(row.try_into()?)),
            None => self.unmoved(project, id).await,
        }
    }

    /// `None` for a move that did not apply, or `NotFound` when there is no such campaign.
    async fn unmoved(&self, project: &ProjectId, id: &CampaignId) -> StoreResult<Option<Campaign>> {
        self.campaign(project, id).await.map(|_| None)
    }

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
             from_name, reply_to, audience_type, segment_id, audience_filter, status, created_at, updated_at, \
             locale_variants, ab_test, topic_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'DRAFT', $13, $13, $14, $15, $16) RETURNING {COLUMNS}"
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
                .bind(stored_variants(c))
                .bind(c.ab.as_ref().map(Json))
                .bind(c.topic.as_ref().map(|t| t.as_str()))
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
        let mut from_where = String::from("FROM campaigns WHERE project_id = $1");
        let mut binds = vec![project.as_str()];
        if let Some(s) = status {
            from_where.push_str(" AND status = $2");
            binds.push(s.as_str());
        }
        let (rows, total): (Vec<CampaignRow>, i64) = self
            .newest_first_rows(COLUMNS, &from_where, &binds, page)
            .await?;
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
             updated_at = $13, locale_variants = $14, ab_test = $15, topic_id = $16 \
             WHERE project_id = $1 AND id = $2 AND status IN ('DRAFT', 'SCHEDULED') \
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
                .bind(stored_variants(c))
                .bind(c.ab.as_ref().map(Json))
                .bind(c.topic.as_ref().map(|t| t.as_str()))
                .fetch_optional(pool)
                .await?
        });
        self.moved(row, project, id).await
    }

    /// Deletes a campaign unless it is `SENDING` or `PAUSED` (its held emails wait for it);
    /// `false` when it is (`NotFound` when it does not exist). Its ledger goes with it; its
    /// emails stay (they were sent).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_campaign(&self, project: &ProjectId, id: &CampaignId) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM campaigns WHERE project_id = $1 AND id = $2 AND status NOT IN ('SENDING', 'PAUSED')",
            )
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
    /// `SCHEDULED`, and queues its send job for then, in one transaction; `local_send_at` is
    /// the wall-clock time of a send at each contact's local time (`None` for one time for
    /// all). `None` when the campaign is in another status.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn send_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
        scheduled_at: Option<i64>,
        local_send_at: Option<i64>,
        max_attempts: i32,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let (status, started) = match scheduled_at {
            Some(_) => (CampaignStatus::Scheduled, None),
            None => (CampaignStatus::Sending, Some(now)),
        };
        let job = send_job(project, id, scheduled_at, max_attempts, now)?;
        let sql = format!(
            "UPDATE campaigns SET status = $3, scheduled_at = $4, started_at = $5, updated_at = $6, \
             local_send_at = $7 WHERE project_id = $1 AND id = $2 AND status IN ('DRAFT', 'SCHEDULED') RETURNING {COLUMNS}"
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
                .bind(local_send_at)
                .fetch_optional(&mut *tx)
                .await?;
            if row.is_some() {
                tx.insert_job(&job, now).await?;
            }
            tx.commit().await?;
            row
        });
        self.moved(row, project, id).await
    }

    /// Cancels a `SCHEDULED`, `SENDING` or `PAUSED` campaign; `None` when it is in another
    /// status. In the same transaction, its emails still waiting for the transport (no hand-off
    /// started, held by a pause or not) become `suppressed` with the reason, so no delivery
    /// hands them off, and its pending ledger rows `cancelled` (a paused campaign's batches
    /// have ended); the batches still running see the status and stop.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let sql = format!(
            "UPDATE campaigns SET status = 'CANCELLED', finished_at = $3, updated_at = $3 \
             WHERE project_id = $1 AND id = $2 AND status IN ('SCHEDULED', 'SENDING', 'PAUSED') \
             RETURNING {COLUMNS}"
        );
        let then = [
            (
                "UPDATE campaign_recipients SET status = 'cancelled' \
                 WHERE campaign_id = $1 AND status = 'pending'",
                None,
            ),
            (
                "UPDATE emails SET status = 'suppressed', raw = NULL, draft = NULL, updated_at = $2, \
                 error = 'the campaign was cancelled before this email was handed to the transport' \
                 WHERE campaign_id = $1 AND status = 'queued' AND handed_off_at IS NULL",
                Some(now),
            ),
        ];
        self.move_campaign(project, id, &sql, now, &then).await
    }

    /// Moves a campaign's status with `sql` (an `UPDATE campaigns … RETURNING` its columns,
    /// binding `$1` the project, `$2` the id and `$3` `now`) and, only when it applied, runs
    /// each statement of `then` in the same transaction (binding `$1` the id and, when given,
    /// `$2` the value). `None` when the status did not allow the move (`NotFound` when there is
    /// no such campaign).
    pub(super) async fn move_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
        sql: &str,
        now: i64,
        then: &[(&str, Option<i64>)],
    ) -> StoreResult<Option<Campaign>> {
        let row: Option<CampaignRow> = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<CampaignRow> = sqlx::query_as(sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            if row.is_some() {
                for (statement, value) in then {
                    let mut q = sqlx::query(statement).bind(id.as_str());
                    if let Some(value) = value {
                        q = q.bind(*value);
                    }
                    q.execute(&mut *tx).await?;
                }
            }
            tx.commit().await?;
            row
        });
        self.moved(row, project, id).await
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

    /// The active (`SCHEDULED`, `SENDING` or `PAUSED`) campaigns of a project whose audience
    /// is a segment, as `(id, name)`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn active_campaigns_using_segment(
        &self,
        project: &ProjectId,
        id: &SegmentId,
    ) -> StoreResult<Vec<(String, String)>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, name FROM campaigns WHERE project_id = $1 AND segment_id = $2 \
                 AND status IN ('SCHEDULED', 'SENDING', 'PAUSED') ORDER BY id",
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
