//! Running step runs (`workflow.step` jobs, in batches of a project's due jobs) and resuming a
//! wait on its timeout (`workflow.timeout` jobs).

use std::collections::{BTreeSet, HashMap, HashSet};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::WorkflowEngine;
use super::effects::{EffectError, SendReads, write_count};
use crate::domain::contact::Contact;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::workflow::{StepType, execution_status as es, step_run_status as rs};
use crate::jobs::{JobContext, JobError, JobHandler, backoff_ms, jittered};
use crate::plugins::PluginError;
use crate::plugins::types::{self as step, Outcome, StepInput};
use crate::services::sending::KnownContact;
use crate::store::contacts::changed;
use crate::store::executions::{
    Committed, EffectWrite, Exit, NextRun, RunContext, RunOutcome, STEP_KIND, StepCommit,
    StepPayload, TIMEOUT_KIND, TimeoutPayload,
};
use crate::store::jobs::{JobPayload, Lease, NewJob, queue_of};
use crate::store::{Backend, StoreError};

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

/// The transition out of a step along `branch`, or its plain transition when no transition
/// carries that branch (a `PLUGIN` step's own branch names).
fn follow<'a>(transitions: &'a [Exit], branch: Option<&str>) -> Option<&'a Exit> {
    transitions
        .iter()
        .find(|t| t.branch.as_deref() == branch)
        .or_else(|| transitions.iter().find(|t| t.branch.is_none()))
}

/// What a step run's input is recorded as: its config, the contact's id, the trigger's name
/// and the context (not the contact's data or history, which can be large).
fn input_summary(input: &StepInput) -> Value {
    json!({
        "config": input.config,
        "contactId": input.contact.id,
        "event": input.event.as_ref().map(|e| e.name.clone()),
        "context": Value::Object(input.context.clone()),
    })
}

fn trigger_event(trigger: Option<&Value>) -> Option<step::Event> {
    let t = trigger?;
    Some(step::Event {
        name: t.get("name")?.as_str()?.to_string(),
        data: t.get("data").cloned().unwrap_or_else(|| json!({})),
        created_at: t.get("createdAt").and_then(Value::as_i64).unwrap_or(0),
    })
}

/// Whether a step of `step_type` with `config` reads the contact's event history and segment
/// ids: a `PLUGIN` step (or an unknown type) may, a `CONDITION` when its filter has an `event.`
/// or `segment.` condition (one it cannot parse is given them: its plugin reports the error),
/// the other built-in steps never do.
fn reads_history(step_type: &str, config: &Value) -> bool {
    match StepType::parse(step_type) {
        None => true,
        Some(StepType::Condition) => config.get("filter").is_none_or(|f| {
            herald_filter::parse(f, herald_filter::Scope::Workflow)
                .map_or(true, |filter| filter.reads_history())
        }),
        Some(t) => t.reads_history(),
    }
}

/// `contact` as the `UPDATE_CONTACT` writes among `effects` leave it.
fn apply_updates(contact: &mut Contact, effects: &[EffectWrite]) {
    for effect in effects {
        if let EffectWrite::UpdateContact { change, .. } = effect {
            *contact = changed(contact, change);
        }
    }
}

/// The span of one step run.
fn step_span(run: &RunContext) -> tracing::Span {
    tracing::info_span!("step_run", step_run_id = %run.run_id, execution_id = %run.execution_id, workflow_id = %run.workflow_id, step_type = run.step_type.as_deref().unwrap_or("?"))
}

/// Plugin failures that a retry cannot fix.
fn is_permanent(err: &PluginError) -> bool {
    matches!(
        err,
        PluginError::NotFound(_) | PluginError::WrongWorld { .. }
    )
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

/// A step run's outcome, owned until the round commits it (see [`StepCommit`]).
struct Planned {
    run: RunContext,
    run_status: &'static str,
    branch: Option<String>,
    input: Value,
    output: Value,
    attempts: i32,
    started_at: i64,
    execution_status: &'static str,
    context: Map<String, Value>,
    current_step: Option<String>,
    waiting_event: Option<String>,
    error: Option<String>,
    exit_reason: Option<String>,
    next: Option<NextRun>,
    timeout_job: Option<NewJob>,
    chain: bool,
    /// The writes of its effects and of those of the step runs run before it in the same chain,
    /// in order, made in the round's commit.
    effects: Vec<EffectWrite>,
    /// Its effects were written before the commit, one by one (a step with several writes), so
    /// the contact the round read may no longer be the contact's.
    wrote_alone: bool,
    /// The step runs run before this one in the same round, oldest first (see
    /// [`StepCommit::earlier`]).
    earlier: Vec<Planned>,
}

impl Planned {
    fn outcome(&self) -> RunOutcome<'_> {
        RunOutcome {
            run_id: &self.run.run_id,
            step_id: &self.run.step_id,
            step_type: self.run.step_type.as_deref().unwrap_or_default(),
            status: self.run_status,
            branch: self.branch.as_deref(),
            input: &self.input,
            output: &self.output,
            error: self.error.as_deref(),
            attempts: self.attempts,
            started_at: self.started_at,
        }
    }

    /// Whether the job may run the next step run on in memory: it goes on to it at once
    /// ([`Planned::chain`]) and did not write its effects before the commit. Its writes and
    /// those of the step runs before it wait for the commit of the last step run of the chain
    /// ([`StepRunner::round`] says when an update of the contact ends the chain).
    fn runs_on(&self) -> bool {
        self.chain && self.next.is_some() && !self.wrote_alone
    }

    /// Whether this step run, or one run before it in the same chain, updates the contact.
    fn updates_contact(&self) -> bool {
        self.effects
            .iter()
            .any(|e| matches!(e, EffectWrite::UpdateContact { .. }))
    }

    /// The next step run's context, as the commit will leave it: the same execution, trigger
    /// and contact, this step's context, the next step's `config`.
    fn next_context(&self, next: &NextRun, config: &Value) -> RunContext {
        RunContext {
            run_id: next.run_id.as_str().to_string(),
            run_status: rs::PENDING.to_string(),
            step_id: next.step_id.clone(),
            execution_id: self.run.execution_id.clone(),
            project_id: self.run.project_id.clone(),
            workflow_id: self.run.workflow_id.clone(),
            contact_id: self.run.contact_id.clone(),
            execution_status: self.execution_status.to_string(),
            trigger: self.run.trigger.clone(),
            context: sqlx::types::Json(self.context.clone()),
            step_type: Some(next.step_type.clone()),
            config: Some(sqlx::types::Json(config.clone())),
        }
    }

    fn commit<'a>(&'a self, lease: &'a Lease) -> StepCommit<'a> {
        StepCommit {
            lease,
            run: self.outcome(),
            execution_id: &self.run.execution_id,
            project_id: &self.run.project_id,
            execution_status: self.execution_status,
            context: &self.context,
            current_step: self.current_step.as_deref(),
            waiting_event: self.waiting_event.as_deref(),
            execution_error: self.error.as_deref(),
            exit_reason: self.exit_reason.as_deref(),
            next: self.next.as_ref(),
            timeout_job: self.timeout_job.as_ref(),
            chain: self.chain,
            effects: &self.effects,
            earlier: self.earlier.iter().map(Planned::outcome).collect(),
        }
    }
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
        let (error, retry_at) = match result {
            Ok(()) | Err(JobError::LeaseLost) => return,
            Err(JobError::Fail(error)) => (error, None),
            Err(JobError::Retry(error)) => (
                error.to_string(),
                (member.attempts < member.max_attempts)
                    .then(|| now_ms() + jittered(backoff_ms(member.attempts))),
            ),
        };
        tracing::warn!(job_id = %member.lease.job, error = %error, retry = retry_at.is_some(), "step job attempt failed");
        if let Err(err) = self
            .engine
            .store
            .fail_job(&member.lease, &error, retry_at)
            .await
        {
            tracing::warn!(job_id = %member.lease.job, error = %err, "could not record the job's failure");
        }
    }

    /// One round: reads the members' step runs, contacts and transitions at once, runs each
    /// step, and commits every outcome in one transaction. Members whose job carries on with
    /// their next step run stay in `members`; the others are answered with how they ended.
    async fn round(
        &self,
        project: &ProjectId,
        members: &mut Vec<Member>,
        deadline: std::time::Instant,
    ) -> Result<Vec<(Member, Result<(), JobError>)>, StoreError> {
        let store = &self.engine.store;
        let ids: Vec<&str> = members.iter().map(|m| m.run_id.as_str()).collect();
        let mut runs: HashMap<String, RunContext> = store
            .run_contexts(&ids)
            .await?
            .into_iter()
            .map(|r| (r.run_id.clone(), r))
            .collect();
        let contact_ids: BTreeSet<&str> = runs.values().map(|r| r.contact_id.as_str()).collect();
        let contact_ids: Vec<&str> = contact_ids.into_iter().collect();
        let contacts: HashMap<String, Contact> = store
            .contacts_by_ids(project, &contact_ids)
            .await?
            .into_iter()
            .map(|c| (c.id.as_str().to_string(), c))
            .collect();
        // Contacts that more than one of the round's step runs is for.
        let mut once = HashSet::new();
        let shared: HashSet<String> = runs
            .values()
            .filter(|r| !once.insert(r.contact_id.as_str()))
            .map(|r| r.contact_id.clone())
            .collect();
        drop(once);
        let workflow_ids: BTreeSet<&str> = runs.values().map(|r| r.workflow_id.as_str()).collect();
        let workflow_ids: Vec<&str> = workflow_ids.into_iter().collect();
        let transitions = store.transitions_of_workflows(&workflow_ids).await?;
        // One after the other: on SQLite every effect waits for the one writer anyway, and
        // running a batch's steps at once only lengthens the writer's queue in front of the API's
        // requests (measured: no faster on either database, and /v1/track slowed by half).
        let mut ran: Vec<Ran> = Vec::with_capacity(members.len());
        let mut reads = SendReads::new(project.clone());
        for (index, m) in members.iter().enumerate() {
            // Past the job's wall time, the members not run yet go back to the queue (the first
            // one of a job's first round always runs, so that every claim makes progress).
            if (index > 0 || m.ran > 0) && std::time::Instant::now() >= deadline {
                ran.push(Ran::Finished(self.postpone(m, now_ms()).await));
                continue;
            }
            let run = runs.remove(&m.run_id);
            let contact = run
                .as_ref()
                .and_then(|r| contacts.get(&r.contact_id).cloned());
            let exits = run
                .as_ref()
                .and_then(|r| transitions.get(&r.step_id))
                .map_or(&[][..], Vec::as_slice);
            let may_chain = m.chainable && m.ran + 1 < CHAIN_LIMIT;
            let mut outcome = self
                .run_member(&mut reads, m, run, contact.clone(), exits, may_chain)
                .await;
            // The contact as the chain's step runs so far leave it: their updates are written by
            // the commit, after it checks that the contact is still as the round read it.
            let mut current = contact.clone();
            if let (Ran::Commit(p), Some(current)) = (&outcome, &mut current) {
                apply_updates(current, &p.effects);
            }
            // Runs on in memory while a step run goes on at once, so that a chain of such steps
            // and the step after them are read and committed once, their effects' writes with
            // them.
            while let Ran::Commit(planned) = &outcome
                && planned.runs_on()
                && let (Some(stored), Some(seen)) = (&contact, &current)
            {
                let next = planned.next.as_ref().expect("runs_on");
                let Some(config) = transitions
                    .get(&planned.run.step_id)
                    .and_then(|exits| exits.iter().find(|t| t.to_step_id == next.step_id))
                    .map(|t| &t.to_step_config.0)
                else {
                    break;
                };
                // Past an update of the contact, only when no other step run of the round is for
                // the same contact (two chains that each updated it, both checked against the one
                // read, would each miss the other's update), and not into a step that reads the
                // contact's events or segments (its subscription events are written by the
                // commit).
                if planned.updates_contact()
                    && (shared.contains(stored.id.as_str())
                        || reads_history(&next.step_type, config))
                {
                    break;
                }
                // Past the wall time, the next step run is committed to run from its own row.
                if std::time::Instant::now() >= deadline {
                    break;
                }
                let run = planned.next_context(next, config);
                let exits = transitions.get(&run.step_id).map_or(&[][..], Vec::as_slice);
                let ahead = planned.earlier.len() as u32 + 1;
                let may_chain = m.ran + 1 + ahead < CHAIN_LIMIT;
                let Ran::Commit(mut then) = self
                    .run_ahead(&mut reads, m, run, stored, seen.clone(), exits, may_chain)
                    .await
                else {
                    break;
                };
                let Ran::Commit(mut planned) = outcome else {
                    unreachable!("matched above")
                };
                if let Some(current) = &mut current {
                    apply_updates(current, &then.effects);
                }
                let mut effects = std::mem::take(&mut planned.effects);
                effects.append(&mut then.effects);
                then.effects = effects;
                then.earlier = std::mem::take(&mut planned.earlier);
                then.earlier.push(*planned);
                outcome = Ran::Commit(then);
            }
            ran.push(outcome);
        }
        let mut ended: Vec<Option<Result<(), JobError>>> = Vec::with_capacity(ran.len());
        let mut planned: Vec<(usize, Box<Planned>)> = Vec::new();
        for (i, r) in ran.into_iter().enumerate() {
            match r {
                Ran::Commit(p) => {
                    planned.push((i, p));
                    ended.push(None);
                }
                Ran::Finished(result) => ended.push(Some(result)),
                Ran::Back => unreachable!("only a step run run on to comes back"),
            }
        }
        let commits: Vec<StepCommit<'_>> = planned
            .iter()
            .map(|(i, p)| p.commit(&members[*i].lease))
            .collect();
        let committed = store.commit_steps(&commits).await?;
        drop(commits);
        let mut wake = false;
        let mut next_runs: HashMap<usize, (String, u32)> = HashMap::new();
        for ((i, p), committed) in planned.iter().zip(committed) {
            if committed == Committed::Stale {
                let stale = "a contact changed while its email was being rendered; retrying";
                ended[*i] = Some(Err(JobError::Retry(stale.into())));
                continue;
            }
            if committed != Committed::LeaseLost {
                wake |= p.effects.iter().any(EffectWrite::queues_email);
            }
            tracing::info!(
                step_run_id = %p.run.run_id,
                execution_id = %p.run.execution_id,
                status = p.run_status,
                execution_status = p.execution_status,
                chained = committed == Committed::Chained,
                ran_before = p.earlier.len(),
                "step run finished"
            );
            match committed {
                Committed::LeaseLost => ended[*i] = Some(Err(JobError::LeaseLost)),
                Committed::Chained => {
                    if let Some(next) = &p.next {
                        let ran = 1 + p.earlier.len() as u32;
                        next_runs.insert(*i, (next.run_id.as_str().to_string(), ran));
                    }
                }
                Committed::Done => {
                    wake |= p.next.is_some() || p.timeout_job.is_some();
                    ended[*i] = Some(Ok(()));
                }
                // Answered above.
                Committed::Stale => {}
            }
        }
        if wake {
            self.engine.jobs.wake();
        }
        let mut out = Vec::new();
        let mut staying = Vec::with_capacity(next_runs.len());
        for (i, (mut member, end)) in members.drain(..).zip(ended).enumerate() {
            if let Some((next, ran)) = next_runs.remove(&i) {
                // The job row now names `next`, with its attempts counted afresh.
                member.run_id = next;
                member.attempts = 1;
                member.ran += ran;
                staying.push(member);
            } else {
                out.push((member, end.unwrap_or(Ok(()))));
            }
        }
        *members = staying;
        Ok(out)
    }

    /// Runs one member's step run up to its commit (the round writes it), or to its end when it
    /// cannot run (gone, skipped, failed, retried).
    async fn run_member(
        &self,
        reads: &mut SendReads,
        member: &Member,
        run: Option<RunContext>,
        contact: Option<Contact>,
        transitions: &[Exit],
        may_chain: bool,
    ) -> Ran {
        let Some(run) = run else {
            // The execution was deleted with its workflow or contact.
            let done = self
                .engine
                .store
                .complete_job(&member.lease, &json!({ "gone": true }))
                .await;
            return Ran::Finished(match done {
                Ok(true) => Ok(()),
                Ok(false) => Err(JobError::LeaseLost),
                Err(e) => Err(e.into()),
            });
        };
        let span = step_span(&run);
        match self
            .run_step(
                reads,
                member,
                run,
                None,
                contact,
                transitions,
                may_chain,
                false,
            )
            .instrument(span)
            .await
        {
            Ok(ran) => ran,
            Err(e) => Ran::Finished(Err(e)),
        }
    }

    /// Runs on in memory to `run`, the step run that `member`'s step run goes on to at once, for
    /// `contact` as the step runs before it leave it (`stored`: as the round read it):
    /// [`Ran::Commit`] with its outcome, or [`Ran::Back`] (nothing written) when it does not
    /// come to one.
    #[allow(clippy::too_many_arguments)]
    async fn run_ahead(
        &self,
        reads: &mut SendReads,
        member: &Member,
        run: RunContext,
        stored: &Contact,
        contact: Contact,
        transitions: &[Exit],
        may_chain: bool,
    ) -> Ran {
        let span = step_span(&run);
        // Its first attempt, under the job's lease.
        let first = Member {
            lease: member.lease.clone(),
            attempts: 1,
            max_attempts: member.max_attempts,
            run_id: run.run_id.clone(),
            chainable: true,
            ran: 0,
            claimed: false,
        };
        match self
            .run_step(
                reads,
                &first,
                run,
                Some(stored),
                Some(contact),
                transitions,
                may_chain,
                true,
            )
            .instrument(span)
            .await
        {
            Ok(Ran::Commit(planned)) => Ran::Commit(planned),
            Ok(_) | Err(_) => Ran::Back,
        }
    }

    /// Runs one step run for `contact` (`stored`: the contact as the round read it, when the
    /// step runs run on to before it updated it): its plugin and effects, answering the outcome
    /// to commit. `ahead`: it is run on to in memory (its row does not exist yet), so where it
    /// cannot come to an outcome it answers [`Ran::Back`] and writes nothing.
    #[allow(clippy::too_many_arguments)]
    async fn run_step(
        &self,
        reads: &mut SendReads,
        member: &Member,
        run: RunContext,
        stored: Option<&Contact>,
        contact: Option<Contact>,
        transitions: &[Exit],
        may_chain: bool,
        ahead: bool,
    ) -> Result<Ran, JobError> {
        let store = &self.engine.store;
        if run.run_status != rs::PENDING || !es::ACTIVE.contains(&run.execution_status.as_str()) {
            if !store.skip_step_run(&member.lease, &run.run_id).await? {
                return Err(JobError::LeaseLost);
            }
            return Ok(Ran::Finished(Ok(())));
        }
        let (Some(step_type), Some(config)) = (run.step_type.clone(), run.config.clone()) else {
            let error = format!(
                "step {} was deleted from the workflow while this execution was on its way to it",
                run.step_id
            );
            return self.fail(member, &run, &error).await;
        };
        let project = ProjectId::from_trusted(run.project_id.clone());
        let contact_id = ContactId::from_trusted(run.contact_id.clone());
        let Some(contact) = contact else {
            return self.fail(member, &run, "the contact was deleted").await;
        };
        let (history, segments) = if reads_history(&step_type, &config.0) {
            store.contact_summary(&contact_id).await?
        } else {
            Default::default()
        };
        let input = StepInput {
            config: config.0,
            contact: step::Contact {
                id: contact.id.as_str().to_string(),
                email: contact.email.as_str().to_string(),
                subscribed: contact.subscribed,
                created_at: contact.created_at,
                updated_at: contact.updated_at,
                data: contact.data.clone(),
            },
            event: trigger_event(run.trigger.as_ref().map(|t| &t.0)),
            context: run.context.0.clone(),
            history: history
                .into_iter()
                .map(|(name, count, last_at)| step::EventSummary {
                    name,
                    count: u32::try_from(count).unwrap_or(u32::MAX),
                    last_at,
                })
                .collect(),
            segments,
        };
        // A `WEBHOOK` call takes a place of the project's and of the instance's (see
        // [`super::gate`]); without one, the step run waits in the queue rather than in a job
        // slot.
        let permit = if step_type == StepType::Webhook.as_str() {
            match self.engine.webhooks.try_enter(&run.project_id) {
                Some(permit) => Some(permit),
                None if ahead => return Ok(Ran::Back),
                None => {
                    metrics::counter!("herald_webhook_steps_deferred_total").increment(1);
                    let at = now_ms() + jittered(super::gate::DEFER_MS);
                    return Ok(Ran::Finished(self.postpone(member, at).await));
                }
            }
        } else {
            None
        };
        let started = now_ms();
        let result = self.engine.plugins.run_step(&step_type, &input).await;
        drop(permit);
        let result = match result {
            Ok(r) => r,
            Err(_) if ahead => return Ok(Ran::Back),
            Err(err) => {
                let message = format!("the {step_type} step failed: {err}");
                if is_permanent(&err) {
                    return self.fail(member, &run, &message).await;
                }
                return self.retry_or_fail(member, &run, message).await;
            }
        };
        let write_count = write_count(&result.effects);
        if ahead && write_count > 1 {
            // Several writes are made one by one, each in a transaction of its own under this
            // step run's keys: they wait for its own row (the next round), so that a round
            // retried does not make them again under another step run's keys.
            return Ok(Ran::Back);
        }
        let mut context = run.context.0.clone();
        let (effects, writes) = match self
            .engine
            .apply_effects(
                reads,
                KnownContact {
                    stored: stored.unwrap_or(&contact),
                    now: &contact,
                },
                &run.run_id,
                member.attempts == 1,
                &result.effects,
                &mut context,
            )
            .await
        {
            Ok(out) => out,
            Err(_) if ahead => return Ok(Ran::Back),
            Err(EffectError::Fail(message)) => {
                return self.fail(member, &run, &message).await;
            }
            Err(EffectError::Retry(message)) => {
                return self.retry_or_fail(member, &run, message).await;
            }
        };
        let mut output = Map::new();
        output.insert(
            "outcome".into(),
            serde_json::to_value(&result.outcome).unwrap_or(Value::Null),
        );
        if !effects.is_empty() {
            output.insert("effects".into(), Value::Array(effects));
        }
        let mut planned = Planned {
            input: input_summary(&input),
            output: Value::Object(output),
            run_status: rs::COMPLETED,
            branch: None,
            attempts: member.attempts,
            started_at: started,
            execution_status: es::COMPLETED,
            context,
            current_step: None,
            waiting_event: None,
            error: None,
            exit_reason: None,
            next: None,
            timeout_job: None,
            chain: false,
            effects: writes,
            wrote_alone: write_count > 1,
            earlier: Vec::new(),
            run,
        };
        let run = &planned.run;
        match &result.outcome {
            Outcome::Continue { branch } => {
                planned.branch = branch.clone();
                if let Some(t) = follow(transitions, branch.as_deref()) {
                    planned.next = Some(self.next_of(run, &project, t, now_ms())?);
                    planned.execution_status = es::RUNNING;
                }
            }
            Outcome::WaitUntil { at } => {
                if let Some(t) = follow(transitions, None) {
                    planned.next = Some(self.next_of(run, &project, t, (*at).max(now_ms()))?);
                    planned.execution_status = es::WAITING;
                } else if *at > now_ms() {
                    // A `DELAY` that is the workflow's last step still holds the execution for
                    // its time (a cool-down: re-entry stays barred while it waits); its own
                    // timeout job ends the wait and completes the execution.
                    planned.run_status = rs::WAITING;
                    planned.execution_status = es::WAITING;
                    planned.current_step = Some(run.step_id.clone());
                    planned.timeout_job = Some(NewJob {
                        kind: TIMEOUT_KIND.to_string(),
                        project_id: Some(project.clone()),
                        payload: TimeoutPayload {
                            step_run_id: run.run_id.clone(),
                            execution_id: run.execution_id.clone(),
                            workflow_id: run.workflow_id.clone(),
                            delay: true,
                        }
                        .to_json()?,
                        input: None,
                        max_attempts: member.max_attempts,
                        run_at: *at,
                    });
                }
            }
            Outcome::WaitForEvent {
                event_name,
                timeout_at,
            } => {
                planned.run_status = rs::WAITING;
                planned.execution_status = es::WAITING;
                planned.current_step = Some(run.step_id.clone());
                planned.waiting_event = Some(event_name.clone());
                planned.timeout_job = match timeout_at {
                    Some(at) => Some(NewJob {
                        kind: TIMEOUT_KIND.to_string(),
                        project_id: Some(project.clone()),
                        payload: TimeoutPayload {
                            step_run_id: run.run_id.clone(),
                            execution_id: run.execution_id.clone(),
                            workflow_id: run.workflow_id.clone(),
                            delay: false,
                        }
                        .to_json()?,
                        input: None,
                        max_attempts: member.max_attempts,
                        run_at: *at,
                    }),
                    None => None,
                };
            }
            Outcome::Exit { reason } => {
                planned.execution_status = es::EXITED;
                planned.exit_reason = reason.clone();
            }
            Outcome::Fail { message } => {
                planned.run_status = rs::FAILED;
                planned.error = Some(message.clone());
                planned.execution_status = es::FAILED;
            }
        }
        if let Some(n) = &planned.next {
            planned.current_step = Some(n.step_id.clone());
        }
        planned.chain = may_chain
            && planned
                .next
                .as_ref()
                .is_some_and(|n| n.job.run_at <= now_ms());
        Ok(Ran::Commit(Box::new(planned)))
    }

    /// The step run that follows along `t`, due at `run_at`.
    fn next_of(
        &self,
        run: &RunContext,
        project: &ProjectId,
        t: &Exit,
        run_at: i64,
    ) -> Result<NextRun, JobError> {
        Ok(self.engine.next_run(
            &run.workflow_id,
            &run.execution_id,
            project,
            &t.to_step_id,
            &t.to_step_type,
            run_at,
        )?)
    }

    /// A transient failure: retried with the queue's backoff (the attempt and its error kept on
    /// the step run), or on the last attempt the execution fails with it.
    async fn retry_or_fail(
        &self,
        member: &Member,
        run: &RunContext,
        message: String,
    ) -> Result<Ran, JobError> {
        if member.attempts >= member.max_attempts {
            return self.fail(member, run, &message).await;
        }
        self.engine
            .store
            .record_step_attempt(&run.run_id, member.attempts, &message)
            .await?;
        Ok(Ran::Finished(Err(JobError::Retry(message.into()))))
    }

    /// Fails the step run and its execution with `error`.
    async fn fail(&self, member: &Member, run: &RunContext, error: &str) -> Result<Ran, JobError> {
        tracing::warn!(error = %error, "workflow step failed; the execution fails");
        if !self
            .engine
            .store
            .fail_execution(
                &member.lease,
                &run.run_id,
                &run.execution_id,
                error,
                member.attempts,
            )
            .await?
        {
            return Err(JobError::LeaseLost);
        }
        Ok(Ran::Finished(Ok(())))
    }

    /// Resumes a `WAIT_FOR_EVENT` along `timeout`, unless the event came first; ends a
    /// trailing `DELAY`'s wait (no branch, its output kept), completing the execution.
    async fn timeout(&self, ctx: JobContext) -> Result<(), JobError> {
        let payload: TimeoutPayload = ctx.payload()?;
        let project = ctx.project()?;
        let timed_out = json!({ "timedOut": true });
        let (branch, output) = if payload.delay {
            (None, None)
        } else {
            (Some("timeout"), Some(&timed_out))
        };
        let resumed = self
            .engine
            .resume(
                &project,
                &payload.workflow_id,
                &payload.execution_id,
                &payload.step_run_id,
                branch,
                output,
                Some(&ctx.lease),
            )
            .await?;
        if resumed.is_none() {
            return Err(JobError::LeaseLost);
        }
        Ok(())
    }
}

impl WorkflowEngine {
    /// Resumes a waiting execution along `branch`: `Some(true)` when this resumed it,
    /// `Some(false)` when it was no longer waiting on that step run, `None` when the timeout
    /// job's lease was lost.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn resume(
        &self,
        project: &ProjectId,
        workflow: &str,
        execution: &str,
        waiting_run: &str,
        branch: Option<&str>,
        output: Option<&Value>,
        lease: Option<&crate::store::jobs::Lease>,
    ) -> Result<Option<bool>, StoreError> {
        let step: Option<String> = self.store.run_step_id(waiting_run).await?;
        let next = match &step {
            Some(step) => {
                let transitions = self.store.transitions_from(step).await?;
                match follow(&transitions, branch) {
                    Some(t) => Some(self.next_run(
                        workflow,
                        execution,
                        project,
                        &t.to_step_id,
                        &t.to_step_type,
                        now_ms(),
                    )?),
                    None => None,
                }
            }
            None => None,
        };
        let resume = crate::store::executions::Resume {
            execution_id: execution,
            project_id: project.as_str(),
            waiting_run_id: waiting_run,
            branch,
            output,
            next: next.as_ref(),
            lease,
        };
        let resumed = self.store.resume_execution(&resume).await?;
        if resumed == Some(true) {
            if next.is_some() {
                self.jobs.wake();
            }
            tracing::info!(execution_id = %execution, branch = branch.unwrap_or_default(), "workflow execution resumed");
        }
        Ok(resumed)
    }
}
