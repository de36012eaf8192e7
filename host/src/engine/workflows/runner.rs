//! Running one step run (`workflow.step` jobs) and resuming a wait on its timeout
//! (`workflow.timeout` jobs).

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::WorkflowEngine;
use super::effects::EffectError;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::workflow::{StepType, execution_status as es, step_run_status as rs};
use crate::jobs::{JobContext, JobError, JobHandler};
use crate::plugins::PluginError;
use crate::plugins::types::{self as step, Outcome, StepInput};
use crate::store::StoreError;
use crate::store::executions::{
    Committed, Exit, NextRun, RunContext, STEP_KIND, StepCommit, StepPayload, TIMEOUT_KIND,
    TimeoutPayload,
};
use crate::store::jobs::{JobPayload, NewJob};

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

/// Plugin failures that a retry cannot fix.
fn is_permanent(err: &PluginError) -> bool {
    matches!(
        err,
        PluginError::NotFound(_) | PluginError::WrongWorld { .. }
    )
}

impl StepRunner {
    /// Runs the job's step run, then each next one that is due at once, up to [`CHAIN_LIMIT`].
    async fn step(&self, mut ctx: JobContext) -> Result<(), JobError> {
        let payload: StepPayload = ctx.payload()?;
        let store = &self.engine.store;
        let mut run_id = payload.step_run_id;
        // Only a job on its first attempt carries on: the queue decides whether a failed attempt
        // is retried from the attempts of the claim it made, and a chained step run starts its
        // count afresh at 1.
        let chainable = ctx.job.attempts == 1;
        for ran in 1.. {
            let Some(run) = store.run_context(&run_id).await? else {
                // The execution was deleted with its workflow or contact.
                store
                    .complete_job(&ctx.lease, &json!({ "gone": true }))
                    .await?;
                return Ok(());
            };
            let span = tracing::info_span!("step_run", step_run_id = %run.run_id, execution_id = %run.execution_id, workflow_id = %run.workflow_id, step_type = run.step_type.as_deref().unwrap_or("?"));
            match self
                .run_step(&ctx, run, chainable && ran < CHAIN_LIMIT)
                .instrument(span)
                .await?
            {
                Some(next) => {
                    // The job row now names `next`, with its attempts counted afresh.
                    run_id = next;
                    ctx.job.attempts = 1;
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Runs one step run; answers the next step run's id when the job carries on with it.
    async fn run_step(
        &self,
        ctx: &JobContext,
        run: RunContext,
        may_chain: bool,
    ) -> Result<Option<String>, JobError> {
        let store = &self.engine.store;
        if run.run_status != rs::PENDING || !es::ACTIVE.contains(&run.execution_status.as_str()) {
            if !store.skip_step_run(&ctx.lease, &run.run_id).await? {
                return Err(JobError::LeaseLost);
            }
            return Ok(None);
        }
        let (Some(step_type), Some(config)) = (run.step_type.clone(), run.config.clone()) else {
            let error = format!(
                "step {} was deleted from the workflow while this execution was on its way to it",
                run.step_id
            );
            return self.fail(ctx, &run, &error).await.map(|()| None);
        };
        let project = ProjectId::from_trusted(run.project_id.clone());
        let contact_id = ContactId::from_trusted(run.contact_id.clone());
        let contact = match store.contact(&project, &contact_id).await {
            Ok(c) => c,
            Err(StoreError::NotFound) => {
                return self
                    .fail(ctx, &run, "the contact was deleted")
                    .await
                    .map(|()| None);
            }
            Err(e) => return Err(e.into()),
        };
        // An unknown type (none is stored) reads them, as a plugin step would.
        let (history, segments) = if StepType::parse(&step_type).is_none_or(StepType::reads_history)
        {
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
        let started = now_ms();
        let attempts = ctx.job.attempts;
        let result = match self.engine.plugins.run_step(&step_type, &input).await {
            Ok(r) => r,
            Err(err) => {
                let message = format!("the {step_type} step failed: {err}");
                if is_permanent(&err) {
                    return self.fail(ctx, &run, &message).await.map(|()| None);
                }
                return self.retry_or_fail(ctx, &run, message).await.map(|()| None);
            }
        };
        let mut context = run.context.0.clone();
        let effects = match self
            .engine
            .apply_effects(
                &project,
                &contact,
                &run.run_id,
                &result.effects,
                &mut context,
            )
            .await
        {
            Ok(out) => out,
            Err(EffectError::Fail(message)) => {
                return self.fail(ctx, &run, &message).await.map(|()| None);
            }
            Err(EffectError::Retry(message)) => {
                return self.retry_or_fail(ctx, &run, message).await.map(|()| None);
            }
        };
        let summary = input_summary(&input);
        let transitions = store.transitions_from(&run.step_id).await?;
        let mut output = Map::new();
        output.insert(
            "outcome".into(),
            serde_json::to_value(&result.outcome).unwrap_or(Value::Null),
        );
        if !effects.is_empty() {
            output.insert("effects".into(), Value::Array(effects));
        }
        let output = Value::Object(output);
        let mut commit = StepCommit {
            lease: &ctx.lease,
            run_id: &run.run_id,
            execution_id: &run.execution_id,
            project_id: &run.project_id,
            run_status: rs::COMPLETED,
            branch: None,
            input: &summary,
            output: &output,
            error: None,
            attempts,
            started_at: started,
            execution_status: es::COMPLETED,
            context: &context,
            current_step: None,
            waiting_event: None,
            execution_error: None,
            exit_reason: None,
            next: None,
            timeout_job: None,
            chain: false,
        };
        let next: Option<NextRun>;
        let timeout: Option<NewJob>;
        match &result.outcome {
            Outcome::Continue { branch } => {
                commit.branch = branch.as_deref();
                next = match follow(&transitions, branch.as_deref()) {
                    Some(t) => Some(self.next_of(&run, &project, t, now_ms())?),
                    None => None,
                };
                if next.is_some() {
                    commit.execution_status = es::RUNNING;
                }
                timeout = None;
            }
            Outcome::WaitUntil { at } => {
                next = match follow(&transitions, None) {
                    Some(t) => Some(self.next_of(&run, &project, t, (*at).max(now_ms()))?),
                    None => None,
                };
                if next.is_some() {
                    commit.execution_status = es::WAITING;
                }
                timeout = None;
            }
            Outcome::WaitForEvent {
                event_name,
                timeout_at,
            } => {
                commit.run_status = rs::WAITING;
                commit.execution_status = es::WAITING;
                commit.current_step = Some(&run.step_id);
                commit.waiting_event = Some(event_name);
                next = None;
                timeout = match timeout_at {
                    Some(at) => Some(NewJob {
                        kind: TIMEOUT_KIND.to_string(),
                        project_id: Some(project.clone()),
                        payload: TimeoutPayload {
                            step_run_id: run.run_id.clone(),
                            execution_id: run.execution_id.clone(),
                            workflow_id: run.workflow_id.clone(),
                        }
                        .to_json()?,
                        input: None,
                        max_attempts: ctx.job.max_attempts,
                        run_at: *at,
                    }),
                    None => None,
                };
            }
            Outcome::Exit { reason } => {
                commit.execution_status = es::EXITED;
                commit.exit_reason = reason.as_deref();
                next = None;
                timeout = None;
            }
            Outcome::Fail { message } => {
                commit.run_status = rs::FAILED;
                commit.error = Some(message);
                commit.execution_status = es::FAILED;
                commit.execution_error = Some(message);
                next = None;
                timeout = None;
            }
        }
        if let Some(n) = &next {
            commit.current_step = Some(&n.step_id);
        }
        commit.next = next.as_ref();
        commit.timeout_job = timeout.as_ref();
        commit.chain = may_chain && next.as_ref().is_some_and(|n| n.job.run_at <= now_ms());
        let committed = store.commit_step(&commit).await?;
        tracing::info!(
            status = commit.run_status,
            execution_status = commit.execution_status,
            chained = committed == Committed::Chained,
            "step run finished"
        );
        match committed {
            Committed::LeaseLost => Err(JobError::LeaseLost),
            Committed::Chained => Ok(next.map(|n| n.run_id.as_str().to_string())),
            Committed::Done => {
                if next.is_some() || timeout.is_some() {
                    self.engine.jobs.wake();
                }
                Ok(None)
            }
        }
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
        ctx: &JobContext,
        run: &RunContext,
        message: String,
    ) -> Result<(), JobError> {
        if ctx.job.attempts >= ctx.job.max_attempts {
            return self.fail(ctx, run, &message).await;
        }
        self.engine
            .store
            .record_step_attempt(&run.run_id, ctx.job.attempts, &message)
            .await?;
        Err(JobError::Retry(message.into()))
    }

    /// Fails the step run and its execution with `error`.
    async fn fail(&self, ctx: &JobContext, run: &RunContext, error: &str) -> Result<(), JobError> {
        tracing::warn!(error = %error, "workflow step failed; the execution fails");
        if !self
            .engine
            .store
            .fail_execution(
                &ctx.lease,
                &run.run_id,
                &run.execution_id,
                error,
                ctx.job.attempts,
            )
            .await?
        {
            return Err(JobError::LeaseLost);
        }
        Ok(())
    }

    /// Resumes a `WAIT_FOR_EVENT` along `timeout`, unless the event came first.
    async fn timeout(&self, ctx: JobContext) -> Result<(), JobError> {
        let payload: TimeoutPayload = ctx.payload()?;
        let project = ctx.project()?;
        let resumed = self
            .engine
            .resume(
                &project,
                &payload.workflow_id,
                &payload.execution_id,
                &payload.step_run_id,
                "timeout",
                &json!({ "timedOut": true }),
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
        branch: &str,
        output: &Value,
        lease: Option<&crate::store::jobs::Lease>,
    ) -> Result<Option<bool>, StoreError> {
        let step: Option<String> = self.store.run_step_id(waiting_run).await?;
        let next = match &step {
            Some(step) => {
                let transitions = self.store.transitions_from(step).await?;
                match follow(&transitions, Some(branch)) {
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
            tracing::info!(execution_id = %execution, branch, "workflow execution resumed");
        }
        Ok(resumed)
    }
}
