//! Workflow definitions: the `workflows` rows, their steps and the transitions between them
//! (executions and step runs are the engine's, in `executions.rs`).
//!
//! Every change of a graph (a step or transition added or deleted, a step changed, the
//! workflow enabled or deleted) is one write transaction that first locks the workflow row
//! (`FOR UPDATE` on PostgreSQL; SQLite's `BEGIN IMMEDIATE` excludes every other writer), then
//! reads what it judges inside that transaction. So two concurrent edits cannot together close a
//! cycle or take one branch twice, no edit slips in between the checks of an enable and the
//! enable itself, and a delete sees every execution the engine committed before it.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::{BeginWrite, for_update, placeholders};
use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{ProjectId, StepId, TransitionId, WorkflowId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;
use crate::domain::workflow::{
    GraphStep, GraphTransition, MAX_STEPS, StepPosition, StepType, Violation, check_new_transition,
    execution_status, splice,
};

const WORKFLOW_COLUMNS: &str = "id, project_id, name, description, trigger_type, trigger_event, \
     enabled, allow_reentry, created_at, updated_at";
const STEP_COLUMNS: &str =
    "id, workflow_id, type, name, config, position_x, position_y, created_at, updated_at";
const TRANSITION_COLUMNS: &str = "id, workflow_id, from_step_id, to_step_id, branch, created_at";

/// A stored workflow (without its graph).
#[derive(Clone, Debug, PartialEq)]
pub struct Workflow {
    pub id: WorkflowId,
    pub project_id: ProjectId,
    pub name: String,
    pub description: Option<String>,
    /// Always `EVENT`.
    pub trigger_type: String,
    /// The event name that starts an execution.
    pub trigger_event: String,
    /// Whether events start executions.
    pub enabled: bool,
    /// Whether a contact may enter again once its previous execution is no longer active.
    pub allow_reentry: bool,
    /// Created, unix ms.
    pub created_at: i64,
    /// Last changed (its fields or its graph), unix ms.
    pub updated_at: i64,
}

/// A step of a workflow.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub id: StepId,
    pub workflow_id: WorkflowId,
    pub step_type: StepType,
    pub name: Option<String>,
    /// The step plugin's configuration (a JSON object).
    pub config: Value,
    /// Where the dashboard draws it.
    pub position: Option<StepPosition>,
    /// Created, unix ms.
    pub created_at: i64,
    /// Last changed, unix ms.
    pub updated_at: i64,
}

/// A transition from one step to the next, along `branch` for the steps that branch.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub id: TransitionId,
    pub workflow_id: WorkflowId,
    pub from_step_id: StepId,
    pub to_step_id: StepId,
    /// `yes`/`no` out of `CONDITION`, `event`/`timeout` out of `WAIT_FOR_EVENT`, else none.
    pub branch: Option<String>,
    /// Created, unix ms.
    pub created_at: i64,
}

/// A workflow with its steps and transitions, each in creation order.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowGraph {
    pub workflow: Workflow,
    pub steps: Vec<Step>,
    pub transitions: Vec<Transition>,
}

impl WorkflowGraph {
    /// The steps as the graph rules see them.
    pub fn graph_steps(&self) -> Vec<GraphStep<'_>> {
        graph_steps(&self.steps)
    }

    /// The transitions as the graph rules see them.
    pub fn graph_transitions(&self) -> Vec<GraphTransition<'_>> {
        graph_transitions(&self.transitions)
    }
}

fn graph_steps(steps: &[Step]) -> Vec<GraphStep<'_>> {
    steps
        .iter()
        .map(|s| GraphStep {
            id: s.id.as_str(),
            step_type: s.step_type,
        })
        .collect()
}

fn graph_transitions(transitions: &[Transition]) -> Vec<GraphTransition<'_>> {
    transitions
        .iter()
        .map(|t| GraphTransition {
            id: t.id.as_str(),
            from: t.from_step_id.as_str(),
            to: t.to_step_id.as_str(),
            branch: t.branch.as_deref(),
        })
        .collect()
}

/// A new workflow (validated); it starts disabled.
#[derive(Clone, Debug)]
pub struct NewWorkflow {
    pub name: String,
    pub description: Option<String>,
    pub trigger_event: String,
    pub allow_reentry: bool,
}

/// A change of a workflow (validated); `None` keeps a field, `Some(None)` clears the
/// description.
#[derive(Clone, Debug, Default)]
pub struct WorkflowPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    pub trigger_event: Option<String>,
    pub enabled: Option<bool>,
    pub allow_reentry: Option<bool>,
}

impl WorkflowPatch {
    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.description.is_none()
            && self.trigger_event.is_none()
            && self.enabled.is_none()
            && self.allow_reentry.is_none()
    }
}

/// A new step (its config checked by its plugin).
#[derive(Clone, Debug)]
pub struct NewStep {
    pub step_type: StepType,
    pub name: Option<String>,
    pub config: Value,
    pub position: Option<StepPosition>,
}

/// A change of a step; `None` keeps a field, `Some(None)` clears the name or the position.
#[derive(Clone, Debug, Default)]
pub struct StepPatch {
    pub name: Option<Option<String>>,
    pub config: Option<Value>,
    pub position: Option<Option<StepPosition>>,
}

/// Why a change of a workflow was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The workflow, step or transition (named) is not in the project.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The graph of an enabled workflow cannot change.
    #[error("the workflow is enabled")]
    Enabled,
    /// The change breaks the graph's rules.
    #[error("the change breaks the workflow's rules")]
    Invalid(Vec<Violation>),
    /// The workflow has this many active (`RUNNING` or `WAITING`) executions.
    #[error("the workflow has {0} active executions")]
    Active(i64),
    /// The workflow has [`MAX_STEPS`] steps.
    #[error("the workflow has {MAX_STEPS} steps")]
    TooManySteps,
    /// The graph changed after the caller checked it (enable, or a step change of an enabled
    /// workflow): checking again is needed.
    #[error("the workflow changed while it was being checked")]
    Changed,
    /// A database failure.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for WorkflowError {
    fn from(err: sqlx::Error) -> WorkflowError {
        WorkflowError::Store(StoreError::from(err))
    }
}

#[derive(FromRow)]
struct WorkflowRow {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    trigger_type: String,
    trigger_event: String,
    enabled: bool,
    allow_reentry: bool,
    created_at: i64,
    updated_at: i64,
}

impl From<WorkflowRow> for Workflow {
    fn from(r: WorkflowRow) -> Workflow {
        Workflow {
            id: WorkflowId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            name: r.name,
            description: r.description,
            trigger_type: r.trigger_type,
            trigger_event: r.trigger_event,
            enabled: r.enabled,
            allow_reentry: r.allow_reentry,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(FromRow)]
struct StepRow {
    id: String,
    workflow_id: String,
    #[sqlx(rename = "type")]
    step_type: String,
    name: Option<String>,
    config: Json<Value>,
    position_x: Option<f64>,
    position_y: Option<f64>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<StepRow> for Step {
    type Error = StoreError;

    fn try_from(r: StepRow) -> Result<Step, StoreError> {
        let step_type = StepType::parse(&r.step_type)
            .ok_or_else(|| StoreError::Corrupt(format!("step type `{}`", r.step_type)))?;
        Ok(Step {
            id: StepId::from_trusted(r.id),
            workflow_id: WorkflowId::from_trusted(r.workflow_id),
            step_type,
            name: r.name,
            config: r.config.0,
            position: match (r.position_x, r.position_y) {
                (Some(x), Some(y)) => Some(StepPosition { x, y }),
                _ => None,
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(FromRow)]
struct TransitionRow {
    id: String,
    workflow_id: String,
    from_step_id: String,
    to_step_id: String,
    branch: Option<String>,
    created_at: i64,
}

impl From<TransitionRow> for Transition {
    fn from(r: TransitionRow) -> Transition {
        Transition {
            id: TransitionId::from_trusted(r.id),
            workflow_id: WorkflowId::from_trusted(r.workflow_id),
            from_step_id: StepId::from_trusted(r.from_step_id),
            to_step_id: StepId::from_trusted(r.to_step_id),
            branch: r.branch,
            created_at: r.created_at,
        }
    }
}

fn steps(rows: Vec<StepRow>) -> StoreResult<Vec<Step>> {
    rows.into_iter().map(Step::try_from).collect()
}

fn transitions(rows: Vec<TransitionRow>) -> Vec<Transition> {
    rows.into_iter().map(Into::into).collect()
}

/// The statements a graph's reads and edits share, as SQL text for one backend.
struct Sql {
    /// Locks a workflow of a project (`$1` project, `$2` workflow) and answers `enabled`.
    lock: String,
    /// A workflow's steps in creation order (`$1` project, `$2` workflow).
    steps: String,
    /// A workflow's transitions in creation order (`$1` workflow).
    transitions: String,
}

impl Sql {
    fn new(store: &Store) -> Sql {
        Sql {
            lock: format!(
                "SELECT enabled FROM workflows WHERE project_id = $1 AND id = $2{}",
                for_update(store.db().backend())
            ),
            steps: format!(
                "SELECT {STEP_COLUMNS} FROM workflow_steps \
                 WHERE project_id = $1 AND workflow_id = $2 ORDER BY id"
            ),
            transitions: format!(
                "SELECT {TRANSITION_COLUMNS} FROM workflow_transitions \
                 WHERE workflow_id = $1 ORDER BY id"
            ),
        }
    }
}

/// Marks a workflow changed (`$1` workflow, `$2` now).
const TOUCH: &str = "UPDATE workflows SET updated_at = $2 WHERE id = $1";

/// Locks the workflow `$id` of `$project` in the transaction `$tx` and answers whether it is
/// enabled; returns `NotFound("workflow")` from the caller when the project has no such workflow.
macro_rules! lock_workflow {
    ($tx:expr, $sql:expr, $project:expr, $id:expr) => {{
        let enabled: Option<bool> = sqlx::query_scalar(&$sql.lock)
            .bind($project.as_str())
            .bind($id.as_str())
            .fetch_optional(&mut *$tx)
            .await?;
        match enabled {
            Some(enabled) => enabled,
            None => return Err(WorkflowError::NotFound("workflow")),
        }
    }};
}

/// Reads the steps and transitions of workflow `$id` inside the transaction `$tx`.
macro_rules! read_graph {
    ($tx:expr, $sql:expr, $project:expr, $id:expr) => {{
        let step_rows: Vec<StepRow> = sqlx::query_as(&$sql.steps)
            .bind($project.as_str())
            .bind($id.as_str())
            .fetch_all(&mut *$tx)
            .await?;
        let transition_rows: Vec<TransitionRow> = sqlx::query_as(&$sql.transitions)
            .bind($id.as_str())
            .fetch_all(&mut *$tx)
            .await?;
        (steps(step_rows)?, transitions(transition_rows))
    }};
}

impl Store {
    /// Adds a workflow, disabled.
    #[tracing::instrument(level = "debug", skip(self, w))]
    pub async fn insert_workflow(
        &self,
        project: &ProjectId,
        w: &NewWorkflow,
    ) -> StoreResult<Workflow> {
        let id = WorkflowId::generate();
        let sql = format!(
            "INSERT INTO workflows ({WORKFLOW_COLUMNS}) \
             VALUES ($1, $2, $3, $4, 'EVENT', $5, FALSE, $6, $7, $7) RETURNING {WORKFLOW_COLUMNS}"
        );
        let row: WorkflowRow = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(project.as_str())
                .bind(&w.name)
                .bind(w.description.as_deref())
                .bind(&w.trigger_event)
                .bind(w.allow_reentry)
                .bind(now_ms())
                .fetch_one(pool)
                .await?
        });
        Ok(row.into())
    }

    /// A workflow of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn workflow(&self, project: &ProjectId, id: &WorkflowId) -> StoreResult<Workflow> {
        let sql =
            format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE project_id = $1 AND id = $2");
        let row: Option<WorkflowRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row.ok_or(StoreError::NotFound)?.into())
    }

    /// A workflow of a project with its steps and transitions.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn workflow_graph(
        &self,
        project: &ProjectId,
        id: &WorkflowId,
    ) -> StoreResult<WorkflowGraph> {
        let workflow = self.workflow(project, id).await?;
        let sql = Sql::new(self);
        let (step_rows, transition_rows): (Vec<StepRow>, Vec<TransitionRow>) = on_db!(self.db(), pool => {
            let s = sqlx::query_as(&sql.steps)
                .bind(project.as_str())
                .bind(id.as_str())
                .fetch_all(pool)
                .await?;
            let t = sqlx::query_as(&sql.transitions).bind(id.as_str()).fetch_all(pool).await?;
            (s, t)
        });
        Ok(WorkflowGraph {
            workflow,
            steps: steps(step_rows)?,
            transitions: transitions(transition_rows),
        })
    }

    /// A page of a project's workflows, newest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_workflows(
        &self,
        project: &ProjectId,
        page: &PageRequest,
    ) -> StoreResult<Page<Workflow>> {
        let (rows, total): (Vec<WorkflowRow>, i64) = self
            .newest_first_rows(
                WORKFLOW_COLUMNS,
                "FROM workflows WHERE project_id = $1",
                &[project.as_str()],
                page,
            )
            .await?;
        let items = rows.into_iter().map(Workflow::from).collect();
        Ok(Page::from_rows(items, page, total, |w| w.id.as_str()))
    }

    /// Applies a change to a workflow and answers it.
    ///
    /// Enabling a disabled workflow needs `checked`: the graph the caller validated. The
    /// workflow is enabled only if its steps and transitions are still exactly those, read under
    /// the lock; otherwise [`WorkflowError::Changed`] (and nothing is written).
    #[tracing::instrument(level = "debug", skip(self, patch, checked))]
    pub async fn update_workflow(
        &self,
        project: &ProjectId,
        id: &WorkflowId,
        patch: &WorkflowPatch,
        checked: Option<&WorkflowGraph>,
    ) -> Result<Workflow, WorkflowError> {
        let sql = Sql::new(self);
        let update = format!(
            "UPDATE workflows SET name = COALESCE($3, name), \
             description = CASE WHEN $4 THEN $5 ELSE description END, \
             trigger_event = COALESCE($6, trigger_event), enabled = COALESCE($7, enabled), \
             allow_reentry = COALESCE($8, allow_reentry), updated_at = $9 \
             WHERE project_id = $1 AND id = $2 RETURNING {WORKFLOW_COLUMNS}"
        );
        let row: WorkflowRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let enabled = lock_workflow!(tx, sql, project, id);
            if patch.enabled == Some(true) && !enabled {
                let Some(checked) = checked else {
                    return Err(WorkflowError::Changed);
                };
                let (steps, transitions) = read_graph!(tx, sql, project, id);
                if steps != checked.steps || transitions != checked.transitions {
                    return Err(WorkflowError::Changed);
                }
            }
            let row = sqlx::query_as(&update)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(patch.name.as_deref())
                .bind(patch.description.is_some())
                .bind(patch.description.clone().flatten())
                .bind(patch.trigger_event.as_deref())
                .bind(patch.enabled)
                .bind(patch.allow_reentry)
                .bind(now_ms())
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            row
        });
        Ok(row.into())
    }

    /// Removes a workflow with its graph and its finished executions; refused with
    /// [`WorkflowError::Active`] while it has `RUNNING` or `WAITING` executions (counted under
    /// the lock, so an execution the engine commits concurrently is either counted or fails).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_workflow(
        &self,
        project: &ProjectId,
        id: &WorkflowId,
    ) -> Result<(), WorkflowError> {
        let sql = Sql::new(self);
        let active = execution_status::ACTIVE;
        let count = format!(
            "SELECT COUNT(*) FROM workflow_executions \
             WHERE project_id = $1 AND workflow_id = $2 AND status IN ({})",
            placeholders(3, active.len())
        );
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            lock_workflow!(tx, sql, project, id);
            let mut q = sqlx::query_scalar(&count).bind(project.as_str()).bind(id.as_str());
            for status in active {
                q = q.bind(status);
            }
            let n: i64 = q.fetch_one(&mut *tx).await?;
            if n > 0 {
                return Err(WorkflowError::Active(n));
            }
            sqlx::query("DELETE FROM workflows WHERE project_id = $1 AND id = $2")
                .bind(project.as_str())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Adds a step to a disabled workflow.
    #[tracing::instrument(level = "debug", skip(self, new))]
    pub async fn insert_step(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        new: &NewStep,
    ) -> Result<Step, WorkflowError> {
        let sql = Sql::new(self);
        let id = StepId::generate();
        let insert = format!(
            "INSERT INTO workflow_steps (id, workflow_id, project_id, type, name, config, \
             position_x, position_y, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $8, $9, $7, $7) RETURNING {STEP_COLUMNS}"
        );
        let now = now_ms();
        let row: StepRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if lock_workflow!(tx, sql, project, workflow) {
                return Err(WorkflowError::Enabled);
            }
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM workflow_steps WHERE project_id = $1 AND workflow_id = $2",
            )
            .bind(project.as_str())
            .bind(workflow.as_str())
            .fetch_one(&mut *tx)
            .await?;
            if n >= MAX_STEPS as i64 {
                return Err(WorkflowError::TooManySteps);
            }
            let row = sqlx::query_as(&insert)
                .bind(id.as_str())
                .bind(workflow.as_str())
                .bind(project.as_str())
                .bind(new.step_type.as_str())
                .bind(new.name.as_deref())
                .bind(Json(&new.config))
                .bind(now)
                .bind(new.position.map(|p| p.x))
                .bind(new.position.map(|p| p.y))
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(TOUCH).bind(workflow.as_str()).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
            row
        });
        Ok(row.try_into()?)
    }

    /// A step of a workflow of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn step(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &StepId,
    ) -> StoreResult<Step> {
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM workflow_steps \
             WHERE project_id = $1 AND workflow_id = $2 AND id = $3"
        );
        let row: Option<StepRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(workflow.as_str())
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Changes a step's name, config or position. A config change of an enabled workflow needs
    /// `checked_enabled`: the caller ran the enable-time checks on the new config. When it did
    /// not and the workflow is (or meanwhile became) enabled: [`WorkflowError::Changed`].
    #[tracing::instrument(level = "debug", skip(self, patch))]
    pub async fn update_step(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &StepId,
        patch: &StepPatch,
        checked_enabled: bool,
    ) -> Result<Step, WorkflowError> {
        let sql = Sql::new(self);
        let update = format!(
            "UPDATE workflow_steps SET name = CASE WHEN $4 THEN $5 ELSE name END, \
             config = CASE WHEN $6 THEN $7 ELSE config END, updated_at = $8, \
             position_x = CASE WHEN $9 THEN $10 ELSE position_x END, \
             position_y = CASE WHEN $9 THEN $11 ELSE position_y END \
             WHERE project_id = $1 AND workflow_id = $2 AND id = $3 RETURNING {STEP_COLUMNS}"
        );
        let now = now_ms();
        let row: StepRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let enabled = lock_workflow!(tx, sql, project, workflow);
            let row: Option<StepRow> = sqlx::query_as(&update)
                .bind(project.as_str())
                .bind(workflow.as_str())
                .bind(id.as_str())
                .bind(patch.name.is_some())
                .bind(patch.name.clone().flatten())
                .bind(patch.config.is_some())
                .bind(patch.config.as_ref().map(Json))
                .bind(now)
                .bind(patch.position.is_some())
                .bind(patch.position.flatten().map(|p| p.x))
                .bind(patch.position.flatten().map(|p| p.y))
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Err(WorkflowError::NotFound("step"));
            };
            if enabled && patch.config.is_some() && !checked_enabled {
                return Err(WorkflowError::Changed);
            }
            sqlx::query(TOUCH).bind(workflow.as_str()).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
            row
        });
        Ok(row.try_into()?)
    }

    /// Deletes a step of a disabled workflow with its transitions. With `splice`, the
    /// transitions into it are first re-pointed to its next step ([`splice`] decides; when it
    /// cannot, [`WorkflowError::Invalid`] and nothing is deleted).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_step(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &StepId,
        with_splice: bool,
    ) -> Result<(), WorkflowError> {
        let sql = Sql::new(self);
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let enabled = lock_workflow!(tx, sql, project, workflow);
            let (steps, transitions) = read_graph!(tx, sql, project, workflow);
            if !steps.iter().any(|s| &s.id == id) {
                return Err(WorkflowError::NotFound("step"));
            }
            if enabled {
                return Err(WorkflowError::Enabled);
            }
            if with_splice {
                let graph = graph_transitions(&transitions);
                let repoint = splice(id.as_str(), &graph)
                    .map_err(|v| WorkflowError::Invalid(vec![v]))?;
                for (transition, to) in repoint {
                    sqlx::query(
                        "UPDATE workflow_transitions SET to_step_id = $3 \
                         WHERE workflow_id = $1 AND id = $2",
                    )
                    .bind(workflow.as_str())
                    .bind(transition)
                    .bind(to)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            sqlx::query(
                "DELETE FROM workflow_transitions \
                 WHERE workflow_id = $1 AND (from_step_id = $2 OR to_step_id = $2)",
            )
            .bind(workflow.as_str())
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "DELETE FROM workflow_steps WHERE project_id = $1 AND workflow_id = $2 AND id = $3",
            )
            .bind(project.as_str())
            .bind(workflow.as_str())
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
            sqlx::query(TOUCH).bind(workflow.as_str()).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Adds a transition to a disabled workflow: both steps must be its own, and the transition
    /// must pass [`check_new_transition`] against the transitions read under the lock.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn insert_transition(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        from: &str,
        to: &str,
        branch: Option<&str>,
    ) -> Result<Transition, WorkflowError> {
        let sql = Sql::new(self);
        let id = TransitionId::generate();
        let insert = format!(
            "INSERT INTO workflow_transitions ({TRANSITION_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TRANSITION_COLUMNS}"
        );
        let now = now_ms();
        let row: TransitionRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let enabled = lock_workflow!(tx, sql, project, workflow);
            let (steps, transitions) = read_graph!(tx, sql, project, workflow);
            let graph = graph_steps(&steps);
            let find = |field: &str, id: &str| {
                graph.iter().find(|s| s.id == id).ok_or_else(|| {
                    Violation::new(
                        field,
                        "not_found",
                        format!("`{id}` is not a step of this workflow"),
                    )
                })
            };
            let (from_step, to_step) = match (find("fromStepId", from), find("toStepId", to)) {
                (Ok(f), Ok(t)) => (f, t),
                (f, t) => {
                    let problems = [f.err(), t.err()].into_iter().flatten().collect();
                    return Err(WorkflowError::Invalid(problems));
                }
            };
            if enabled {
                return Err(WorkflowError::Enabled);
            }
            check_new_transition(from_step, to_step, branch, &graph_transitions(&transitions))
                .map_err(|v| WorkflowError::Invalid(vec![v]))?;
            let row = sqlx::query_as(&insert)
                .bind(id.as_str())
                .bind(workflow.as_str())
                .bind(from)
                .bind(to)
                .bind(branch)
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(TOUCH).bind(workflow.as_str()).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
            row
        });
        Ok(row.into())
    }

    /// Deletes a transition of a disabled workflow.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_transition(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &TransitionId,
    ) -> Result<(), WorkflowError> {
        let sql = Sql::new(self);
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let enabled = lock_workflow!(tx, sql, project, workflow);
            let exists: Option<String> = sqlx::query_scalar(
                "SELECT id FROM workflow_transitions WHERE workflow_id = $1 AND id = $2",
            )
            .bind(workflow.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            if exists.is_none() {
                return Err(WorkflowError::NotFound("transition"));
            }
            if enabled {
                return Err(WorkflowError::Enabled);
            }
            sqlx::query("DELETE FROM workflow_transitions WHERE workflow_id = $1 AND id = $2")
                .bind(workflow.as_str())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
            sqlx::query(TOUCH).bind(workflow.as_str()).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }
}
