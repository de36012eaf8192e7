//! The durable job queue: jobs live in the database and are claimed with a lease.
//!
//! A claim marks up to N due jobs `running`, owned by one worker until `locked_until`. On
//! PostgreSQL the claim uses `FOR UPDATE SKIP LOCKED`, so workers of several instances never
//! take the same job; on SQLite the single writer makes the claim atomic. A job whose worker died
//! is claimed again once its lease has expired. Every later write of a job's state is guarded by
//! `locked_by`, so a worker that lost its lease cannot overwrite its successor's work.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::{Backend, Store, StoreError, StoreResult, on_db, on_db_write};
use crate::domain::ids::{DomainId, JobId, ProjectId};
use crate::domain::time::now_ms;

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

/// The parameters of one kind of job, stored as JSON in `jobs.payload` when the job is queued
/// and read back as the same type by its handler.
pub trait JobPayload: Serialize + DeserializeOwned {
    /// The payload as stored.
    fn to_json(&self) -> StoreResult<Value> {
        serde_json::to_value(self).map_err(|e| StoreError::Corrupt(format!("job payload: {e}")))
    }
}

/// A free-form payload, for job kinds registered outside the crate (and tests).
impl JobPayload for Value {}

/// The payload of a `domains.check` job: `{"domainId": …}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainCheckPayload {
    /// The domain to check.
    #[serde(serialize_with = "id_text", deserialize_with = "domain_id")]
    pub domain_id: DomainId,
}

impl JobPayload for DomainCheckPayload {}

/// The payload of the bulk contact jobs: `{"contactIds": […]}`, the ids as the caller sent them
/// (unknown ones are reported in the result).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkPayload {
    /// The contacts to change.
    #[serde(default)]
    pub contact_ids: Vec<String>,
}

impl JobPayload for BulkPayload {}

/// The payload of a `contacts.import` job: `{"filename": …}` (the file itself is the job's
/// input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportPayload {
    /// The uploaded file's name, if it had one.
    pub filename: Option<String>,
}

impl JobPayload for ImportPayload {}

fn id_text<S: Serializer>(id: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

fn domain_id<'de, D: Deserializer<'de>>(d: D) -> Result<DomainId, D::Error> {
    String::deserialize(d).map(DomainId::from_trusted)
}

/// A worker's claim on a running job: every write of the job's state names it, and does nothing
/// once another claim holds the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub job: JobId,
    /// This claim: the worker that made it and a random token of its own, so that two claims of
    /// one job by the same instance (after a lapsed lease) are told apart.
    pub worker: String,
}

/// A queue with queued work, as the loose index scan reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueHead {
    /// `<project id> <kind>`, the queue a job waits in (see `jobs::fairness`); the project is empty for system jobs.
    pub queue: String,
    /// When its earliest job is due, unix ms.
    pub next_run_at: i64,
}

impl QueueHead {
    /// The project the queue belongs to, if any.
    pub fn project(&self) -> Option<&str> {
        self.queue
            .split_once(' ')
            .map(|(p, _)| p)
            .filter(|p| !p.is_empty())
    }

    /// The kind of its jobs.
    pub fn kind(&self) -> &str {
        self.queue.split_once(' ').map_or("", |(_, k)| k)
    }
}

/// The queue name of a job of `kind` in `project`.
pub fn queue_of(project: Option<&str>, kind: &str) -> String {
    format!("{} {kind}", project.unwrap_or(""))
}

/// A job to enqueue.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// What handler runs it.
    pub kind: String,
    /// The project it belongs to.
    pub project_id: Option<ProjectId>,
    /// Its parameters, a [`JobPayload`] as stored.
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
    pub id: String,
    pub project_id: Option<String>,
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
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub id: JobId,
    pub project_id: Option<ProjectId>,
    pub kind: String,
    /// Its parameters (read them with `JobContext::payload`).
    pub payload: Value,
    /// Where a previous attempt got to.
    pub checkpoint: Option<Value>,
    /// Attempts, this one included.
    pub attempts: i32,
    /// The attempt limit.
    pub max_attempts: i32,
    /// This claim's own id (the worker and a random token), which its [`Lease`] names.
    pub claim: String,
}

#[derive(FromRow)]
pub(super) struct ClaimedRow {
    id: String,
    project_id: Option<String>,
    kind: String,
    payload: Json<Value>,
    checkpoint: Option<Json<Value>>,
    attempts: i32,
    max_attempts: i32,
    locked_by: String,
}

impl From<ClaimedRow> for ClaimedJob {
    fn from(r: ClaimedRow) -> ClaimedJob {
        ClaimedJob {
            id: JobId::from_trusted(r.id),
            project_id: r.project_id.map(ProjectId::from_trusted),
            kind: r.kind,
            payload: r.payload.0,
            checkpoint: r.checkpoint.map(|c| c.0),
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            claim: r.locked_by,
        }
    }
}

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
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE jobs SET state = 'queued', run_at = $3, attempts = attempts - 1, locked_by = NULL, \
                 locked_until = NULL, updated_at = $4 WHERE id = $1 AND locked_by = $2 AND state = 'running'",
            )
            .bind(lease.job.as_str())
            .bind(lease.worker.as_str())
            .bind(run_at)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }
}

/// Lists queues with queued work after `$1`, at most `$2` (see [`Store::job_queue_heads`]).
///
/// Each step is `ORDER BY … LIMIT 1`, not `MIN(…)`: PostgreSQL plans `MIN` over an index either
/// as one seek or as an aggregate over every matching entry, and picks the aggregate whenever its
/// statistics were taken while few or no jobs were queued (a quiet queue, the usual case); then
/// each claim in a burst read every queued job (8,452 of them, 24-34 ms a claim, in the send
/// benchmark). An ordered `LIMIT 1` over `jobs_queued_by_queue` needs no sort, so it stays the
/// cheaper plan with such statistics, now that no other index holds the queued jobs (migration
/// 0028). Statistics of a table analyzed while empty still mislead it until the next `ANALYZE`
/// (`docs/benchmarks.md`, "The queue's search and PostgreSQL's statistics").
const QUEUE_HEADS: &str = "WITH RECURSIVE q(queue, n) AS ( \
     SELECT (SELECT queue FROM jobs WHERE state = 'queued' AND queue > $1 ORDER BY queue LIMIT 1), 1 \
     UNION ALL \
     SELECT (SELECT j.queue FROM jobs j WHERE j.state = 'queued' AND j.queue > q.queue ORDER BY j.queue LIMIT 1), \
     q.n + 1 FROM q WHERE q.queue IS NOT NULL AND q.n < $2) \
     SELECT queue, (SELECT j.run_at FROM jobs j WHERE j.state = 'queued' AND j.queue = q.queue \
     ORDER BY j.run_at LIMIT 1) FROM q WHERE q.queue IS NOT NULL";

/// The claim of [`Store::claim_jobs`] for `queues` queues; binds worker, lease end, now, slots,
/// then each queue and its count.
fn claim_sql(backend: Backend, queues: usize) -> String {
    let lock = super::dialect::skip_locked(backend);
    let token = super::dialect::random_token(backend);
    let mut branches = vec![format!(
        "SELECT id, 0 AS pos FROM (SELECT id FROM jobs WHERE state = 'running' AND locked_until < $3 \
         ORDER BY locked_until LIMIT $4{lock}) e"
    )];
    for i in 0..queues {
        let (queue, n) = (5 + 2 * i, 6 + 2 * i);
        branches.push(format!(
            "SELECT id, 1 AS pos FROM (SELECT id FROM jobs WHERE state = 'queued' AND queue = ${queue} \
             AND run_at <= $3 ORDER BY run_at LIMIT ${n}{lock}) q{i}"
        ));
    }
    let claimed = super::dialect::in_subquery(
        backend,
        "id",
        &format!(
            "SELECT id FROM ({}) c ORDER BY pos LIMIT $4",
            branches.join(" UNION ALL ")
        ),
    );
    format!(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, locked_by = $1 || ':' || {token}, \
         locked_until = $2, updated_at = $3 WHERE {claimed} \
         RETURNING id, project_id, kind, payload, checkpoint, attempts, max_attempts, locked_by"
    )
}

/// Deletes the queued jobs of kind `$1` whose payload names `$2` under `key` (a fixed
/// identifier, never user input).
pub(super) fn delete_queued_jobs_for_sql(backend: Backend, key: &'static str) -> String {
    let field = super::dialect::json_text(backend, "payload", key);
    format!("DELETE FROM jobs WHERE kind = $1 AND state = 'queued' AND {field} = $2")
}

/// Inserts `n` queued jobs in one statement; binds each job's id, project, kind, payload,
/// input, max attempts, run at, now (created), now (updated) and queue
/// (`jobs::fairness::queue_of`), each placeholder once and in order
/// (`dialect::bound_in_order`). A fresh id never
/// conflicts; the unique index of a singleton kind does when one is queued or running, and then
/// that job is not inserted.
pub(super) fn insert_jobs_sql(n: usize) -> String {
    use super::dialect::placeholders;
    let rows = (0..n)
        .map(|i| {
            let b = 1 + 10 * i;
            format!(
                "({}, 'queued', 0, 0, {})",
                placeholders(b, 5),
                placeholders(b + 5, 5)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO jobs (id, project_id, kind, payload, input, state, progress, attempts, max_attempts, \
         run_at, created_at, updated_at, queue) VALUES {rows} ON CONFLICT DO NOTHING"
    )
}

/// [`COMPLETE_JOB`] for `n` jobs in one statement, answering the ids whose lease held; binds
/// each job's id, worker and result, then now twice (each placeholder once and in order:
/// `dialect::bound_in_order`). Each job is found by id (`dialect::unindexed_equals`).
pub(super) fn complete_jobs_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_worker, v_result) AS (VALUES {}) \
         UPDATE jobs SET state = 'completed', result = v_result, progress = 100, finished_at = ${}, updated_at = ${}, \
         locked_by = NULL, locked_until = NULL FROM v WHERE id = v_id AND locked_by = v_worker AND {} \
         RETURNING id",
        super::dialect::value_rows(1, n, 3),
        3 * n + 1,
        3 * n + 2,
        super::dialect::unindexed_equals("state", "running"),
    )
}

/// Hands running jobs on, each to the next piece of work of the same kind (a workflow's next
/// step run, due now): a new payload, its attempts counted afresh, no checkpoint. The claim
/// stays, so nothing else can run it meanwhile. Answers the ids whose lease held; binds
/// each job's id, worker and payload, then now.
pub(super) fn chain_jobs_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_worker, v_payload) AS (VALUES {}) \
         UPDATE jobs SET payload = v_payload, attempts = 1, checkpoint = NULL, last_error = NULL, updated_at = ${} \
         FROM v WHERE id = v_id AND locked_by = v_worker AND {} RETURNING id",
        super::dialect::value_rows(1, n, 3),
        3 * n + 1,
        super::dialect::unindexed_equals("state", "running"),
    )
}

/// Queues a claimed job again after a failed attempt; binds id, claim, run at, error, now.
pub(super) const RETRY_JOB: &str = "UPDATE jobs SET state = 'queued', run_at = $3, last_error = $4, locked_by = NULL, \
     locked_until = NULL, updated_at = $5 WHERE id = $1 AND locked_by = $2";

/// Claims due jobs of one queue under an existing claim (a batch joining a running job); binds
/// the claim, lease end, now, the queue, the most to claim.
pub(super) fn adopt_sql(backend: Backend) -> String {
    let lock = super::dialect::skip_locked(backend);
    let claimed = super::dialect::in_subquery(
        backend,
        "id",
        &format!(
            "SELECT id FROM jobs WHERE state = 'queued' AND queue = $4 \
             AND run_at <= $3 ORDER BY run_at LIMIT $5{lock}"
        ),
    );
    format!(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, locked_by = $1, locked_until = $2, \
         updated_at = $3 WHERE {claimed} \
         RETURNING id, project_id, kind, payload, checkpoint, attempts, max_attempts, locked_by"
    )
}

/// The smallest job id created at `at` (unix ms) or later: a job id is its prefix and a
/// UUIDv7, whose first 12 hex digits are its creation time in ms, so every id created earlier
/// sorts below this one and every id created at `at` or later above it.
fn created_before(at: i64) -> String {
    format!("{}{:012x}", JobId::PREFIX, at.max(0))
}

/// Completes a job; binds id, worker, result, now.
pub(super) const COMPLETE_JOB: &str = "UPDATE jobs SET state = 'completed', result = $3, progress = 100, \
     finished_at = $4, updated_at = $4, locked_by = NULL, locked_until = NULL \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";

/// Saves a checkpoint; binds id, worker, checkpoint, progress, now.
pub(super) const CHECKPOINT_JOB: &str = "UPDATE jobs SET checkpoint = $3, progress = $4, updated_at = $5 \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn payloads_keep_the_stored_json_shape() {
        let domain = DomainId::generate();
        let stored = json!({ "domainId": domain.as_str() });
        let check = DomainCheckPayload {
            domain_id: domain.clone(),
        };
        assert_eq!(check.to_json().unwrap(), stored);
        assert_eq!(
            serde_json::from_value::<DomainCheckPayload>(stored).unwrap(),
            check
        );

        let bulk = BulkPayload {
            contact_ids: vec!["cnt_a".into(), "cnt_garbage".into()],
        };
        let stored = json!({ "contactIds": ["cnt_a", "cnt_garbage"] });
        assert_eq!(bulk.to_json().unwrap(), stored);
        assert_eq!(serde_json::from_value::<BulkPayload>(stored).unwrap(), bulk);

        let import = ImportPayload {
            filename: Some("list.csv".into()),
        };
        assert_eq!(import.to_json().unwrap(), json!({ "filename": "list.csv" }));
        assert_eq!(
            ImportPayload { filename: None }.to_json().unwrap(),
            json!({ "filename": null })
        );
    }

    #[test]
    fn a_multi_row_update_finds_its_jobs_by_id_not_by_their_state() {
        let running = "AND state || '' = 'running'";
        assert!(complete_jobs_sql(2).contains(running));
        assert!(chain_jobs_sql(2).contains(running));
        assert!(!complete_jobs_sql(2).contains("state = 'running'"));
        assert!(!chain_jobs_sql(2).contains(" IN ("));
    }

    #[test]
    fn the_creation_bound_splits_job_ids_by_their_time() {
        let now = now_ms();
        let id = JobId::generate();
        assert!(id.as_str() < created_before(now + 1).as_str());
        assert!(id.as_str() >= created_before(now - 1).as_str());
        assert!(created_before(now - 1) < created_before(now));
        assert_eq!(created_before(0), "job_000000000000");
    }
}
