//! Running one step run: its input (the contact, the trigger, the context and, when the step
//! reads them, the contact's events and segments), its step plugin, the effects it asks for,
//! and the outcome to commit, or its end when it cannot run.

use serde_json::{Map, Value, json};

use super::resume::follow;
use super::{Member, Planned, Ran, StepRunner};
use crate::domain::contact::Contact;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::workflow::{
    StepType, execution_status as es, step_run_status as rs, step_topic_id,
};
use crate::engine::workflows::effects::{EffectError, SendReads, write_count};
use crate::jobs::{JobError, jittered};
use crate::plugins::PluginError;
use crate::plugins::types::{self as step, Effect, Outcome, StepInput};
use crate::services::sending::KnownContact;
use crate::store::contacts::changed;
use crate::store::executions::{
    EffectWrite, Exit, NextRun, RunContext, TIMEOUT_KIND, TimeoutPayload,
};
use crate::store::jobs::{JobPayload, NewJob};

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
pub(super) fn reads_history(step_type: &str, config: &Value) -> bool {
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
pub(super) fn apply_updates(contact: &mut Contact, effects: &[EffectWrite]) {
    for effect in effects {
        if let EffectWrite::UpdateContact { change, .. } = effect {
            *contact = changed(contact, change);
        }
    }
}

/// The span of one step run.
pub(super) fn step_span(run: &RunContext) -> tracing::Span {
    tracing::info_span!("step_run", step_run_id = %run.run_id, execution_id = %run.execution_id, workflow_id = %run.workflow_id, step_type = run.step_type.as_deref().unwrap_or("?"))
}

/// Plugin failures that a retry cannot fix.
fn is_permanent(err: &PluginError) -> bool {
    matches!(
        err,
        PluginError::NotFound(_) | PluginError::WrongWorld { .. }
    )
}

impl StepRunner {
    /// Runs one step run for `contact` (`stored`: the contact as the round read it, when the
    /// step runs run on to before it updated it): its plugin and effects, answering the outcome
    /// to commit. `ahead`: it is run on to in memory (its row does not exist yet), so where it
    /// cannot come to an outcome it answers [`Ran::Back`] and writes nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_step(
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
        // [`crate::engine::workflows::gate`]); without one, the step run waits in the queue rather than in a job
        // slot.
        let permit = if step_type == StepType::Webhook.as_str() {
            match self.engine.webhooks.try_enter(&run.project_id) {
                Some(permit) => Some(permit),
                None if ahead => return Ok(Ran::Back),
                None => {
                    metrics::counter!("herald_webhook_steps_deferred_total").increment(1);
                    let at = now_ms() + jittered(crate::engine::workflows::gate::DEFER_MS);
                    return Ok(Ran::Finished(self.postpone(member, at).await));
                }
            }
        } else {
            None
        };
        let started = now_ms();
        let result = self.engine.plugins.run_step(&step_type, &input).await;
        drop(permit);
        let mut result = match result {
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
        // A `SEND_EMAIL` step's own topic, which the host reads from its config.
        if let Some(topic) =
            StepType::parse(&step_type).and_then(|t| step_topic_id(t, &input.config))
        {
            for effect in &mut result.effects {
                if let Effect::SendEmail { topic_id, .. } = effect {
                    *topic_id = Some(topic.to_string());
                }
            }
        }
        let write_count = write_count(&result.effects);
        if ahead && write_count > 1 {
            // Several writes are made one by one, each in a transaction of its own under this
            // step run's keys: they wait for its own row (the next round), so that a round
            // retried does not make them again under another step run's keys.
            return Ok(Ran::Back);
        }
        let mut context = run.context.0.clone();
        let (effects, writes, rooms) = match self
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
            rooms,
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
}
