//! The durable job queue: jobs live in the database and are claimed with a lease.
//!
//! A claim marks up to N due jobs `running`, owned by one worker until `locked_until`. On
//! PostgreSQL the claim uses `FOR UPDATE SKIP LOCKED`, so workers of several instances never
//! take the same job; on SQLite the single writer makes the claim atomic. A job whose worker died
//! is claimed again once its lease has expired. Every later write of a job's state is guarded by
//! `locked_by`, so a worker that lost its lease cannot overwrite its successor's work.

use serde_json::Value;
use sqlx::types::Json;

use super::{Store, StoreResult, on_db, on_db_write};
use crate::domain::ids::{JobId, ProjectId};
use crate::domain::time::now_ms;

pub(in crate::store) mod rows;
pub(in crate::store) mod sql;

pub(in crate::store) use rows::ClaimedRow;
pub use rows::{
    BulkPayload, ClaimedJob, DomainCheckPayload, ImportPayload, JobPayload, JobRecord, Lease,
    NewJob, QueueHead, queue_of, state,
};
pub(in crate::store) use sql::delete_queued_jobs_for_sql;
use sql::{COMPLETE_JOB, QUEUE_HEADS, RETRY_JOB, adopt_sql, claim_sql, created_before};

const RECORD_COLUMNS: &str = "id, project_id, kind, state, progress, result, checkpoint, attempts, last_error, created_at, finished_at";

impl Store {
    /// Adds a job to the queue.
    #[tracing::instrument(level = "debug", skip_all, fields(kind = %job.kind))]
    pub async fn enqueue_job(&self, job: &NewJob) -> StoreResult<JobId> {
        use super::dialect::BeginWrite;
        use super::statements::Statements;
        let id = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let id = tx.insert_job(job, now_ms()).await?;
            tx.commit().await?;
            id
        });
        Ok(id)
    }

    /// A job of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn job(&self, project: &ProjectId, id: &JobId) -> StoreResult<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM jobs WHERE project_id = $1 AND id = $2");
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// Jobs of `kind` waiting to run (queued or running), across projects.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_queued_jobs(&self, kind: &str) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT (SELECT COUNT(*) FROM jobs WHERE kind = $1 AND state = 'queued') \
                 + (SELECT COUNT(*) FROM jobs WHERE kind = $1 AND state = 'running')",
            )
            .bind(kind)
            .fetch_one(pool)
            .await?
        });
        Ok(n)
    }

    /// Jobs of `kind` in `state` (see [`state`]), across projects.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_jobs(&self, kind: &str, state: &str) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE kind = $1 AND state = $2")
                .bind(kind)
                .bind(state)
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// Any job by id (for workers and tests).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn job_by_id(&self, id: &JobId) -> StoreResult<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM jobs WHERE id = $1");
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// The large input of a job.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn job_input(&self, id: &JobId) -> StoreResult<Option<Vec<u8>>> {
        let row: Option<Option<Vec<u8>>> = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT input FROM jobs WHERE id = $1").bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row.flatten())
    }

    /// The queues with queued work after `after` in queue order, at most `limit`, each with
    /// when its earliest job is due: a loose index scan over `jobs_queued_by_queue`, two index
    /// seeks per queue however many jobs each holds (see `jobs::fairness`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn job_queue_heads(&self, after: &str, limit: i64) -> StoreResult<Vec<QueueHead>> {
        self.queue_heads(QUEUE_HEADS, after, limit).await
    }

    /// The heads a loose index scan `sql` lists (binds `after` and `limit`; answers each queue
    /// and when its earliest work is due, NULL for a queue with nothing that will ever be due,
    /// which is left out). Planned at each call on PostgreSQL: a plan kept from when the
    /// statistics saw no queued work scans the whole table at each claim of a burst
    /// (docs/benchmarks.md, "The send benchmark's statistics").
    pub(super) async fn queue_heads(
        &self,
        sql: &'static str,
        after: &str,
        limit: i64,
    ) -> StoreResult<Vec<QueueHead>> {
        let keep = super::dialect::keeps_plans(self.db().backend());
        let rows: Vec<(String, Option<i64>)> = on_db!(self.db(), pool => {
            sqlx::query_as(sql)
                .bind(after)
                .bind(limit)
                .persistent(keep)
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(queue, due)| due.map(|next_run_at| QueueHead { queue, next_run_at }))
            .collect())
    }

    /// Claims for `worker`, in one statement, up to `slots` jobs: first jobs whose lease
    /// expired, then from each queue of `takes` its due jobs, earliest first, at most the count
    /// given. Each claim is `worker:<random token>`, its own.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn claim_jobs(
        &self,
        worker: &str,
        slots: i64,
        takes: &[(String, i64)],
        lease_ms: i64,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let now = now_ms();
        let backend = self.db().backend();
        let sql = claim_sql(backend, takes.len());
        let rows: Vec<ClaimedRow> = on_db_write!(self.db(), pool => {
            let mut query = sqlx::query_as(&sql).bind(worker).bind(now + lease_ms).bind(now).bind(slots);
            for (queue, n) in takes {
                query = query.bind(queue.as_str()).bind(*n);
            }
            query.fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Claims for the running job of `lease`, under the same claim (so its heartbeat keeps them),
    /// up to `more` further due jobs of `queue`, earliest first: a batch its handler runs and
    /// finishes together (the step runs of many executions). Each claimed job's own lease is
    /// `(its id, lease.worker)`.
    #[tracing::instrument(level = "debug", skip(self, lease))]
    pub async fn adopt_jobs(
        &self,
        queue: &str,
        lease: &Lease,
        more: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<ClaimedJob>> {
        if more <= 0 {
            return Ok(Vec::new());
        }
        let now = now_ms();
        let sql = adopt_sql(self.db().backend());
        let rows: Vec<ClaimedRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(lease.worker.as_str())
                .bind(now + lease_ms)
                .bind(now)
                .bind(queue)
                .bind(more)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Extends a lease, and those of every job claimed under it; false when the claim no longer
    /// owns any job.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn extend_job_lease(&self, lease: &Lease, lease_ms: i64) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            // Every job of the claim: a delivery batch's jobs share the claim of the one that
            // gathered them, and its heartbeat.
            sqlx::query("UPDATE jobs SET locked_until = $2 WHERE locked_by = $1 AND state = 'running'")
                .bind(lease.worker.as_str())
                .bind(now_ms() + lease_ms)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n >= 1)
    }

    /// Deletes up to `limit` jobs that finished (completed or failed) before `before` (unix ms)
    /// and were created before it too, oldest first, in one statement; answers how many. Job
    /// ids sort by creation time, so the search is a range of the primary key that starts at
    /// the oldest job: it steps only over old jobs still queued or running (delayed steps) and
    /// never reads the recent ones.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_finished_jobs(&self, before: i64, limit: i64) -> StoreResult<u64> {
        let created_before = created_before(before);
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE id < $1 \
                 AND state IN ('completed', 'failed') AND finished_at < $2 ORDER BY id LIMIT $3)",
            )
            .bind(created_before.as_str())
            .bind(before)
            .bind(limit)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Marks a job completed with its result; false when the worker no longer owns it.
    #[tracing::instrument(level = "debug", skip(self, result))]
    pub async fn complete_job(&self, lease: &Lease, result: &Value) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(COMPLETE_JOB)
                .bind(lease.job.as_str())
                .bind(lease.worker.as_str())
                .bind(Json(result))
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// Records a failed attempt: queued again at `retry_at`, or failed for good when `None`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn fail_job(
        &self,
        lease: &Lease,
        error: &str,
        retry_at: Option<i64>,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let (id, worker) = (lease.job.as_str(), lease.worker.as_str());
        let n = on_db_write!(self.db(), pool => {
            match retry_at {
                Some(at) => sqlx::query(RETRY_JOB)
                .bind(id)
                .bind(worker)
                .bind(at)
                .bind(error)
                .bind(now),
                None => sqlx::query(
                    "UPDATE jobs SET state = 'failed', last_error = $4, locked_by = NULL, locked_until = NULL, \
                     updated_at = $5, finished_at = $3 WHERE id = $1 AND locked_by = $2",
                )
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(error)
                .bind(now),
            }
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Queues `job` of a singleton kind (one that a unique index allows only once queued or
    /// running, across every instance: `segments.reevaluate`) unless one is there already, and
    /// answers whether it was queued. With `completing`, first completes that running job under
    /// its lease with its result, in the same transaction, so a periodic job hands over to its
    /// next run atomically; `None` when the lease was lost (and then nothing is queued).
    #[tracing::instrument(level = "debug", skip_all, fields(kind = %job.kind))]
    pub async fn queue_singleton_job(
        &self,
        job: &NewJob,
        completing: Option<(&Lease, &Value)>,
    ) -> StoreResult<Option<bool>> {
        use super::dialect::BeginWrite;
        use super::statements::Statements;
        let now = now_ms();
        let queued = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if let Some((lease, result)) = completing
                && !tx.complete_job(lease, result, now).await?
            {
                return Ok(None);
            }
            let queued = tx.insert_job_once(job, now).await?.is_some();
            tx.commit().await?;
            queued
        });
        Ok(Some(queued))
    }

    /// Saves a running job's checkpoint and progress (0..=100); false when the lease was lost.
    #[tracing::instrument(level = "debug", skip(self, checkpoint))]
    pub async fn checkpoint_job(
        &self,
        lease: &Lease,
        checkpoint: &Value,
        progress: i32,
    ) -> StoreResult<bool> {
        use super::dialect::BeginWrite;
        use super::statements::Statements;
        let saved = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let saved = tx.checkpoint_job(lease, checkpoint, progress, now_ms()).await?;
            tx.commit().await?;
            saved
        });
        Ok(saved)
    }

    /// Puts a claimed job back to wait until `run_at` without counting the attempt.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn postpone_job(&self, lease: &Lease, run_at: i64) -> StoreResult<bool> {
        self.requeue_uncounted(lease, run_at, None).await
    }

    /// Puts a claimed job back to wait until `run_at` without counting the attempt, recording
    /// `reason` as its last error (something asked it to wait: a transport's `429`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn defer_job(&self, lease: &Lease, run_at: i64, reason: &str) -> StoreResult<bool> {
        self.requeue_uncounted(lease, run_at, Some(reason)).await
    }

    async fn requeue_uncounted(
        &self,
        lease: &Lease,
        run_at: i64,
        reason: Option<&str>,
    ) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE jobs SET state = 'queued', run_at = $3, attempts = attempts - 1, locked_by = NULL, \
                 locked_until = NULL, updated_at = $4, last_error = COALESCE($5, last_error) \
                 WHERE id = $1 AND locked_by = $2 AND state = 'running'",
            )
            .bind(lease.job.as_str())
            .bind(lease.worker.as_str())
            .bind(run_at)
            .bind(now_ms())
            .bind(reason)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }
}
