//! The rules a `/workflows` request is checked by: its fields, gathered so that one answer
//! names every problem ([`Problems`]), each step's config as its plugin and the project see it,
//! and the whole graph before enabling.

use poem_openapi::types::MaybeUndefined;
use serde_json::Value;

use super::TriggerConfig;
use crate::api::error::{ApiError, FieldError};
use crate::api::state::AppState;
use crate::domain::ids::{ProjectId, TemplateId, TopicId};
use crate::domain::workflow::{
    MAX_STEPS, StepType, Violation, check_graph, check_trigger_event, step_template_id,
    step_topic_id,
};
use crate::services::sending_domains::SenderError;
use crate::store::StoreError;
use crate::store::workflows::{WorkflowError, WorkflowGraph};

/// The broken rules of a request, gathered so that one answer names them all.
#[derive(Default)]
pub(super) struct Problems(pub(super) Vec<FieldError>);

impl Problems {
    /// Keeps the value of a passed rule, or records the broken one.
    pub(super) fn check<T>(&mut self, result: Result<T, Violation>) -> Option<T> {
        result.map_err(|v| self.0.push(v.into())).ok()
    }

    /// A field that may be left out of a change but not set to null.
    pub(super) fn not_null<T>(&mut self, field: &str, value: MaybeUndefined<T>) -> Option<T> {
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

    pub(super) fn done(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.0))
        }
    }
}

/// The trigger event of a request from `triggerConfig.eventName` or the top-level
/// `eventName` (the same name if both are sent); `None` when neither is.
pub(super) fn trigger_event(
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
pub(super) fn refused(err: WorkflowError) -> ApiError {
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
/// `SEND_EMAIL` step's template is one of the project's with a sender it may use, and its
/// `topicId`, when it names one, a topic of the project. A `PLUGIN`
/// step whose plugin is not loaded is reported at `config.plugin` by the validation itself.
pub(super) async fn step_problems(
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
    if deep
        && problems.is_empty()
        && let Some(topic) = step_topic_id(step_type, config)
        && !topic_exists(state, project, topic).await?
    {
        problems.push(FieldError::new(
            format!("{prefix}config.topicId"),
            "not_found",
            format!("`{topic}` is not a topic of this project; GET /topics lists them"),
        ));
    }
    Ok(problems)
}

/// Whether `topic` names a topic of the project.
async fn topic_exists(
    state: &AppState,
    project: &ProjectId,
    topic: &str,
) -> Result<bool, ApiError> {
    let Some(id) = TopicId::parse(topic) else {
        return Ok(false);
    };
    match state.store().topic(project, &id).await {
        Ok(_) => Ok(true),
        Err(StoreError::NotFound) => Ok(false),
        Err(e) => Err(e.into()),
    }
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
pub(super) async fn enable_problems(
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
pub(super) fn config_refused(problems: Vec<FieldError>) -> Result<(), ApiError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation(problems))
    }
}
