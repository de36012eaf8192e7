//! Pausing and resuming a campaign, each one transaction, with nothing kept in a process.
//!
//! A pause moves a `SCHEDULED` or `SENDING` campaign to `PAUSED` and holds its emails still
//! waiting for the transport (no hand-off started): their `due_at` moves [`HELD_MS`] ahead, so
//! no delivery claims them, and the resume moves it back (an email whose retry time passed
//! meanwhile is due at once). The batch jobs read the status in the transaction that moves
//! their recipients out of `pending` (`commit_campaign_batch`), end on `PAUSED` and leave the
//! rows pending; the snapshot's guard (`snapshot_chunk`) and the finish job end likewise. The
//! resume queues, in its own transaction, what is needed to go on from the rows: a batch job
//! for each batch with pending rows, the snapshot's job while the snapshot is not done (it goes
//! on from its checkpoint), else the finish job. A batch job still running from before the
//! pause may run beside the new one: the ledger row's move out of `pending` lets only one of
//! them write a recipient's email, so each recipient still gets one email.

use super::records::{
    COLUMNS, Campaign, CampaignRow, PENDING_BATCHES, batch_job, finish_job, send_job, winner_job,
};
use crate::domain::campaign::CampaignStatus;
use crate::domain::ids::{CampaignId, ProjectId};
use crate::domain::time::now_ms;
use crate::store::dialect::BeginWrite;
use crate::store::jobs::NewJob;
use crate::store::statements::Statements;
use crate::store::{Store, StoreResult, on_db_write};

/// How far a pause moves its queued emails' `due_at` ahead (about 35,000 years): far past any
/// real due time, so a held email is never due and one not held never looks held.
pub const HELD_MS: i64 = 1 << 50;

impl Store {
    /// Pauses a `SCHEDULED` or `SENDING` campaign and holds its emails not yet handed to the
    /// transport, in one transaction; `None` when it is in another status (`NotFound` when it
    /// does not exist).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn pause_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let sql = format!(
            "UPDATE campaigns SET status = 'PAUSED', updated_at = $3 \
             WHERE project_id = $1 AND id = $2 AND status IN ('SCHEDULED', 'SENDING') RETURNING {COLUMNS}"
        );
        let hold = "UPDATE emails SET due_at = due_at + $2 WHERE campaign_id = $1 \
                    AND status = 'queued' AND handed_off_at IS NULL AND due_at < $2";
        self.move_campaign(project, id, &sql, now, &[(hold, Some(HELD_MS))])
            .await
    }

    /// Resumes a `PAUSED` campaign, in one transaction: back to `SCHEDULED` when it was paused
    /// before its scheduled time and that time has not come, else `SENDING` (from now, when it
    /// had not started); its held emails due again; and the jobs that go on from its ledger
    /// queued. `None` when it is not paused (`NotFound` when it does not exist).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn resume_campaign(
        &self,
        project: &ProjectId,
        id: &CampaignId,
        max_attempts: i32,
    ) -> StoreResult<Option<Campaign>> {
        let now = now_ms();
        let waits = "started_at IS NULL AND scheduled_at > $3";
        let sql = format!(
            "UPDATE campaigns SET \
             status = CASE WHEN {waits} THEN 'SCHEDULED' ELSE 'SENDING' END, \
             started_at = CASE WHEN {waits} THEN NULL ELSE COALESCE(started_at, $3) END, \
             updated_at = $3 WHERE project_id = $1 AND id = $2 AND status = 'PAUSED' RETURNING {COLUMNS}"
        );
        let resumed: Option<Campaign> = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<CampaignRow> = sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            match row {
                None => {
                    tx.rollback().await?;
                    None
                }
                Some(row) => {
                    let c = Campaign::try_from(row)?;
                    let mut jobs = resume_jobs(&c, max_attempts, now)?;
                    if c.status == CampaignStatus::Sending {
                        let batches: Vec<i32> = sqlx::query_scalar(PENDING_BATCHES)
                        .bind(id.as_str())
                        .fetch_all(&mut *tx)
                        .await?;
                        for batch in batches {
                            jobs.push(batch_job(project, id, batch, max_attempts, now)?);
                        }
                        sqlx::query(
                            "UPDATE emails SET due_at = due_at - $2 WHERE campaign_id = $1 \
                             AND status = 'queued' AND due_at >= $2",
                        )
                        .bind(id.as_str())
                        .bind(HELD_MS)
                        .execute(&mut *tx)
                        .await?;
                    }
                    let jobs: Vec<&NewJob> = jobs.iter().collect();
                    tx.insert_jobs(&jobs, now).await?;
                    tx.commit().await?;
                    Some(c)
                }
            }
        });
        match resumed {
            Some(c) => Ok(Some(c)),
            None => self.unmoved(project, id).await,
        }
    }
}

/// The jobs a resumed campaign goes on with, besides its batches': its send job for its
/// scheduled time (`SCHEDULED`); else the snapshot's job while the snapshot is not done, the
/// A/B test's winner job while its winner is not chosen, or the finish job.
fn resume_jobs(c: &Campaign, max_attempts: i32, now: i64) -> StoreResult<Vec<NewJob>> {
    let (project, id) = (&c.project_id, &c.id);
    let job = match (c.status, c.snapshot_done) {
        (CampaignStatus::Scheduled, _) => send_job(project, id, c.scheduled_at, max_attempts, now)?,
        (_, false) => send_job(project, id, None, max_attempts, now)?,
        // An A/B test still waiting for its winner: the choice, at its time.
        (_, true) if c.content.ab.is_some() && c.ab_progress.winner.is_none() => {
            let at = c.ab_progress.decide_at.unwrap_or(now).max(now);
            winner_job(project, id, max_attempts, at)?
        }
        (_, true) => finish_job(project, id, max_attempts, now)?,
    };
    Ok(vec![job])
}
