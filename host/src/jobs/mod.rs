//! The durable job queue's workers: they run inside `herald serve`, claim due jobs from the
//! database with a lease, keep the lease alive while a handler runs, retry failures with
//! exponential backoff up to the job's attempt limit, and stop cleanly with the server.
//!
//! Handlers own their durability: a handler writes its effects and its checkpoint (or its final
//! result) in one transaction, guarded by the lease, so a job resumed after a crash continues
//! from its last checkpoint and never applies a chunk twice.

pub mod account_mail;
pub mod bulk;
pub mod deliver;
pub mod domains;
pub mod fairness;
pub mod import;
pub mod routing;
pub mod segments;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, Semaphore, watch};
use tracing::Instrument;

use crate::domain::ids::{JobId, ProjectId};
use crate::domain::time::now_ms;
use crate::store::jobs::{ClaimedJob, JobPayload, Lease, NewJob};
use crate::store::{Store, StoreError};

/// How a handler failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Try again later (database hiccup, transient failure), after the queue's backoff (or
    /// later, when the message says `(retry after N s)`: [`retry_time`]); the attempt counts.
    #[error("{0}")]
    Retry(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Refused for now by something that said when to come back (a transport's `429` with
    /// `Retry-After`): the job waits `seconds` and the attempt does not count, so being rate
    /// limited never uses up the job's attempts.
    #[error("{reason} (waiting {seconds} s as asked)")]
    RetryAfter {
        /// How long to wait.
        seconds: u64,
        /// What said so.
        reason: String,
    },
    /// Give up now; retrying cannot help.
    #[error("{0}")]
    Fail(String),
    /// Another worker owns the job now; stop without writing.
    #[error("the job's lease was lost")]
    LeaseLost,
}

impl From<StoreError> for JobError {
    /// A reached billing cap fails the job at once (retrying writes the same rows into the same
    /// cap); anything else is retried.
    fn from(err: StoreError) -> JobError {
        match err {
            StoreError::BillingLimit(_) => JobError::Fail(format!(
                "{err}; an OWNER can raise the cap (PUT /users/@me/projects/:id/billing-limits) \
                 and run the job again"
            )),
            // A cap on what a project may hold: retrying writes the same data into it.
            StoreError::Cap(_) => {
                JobError::Fail(format!("{err}; nothing of the failing part was written"))
            }
            other => JobError::Retry(Box::new(other)),
        }
    }
}

/// What a handler gets.
pub struct JobContext {
    pub store: Store,
    /// The claimed job.
    pub job: ClaimedJob,
    /// This worker's claim on the job, which every write of the job's state names.
    pub lease: Lease,
}

impl JobContext {
    /// The job's payload as the type its kind stores.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        T::deserialize(&self.job.payload).map_err(|e| {
            JobError::Fail(format!(
                "the {} job's payload is invalid: {e}",
                self.job.kind
            ))
        })
    }

    /// The checkpoint a previous attempt saved, when it reads as `T`.
    pub fn checkpoint<T: DeserializeOwned>(&self) -> Option<T> {
        self.job
            .checkpoint
            .as_ref()
            .and_then(|c| T::deserialize(c).ok())
    }

    /// The job's project.
    pub fn project(&self) -> Result<ProjectId, JobError> {
        self.job
            .project_id
            .clone()
            .ok_or_else(|| JobError::Fail("the job has no project".into()))
    }
}

/// Runs jobs of one kind.
pub trait JobHandler: Send + Sync {
    /// The kinds it runs.
    fn kinds(&self) -> &'static [&'static str];

    /// Runs a claimed job to completion, writing its result itself (see the module docs).
    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>>;
}

/// Queue settings (the application builder makes them from the deployment's settings).
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Jobs run at once by this instance.
    pub concurrency: usize,
    /// How often an idle worker looks for due jobs.
    pub poll_interval: Duration,
    /// How long a claim lasts without a heartbeat.
    pub lease: Duration,
    /// Attempts before a job fails for good.
    pub max_attempts: i32,
}

/// The queue's enqueuing side: what services and handlers hold to add jobs. Cheap to clone.
#[derive(Clone)]
pub struct JobQueue {
    store: Store,
    config: QueueConfig,
    wake: Arc<Notify>,
    /// Wakes this instance's delivery workers (`deliver::Deliveries`).
    deliveries: Arc<Notify>,
}

/// The workers of this instance: they run the handlers they are given on the jobs of a
/// [`JobQueue`]. Built after the services, so that a handler can hold a service that itself
/// enqueues jobs (a delivery, a workflow step).
#[derive(Clone)]
pub struct Workers {
    queue: JobQueue,
    handlers: Arc<HashMap<&'static str, Arc<dyn JobHandler>>>,
}

impl JobQueue {
    /// A queue on `store`.
    pub fn new(store: Store, config: QueueConfig) -> JobQueue {
        JobQueue {
            store,
            config,
            wake: Arc::new(Notify::new()),
            deliveries: Arc::new(Notify::new()),
        }
    }

    /// Wakes an idle worker of this instance to look for due jobs now, and the delivery workers
    /// to look for due emails (what queues jobs often queues emails too).
    pub fn wake(&self) {
        self.wake.notify_one();
        self.wake_deliveries();
    }

    /// Wakes the delivery workers alone, after a write that queued emails and no job (a send, a
    /// campaign's batch of emails): the job workers, woken for nothing, would each look for due
    /// jobs and expired leases in two statements.
    pub fn wake_deliveries(&self) {
        self.deliveries.notify_one();
    }

    /// What wakes this instance's delivery workers.
    pub fn delivery_wake(&self) -> Arc<Notify> {
        self.deliveries.clone()
    }

    /// The queue's settings.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Enqueues a job to run now.
    pub async fn enqueue(
        &self,
        kind: &str,
        project: &ProjectId,
        payload: impl JobPayload + Send,
        input: Option<Vec<u8>>,
    ) -> Result<JobId, StoreError> {
        self.schedule(kind, project, payload, input, now_ms()).await
    }

    /// Enqueues a job of the service itself (no project) to run now.
    pub async fn enqueue_system(
        &self,
        kind: &str,
        payload: impl JobPayload + Send,
        input: Option<Vec<u8>>,
    ) -> Result<JobId, StoreError> {
        let id = self
            .store
            .enqueue_job(&NewJob {
                kind: kind.to_string(),
                project_id: None,
                payload: payload.to_json()?,
                input,
                max_attempts: self.config.max_attempts,
                run_at: now_ms(),
            })
            .await?;
        self.wake.notify_one();
        Ok(id)
    }

    /// Enqueues a job to run at `run_at` (unix ms) or later.
    pub async fn schedule(
        &self,
        kind: &str,
        project: &ProjectId,
        payload: impl JobPayload + Send,
        input: Option<Vec<u8>>,
        run_at: i64,
    ) -> Result<JobId, StoreError> {
        let payload = payload.to_json()?;
        let id = self
            .store
            .enqueue_job(&NewJob {
                kind: kind.to_string(),
                project_id: Some(project.clone()),
                payload,
                input,
                max_attempts: self.config.max_attempts,
                run_at,
            })
            .await?;
        self.wake.notify_one();
        Ok(id)
    }
}

impl Workers {
    /// Workers running `handlers`, each for the kinds it names. The queue knows no handler of
    /// its own: the application builder makes the built-in ones and passes them here.
    pub fn new(queue: JobQueue, handlers: Vec<Arc<dyn JobHandler>>) -> Workers {
        let handlers = handlers
            .into_iter()
            .flat_map(|h| h.kinds().iter().map(move |k| (*k, h.clone())))
            .collect();
        Workers {
            queue,
            handlers: Arc::new(handlers),
        }
    }

    /// Runs the workers until `stop` turns true, then waits for running jobs to end.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let worker = format!("wrk_{}", uuid::Uuid::new_v4().simple());
        let slots = Arc::new(Semaphore::new(self.queue.config.concurrency.max(1)));
        let lease_ms = self.queue.config.lease.as_millis() as i64;
        // The queue served last: the next claim starts after it (see `fairness`).
        let mut cursor = None;
        tracing::info!(worker = %worker, concurrency = self.queue.config.concurrency, "job workers started");
        loop {
            if *stop.borrow() {
                break;
            }
            let free = slots.available_permits();
            let mut claimed = Vec::new();
            let mut wake_at = None;
            if free > 0 {
                match self.claim(&worker, free, &mut cursor, lease_ms).await {
                    Ok((jobs, next)) => (claimed, wake_at) = (jobs, next),
                    Err(err) => tracing::warn!(error = %err, "could not claim jobs"),
                }
            }
            let idle = claimed.is_empty();
            for job in claimed {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let this = self.clone();
                let span = tracing::info_span!("job", job_id = %job.id, kind = %job.kind, attempt = job.attempts);
                tokio::spawn(
                    async move {
                        this.execute(job).await;
                        drop(permit);
                        // A slot is free: look for due jobs now rather than at the next poll.
                        this.queue.wake.notify_one();
                    }
                    .instrument(span),
                );
            }
            if idle || slots.available_permits() == 0 {
                // Sleep until woken, or until the next job is due, or a poll.
                let poll = self.queue.config.poll_interval;
                let pause = pause_until(wake_at, poll);
                tokio::select! {
                    _ = self.queue.wake.notified() => {}
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        // Wait for running jobs; unfinished ones are resumed by any worker after their lease.
        let _ = slots
            .acquire_many(self.queue.config.concurrency.max(1) as u32)
            .await;
        tracing::info!(worker = %worker, "job workers stopped");
    }

    /// Claims up to `free` jobs fairly (see [`fairness`]): lists the queues after `cursor`
    /// (wrapping), deals the slots, and claims. Answers the jobs and, when nothing is due now,
    /// when something will be.
    async fn claim(
        &self,
        worker: &str,
        free: usize,
        cursor: &mut Option<String>,
        lease_ms: i64,
    ) -> Result<(Vec<ClaimedJob>, Option<i64>), StoreError> {
        let store = &self.queue.store;
        let heads = fairness::heads_after(cursor.as_deref(), |after, limit| async move {
            store.job_queue_heads(&after, limit).await
        })
        .await?;
        let left = HashMap::new();
        let now = now_ms();
        let plan = fairness::plan(&heads, &left, cursor.as_deref(), free, now);
        if plan.cursor.is_some() {
            *cursor = plan.cursor;
        }
        let jobs = store
            .claim_jobs(worker, free as i64, &plan.takes, lease_ms)
            .await?;
        // When to look again if nothing was due: the earliest head.
        let wake_at = heads
            .iter()
            .map(|h| h.next_run_at)
            .filter(|at| *at > now)
            .min();
        Ok((jobs, wake_at))
    }

    async fn execute(&self, job: ClaimedJob) {
        let lease = Lease {
            job: job.id.clone(),
            worker: job.claim.clone(),
        };
        let id = job.id.clone();
        let lease_ms = self.queue.config.lease.as_millis() as i64;
        if job.attempts > job.max_attempts {
            self.fail(
                &lease,
                "gave up: the job's worker was lost too many times",
                None,
            )
            .await;
            return;
        }
        let Some(handler) = self.handlers.get(job.kind.as_str()).cloned() else {
            self.fail(
                &lease,
                &format!("no handler for job kind {}", job.kind),
                None,
            )
            .await;
            return;
        };
        let attempts = job.attempts;
        let max_attempts = job.max_attempts;
        let kind = job.kind.clone();
        let started = std::time::Instant::now();
        // Heartbeat: extend the lease while the handler runs.
        let (done_tx, mut done_rx) = watch::channel(false);
        let heartbeat = {
            let store = self.queue.store.clone();
            let lease = lease.clone();
            let every = self.queue.config.lease / 3;
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {
                            match store.extend_job_lease(&lease, lease_ms).await {
                                Ok(true) => {}
                                Ok(false) => break,
                                Err(err) => tracing::warn!(error = %err, job_id = %lease.job, "could not extend lease"),
                            }
                        }
                        _ = done_rx.changed() => break,
                    }
                }
            })
        };
        let ctx = JobContext {
            store: self.queue.store.clone(),
            job,
            lease: lease.clone(),
        };
        let result = std::panic::AssertUnwindSafe(handler.run(ctx));
        let result = futures::FutureExt::catch_unwind(result)
            .await
            .unwrap_or_else(|_| Err(JobError::Fail("the job handler panicked".into())));
        let _ = done_tx.send(true);
        let _ = heartbeat.await;
        let outcome = match &result {
            Ok(()) => "ok",
            Err(JobError::LeaseLost) => "lease_lost",
            Err(JobError::Fail(_)) => "failed",
            Err(JobError::Retry(_)) => "retry",
            Err(JobError::RetryAfter { .. }) => "retry_after",
        };
        metrics::counter!("herald_job_runs_total", "kind" => kind.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("herald_job_run_seconds", "kind" => kind)
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => tracing::info!(job_id = %id, "job completed"),
            Err(error) => {
                record_unfinished(&self.queue.store, &lease, attempts, max_attempts, error).await
            }
        }
    }

    /// Records a failed attempt (see [`Store::fail_job`]); a write that fails is logged, and the
    /// job is claimed again once its lease expires.
    async fn fail(&self, lease: &Lease, error: &str, retry_at: Option<i64>) {
        if let Err(err) = self.queue.store.fail_job(lease, error, retry_at).await {
            tracing::warn!(job_id = %lease.job, error = %err, "could not record the job's failure");
        }
    }
}

/// Records how a run of the job under `lease` (its `attempts`th of at most `max_attempts`)
/// ended without completing: nothing more when the lease was lost; failed for good
/// ([`JobError::Fail`], or a [`JobError::Retry`] of its last attempt); queued again at its
/// [`retry_time`] ([`JobError::Retry`]); or queued again after the wait asked, the attempt not
/// counted ([`JobError::RetryAfter`]). A write that fails is logged, and the job is claimed
/// again once its lease expires. The workers call it for the job they claimed, the workflow
/// runner for the jobs it adopted.
pub async fn record_unfinished(
    store: &Store,
    lease: &Lease,
    attempts: i32,
    max_attempts: i32,
    error: JobError,
) {
    let id = &lease.job;
    let written = match error {
        JobError::LeaseLost => {
            tracing::warn!(job_id = %id, "job lease lost; another worker continues it");
            return;
        }
        JobError::Fail(error) => {
            tracing::warn!(job_id = %id, error = %error, "job failed");
            store.fail_job(lease, &error, None).await
        }
        JobError::Retry(error) => {
            let error = error.to_string();
            let retry_at = (attempts < max_attempts).then(|| retry_time(attempts, &error));
            tracing::warn!(job_id = %id, error = %error, retry = retry_at.is_some(), "job attempt failed");
            store.fail_job(lease, &error, retry_at).await
        }
        error @ JobError::RetryAfter { seconds, .. } => {
            let wait = i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
            let error = error.to_string();
            tracing::info!(job_id = %id, error = %error, "job asked to wait; the attempt does not count");
            store
                .defer_job(lease, now_ms().saturating_add(wait), &error)
                .await
        }
    };
    if let Err(err) = written {
        tracing::warn!(job_id = %id, error = %err, "could not record the job's failure");
    }
}

/// How long an idle worker sleeps: until `wake_at` (unix ms; the next due work or budget
/// window), at most `poll`.
fn pause_until(wake_at: Option<i64>, poll: Duration) -> Duration {
    wake_at.map_or(poll, |at| {
        Duration::from_millis((at - now_ms()).max(1) as u64).min(poll)
    })
}

/// When to try again (unix ms) after the `attempts`th try failed with `error`: after the
/// queue's backoff, jittered, and no sooner than the error asks (`(retry after N s)`, a
/// provider's `429`: [`routing::retry_after`]).
pub fn retry_time(attempts: i32, error: &str) -> i64 {
    let asked =
        routing::retry_after(error).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    now_ms().saturating_add(jittered(backoff_ms(attempts)).max(asked))
}

/// Exponential backoff: 1 s, 2 s, 4 s, … capped at 5 minutes.
pub fn backoff_ms(attempts: i32) -> i64 {
    let exp = attempts.clamp(1, 20) - 1;
    (1000i64 << exp).min(300_000)
}

/// A backoff less a random part of up to a quarter, so that retries that failed together (a
/// relay restart) do not all come back in the same instant.
pub fn jittered(ms: i64) -> i64 {
    use rand::Rng;
    ms - rand::thread_rng().gen_range(0..=ms / 4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn jitter_takes_off_at_most_a_quarter() {
        for _ in 0..100 {
            let j = super::jittered(4000);
            assert!((3000..=4000).contains(&j), "{j}");
        }
    }

    #[test]
    fn a_retry_waits_the_backoff_or_what_the_error_asks() {
        let now = crate::domain::time::now_ms();
        let plain = super::retry_time(3, "451 4.3.0 try again later");
        assert!(
            (now + 3000..=now + 4100).contains(&plain),
            "{}",
            plain - now
        );
        let asked = super::retry_time(1, "rate limited by Postmark (retry after 30 s)");
        assert!(
            (now + 30_000..=now + 30_100).contains(&asked),
            "{}",
            asked - now
        );
        // A shorter ask than the backoff waits the backoff.
        let short = super::retry_time(6, "limited (retry after 1 s)");
        assert!(short >= now + 24_000, "{}", short - now);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(super::backoff_ms(1), 1000);
        assert_eq!(super::backoff_ms(2), 2000);
        assert_eq!(super::backoff_ms(5), 16000);
        assert_eq!(super::backoff_ms(30), 300_000);
    }
}
