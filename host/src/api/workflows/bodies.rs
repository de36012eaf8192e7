//! The workflows, steps and transitions of `/workflows` as answered, and the answers of the
//! endpoints that create and delete them.

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object};
use serde::Deserialize;
use serde_json::Value;

use crate::api::timestamp::Timestamp;
use crate::domain::workflow::{StepPosition, StepType};
use crate::store::workflows::{Step, Transition, Workflow, WorkflowGraph};

/// What starts a workflow.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum TriggerKind {
    /// An event of `triggerConfig.eventName` recorded for a contact.
    Event,
}

/// The trigger of a workflow.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct TriggerConfig {
    /// The event name that starts an execution: the rules of `/v1/track` event names; names
    /// the service emits (`contact.subscribed`, `segment.<slug>.entry`, …) are allowed.
    pub event_name: String,
}

/// A workflow.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct WorkflowBody {
    /// Its id (`wfl_…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it is for; null when none.
    #[oai(nullable)]
    pub description: Option<String>,
    /// Always `EVENT`.
    pub trigger_type: TriggerKind,
    /// The trigger event.
    pub trigger_config: TriggerConfig,
    /// Whether events of the trigger start executions.
    pub enabled: bool,
    /// Whether a contact may enter again once its previous execution is no longer active.
    pub allow_reentry: bool,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it or its graph last changed.
    pub updated_at: Timestamp,
}

impl From<Workflow> for WorkflowBody {
    fn from(w: Workflow) -> WorkflowBody {
        WorkflowBody {
            id: w.id.into_string(),
            name: w.name,
            description: w.description,
            trigger_type: TriggerKind::Event,
            trigger_config: TriggerConfig {
                event_name: w.trigger_event,
            },
            enabled: w.enabled,
            allow_reentry: w.allow_reentry,
            created_at: Timestamp::from_ms(w.created_at),
            updated_at: Timestamp::from_ms(w.updated_at),
        }
    }
}

/// What a step does.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepKind {
    /// Sends a template (`config: { templateId, to?, topicId? }`; `topicId` makes the mail about
    /// that topic, in place of the template's).
    SendEmail,
    /// Waits (`config: { amount, unit: minutes|hours|days }`).
    Delay,
    /// Waits for an event, branches `event` and `timeout` (`config: { eventName, timeoutSeconds? }`).
    WaitForEvent,
    /// Tests a filter, branches `yes` and `no` (`config: { filter }`).
    Condition,
    /// Calls a URL (`config: { url, method?, headers?, body? }`).
    Webhook,
    /// Changes the contact (`config: { data?, subscribed? }`).
    UpdateContact,
    /// Ends the execution (`config: { reason? }`).
    Exit,
    /// Runs the step plugin named by `config.plugin`.
    Plugin,
}

impl From<StepType> for StepKind {
    fn from(t: StepType) -> StepKind {
        match t {
            StepType::SendEmail => StepKind::SendEmail,
            StepType::Delay => StepKind::Delay,
            StepType::WaitForEvent => StepKind::WaitForEvent,
            StepType::Condition => StepKind::Condition,
            StepType::Webhook => StepKind::Webhook,
            StepType::UpdateContact => StepKind::UpdateContact,
            StepType::Exit => StepKind::Exit,
            StepType::Plugin => StepKind::Plugin,
        }
    }
}

/// Where a step is drawn on the canvas: the dashboard's coordinates, not read by executions.
#[derive(Object, Deserialize, Clone, Copy, Debug)]
#[oai(rename_all = "camelCase")]
pub struct PositionBody {
    /// Across, -1,000,000 to 1,000,000.
    pub x: f64,
    /// Down, -1,000,000 to 1,000,000.
    pub y: f64,
}

impl From<StepPosition> for PositionBody {
    fn from(p: StepPosition) -> PositionBody {
        PositionBody { x: p.x, y: p.y }
    }
}

/// A step of a workflow.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct StepBody {
    /// Its id (`stp_…`).
    pub id: String,
    /// Its workflow.
    pub workflow_id: String,
    /// What it does.
    #[oai(rename = "type")]
    pub step_type: StepKind,
    /// Its name; null when none.
    #[oai(nullable)]
    pub name: Option<String>,
    /// Its configuration, as its step plugin reads it.
    pub config: Value,
    /// Where it is drawn on the canvas; null until placed.
    #[oai(nullable)]
    pub position: Option<PositionBody>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl From<Step> for StepBody {
    fn from(s: Step) -> StepBody {
        StepBody {
            id: s.id.into_string(),
            workflow_id: s.workflow_id.into_string(),
            step_type: s.step_type.into(),
            name: s.name,
            config: s.config,
            position: s.position.map(Into::into),
            created_at: Timestamp::from_ms(s.created_at),
            updated_at: Timestamp::from_ms(s.updated_at),
        }
    }
}

/// A transition from one step to the next.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TransitionBody {
    /// Its id (`trn_…`).
    pub id: String,
    /// Its workflow.
    pub workflow_id: String,
    /// The step it leaves.
    pub from_step_id: String,
    /// The step it leads to.
    pub to_step_id: String,
    /// `yes`/`no` out of a `CONDITION` step, `event`/`timeout` out of a `WAIT_FOR_EVENT` step;
    /// null for the one plain transition of any other step.
    #[oai(nullable)]
    pub branch: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
}

impl From<Transition> for TransitionBody {
    fn from(t: Transition) -> TransitionBody {
        TransitionBody {
            id: t.id.into_string(),
            workflow_id: t.workflow_id.into_string(),
            from_step_id: t.from_step_id.into_string(),
            to_step_id: t.to_step_id.into_string(),
            branch: t.branch,
            created_at: Timestamp::from_ms(t.created_at),
        }
    }
}

/// A workflow with its graph.
#[derive(Object)]
pub struct WorkflowDetail {
    /// The workflow.
    #[oai(flatten)]
    pub workflow: WorkflowBody,
    /// Its steps, in creation order.
    pub steps: Vec<StepBody>,
    /// Its transitions, in creation order.
    pub transitions: Vec<TransitionBody>,
}

impl From<WorkflowGraph> for WorkflowDetail {
    fn from(g: WorkflowGraph) -> WorkflowDetail {
        WorkflowDetail {
            workflow: g.workflow.into(),
            steps: g.steps.into_iter().map(Into::into).collect(),
            transitions: g.transitions.into_iter().map(Into::into).collect(),
        }
    }
}

/// One page of workflows.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct WorkflowPage {
    /// Workflows, newest first.
    pub data: Vec<WorkflowBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Workflows in all (first page only; 0 on later pages).
    pub total: i64,
}

/// A field a `CONDITION` filter may use.
#[derive(Object)]
pub struct ConditionField {
    /// The field as a filter names it: `email`, `data.plan`, `event.data.amount`.
    pub field: String,
    /// Its type: `string`, `number`, `boolean`, `date`, `array`, `object` (or `null` for an
    /// event key only ever seen null).
    #[oai(rename = "type")]
    pub field_type: String,
}

/// The fields a `CONDITION` filter may use.
#[derive(Object)]
pub struct WorkflowFields {
    /// The contact's own fields.
    pub contact: Vec<ConditionField>,
    /// The project's custom data fields (`data.<key>`) with their recorded types.
    pub data: Vec<ConditionField>,
    /// The data keys (`event.data.<key>`) of the latest events of the trigger name.
    pub event: Vec<ConditionField>,
}

/// Answer of `POST /workflows`.
#[derive(ApiResponse)]
pub enum CreatedWorkflow {
    /// Created, disabled.
    #[oai(status = 201)]
    Created(Json<WorkflowBody>),
}

/// Answer of `POST /workflows/:id/steps`.
#[derive(ApiResponse)]
pub enum CreatedStep {
    /// Added.
    #[oai(status = 201)]
    Created(Json<StepBody>),
}

/// Answer of `POST /workflows/:id/transitions`.
#[derive(ApiResponse)]
pub enum CreatedTransition {
    /// Added.
    #[oai(status = 201)]
    Created(Json<TransitionBody>),
}

/// Answer of the deletes.
#[derive(ApiResponse)]
pub enum Deleted {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}
