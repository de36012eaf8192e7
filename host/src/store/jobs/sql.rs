//! The SQL text of the job queue: the search for queues with work, a claim, and the statements
//! of [`crate::store::statements::Statements`] that insert, complete, chain and checkpoint jobs.

use crate::domain::ids::JobId;
use crate::store::Backend;

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
pub(super) const QUEUE_HEADS: &str = "WITH RECURSIVE q(queue, n) AS ( \
     SELECT (SELECT queue FROM jobs WHERE state = 'queued' AND queue > $1 ORDER BY queue LIMIT 1), 1 \
     UNION ALL \
     SELECT (SELECT j.queue FROM jobs j WHERE j.state = 'queued' AND j.queue > q.queue ORDER BY j.queue LIMIT 1), \
     q.n + 1 FROM q WHERE q.queue IS NOT NULL AND q.n < $2) \
     SELECT queue, (SELECT j.run_at FROM jobs j WHERE j.state = 'queued' AND j.queue = q.queue \
     ORDER BY j.run_at LIMIT 1) FROM q WHERE q.queue IS NOT NULL";

/// The claim of [`Store::claim_jobs`] for `queues` queues; binds worker, lease end, now, slots,
/// then each queue and its count.
pub(super) fn claim_sql(backend: Backend, queues: usize) -> String {
    let lock = crate::store::dialect::skip_locked(backend);
    let token = crate::store::dialect::random_token(backend);
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
    let claimed = crate::store::dialect::in_subquery(
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
pub(in crate::store) fn delete_queued_jobs_for_sql(backend: Backend, key: &'static str) -> String {
    let field = crate::store::dialect::json_text(backend, "payload", key);
    format!("DELETE FROM jobs WHERE kind = $1 AND state = 'queued' AND {field} = $2")
}

/// Inserts `n` queued jobs in one statement; binds each job's id, project, kind, payload,
/// input, max attempts, run at, now (created), now (updated) and queue
/// (`jobs::fairness::queue_of`), each placeholder once and in order
/// (`dialect::bound_in_order`). A fresh id never
/// conflicts; the unique index of a singleton kind does when one is queued or running, and then
/// that job is not inserted.
pub(in crate::store) fn insert_jobs_sql(n: usize) -> String {
    use crate::store::dialect::placeholders;
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
pub(in crate::store) fn complete_jobs_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_worker, v_result) AS (VALUES {}) \
         UPDATE jobs SET state = 'completed', result = v_result, progress = 100, finished_at = ${}, updated_at = ${}, \
         locked_by = NULL, locked_until = NULL FROM v WHERE id = v_id AND locked_by = v_worker AND {} \
         RETURNING id",
        crate::store::dialect::value_rows(1, n, 3),
        3 * n + 1,
        3 * n + 2,
        crate::store::dialect::unindexed_equals("state", "running"),
    )
}

/// Hands running jobs on, each to the next piece of work of the same kind (a workflow's next
/// step run, due now): a new payload, its attempts counted afresh, no checkpoint. The claim
/// stays, so nothing else can run it meanwhile. Answers the ids whose lease held; binds
/// each job's id, worker and payload, then now.
pub(in crate::store) fn chain_jobs_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_worker, v_payload) AS (VALUES {}) \
         UPDATE jobs SET payload = v_payload, attempts = 1, checkpoint = NULL, last_error = NULL, updated_at = ${} \
         FROM v WHERE id = v_id AND locked_by = v_worker AND {} RETURNING id",
        crate::store::dialect::value_rows(1, n, 3),
        3 * n + 1,
        crate::store::dialect::unindexed_equals("state", "running"),
    )
}

/// Queues a claimed job again after a failed attempt; binds id, claim, run at, error, now.
pub(in crate::store) const RETRY_JOB: &str = "UPDATE jobs SET state = 'queued', run_at = $3, last_error = $4, locked_by = NULL, \
     locked_until = NULL, updated_at = $5 WHERE id = $1 AND locked_by = $2";

/// Claims due jobs of one queue under an existing claim (a batch joining a running job); binds
/// the claim, lease end, now, the queue, the most to claim.
pub(in crate::store) fn adopt_sql(backend: Backend) -> String {
    let lock = crate::store::dialect::skip_locked(backend);
    let claimed = crate::store::dialect::in_subquery(
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
pub(super) fn created_before(at: i64) -> String {
    format!("{}{:012x}", JobId::PREFIX, at.max(0))
}

/// Completes a job; binds id, worker, result, now.
pub(in crate::store) const COMPLETE_JOB: &str = "UPDATE jobs SET state = 'completed', result = $3, progress = 100, \
     finished_at = $4, updated_at = $4, locked_by = NULL, locked_until = NULL \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";

/// Saves a checkpoint; binds id, worker, checkpoint, progress, now.
pub(in crate::store) const CHECKPOINT_JOB: &str = "UPDATE jobs SET checkpoint = $3, progress = $4, updated_at = $5 \
     WHERE id = $1 AND locked_by = $2 AND state = 'running'";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::JobId;
    use crate::domain::time::now_ms;

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
