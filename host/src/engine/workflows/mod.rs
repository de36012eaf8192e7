//! The workflow engine: durable executions of WASM steps.
//!
//! - [`triggers`]: the outbox consumer. Each event starts an execution of every enabled
//!   workflow of the project it triggers (deduplicated by (workflow, event), re-entry rules
//!   applied in the start transaction), and resumes the contact's executions that wait for it.
//! - [`runner`]: the `workflow.step` job handler. It reads the step run, builds the step's
//!   input, runs the step plugin, applies the effects it asks for (each under an idempotency
//!   key `wf:<stepRunId>:<index>`, so a retry never sends or updates twice), then commits the
//!   step run, the execution's new state and the next step's job in one transaction guarded by
//!   the job's lease. The `workflow.timeout` handler resumes a `WAIT_FOR_EVENT` on `timeout`,
//!   and ends the wait of a `DELAY` that is the workflow's last step (completing the execution).
//! - [`effects`]: sending a template and updating the contact on a step's behalf.
//!
//! Every step run is a job of the shared queue, so several instances on one PostgreSQL run each
//! exactly once (`SKIP LOCKED` claims, lease-guarded commits), and waiting executions live in
//! the database, not in memory.

pub mod effects;
pub mod gate;
pub mod runner;
pub mod triggers;

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, ExecutionId, StepRunId};
use crate::domain::workflow::{self, Violation};
use crate::jobs::JobQueue;
use crate::plugins::Plugins;
use crate::services::sending::Sending;
use crate::services::sending_domains::SendingDomains;
use crate::store::executions::{
    ExecutionRecord, NewExecution, NextRun, NotStarted, STEP_KIND, StepPayload,
};
use crate::store::jobs::{JobPayload, NewJob};
use crate::store::workflows::WorkflowGraph;
use crate::store::{Store, StoreError};

pub use runner::StepRunner;
pub use triggers::WorkflowTriggers;

/// Why an execution could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The workflow's graph cannot run.
    #[error("the workflow's graph cannot run")]
    InvalidGraph(Vec<Violation>),
    /// The re-entry rules refused it.
    #[error("{0:?}")]
    Refused(NotStarted),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the engine's parts share.
#[derive(Clone)]
pub struct WorkflowEngine {
    pub(crate) store: Store,
    pub(crate) plugins: Arc<Plugins>,
    pub(crate) sending: Arc<Sending>,
    pub(crate) sending_domains: Arc<SendingDomains>,
    pub(crate) jobs: JobQueue,
    /// Longest a claimed step job runs step runs before it puts the rest back in the queue.
    pub(crate) wall_time: std::time::Duration,
    /// This instance's `WEBHOOK` calls under way.
    pub(crate) webhooks: Arc<gate::WebhookGate>,
}

/// The triggering event as the steps see it (`{ id, name, data, createdAt }`).
pub fn trigger_of(event: &StoredEvent) -> Value {
    json!({
        "id": event.id.as_str(),
        "name": event.name,
        "data": Value::Object(event.data.clone()),
        "createdAt": event.created_at,
    })
}

/// A claimed step job's wall time unless the deployment sets `workflows.job_wall_time_ms`.
const DEFAULT_JOB_WALL_TIME: std::time::Duration = std::time::Duration::from_millis(15_000);

/// `WEBHOOK` calls of one project under way at once unless the deployment sets
/// `workflows.webhooks_per_project`.
const DEFAULT_WEBHOOKS_PER_PROJECT: usize = 4;

impl WorkflowEngine {
    /// The engine over the services it uses.
    pub fn new(
        store: Store,
        plugins: Arc<Plugins>,
        sending: Arc<Sending>,
        sending_domains: Arc<SendingDomains>,
        jobs: JobQueue,
    ) -> WorkflowEngine {
        let slots = jobs.config().concurrency;
        WorkflowEngine {
            store,
            plugins,
            sending,
            sending_domains,
            jobs,
            wall_time: DEFAULT_JOB_WALL_TIME,
            webhooks: gate::WebhookGate::new(DEFAULT_WEBHOOKS_PER_PROJECT, slots),
        }
    }

    /// The engine with the deployment's `[workflows]` settings: a claimed step job's wall time
    /// (`workflows.job_wall_time_ms`) and the `WEBHOOK` calls of one project under way at once
    /// (`workflows.webhooks_per_project`; see [`gate`]).
    pub fn with_limits(
        mut self,
        wall_time: std::time::Duration,
        webhooks_per_project: usize,
    ) -> WorkflowEngine {
        self.wall_time = wall_time.max(std::time::Duration::from_millis(1));
        self.webhooks =
            gate::WebhookGate::new(webhooks_per_project, self.jobs.config().concurrency);
        self
    }

    /// A step run of `step` with the job that runs it at `run_at`.
    pub(crate) fn next_run(
        &self,
        graph_workflow: &str,
        execution: &str,
        project: &crate::domain::ids::ProjectId,
        step_id: &str,
        step_type: &str,
        run_at: i64,
    ) -> Result<NextRun, StoreError> {
        let run_id = StepRunId::generate();
        let payload = StepPayload {
            step_run_id: run_id.as_str().to_string(),
            execution_id: execution.to_string(),
            workflow_id: graph_workflow.to_string(),
        };
        Ok(NextRun {
            job: NewJob {
                kind: STEP_KIND.to_string(),
                project_id: Some(project.clone()),
                payload: payload.to_json()?,
                input: None,
                max_attempts: self.jobs.config().max_attempts,
                run_at,
            },
            run_id,
            step_id: step_id.to_string(),
            step_type: step_type.to_string(),
        })
    }

    /// Starts an execution of `graph` for `contact` at its entry step, now.
    pub async fn start(
        &self,
        graph: &WorkflowGraph,
        contact: &ContactId,
        trigger: Option<&StoredEvent>,
        context: &Map<String, Value>,
    ) -> Result<ExecutionRecord, StartError> {
        let new = self.plan_start(graph, contact, trigger, context)?;
        let started = self
            .store
            .start_execution(&new)
            .await?
            .map_err(StartError::Refused)?;
        self.jobs.wake();
        tracing::info!(execution_id = %started.id, workflow_id = %graph.workflow.id, contact_id = %contact, "workflow execution started");
        Ok(started)
    }

    /// The execution of `graph` for `contact` to start at its entry step now, with the entry
    /// step run and its job; refused when the graph cannot run.
    pub(crate) fn plan_start<'a>(
        &self,
        graph: &'a WorkflowGraph,
        contact: &'a ContactId,
        trigger: Option<&'a StoredEvent>,
        context: &'a Map<String, Value>,
    ) -> Result<NewExecution<'a>, StartError> {
        let steps = graph.graph_steps();
        let transitions = graph.graph_transitions();
        let problems = workflow::check_graph(&steps, &transitions);
        if !problems.is_empty() {
            return Err(StartError::InvalidGraph(problems));
        }
        let entry = workflow::entry_step(&steps, &transitions)
            .and_then(|id| steps.iter().find(|s| s.id == id))
            .ok_or_else(|| StartError::InvalidGraph(Vec::new()))?;
        let wf = &graph.workflow;
        let id = ExecutionId::generate();
        let entry = self.next_run(
            wf.id.as_str(),
            id.as_str(),
            &wf.project_id,
            entry.id,
            entry.step_type.as_str(),
            crate::domain::time::now_ms(),
        )?;
        Ok(NewExecution {
            id,
            project: &wf.project_id,
            workflow: &wf.id,
            contact,
            allow_reentry: wf.allow_reentry,
            trigger_event_id: trigger.map(|e| e.id.as_str()),
            trigger: trigger.map(trigger_of),
            context,
            entry,
        })
    }
}
