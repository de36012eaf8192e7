//! `/workflows/:id/executions`: one contact's way through a workflow. Started by the workflow's
//! trigger event or by hand; listed, read with their step runs, and cancelled.

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use super::timestamp::Timestamp;
use super::workflows::workflow_id;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, ExecutionId, ProjectId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::workflow::{MAX_CONFIG_BYTES, execution_status};
use crate::engine::workflows::StartError;
use crate::store::StoreError;
use crate::store::executions::{ExecutionRecord, NotStarted, StepRunRecord};

/// The status of an execution.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum ExecutionStatus {
    /// A step is due or running.
    Running,
    /// Waiting for a delay or an event.
    Waiting,
    /// Ran out of steps.
    Completed,
    /// Ended by an `EXIT` step.
    Exited,
    /// A step failed for good; `error` says why.
    Failed,
    /// Cancelled through the API.
    Cancelled,
}

impl ExecutionStatus {
    fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Running => execution_status::RUNNING,
            ExecutionStatus::Waiting => execution_status::WAITING,
            ExecutionStatus::Completed => execution_status::COMPLETED,
            ExecutionStatus::Exited => execution_status::EXITED,
            ExecutionStatus::Failed => execution_status::FAILED,
            ExecutionStatus::Cancelled => execution_status::CANCELLED,
        }
    }

    fn parse(s: &str) -> ExecutionStatus {
        [
            ExecutionStatus::Running,
            ExecutionStatus::Waiting,
            ExecutionStatus::Completed,
            ExecutionStatus::Exited,
            ExecutionStatus::Failed,
            ExecutionStatus::Cancelled,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
        .unwrap_or(ExecutionStatus::Failed)
    }
}

/// The status of a step run.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum StepRunStatus {
    /// Due, not yet run, or waiting for a retry (`error` holds the last attempt's).
    Pending,
    /// Being run.
    Running,
    /// Waiting for an event.
    Waiting,
    /// Done.
    Completed,
    /// Failed for good.
    Failed,
    /// Never ran: the execution was cancelled first.
    Skipped,
}

impl StepRunStatus {
    fn parse(s: &str) -> StepRunStatus {
        match s {
            "PENDING" => StepRunStatus::Pending,
            "RUNNING" => StepRunStatus::Running,
            "WAITING" => StepRunStatus::Waiting,
            "COMPLETED" => StepRunStatus::Completed,
            "SKIPPED" => StepRunStatus::Skipped,
            _ => StepRunStatus::Failed,
        }
    }
}

/// One run of a step.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct StepRunBody {
    /// Its id (`run_…`).
    pub id: String,
    /// The step it ran (`stp_…`).
    pub step_id: String,
    /// The step's type when it ran.
    pub step_type: String,
    pub status: StepRunStatus,
    /// The branch it continued along (`yes`/`no`, `event`/`timeout`); null for a plain one.
    #[oai(nullable)]
    pub branch: Option<String>,
    /// A summary of what the step was given: its config, the contact's id, the trigger event's
    /// name and the context; null before it ran.
    #[oai(nullable)]
    pub input: Option<Value>,
    /// What it decided (`outcome`) and what its effects did (`effects`: the email queued, the
    /// contact updated, …); null before it ran. A `SEND_EMAIL` effect is `{ type, emailId, to,
    /// suppressed }`, with `reason` when `suppressed` is true (the email is recorded but never
    /// sent): `HARD_BOUNCE`, `COMPLAINT` or `MANUAL` (the recipient is on the project's
    /// suppression list), or `UNSUBSCRIBED` (marketing mail to an unsubscribed contact).
    #[oai(nullable)]
    pub output: Option<Value>,
    /// Why it failed (or why its last attempt failed, while it is retried); null otherwise.
    #[oai(nullable)]
    pub error: Option<String>,
    /// Attempts so far.
    pub attempts: i32,
    pub created_at: Timestamp,
    /// When its last attempt started; null before it ran.
    #[oai(nullable)]
    pub started_at: Option<Timestamp>,
    /// When it finished; null while pending or waiting.
    #[oai(nullable)]
    pub finished_at: Option<Timestamp>,
}

impl From<StepRunRecord> for StepRunBody {
    fn from(r: StepRunRecord) -> StepRunBody {
        StepRunBody {
            id: r.id,
            step_id: r.step_id,
            step_type: r.step_type,
            status: StepRunStatus::parse(&r.status),
            branch: r.branch,
            input: r.input.map(|j| j.0),
            output: r.output.map(|j| j.0),
            error: r.error,
            attempts: r.attempts,
            created_at: Timestamp(r.created_at),
            started_at: r.started_at.map(Timestamp),
            finished_at: r.finished_at.map(Timestamp),
        }
    }
}

/// An execution.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ExecutionBody {
    /// Its id (`exe_…`).
    pub id: String,
    pub workflow_id: String,
    /// The contact it runs for.
    pub contact_id: String,
    pub status: ExecutionStatus,
    /// The event that started it; null for a manual start.
    #[oai(nullable)]
    pub trigger_event_id: Option<String>,
    /// Per-execution values (set at a manual start and by steps, e.g. a webhook's answer).
    pub context: BTreeMap<String, Value>,
    /// The step it is at or due to run next; null once it ended.
    #[oai(nullable)]
    pub current_step_id: Option<String>,
    /// The event it waits for; null unless it waits for one.
    #[oai(nullable)]
    pub waiting_for_event: Option<String>,
    /// Why it failed; null unless `FAILED`.
    #[oai(nullable)]
    pub error: Option<String>,
    /// The reason an `EXIT` step gave; null otherwise.
    #[oai(nullable)]
    pub exit_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When it ended; null while active.
    #[oai(nullable)]
    pub finished_at: Option<Timestamp>,
    /// Its step runs in order (only on `GET /workflows/:id/executions/:executionId`).
    #[oai(skip_serializing_if_is_none)]
    pub step_runs: Option<Vec<StepRunBody>>,
}

impl From<ExecutionRecord> for ExecutionBody {
    fn from(e: ExecutionRecord) -> ExecutionBody {
        let active = execution_status::ACTIVE.contains(&e.status.as_str());
        ExecutionBody {
            id: e.id,
            workflow_id: e.workflow_id,
            contact_id: e.contact_id,
            status: ExecutionStatus::parse(&e.status),
            trigger_event_id: e.trigger_event_id,
            context: e.context.0.into_iter().collect(),
            current_step_id: e.current_step_id.filter(|_| active),
            waiting_for_event: e.waiting_event,
            error: e.error,
            exit_reason: e.exit_reason,
            created_at: Timestamp(e.created_at),
            updated_at: Timestamp(e.updated_at),
            finished_at: e.finished_at.map(Timestamp),
            step_runs: None,
        }
    }
}

/// A page of executions.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ExecutionPage {
    pub data: Vec<ExecutionBody>,
    /// The cursor of the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    pub has_more: bool,
    /// Matching executions (first page only; 0 on later pages).
    pub total: i64,
}

impl From<Page<ExecutionRecord>> for ExecutionPage {
    fn from(page: Page<ExecutionRecord>) -> ExecutionPage {
        ExecutionPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }
    }
}

/// A manual start.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct StartExecution {
    /// The contact (`cnt_…`); or give `email`.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// The contact's address; or give `contactId`.
    #[oai(nullable)]
    pub email: Option<String>,
    /// Per-execution values the steps see (`context.<key>` in conditions, template
    /// variables in sends); a JSON object of at most 64 KB.
    #[oai(nullable)]
    pub context: Option<BTreeMap<String, Value>>,
}

/// How many executions were cancelled.
#[derive(Object)]
pub struct CancelledExecutions {
    /// Active executions now cancelled.
    pub cancelled: u64,
}

/// Answer of a manual start.
#[derive(ApiResponse)]
pub enum StartedExecution {
    /// Started: the entry step is due now.
    #[oai(status = 201)]
    Started(Json<ExecutionBody>),
}

fn execution_id(id: &str) -> Result<ExecutionId, ApiError> {
    ExecutionId::parse(id).ok_or_else(|| ApiError::not_found("execution"))
}

/// The contact a start names, of this project.
async fn contact_of(
    state: &AppState,
    project: &ProjectId,
    req: &StartExecution,
) -> Result<ContactId, ApiError> {
    match (&req.contact_id, &req.email) {
        (Some(_), Some(_)) => Err(ApiError::invalid_field(
            "contactId",
            "ambiguous",
            "give either `contactId` or `email`, not both",
        )),
        (None, None) => Err(ApiError::invalid_field(
            "contactId",
            "required",
            "name the contact with `contactId` or `email`",
        )),
        (Some(id), None) => {
            let id = ContactId::parse(id).ok_or_else(|| ApiError::not_found("contact"))?;
            state
                .store()
                .contact(project, &id)
                .await
                .map_err(|e| ApiError::from_store(e, "contact"))?;
            Ok(id)
        }
        (None, Some(email)) => {
            let address = EmailAddress::parse(email)
                .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
            let found = state
                .store()
                .contacts_by_emails(project, std::slice::from_ref(&address))
                .await?;
            found
                .into_iter()
                .find_map(|(id, _)| ContactId::parse(&id))
                .ok_or_else(|| ApiError::not_found("contact"))
        }
    }
}

/// The executions endpoints.
#[derive(Default)]
pub struct ExecutionsApi;

#[OpenApi(tag = "ApiTags::Workflows")]
impl ExecutionsApi {
    /// Start an execution
    ///
    /// Starts the workflow for one contact now, at its entry step, with an optional `context`.
    /// The workflow's graph must be valid (422 listing its problems otherwise); it need not be
    /// enabled. The re-entry rules apply as for triggered starts: 409 while the contact has an
    /// active execution of it, or when it went through it before and `allowReentry` is false.
    #[oai(
        path = "/workflows/:id/executions",
        method = "post",
        operation_id = "startExecution"
    )]
    async fn start(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow (`wfl_…`).
        id: Path<String>,
        body: JsonBody<StartExecution>,
    ) -> Result<StartedExecution, ApiError> {
        let project = auth.0.project_id();
        let workflow = workflow_id(&id)?;
        let graph = state
            .store()
            .workflow_graph(project, &workflow)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        let req = body.0;
        let context: Map<String, Value> = req
            .context
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let size = serde_json::to_vec(&context).map_or(0, |v| v.len());
        if size > MAX_CONFIG_BYTES {
            return Err(ApiError::invalid_field(
                "context",
                "too_large",
                format!("the context is {size} bytes; it may be at most {MAX_CONFIG_BYTES}"),
            ));
        }
        let contact = contact_of(&state, project, &req).await?;
        match state
            .workflows()
            .start(&graph, &contact, None, &context)
            .await
        {
            Ok(started) => Ok(StartedExecution::Started(Json(started.into()))),
            Err(StartError::InvalidGraph(problems)) => {
                // A workflow deleted while its graph was read shows fewer steps (or none): what
                // the caller needs to hear is that it is gone.
                if let Err(StoreError::NotFound) = state.store().workflow(project, &workflow).await
                {
                    return Err(ApiError::not_found("workflow"));
                }
                Err(ApiError::validation(
                    problems
                        .into_iter()
                        .map(|v| FieldError::new(v.field, v.code, v.message))
                        .collect(),
                )
                .suggest("fix the workflow's steps and transitions, then start it again"))
            }
            Err(StartError::Refused(NotStarted::AlreadyEntered)) => Err(ApiError::conflict(
                "the contact went through this workflow before and it does not allow re-entry; \
                 set `allowReentry: true` with PATCH /workflows/:id to let contacts enter again",
            )),
            Err(StartError::Refused(NotStarted::WorkflowGone)) => {
                Err(ApiError::not_found("workflow"))
            }
            Err(StartError::Refused(NotStarted::ContactGone)) => {
                Err(ApiError::not_found("contact"))
            }
            Err(StartError::Refused(_)) => Err(ApiError::conflict(
                "the contact has an active execution of this workflow; cancel it or wait until it ends",
            )),
            Err(StartError::Store(e)) => Err(e.into()),
        }
    }

    /// List executions
    ///
    /// Cursor-paginated, newest first, optionally of some statuses (`status` may repeat).
    #[oai(
        path = "/workflows/:id/executions",
        method = "get",
        operation_id = "listExecutions"
    )]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow (`wfl_…`).
        id: Path<String>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Only executions with these statuses.
        status: Query<Vec<ExecutionStatus>>,
    ) -> Result<Json<ExecutionPage>, ApiError> {
        let project = auth.0.project_id();
        let workflow = workflow_id(&id)?;
        state
            .store()
            .workflow(project, &workflow)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            ExecutionId::parse(id).is_some()
        })?;
        let mut statuses: Vec<&str> = status.0.iter().map(|s| s.as_str()).collect();
        statuses.dedup();
        let page = state
            .store()
            .list_executions(project, &workflow, &statuses, &page)
            .await?;
        Ok(Json(page.into()))
    }

    /// Get an execution
    ///
    /// With its step runs in order: status, input summary, output, error and timings.
    #[oai(
        path = "/workflows/:id/executions/:executionId",
        method = "get",
        operation_id = "getExecution"
    )]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow (`wfl_…`).
        id: Path<String>,
        /// The execution (`exe_…`).
        #[oai(name = "executionId")]
        execution: Path<String>,
    ) -> Result<Json<ExecutionBody>, ApiError> {
        let project = auth.0.project_id();
        let execution = execution_id(&execution)?;
        let record = state
            .store()
            .execution(project, &workflow_id(&id)?, &execution)
            .await
            .map_err(|e| ApiError::from_store(e, "execution"))?;
        let runs = state.store().step_runs(&execution).await?;
        let mut body = ExecutionBody::from(record);
        body.step_runs = Some(runs.into_iter().map(Into::into).collect());
        Ok(Json(body))
    }

    /// Cancel an execution
    ///
    /// Cancels a running or waiting execution: its pending step runs are skipped and nothing
    /// more runs. Email already queued by an earlier step still goes. 409 when it already
    /// ended.
    #[oai(
        path = "/workflows/:id/executions/:executionId",
        method = "delete",
        operation_id = "cancelExecution"
    )]
    async fn cancel(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow (`wfl_…`).
        id: Path<String>,
        /// The execution (`exe_…`).
        #[oai(name = "executionId")]
        execution: Path<String>,
    ) -> Result<Json<ExecutionBody>, ApiError> {
        let project = auth.0.project_id();
        match state
            .store()
            .cancel_execution(project, &workflow_id(&id)?, &execution_id(&execution)?)
            .await
        {
            Ok(Some(cancelled)) => Ok(Json(cancelled.into())),
            Ok(None) => Err(ApiError::conflict(
                "the execution already ended; only RUNNING or WAITING executions can be cancelled",
            )),
            Err(StoreError::NotFound) => Err(ApiError::not_found("execution")),
            Err(e) => Err(e.into()),
        }
    }

    /// Cancel all executions
    ///
    /// Cancels every running or waiting execution of the workflow; answers how many.
    #[oai(
        path = "/workflows/:id/executions/cancel-all",
        method = "post",
        operation_id = "cancelAllExecutions"
    )]
    async fn cancel_all(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The workflow (`wfl_…`).
        id: Path<String>,
    ) -> Result<Json<CancelledExecutions>, ApiError> {
        let project = auth.0.project_id();
        let workflow = workflow_id(&id)?;
        state
            .store()
            .workflow(project, &workflow)
            .await
            .map_err(|e| ApiError::from_store(e, "workflow"))?;
        let cancelled = state
            .store()
            .cancel_all_executions(project, &workflow)
            .await?;
        Ok(Json(CancelledExecutions { cancelled }))
    }
}
