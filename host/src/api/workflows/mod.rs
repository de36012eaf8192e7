//! `/workflows`: the definitions of workflows (a trigger event, steps and the transitions
//! between them) and the fields their conditions may use. Executions are in `executions.rs`.
//!
//! A workflow is created disabled and its graph is edited while it is disabled; enabling it
//! checks the whole graph ([`enable_problems`]) and answers every problem at once. The store
//! applies each edit in one transaction under a lock of the workflow, so the rules hold under
//! concurrent requests too.
//!
//! - `bodies.rs`: the workflows, steps and transitions as answered, and the answers;
//! - `requests.rs`: the bodies of the requests that create and change them;
//! - `checks.rs`: the rules a request is checked by, gathered so one answer names every problem.

mod bodies;
mod checks;
mod requests;

use poem_openapi::OpenApi;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use serde_json::Value;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use crate::domain::ids::{StepId, TransitionId, WorkflowId};
use crate::domain::pagination::PageRequest;
use crate::domain::workflow::{
    CONTACT_FIELDS, check_config, check_description, check_name, check_position, check_step_type,
    check_trigger_event, check_trigger_type, event_data_fields,
};
use crate::store::workflows::{NewStep, NewWorkflow, StepPatch, WorkflowError, WorkflowPatch};
pub use bodies::{
    ConditionField, CreatedStep, CreatedTransition, CreatedWorkflow, Deleted, StepBody, StepKind,
    TransitionBody, TriggerConfig, TriggerKind, WorkflowBody, WorkflowDetail, WorkflowFields,
    WorkflowPage,
};
use checks::{Problems, config_refused, enable_problems, refused, step_problems, trigger_event};
pub use requests::{CreateStep, CreateTransition, CreateWorkflow, UpdateStep, UpdateWorkflow};

/// How many of the latest events of the trigger name `GET /workflows/fields` reads for keys.
pub const FIELD_SAMPLE_EVENTS: u32 = 200;

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
        let position = req
            .position
            .and_then(|p| problems.check(check_position(p.x, p.y)));
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
            position,
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
    /// Changes its `name` (null removes it), `config` (checked by its plugin) or `position` on
    /// the canvas (null removes it). Allowed while the workflow is enabled; the config is then
    /// also checked as enabling checks it, and executions use it from their next run of the
    /// step.
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
        let position = match req.position {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(p) => problems.check(check_position(p.x, p.y)).map(Some),
        };
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
        let patch = StepPatch {
            name,
            config,
            position,
        };
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
