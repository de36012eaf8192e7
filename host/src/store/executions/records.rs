//! An execution's and a step run's records: their job kinds and payloads, their columns, and
//! what a step run needs to run.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use crate::domain::ids::StepRunId;
use crate::domain::workflow::execution_status as es;
use crate::store::jobs::{JobPayload, NewJob};

/// The job kind that runs one step run.
pub const STEP_KIND: &str = "workflow.step";
/// The job kind that resumes a `WAIT_FOR_EVENT` on branch `timeout`.
pub const TIMEOUT_KIND: &str = "workflow.timeout";

/// The payload of a `workflow.step` job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPayload {
    /// The step run to run.
    pub step_run_id: String,
    /// Its execution (so that cancelling can drop queued jobs).
    pub execution_id: String,
    /// Its workflow (so that cancelling all can drop queued jobs).
    pub workflow_id: String,
}

impl JobPayload for StepPayload {}

/// The payload of a `workflow.timeout` job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutPayload {
    /// The waiting step run.
    pub step_run_id: String,
    pub execution_id: String,
    pub workflow_id: String,
    /// The wait is a `DELAY` that is its workflow's last step: it ends the wait with no branch,
    /// keeping the step run's output, and completes the execution.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delay: bool,
}

impl JobPayload for TimeoutPayload {}

/// A transition out of a step, as the engine follows it.
#[derive(Clone, Debug, FromRow)]
pub struct Exit {
    pub to_step_id: String,
    pub branch: Option<String>,
    /// The type of the step it leads to.
    pub to_step_type: String,
    /// The config of the step it leads to.
    pub to_step_config: Json<Value>,
}

/// An execution as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct ExecutionRecord {
    pub id: String,
    pub workflow_id: String,
    pub contact_id: String,
    pub status: String,
    pub trigger_event_id: Option<String>,
    pub trigger: Option<Json<Value>>,
    pub context: Json<Map<String, Value>>,
    pub current_step_id: Option<String>,
    pub waiting_event: Option<String>,
    pub error: Option<String>,
    pub exit_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

pub(super) const EXECUTION_COLUMNS: &str = "id, workflow_id, contact_id, status, trigger_event_id, trigger, context, \
     current_step_id, waiting_event, error, exit_reason, created_at, updated_at, finished_at";

/// A step run as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct StepRunRecord {
    pub id: String,
    pub step_id: String,
    pub step_type: String,
    pub status: String,
    pub branch: Option<String>,
    pub input: Option<Json<Value>>,
    pub output: Option<Json<Value>>,
    pub error: Option<String>,
    pub attempts: i32,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Ids that one look-up of [`Store::start_executions`] names.
pub(super) const LOOKUP_CHUNK: usize = 500;

/// Executions that one insert of [`Store::start_executions`] writes (8 values each).
pub(super) const INSERT_CHUNK: usize = 200;

pub(super) const RUN_COLUMNS: &str = "id, step_id, step_type, status, branch, input, output, error, attempts, \
     created_at, started_at, finished_at";

/// An event name of a contact: the name, how many times, the last time (unix ms).
pub type EventCount = (String, i64, i64);

/// A `PLUGIN` step of any project's workflow, with the plugin it names.
#[derive(Clone, Debug, FromRow, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStep {
    pub project_id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub enabled: bool,
    pub step_id: String,
    /// `config.plugin`; `None` when the config names none.
    pub plugin: Option<String>,
}

/// An active execution with its workflow's name.
#[derive(Clone, Debug, FromRow)]
pub struct ActiveExecution {
    pub id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub contact_id: String,
    pub status: String,
    pub current_step_id: Option<String>,
    pub waiting_event: Option<String>,
    pub created_at: i64,
}

/// Everything a step job reads about its step run before running it.
#[derive(Clone, Debug, FromRow)]
pub struct RunContext {
    pub run_id: String,
    pub run_status: String,
    pub step_id: String,
    pub execution_id: String,
    pub project_id: String,
    pub workflow_id: String,
    pub contact_id: String,
    pub execution_status: String,
    pub trigger: Option<Json<Value>>,
    pub context: Json<Map<String, Value>>,
    /// The step's type and config; `None` when the step was deleted since.
    pub step_type: Option<String>,
    pub config: Option<Json<Value>>,
}

/// A step run to create, with the job that runs it.
#[derive(Clone, Debug)]
pub struct NextRun {
    pub run_id: StepRunId,
    pub step_id: String,
    pub step_type: String,
    /// The job (kind `workflow.step`).
    pub job: NewJob,
}

pub(super) fn is_final(status: &str) -> bool {
    !es::ACTIVE.contains(&status)
}
