//! A step run's outcome, owned from its run until the round commits it.

use serde_json::{Map, Value};

use crate::domain::workflow::step_run_status as rs;
use crate::services::render_budget::RenderRoom;
use crate::store::executions::{EffectWrite, NextRun, RunContext, RunOutcome, StepCommit};
use crate::store::jobs::{Lease, NewJob};

/// A step run's outcome, owned until the round commits it (see [`StepCommit`]).
pub(super) struct Planned {
    pub(super) run: RunContext,
    pub(super) run_status: &'static str,
    pub(super) branch: Option<String>,
    pub(super) input: Value,
    pub(super) output: Value,
    pub(super) attempts: i32,
    pub(super) started_at: i64,
    pub(super) execution_status: &'static str,
    pub(super) context: Map<String, Value>,
    pub(super) current_step: Option<String>,
    pub(super) waiting_event: Option<String>,
    pub(super) error: Option<String>,
    pub(super) exit_reason: Option<String>,
    pub(super) next: Option<NextRun>,
    pub(super) timeout_job: Option<NewJob>,
    pub(super) chain: bool,
    /// The writes of its effects and of those of the step runs run before it in the same chain,
    /// in order, made in the round's commit.
    pub(super) effects: Vec<EffectWrite>,
    /// Its send's rendered message held in the render budget until the round commits (dropped
    /// with it).
    #[expect(
        dead_code,
        reason = "held for its drop: the room is given back after the commit"
    )]
    pub(super) rooms: Vec<RenderRoom>,
    /// Its effects were written before the commit, one by one (a step with several writes), so
    /// the contact the round read may no longer be the contact's.
    pub(super) wrote_alone: bool,
    /// The step runs run before this one in the same round, oldest first (see
    /// [`StepCommit::earlier`]).
    pub(super) earlier: Vec<Planned>,
}

impl Planned {
    pub(super) fn outcome(&self) -> RunOutcome<'_> {
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
    /// ([`StepRunner::round`](super::StepRunner::round) says when an update of the contact ends the chain).
    pub(super) fn runs_on(&self) -> bool {
        self.chain && self.next.is_some() && !self.wrote_alone
    }

    /// Whether this step run, or one run before it in the same chain, updates the contact.
    pub(super) fn updates_contact(&self) -> bool {
        self.effects
            .iter()
            .any(|e| matches!(e, EffectWrite::UpdateContact { .. }))
    }

    /// The next step run's context, as the commit will leave it: the same execution, trigger
    /// and contact, this step's context, the next step's `config`.
    pub(super) fn next_context(&self, next: &NextRun, config: &Value) -> RunContext {
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

    pub(super) fn commit<'a>(&'a self, lease: &'a Lease) -> StepCommit<'a> {
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
