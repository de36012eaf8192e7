//! What the metrics endpoint reads at each scrape: the queue's depth and age, the event outbox's
//! lag, and the connection pools. Each query reads an index range of live rows only.

use super::{Db, Store, StoreResult, on_db};
use crate::domain::time::now_ms;

/// The state of the queues and pools at one instant.
#[derive(Clone, Debug, Default)]
pub struct Gauges {
    /// Live jobs by kind and state (`queued`, `running`).
    pub jobs: Vec<(String, String, i64)>,
    /// Seconds the oldest due queued job has waited past its time (0 when none).
    pub oldest_due_seconds: f64,
    /// Emails waiting for their hand-off to the transport (the delivery queue).
    pub emails_queued: i64,
    /// Seconds the oldest due queued email has waited past its time (0 when none).
    pub emails_oldest_due_seconds: f64,
    /// Events waiting in the outbox for their consumers.
    pub outbox_pending: i64,
    /// Seconds since the oldest of them was written (0 when none).
    pub outbox_lag_seconds: f64,
    /// Open connections of the pool and how many are idle (both pools on SQLite).
    pub pool_open: u32,
    pub pool_idle: u32,
}

/// Live jobs by kind and state, the oldest due run time, the queued emails' count and oldest due
/// time, and the outbox's size and oldest event.
type Read = (
    Vec<(String, String, i64)>,
    Option<i64>,
    (i64, Option<i64>),
    (i64, Option<i64>),
);

impl Store {
    /// The gauges now.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn gauges(&self) -> StoreResult<Gauges> {
        let now = now_ms();
        let (jobs, oldest, emails, outbox): Read = on_db!(self.db(), pool => {
            let jobs = sqlx::query_as(
                // One state a part, so that each reads its own partial index
                // (`jobs_queued_by_queue`, `jobs_running_by_id`) and never the jobs that ran.
                "SELECT kind, 'queued', COUNT(*) FROM jobs WHERE state = 'queued' GROUP BY kind \
                 UNION ALL SELECT kind, 'running', COUNT(*) FROM jobs WHERE state = 'running' GROUP BY kind",
            )
            .fetch_all(pool)
            .await?;
            let oldest = sqlx::query_scalar(
                "SELECT MIN(run_at) FROM jobs WHERE state = 'queued' AND run_at <= $1",
            )
            .bind(now)
            .fetch_one(pool)
            .await?;
            // The queued emails' partial index (`emails_due`): the emails in flight only.
            let emails = sqlx::query_as(
                "SELECT COUNT(*), MIN(CASE WHEN due_at <= $1 THEN due_at END) FROM emails \
                 WHERE status = 'queued'",
            )
            .bind(now)
            .fetch_one(pool)
            .await?;
            let outbox = sqlx::query_as(
                "SELECT COUNT(*), MIN(e.created_at) FROM event_outbox o \
                 JOIN events e ON e.id = o.event_id",
            )
            .fetch_one(pool)
            .await?;
            (jobs, oldest, emails, outbox)
        });
        let (pool_open, pool_idle) = match self.db() {
            Db::Sqlite { pool, writer } => (
                pool.size() + writer.size(),
                (pool.num_idle() + writer.num_idle()) as u32,
            ),
            Db::Postgres(pool) => (pool.size(), pool.num_idle() as u32),
        };
        let age = |at: Option<i64>| at.map_or(0.0, |t| ((now - t).max(0)) as f64 / 1000.0);
        Ok(Gauges {
            jobs,
            oldest_due_seconds: age(oldest),
            emails_queued: emails.0,
            emails_oldest_due_seconds: age(emails.1),
            outbox_pending: outbox.0,
            outbox_lag_seconds: age(outbox.1),
            pool_open,
            pool_idle,
        })
    }
}
