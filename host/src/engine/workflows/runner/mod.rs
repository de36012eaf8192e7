//! Running step runs (`workflow.step` jobs, in batches of a project's due jobs) and resuming a
//! wait on its timeout (`workflow.timeout` jobs).
//!
//! - here: the job handler, the batch a claimed step job runs (its adopted jobs) and how
//!   each job of it ends;
//! - `round.rs`: one round of a batch: its reads, each member's step run (and those it runs on
//!   to in memory), and the one commit;
//! - `step.rs`: running one step run: its input, its plugin, its effects, the outcome to commit;
//! - `planned.rs`: a step run's outcome, owned until the round commits it;
//! - `resume.rs`: resuming a wait, on its `workflow.timeout` job or on the event it waits for.

mod planned;
mod resume;
mod round;
mod step;

use futures::future::BoxFuture;
use serde::Deserialize;

use super::WorkflowEngine;
use crate::domain::time::now_ms;
use crate::jobs::{JobContext, JobError, JobHandler};
use crate::store::Backend;
use crate::store::executions::{STEP_KIND, StepPayload, TIMEOUT_KIND};
use crate::store::jobs::{Lease, queue_of};
use planned::Planned;

/// How many step runs one `workflow.step` job runs back to back: when a step's next step is due
/// at once (a `CONDITION` on to an `UPDATE_CONTACT`, a `DELAY` of 0), the job carries on with it
/// instead of queueing a job for it, which saves a claim, a job row and a trip through the queue.
/// Bounded, so that one execution's long chain leaves the job slots to other work in turn.
pub const CHAIN_LIMIT: u32 = 16;

/// The job handler of both kinds.
pub struct StepRunner {
    pub engine: WorkflowEngine,
}

impl JobHandler for StepRunner {
    fn kinds(&self) -> &'static [&'static str] {
        &[STEP_KIND, TIMEOUT_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            if ctx.job.kind == TIMEOUT_KIND {
                self.timeout(ctx).await
            } else {
                self.step(ctx).await
            }
        })
    }
}

/// Most `workflow.step` jobs of one project that one claimed step job runs together, itself
/// included: the job adopts further due step jobs of its project's queue under its own claim,
/// and their step runs are read, run and committed in rounds, with one read of each kind and one
/// commit transaction a round for all of them (instead of a claim, four reads and a commit per
/// step run). Each job keeps its own lease, attempts and outcome.
///
/// The size depends on the database. On PostgreSQL a round's commit runs beside the API's
/// writes (they lock rows, not the database), and each statement is a round trip, so larger
/// rounds are cheaper: 128 took the workflow benchmark's first-step p99 from 10 s to 5 s at
/// 1,000 events/s. On SQLite every write waits for the one writer, and a round of 128 held it
/// long enough to slow `/v1/track` below the paced 1,000 events/s, so rounds stay at 32
/// there (`docs/benchmarks.md`, "Workflow engine").
pub fn batch_size(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 32,
        Backend::Postgres => 128,
    }
}

/// One step job of a batch.
struct Member {
    lease: Lease,
    /// Attempts of the job, this one included.
    attempts: i32,
    max_attempts: i32,
    /// The step run it runs now.
    run_id: String,
    /// Whether the job may carry on with a next step run that is due at once: only a job on its
    /// first attempt does, since the queue decides whether a failed attempt is retried from the
    /// attempts of the claim it made, and a chained step run starts its count afresh at 1.
    chainable: bool,
    /// Step runs this job ran so far.
    ran: u32,
    /// The job the worker claimed (its outcome is the handler's); the others were adopted.
    claimed: bool,
}

/// What running one member's step run came to.
enum Ran {
    /// Run; its outcome is to be committed with the round's others.
    Commit(Box<Planned>),
    /// Ended outside the round's commit (skipped, failed, retried, gone).
    Finished(Result<(), JobError>),
    /// A step run run on to in memory that did not come to an outcome to commit (its plugin or
    /// an effect failed, a read failed): nothing was written for it, and it runs in the next
    /// round from its own row, where a failure is retried or recorded as usual.
    Back,
}

impl StepRunner {
    /// Runs the claimed job's step run together with those of the step jobs it adopts (up to
    /// [`batch_size`]), each carrying on with its next step run while one is due at once, up to
    /// [`CHAIN_LIMIT`].
    async fn step(&self, ctx: JobContext) -> Result<(), JobError> {
        let payload: StepPayload = ctx.payload()?;
        let project = ctx.project()?;
        let store = &self.engine.store;
        let mut members = vec![Member {
            lease: ctx.lease.clone(),
            attempts: ctx.job.attempts,
            max_attempts: ctx.job.max_attempts,
            run_id: payload.step_run_id,
            chainable: ctx.job.attempts == 1,
            ran: 0,
            claimed: true,
        }];
        let lease_ms = self.engine.jobs.config().lease.as_millis() as i64;
        let queue = queue_of(Some(project.as_str()), STEP_KIND);
        for job in store
            .adopt_jobs(
                &queue,
                &ctx.lease,
                batch_size(store.db().backend()) as i64 - 1,
                lease_ms,
            )
            .await?
        {
            let lease = Lease {
                job: job.id.clone(),
                worker: job.claim.clone(),
            };
            let member = Member {
                lease,
                attempts: job.attempts,
                max_attempts: job.max_attempts,
                run_id: String::new(),
                chainable: job.attempts == 1,
                ran: 0,
                claimed: false,
            };
            if job.attempts > job.max_attempts {
                let lost = "gave up: the job's worker was lost too many times";
                self.finish_adopted(&member, Err(JobError::Fail(lost.into())))
                    .await;
                continue;
            }
            match StepPayload::deserialize(&job.payload) {
                Ok(p) => members.push(Member {
                    run_id: p.step_run_id,
                    ..member
                }),
                Err(e) => {
                    let bad = format!("the job's payload is not a step run: {e}");
                    self.finish_adopted(&member, Err(JobError::Fail(bad))).await;
                }
            }
        }
        metrics::histogram!("herald_step_batch_size").record(members.len() as f64);
        tracing::debug!(jobs = members.len(), "step batch");
        // Past it, between two step runs, the job commits what it ran and puts the rest back
        // in the queue (`workflows.job_wall_time_ms`), so that a batch of slow steps (webhooks
        // to a slow server) leaves its slot to other work in turn.
        let deadline = std::time::Instant::now() + self.engine.wall_time;
        let mut outcome = Ok(());
        let mut progressed = false;
        while !members.is_empty() {
            if progressed && std::time::Instant::now() >= deadline {
                metrics::counter!("herald_step_jobs_cut_total").increment(1);
                tracing::info!(
                    jobs = members.len(),
                    "step job past its wall time; the rest goes back to the queue"
                );
                for member in std::mem::take(&mut members) {
                    let result = self.postpone(&member, now_ms()).await;
                    if member.claimed {
                        outcome = result;
                    } else {
                        self.finish_adopted(&member, result).await;
                    }
                }
                break;
            }
            let round = self.round(&project, &mut members, deadline).await;
            progressed = true;
            let ended = match round {
                Ok(ended) => ended,
                Err(err) => {
                    // A read or the round's commit failed: no step run of the round was
                    // committed, and every job still in the batch is retried (an effect already
                    // performed is found under its idempotency key then; a job that ended on its
                    // own meanwhile is no longer running, and its retry writes nothing).
                    let message = err.to_string();
                    members
                        .drain(..)
                        .map(|m| (m, Err(JobError::Retry(message.clone().into()))))
                        .collect()
                }
            };
            for (member, result) in ended {
                if member.claimed {
                    outcome = result;
                } else {
                    self.finish_adopted(&member, result).await;
                }
            }
        }
        outcome
    }

    /// Puts a member's job back in the queue until `run_at` without counting the attempt: its
    /// step run (pending, or the next one of its chain) runs when the job is claimed again.
    async fn postpone(&self, member: &Member, run_at: i64) -> Result<(), JobError> {
        match self.engine.store.postpone_job(&member.lease, run_at).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(JobError::LeaseLost),
            Err(err) => Err(err.into()),
        }
    }

    /// Records how an adopted job ended, as the workers do for the job they claimed.
    async fn finish_adopted(&self, member: &Member, result: Result<(), JobError>) {
        let Err(error) = result else {
            return;
        };
        crate::jobs::record_unfinished(
            &self.engine.store,
            &member.lease,
            member.attempts,
            member.max_attempts,
            error,
        )
        .await;
    }
}
