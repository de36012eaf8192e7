//! Resuming a waiting execution: along `timeout` on its `workflow.timeout` job (or at the end of
//! a trailing `DELAY`), or along `event` when the event it waits for is tracked.

use serde_json::{Value, json};

use super::StepRunner;
use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;
use crate::engine::workflows::WorkflowEngine;
use crate::jobs::{JobContext, JobError};
use crate::store::StoreError;
use crate::store::executions::{Exit, TimeoutPayload};

/// The transition out of a step along `branch`, or its plain transition when no transition
/// carries that branch (a `PLUGIN` step's own branch names).
pub(super) fn follow<'a>(transitions: &'a [Exit], branch: Option<&str>) -> Option<&'a Exit> {
    transitions
        .iter()
        .find(|t| t.branch.as_deref() == branch)
        .or_else(|| transitions.iter().find(|t| t.branch.is_none()))
}

impl StepRunner {
    /// Resumes a `WAIT_FOR_EVENT` along `timeout`, unless the event came first; ends a
    /// trailing `DELAY`'s wait (no branch, its output kept), completing the execution.
    pub(super) async fn timeout(&self, ctx: JobContext) -> Result<(), JobError> {
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
