//! `/workflows`: the definitions of workflows (a trigger event, steps and the transitions
//! between them) and the fields their conditions may use. Executions are in `executions.rs`.
//!
//! A workflow is created disabled and its graph is edited while it is disabled; enabling it
//! checks the whole graph ([`enable_problems`]) and answers every problem at once. The store
//! applies each edit in one transaction under a lock of the workflow, so the rules hold under
//! concurrent requests too.

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::ids::{ProjectId, StepId, TemplateId, TransitionId, WorkflowId};
use crate::domain::pagination::PageRequest;
use crate::domain::workflow::{
    CONTACT_FIELDS, MAX_STEPS, StepType, Violation, check_config, check_description, check_graph,
    check_name, check_step_type, check_trigger_event, check_trigger_type, event_data_fields,
    step_template_id,
};
use crate::services::sending_domains::SenderError;
use crate::store::StoreError;
use crate::store::workflows::{
    NewStep, NewWorkflow, Step, StepPatch, Transition, Workflow, WorkflowError, WorkflowGraph,
    WorkflowPatch,
};

/// How many of the latest events of the trigger name `GET /workflows/fields` reads for keys.
pub const FIELD_SAMPLE_EVENTS: u32 = 200;

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
    /// Sends a template (`config: { templateId, to? }`).
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

/// `POST /workflows` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateWorkflow {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    pub description: Option<String>,
    /// The trigger: `{ eventName }` (or send `eventName` at the top level).
    #[oai(nullable)]
    pub trigger_config: Option<TriggerConfig>,
    /// The trigger event name, as an alternative to `triggerConfig.eventName`.
    #[oai(nullable)]
    pub event_name: Option<String>,
    /// Let a contact enter again once its previous execution is over (default false).
    #[oai(nullable)]
    pub allow_reentry: Option<bool>,
}

/// `PATCH /workflows/:id` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateWorkflow {
    /// A new name.
    #[serde(default)]
    pub name: MaybeUndefined<String>,
    /// A new description, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    /// Only `EVENT`.
    #[serde(default)]
    pub trigger_type: MaybeUndefined<String>,
    /// A new trigger event.
    #[serde(default)]
    pub trigger_config: MaybeUndefined<TriggerConfig>,
    /// A new trigger event name (alternative to `triggerConfig.eventName`).
    #[serde(default)]
    pub event_name: MaybeUndefined<String>,
    /// `true` checks the whole workflow and enables it (422 listing every problem otherwise);
    /// `false` disables it.
    #[serde(default)]
    pub enabled: MaybeUndefined<bool>,
    /// Whether a contact may enter again once its previous execution is over.
    #[serde(default)]
    pub allow_reentry: MaybeUndefined<bool>,
}

/// `POST /workflows/:id/steps` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateStep {
    /// `SEND_EMAIL`, `DELAY`, `WAIT_FOR_EVENT`, `CONDITION`, `WEBHOOK`, `UPDATE_CONTACT`,
    /// `EXIT` or `PLUGIN` (any case).
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub step_type: String,
    /// 1 to 200 characters.
    #[oai(nullable)]
    pub name: Option<String>,
    /// The step's configuration (a JSON object of at most 64 KB; default `{}`), checked by its
    /// step plugin.
    #[oai(nullable)]
    pub config: Option<Value>,
}

/// `PATCH /workflows/:id/steps/:stepId` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateStep {
    /// A new name, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub name: MaybeUndefined<String>,
    /// A new configuration, checked by the step's plugin (and, while the workflow is enabled,
    /// as enabling checks it).
    #[serde(default)]
    pub config: MaybeUndefined<Value>,
}

/// `POST /workflows/:id/transitions` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateTransition {
    /// The step it leaves (of this workflow).
    pub from_step_id: String,
    /// The step it leads to (of this workflow).
    pub to_step_id: String,
    /// Required out of `CONDITION` (`yes`/`no`) and `WAIT_FOR_EVENT` (`event`/`timeout`)
    /// steps, refused out of the others.
    #[oai(nullable)]
    pub branch: Option<String>,
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

/// A workflow id from a path: malformed ids are 404 like unknown ones.
pub(super) fn workflow_id(id: &str) -> Result<WorkflowId, ApiError> {
    WorkflowId::parse(id).ok_or_else(|| ApiError::not_found("workflow"))
}

fn step_id(id: &str) -> Result<StepId, ApiError> {
    StepId::parse(id).ok_or_else(|| ApiError::not_found("step"))
}

fn transition_id(id: &str) -> Result<TransitionId, ApiError> {
    TransitionId::parse(id).ok_or_else(|| ApiError::not_found("transition"))
}

/// The broken rules of a request, gathered so that one answer names them all.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    /// Keeps the value of a passed rule, or records the broken one.
    fn check<T>(&mut self, result: Result<T, Violation>) -> Option<T> {
        result.map_err(|v| self.0.push(v.into())).ok()
    }

    /// A field that may be left out of a change but not set to null.
    fn not_null<T>(&mut self, field: &str, value: MaybeUndefined<T>) -> Option<T> {
        match value {
            MaybeUndefined::Value(v) => Some(v),
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => {
                self.0.push(FieldError::new(
                    field,
                    "required",
                    format!("`{field}` cannot be removed; send a new value or leave it out"),
                ));
                None
            }
        }
    }

    fn done(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.0))
        }
    }
}

/// The trigger event of a request from `triggerConfig.eventName` or the top-level
/// `eventName` (the same name if both are sent); `None` when neither is.
fn trigger_event(
    config: Option<TriggerConfig>,
    top: Option<String>,
) -> Result<Option<String>, Violation> {
    match (config.map(|c| c.event_name), top) {
        (Some(a), Some(b)) if a.trim() != b.trim() => Err(Violation::new(
            "eventName",
            "conflict",
            "`eventName` and `triggerConfig.eventName` differ; send one of them",
        )),
        (Some(a), _) => check_trigger_event("triggerConfig.eventName", &a).map(Some),
        (None, Some(b)) => check_trigger_event("eventName", &b).map(Some),
        (None, None) => Ok(None),
    }
}

/// A refused change of a workflow as the client sees it.
fn refused(err: WorkflowError) -> ApiError {
    match err {
        WorkflowError::NotFound(what) => ApiError::not_found(what),
        WorkflowError::Enabled => {
            ApiError::conflict("disable the workflow before changing its graph").suggest(
                "PATCH /workflows/:id with {\"enabled\": false}, change the steps or \
                 transitions, then enable it again",
            )
        }
        WorkflowError::Invalid(violations) => {
            ApiError::validation(violations.into_iter().map(Into::into).collect())
        }
        WorkflowError::Active(n) => ApiError::conflict(format!(
            "the workflow has {n} active execution(s) (RUNNING or WAITING); it can be deleted \
             once they are cancelled or finished"
        ))
        .suggest("cancel them with POST /workflows/:id/executions/cancel-all"),
        WorkflowError::TooManySteps => ApiError::conflict(format!(
            "the workflow already has {MAX_STEPS} steps, the most one may have"
        ))
        .suggest("delete steps it no longer needs, or split it into several workflows"),
        WorkflowError::Changed => ApiError::conflict(
            "the workflow changed while this request was checking it; nothing was written",
        )
        .suggest("send the request again"),
        WorkflowError::Store(e) => ApiError::from_store(e, "workflow"),
    }
}

/// The field of a step plugin's error: `<prefix>config.<path>` (`<prefix>config` for the
/// whole config).
fn config_field(prefix: &str, field: &str) -> String {
    match field.strip_prefix("config").unwrap_or(field) {
        "" => format!("{prefix}config"),
        rest if rest.starts_with('.') => format!("{prefix}config{rest}"),
        rest => format!("{prefix}config.{rest}"),
    }
}

/// The problems of one step's config (fields prefixed by `prefix`): what its step plugin's
/// `validate` reports and, with `deep` (enabling, or changing an enabled workflow), that a
/// `SEND_EMAIL` step's template is one of the project's with a sender it may use. A `PLUGIN`
/// step whose plugin is not loaded is reported at `config.plugin` by the validation itself.
async fn step_problems(
    state: &AppState,
    project: &ProjectId,
    step_type: StepType,
    config: &Value,
    prefix: &str,
    deep: bool,
) -> Result<Vec<FieldError>, ApiError> {
    let errors = state
        .plugins()
        .validate_step(step_type.as_str(), config)
        .await?;
    let mut problems: Vec<FieldError> = errors
        .into_iter()
        .map(|e| FieldError::new(config_field(prefix, &e.field), "invalid", e.message))
        .collect();
    if deep
        && problems.is_empty()
        && let Some(template) = step_template_id(step_type, config)
        && let Some((code, message)) = template_problem(state, project, template).await?
    {
        problems.push(FieldError::new(
            format!("{prefix}config.templateId"),
            code,
            message,
        ));
    }
    Ok(problems)
}

/// Why the template a `SEND_EMAIL` step names cannot be sent by it, if it cannot: not a
/// template of the project, no `from`, or a `from` the sender rule refuses (with
/// `domains.allow_unverified` any address is allowed, as for `/v1/send`).
async fn template_problem(
    state: &AppState,
    project: &ProjectId,
    template: &str,
) -> Result<Option<(&'static str, String)>, ApiError> {
    let missing = || {
        Some((
            "not_found",
            format!("`{template}` is not a template of this project"),
        ))
    };
    let Some(id) = TemplateId::parse(template) else {
        return Ok(missing());
    };
    let found = match state.store().template(project, &id).await {
        Ok(t) => t,
        Err(StoreError::NotFound) => return Ok(missing()),
        Err(e) => return Err(e.into()),
    };
    let Some(from) = found.fields.from_email else {
        return Ok(Some((
            "no_sender",
            format!(
                "template {template} has no `from` address; set one with PATCH /templates/{template}"
            ),
        )));
    };
    match state
        .sending_domains()
        .authorize_sender(project, &from)
        .await
    {
        Ok(_) => Ok(None),
        Err(SenderError::NotVerified(domain)) => Ok(Some((
            "domain_not_verified",
            format!(
                "template {template} sends from {from}, but the domain {domain} is not verified \
                 for this project"
            ),
        ))),
        Err(SenderError::Store(e)) => Err(e.into()),
    }
}

/// Every reason the workflow cannot be enabled: the graph's problems ([`check_graph`]), then
/// each step's (`steps[<i>].config.<path>`, in creation order).
async fn enable_problems(
    state: &AppState,
    project: &ProjectId,
    graph: &WorkflowGraph,
) -> Result<Vec<FieldError>, ApiError> {
    let mut problems: Vec<FieldError> =
        check_graph(&graph.graph_steps(), &graph.graph_transitions())
            .into_iter()
            .map(Into::into)
            .collect();
    for (i, step) in graph.steps.iter().enumerate() {
        let prefix = format!("steps[{i}].");
        problems.extend(
            step_problems(state, project, step.step_type, &step.config, &prefix, true).await?,
        );
    }
    Ok(problems)
}

/// 422 for a config of a step that its checks refuse.
fn config_refused(problems: Vec<FieldError>) -> Result<(), ApiError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation(problems))
    }
}

/// The workflows endpoints.
#[derive(Default)]
pub struct WorkflowsApi;

#[OpenApi(tag = "ApiTags::Workflows")]
impl WorkflowsApi {
    /// List workflows
    ///
    /// Cursor-paginated, newest first.
    #[oai(path = "/workflows", method = "get", operation_id = "listWorkflows")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100 (default 20).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<WorkflowPage>, ApiError> {
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            WorkflowId::parse(id).is_some()
        })?;
        let page = state
            .store()
            .list_workflows(auth.0.project_id(), &page)
            .await?;
        Ok(Json(WorkflowPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Fields for conditions
    ///
    /// The fields a `CONDITION` step's filter may use: the contact's own (`email`,
    /// `subscribed`, `createdAt`, `updatedAt`), the project's custom data fields (`data.<key>`,
    /// with the type recorded when first seen) and, for the trigger event named by `eventName`
    /// or by the trigger of `workflowId` (send one of them, or neither), the data keys seen on
    /// its latest 200 events (`event.data.<key>`, with the JSON type of the newest non-null
    /// value).
    #[oai(
        path = "/workflows/fields",
        method = "get",
        operation_id = "workflowFields"
    )]
    async fn fields(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The trigger event whose data keys to list.
        #[oai(name = "eventName")]
        event_name: Query<Option<String>>,
        /// A workflow whose trigger event's data keys to list.
        #[oai(name = "workflowId")]
        workflow: Query<Option<String>>,
    ) -> Result<Json<WorkflowFields>, ApiError> {
        let project = auth.0.project_id();
        let event = match (event_name.0, workflow.0) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_field(
                    "eventName",
                    "conflict",
                    "send `eventName` or `workflowId`, not both",
                ));
            }
            (Some(name), None) => Some(
                check_trigger_event("eventName", &name)
                    .map_err(|v| ApiError::validation(vec![v.into()]))?,
            ),
            (None, Some(id)) => Some(
                state
                    .store()
                    .workflow(project, &workflow_id(&id)?)
                    .await
                    .map_err(|e| ApiError::from_store(e, "workflow"))?
                    .trigger_event,
            ),
            (None, None) => None,
        };
        let field = |(field, field_type): (String, &str)| ConditionField {
            field,
            field_type: field_type.to_string(),
        };
        let contact = CONTACT_FIELDS
            .iter()
            .map(|(f, t)| field((f.to_string(), *t)))
            .collect();
        let data = state
            .store()
            .custom_fields(project)
            .await?
            .into_iter()
            .map(|f| {
                let name = format!("data.{}", herald_filter::escape_key(&f.key));
                field((name, f.field_type.as_str()))
            })
            .collect();
        let event = match event {
            None => Vec::new(),
            Some(name) => {
                let recent = state
                    .store()
                    .recent_event_data(project, &name, FIELD_SAMPLE_EVENTS)
                    .await?;
                event_data_fields(&recent).into_iter().map(field).collect()
            }
        };
        Ok(Json(WorkflowFields {
            contact,
            data,
            event,
        }))
    }

    /// Create a workflow
    ///
    /// Always created disabled, with `triggerType: EVENT`. The trigger event is
    /// `triggerConfig.eventName` or `eventName` (one is required).
    #[oai(path = "/workflows", method = "post", operation_id = "createWorkflow")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateWorkflow>,
    ) -> Result<CreatedWorkflow, ApiError> {
        let req = body.0;
        let mut problems = Problems::default();
        let name = problems.check(check_name("name", &req.name));
        let description = req
            .description
            .map(|d| problems.check(check_description(&d)));
        let trigger = problems
            .check(trigger_event(req.trigger_config, req.event_name))
            .and_then(|t| {
                if t.is_none() {
                    problems.0.push(FieldError::new(
                        "triggerConfig.eventName",
                        "required",
                        "`triggerConfig.eventName` (or `eventName`) is required: the event that \
                         starts the workflow",
                    ));
                }
                t
            });
        problems.done()?;
        let (Some(name), Some(trigger_event)) = (name, trigger) else {
            return Err(ApiError::internal("a checked field has no value"));
        };
        let new = NewWorkflow {
            name,
            description: description.flatten().flatten(),
            trigger_event,
            allow_reentry: req.allow_reentry.unwrap_or(false),
        };
        let workflow = state
            .store()
            .insert_workflow(auth.0.project_id(), &new)
            .await?;
        Ok(CreatedWorkflow::Created(Json(workflow.into())))
    }

    /// Get a workflow
    ///
    /// The workflow with its steps and transitions, each in creation order.
    #[oai(path = "/workflows/:id", method = "get", operation_id = "getWorkflow")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
    ) -> Result<Json<WorkflowDetail>, ApiError> {
        let graph = state
            .store()
            .workflow_graph(auth.0.project_id(), &workflow_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        Ok(Json(graph.into()))
    }

    /// Update a workflow
    ///
    /// Changes only the fields sent. `enabled: true` first checks the whole workflow and
    /// answers 422 listing every problem in `errors`: the graph (exactly one entry step, each
    /// branch at most once and fitting its step, no cycle), each step's config as its plugin
    /// validates it (`steps[<i>].config.<path>`), each `SEND_EMAIL` template (of this project,
    /// with a `from` the project may send from) and each `PLUGIN` step's plugin (loaded).
    /// Enabling an enabled workflow changes nothing. Disabling stops new executions; running
    /// ones continue.
    #[oai(
        path = "/workflows/:id",
        method = "patch",
        operation_id = "updateWorkflow"
    )]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        body: JsonBody<UpdateWorkflow>,
    ) -> Result<Json<WorkflowBody>, ApiError> {
        let project = auth.0.project_id();
        let id = workflow_id(&id)?;
        let req = body.0;
        let mut problems = Problems::default();
        let name = problems
            .not_null("name", req.name)
            .and_then(|n| problems.check(check_name("name", &n)));
        let description = match req.description {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(d) => problems.check(check_description(&d)),
        };
        if let Some(t) = problems.not_null("triggerType", req.trigger_type) {
            problems.check(check_trigger_type(&t));
        }
        let trigger_config = problems.not_null("triggerConfig", req.trigger_config);
        let top_event = problems.not_null("eventName", req.event_name);
        let trigger = problems
            .check(trigger_event(trigger_config, top_event))
            .flatten();
        let enabled = problems.not_null("enabled", req.enabled);
        let allow_reentry = problems.not_null("allowReentry", req.allow_reentry);
        problems.done()?;

        let graph = state
            .store()
            .workflow_graph(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        let patch = WorkflowPatch {
            name,
            description,
            trigger_event: trigger,
            // Enabling an enabled workflow (or disabling a disabled one) is no change.
            enabled: enabled.filter(|e| *e != graph.workflow.enabled),
            allow_reentry,
        };
        if patch.is_empty() {
            return Ok(Json(graph.workflow.into()));
        }
        let checked = if patch.enabled == Some(true) {
            let problems = enable_problems(&state, project, &graph).await?;
            if !problems.is_empty() {
                let mut error = ApiError::validation(problems);
                error.message = format!(
                    "the workflow cannot be enabled: {} problem(s); see `errors`",
                    error.errors.len()
                );
                return Err(error.suggest("fix each problem, then enable the workflow again"));
            }
            Some(&graph)
        } else {
            None
        };
        let workflow = state
            .store()
            .update_workflow(project, &id, &patch, checked)
            .await
            .map_err(refused)?;
        Ok(Json(workflow.into()))
    }

    /// Delete a workflow
    ///
    /// Removes the workflow with its steps, transitions and finished executions. 409 while it
    /// has active (`RUNNING` or `WAITING`) executions: cancel them or let them finish first.
    #[oai(
        path = "/workflows/:id",
        method = "delete",
        operation_id = "deleteWorkflow"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
    ) -> Result<Deleted, ApiError> {
        state
            .store()
            .delete_workflow(auth.0.project_id(), &workflow_id(&id)?)
            .await
            .map_err(refused)?;
        Ok(Deleted::Deleted)
    }

    /// Add a step
    ///
    /// `type` is one of the step types (any case); `config` is checked by the step's plugin,
    /// each mistake answered as 422 at `config.<path>`. A `PLUGIN` step names its step plugin
    /// in `config.plugin`. At most 200 steps per workflow (409 beyond). A `SEND_EMAIL` step's
    /// template is checked when the workflow is enabled. 409 while the workflow is enabled.
    #[oai(
        path = "/workflows/:id/steps",
        method = "post",
        operation_id = "createWorkflowStep"
    )]
    async fn add_step(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        body: JsonBody<CreateStep>,
    ) -> Result<CreatedStep, ApiError> {
        let project = auth.0.project_id();
        let id = workflow_id(&id)?;
        let req = body.0;
        let mut problems = Problems::default();
        let step_type = problems.check(check_step_type(&req.step_type));
        let name = req.name.map(|n| problems.check(check_name("name", &n)));
        let config = req
            .config
            .unwrap_or_else(|| Value::Object(Default::default()));
        problems.check(check_config(&config));
        problems.done()?;
        let Some(step_type) = step_type else {
            return Err(ApiError::internal("a checked field has no value"));
        };
        let workflow = state
            .store()
            .workflow(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        if workflow.enabled {
            return Err(refused(WorkflowError::Enabled));
        }
        config_refused(step_problems(&state, project, step_type, &config, "", false).await?)?;
        let new = NewStep {
            step_type,
            name: name.flatten(),
            config,
        };
        let step = state
            .store()
            .insert_step(project, &id, &new)
            .await
            .map_err(refused)?;
        Ok(CreatedStep::Created(Json(step.into())))
    }

    /// Update a step
    ///
    /// Changes its `name` (null removes it) or `config` (checked by its plugin). Allowed while
    /// the workflow is enabled; the config is then also checked as enabling checks it, and
    /// executions use it from their next run of the step.
    #[oai(
        path = "/workflows/:id/steps/:stepId",
        method = "patch",
        operation_id = "updateWorkflowStep"
    )]
    async fn update_step(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        /// The step's id.
        #[oai(name = "stepId")]
        step: Path<String>,
        body: JsonBody<UpdateStep>,
    ) -> Result<Json<StepBody>, ApiError> {
        let project = auth.0.project_id();
        let id = workflow_id(&id)?;
        let step = step_id(&step)?;
        let req = body.0;
        let mut problems = Problems::default();
        let name = match req.name {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(n) => problems.check(check_name("name", &n)).map(Some),
        };
        let config = problems.not_null("config", req.config);
        if let Some(c) = &config {
            problems.check(check_config(c));
        }
        problems.done()?;
        let workflow = state
            .store()
            .workflow(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        let current = state
            .store()
            .step(project, &id, &step)
            .await
            .map_err(|e| ApiError::from_store(e, "step"))?;
        if let Some(config) = &config {
            let problems = step_problems(
                &state,
                project,
                current.step_type,
                config,
                "",
                workflow.enabled,
            )
            .await?;
            config_refused(problems)?;
        }
        let patch = StepPatch { name, config };
        let updated = state
            .store()
            .update_step(project, &id, &step, &patch, workflow.enabled)
            .await
            .map_err(refused)?;
        Ok(Json(updated.into()))
    }

    /// Delete a step
    ///
    /// Deletes the step and its transitions. With `splice=true` the graph is reconnected
    /// around it first: when it has one outgoing transition, each incoming transition is
    /// re-pointed to that transition's target (keeping its own branch); with no incoming or no
    /// outgoing transition there is nothing to join. A step with several outgoing transitions
    /// (the branches of a `CONDITION` or `WAIT_FOR_EVENT` step) that has incoming ones cannot
    /// be spliced: 422 at `splice`, and nothing is deleted. 409 while the workflow is enabled.
    #[oai(
        path = "/workflows/:id/steps/:stepId",
        method = "delete",
        operation_id = "deleteWorkflowStep"
    )]
    async fn delete_step(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        /// The step's id.
        #[oai(name = "stepId")]
        step: Path<String>,
        /// Reconnect the step's incoming transitions to its next step (default false).
        splice: Query<Option<bool>>,
    ) -> Result<Deleted, ApiError> {
        state
            .store()
            .delete_step(
                auth.0.project_id(),
                &workflow_id(&id)?,
                &step_id(&step)?,
                splice.0.unwrap_or(false),
            )
            .await
            .map_err(refused)?;
        Ok(Deleted::Deleted)
    }

    /// Add a transition
    ///
    /// Both steps must be steps of this workflow (422 at `fromStepId`/`toStepId` otherwise).
    /// `branch` is required out of `CONDITION` (`yes`/`no`) and `WAIT_FOR_EVENT`
    /// (`event`/`timeout`) steps and refused out of the others; each branch (or the one plain
    /// transition) of a step is taken once, no transition leaves an `EXIT` step and none may
    /// close a cycle: each is 422 with the field and what to do. 409 while the workflow is
    /// enabled.
    #[oai(
        path = "/workflows/:id/transitions",
        method = "post",
        operation_id = "createWorkflowTransition"
    )]
    async fn add_transition(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        body: JsonBody<CreateTransition>,
    ) -> Result<CreatedTransition, ApiError> {
        let req = body.0;
        let branch = req.branch.map(|b| b.trim().to_ascii_lowercase());
        let transition = state
            .store()
            .insert_transition(
                auth.0.project_id(),
                &workflow_id(&id)?,
                req.from_step_id.trim(),
                req.to_step_id.trim(),
                branch.as_deref(),
            )
            .await
            .map_err(refused)?;
        Ok(CreatedTransition::Created(Json(transition.into())))
    }

    /// Delete a transition
    ///
    /// 409 while the workflow is enabled.
    #[oai(
        path = "/workflows/:id/transitions/:transitionId",
        method = "delete",
        operation_id = "deleteWorkflowTransition"
    )]
    async fn delete_transition(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow's id.
        id: Path<String>,
        /// The transition's id.
        #[oai(name = "transitionId")]
        transition: Path<String>,
    ) -> Result<Deleted, ApiError> {
        state
            .store()
            .delete_transition(
                auth.0.project_id(),
                &workflow_id(&id)?,
                &transition_id(&transition)?,
            )
            .await
            .map_err(refused)?;
        Ok(Deleted::Deleted)
    }
}
