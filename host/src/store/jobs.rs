//! The durable job queue: jobs live in the database and are claimed with a lease.
//!
//! A claim marks up to N due jobs `running`, owned by one worker until `locked_until`. On
//! PostgreSQL the claim uses `FOR UPDATE SKIP LOCKED`, so workers of several instances never
//! take the same job; on SQLite the single writer makes the claim atomic. A job whose worker died
//! is claimed again once its lease has expired. Every later write of a job's state is guarded by
//! `locked_by`, so a worker that lost its lease cannot overwrite its successor's work.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::{Store, StoreResult};
use crate::domain::ids::{JobId, ProjectId};
use crate::domain::time::now_ms;
use crate::{on_db, on_db_write};

/// States of a job.
pub mod state {
    /// Waiting for its `run_at`.
    pub const QUEUED: &str = "queued";
    /// Claimed by a worker.
    pub const RUNNING: &str = "running";
    /// Finished; `result` holds the outcome.
    pub const COMPLETED: &str = "completed";
    /// Gave up; `last_error` says why.
    pub const FAILED: &str = "failed";
}

/// A job to enqueue.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// What handler runs it.
    pub kind: String,
    /// The project it belongs to.
    pub project_id: Option<ProjectId>,
    /// Its parameters.
    pub payload: Value,
    /// A large input (a CSV file), kept apart from the payload.
    pub input: Option<Vec<u8>>,
    /// How many attempts before it fails for good.
    pub max_attempts: i32,
    /// Earliest start, unix ms.
    pub run_at: i64,
}

/// A job as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct JobRecord {
    /// Its id.
    pub id: String,
    /// Its project.
    pub project_id: Option<String>,
    /// Its kind.
    pub kind: String,
    /// `queued`, `running`, `completed` or `failed`.
    pub state: String,
    /// 0..=100.
    pub progress: i32,
    /// The handler's outcome.
    pub result: Option<Json<Value>>,
    /// The last checkpoint a handler saved.
    pub checkpoint: Option<Json<Value>>,
    /// Attempts so far.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
    /// Created, unix ms.
    pub created_at: i64,
    /// Finished, unix ms.
    pub finished_at: Option<i64>,
}

/// A job claimed by a worker.
#[derive(Clone, Debug, FromRow)]
pub struct ClaimedJob {
    /// Its id.
    pub id: String,
    /// Its project.
    pub project_id: Option<String>,
    /// Its kind.
    pub kind: String,
    /// Its parameters.
    pub payload: Json<Value>,
    /// Where a previous attempt got to.
    pub checkpoint: Option<Json<Value>>,
    /// Attempts, this one included.
    pub attempts: i32,
    /// The attempt limit.
    pub max_attempts: i32,
}

const RECORD_COLUMNS: &str = "id, project_id, kind, state, progress, result, checkpoint, attempts, last_error, created_at, finished_at";

impl Store {
    /// Adds a job to the queue.
    pub async fn enqueue_job(&self, job: &NewJob) -> StoreResult<JobId> {
        let id = JobId::generate();
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            sqlx::query(INSERT_JOB)
            .bind(id.as_str())
            .bind(job.project_id.as_ref().map(|p| p.as_str()))
            .bind(&job.kind)
            .bind(Json(&job.payload))
            .bind(job.input.as_deref())
            .bind(job.max_attempts)
            .bind(job.run_at)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(id)
    }

    /// A job of a project.
    pub async fn job(&self, project: &ProjectId, id: &JobId) -> StoreResult<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM jobs WHERE project_id = $1 AND id = $2");
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// Jobs of `kind` waiting to run (queued or running), across projects.
    pub async fn count_queued_jobs(&self, kind: &str) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM jobs WHERE kind = $1 AND state IN ('queued', 'running')",
            )
            .bind(kind)
            .fetch_one(pool)
            .await?
        });
        Ok(n)
    }

    /// Any job by id (for workers and tests).
    pub async fn job_by_id(&self, id: &str) -> StoreResult<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM jobs WHERE id = $1");
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// The large input of a job.
    pub async fn job_input(&self, id: &str) -> StoreResult<Option<Vec<u8>>> {
        let row: Option<Option<Vec<u8>>> = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT input FROM jobs WHERE id = $1").bind(id).fetch_optional(pool).await?
        });
        Ok(row.flatten())
    }

    /// Claims up to `limit` due jobs (and jobs whose lease expired) for `worker`.
    pub async fn claim_jobs(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let now = now_ms();
        let lock = super::dialect::skip_locked(self.db().backend());
        let sql = format!(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, locked_by = $1, locked_until = $2, updated_at = $3 \
             WHERE id IN (SELECT id FROM jobs WHERE (state = 'queued' AND run_at <= $3) \
             OR (state = 'running' AND locked_until < $3) ORDER BY run_at LIMIT $4{lock}) \
             RETURNING id, project_id, kind, payload, checkpoint, attempts, max_attempts"
        );
        let rows = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql).bind(worker).bind(now + lease_ms).bind(now).bind(limit).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Extends a lease; false when the worker no longer owns the job.
    pub async fn extend_job_lease(
        &self,
        id: &str,
        worker: &str,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("UPDATE jobs SET locked_until = $3 WHERE id = $1 AND locked_by = $2 AND state = 'running'")
                .bind(id)
                .bind(worker)
                .bind(now_ms() + lease_ms)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// Marks a job completed with its result; false when the worker no longer owns it.
    pub async fn complete_job(&self, id: &str, worker: &str, result: &Value) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(COMPLETE_JOB)
                .bind(id)
                .bind(worker)
                .bind(Json(result))
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// Records a failed attempt: queued again at `retry_at`, or failed for good when `None`.
    pub async fn fail_job(
        &self,
        id: &str,
        worker: &str,
        error: &str,
        retry_at: Option<i64>,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let n = on_db_write!(self.db(), pool => {
            match retry_at {
                Some(at) => sqlx::query(
                    "UPDATE jobs SET state = 'queued', run_at = $3, last_error = $4, locked_by = NULL, \
                     locked_until = NULL, updated_at = $5 WHERE id = $1 AND locked_by = $2",
                )
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
}

/// Inserts a queued job; binds id, project, kind, payload, input, max attempts, run at, now.
/// Shared with stores that enqueue a job inside their own transaction.
pub(crate) const INSERT_JOB: &str = "INSERT INTO jobs (id, project_id, kind, payload, input, state, progress, \
     attempts, max_attempts, run_at, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, 'queued', 0, 0, $6, $7, $8, $8)";

/// Completes a job; binds id, worker, result, now. Shared with transactional handlers.
pub(crate) const COMPLETE_JOB: &str = "UPDATE jobs SET state = 'completed', result = $3, progress = 100, \
     finished_at = $4, updated_at = $4, locked_by = NULL, locked_until = NULL \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";

/// Saves a checkpoint; binds id, worker, checkpoint, progress, now. Shared with transactional
/// handlers.
pub(crate) const CHECKPOINT_JOB: &str = "UPDATE jobs SET checkpoint = $3, progress = $4, updated_at = $5 \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";
