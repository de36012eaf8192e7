//! Workflow executions and their step runs: starting one (deduplicated by trigger event, one
//! active per contact, re-entry rules), what a step run needs to run, committing a step's
//! outcome with the next step's job in one lease-guarded transaction, resuming a waiting
//! execution (by event or timeout, whichever commits first), cancelling, and the reads of the
//! executions API.

use serde_json::Value;
use sqlx::types::Json;

use super::dialect::{bound_in_order, placeholders};
use super::{Store, StoreError, StoreResult, on_db};
use crate::domain::ids::{ContactId, ExecutionId, ProjectId, WorkflowId};
use crate::domain::pagination::{Page, PageRequest};

pub(in crate::store) mod commit;
pub(in crate::store) mod effects;
pub(in crate::store) mod records;
pub(in crate::store) mod resume;
pub(in crate::store) mod sql;
pub(in crate::store) mod start;

pub use commit::{Committed, EFFECT_ENDPOINT, EffectWrite, RunOutcome, StepCommit};
pub use records::{
    ActiveExecution, EventCount, ExecutionRecord, Exit, NextRun, PluginStep, RunContext, STEP_KIND,
    StepPayload, StepRunRecord, TIMEOUT_KIND, TimeoutPayload,
};
use records::{EXECUTION_COLUMNS, RUN_COLUMNS};
pub use start::{NewExecution, NotStarted};

pub use resume::{Resume, Waiting};

impl Store {
    /// The transitions leaving a step, with the type of the step each leads to.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn transitions_from(&self, step: &str) -> StoreResult<Vec<Exit>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT t.to_step_id, t.branch, s.type AS to_step_type, s.config AS to_step_config \
                 FROM workflow_transitions t JOIN workflow_steps s ON s.id = t.to_step_id \
                 WHERE t.from_step_id = $1 ORDER BY t.id",
            )
            .bind(step)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The step a step run runs.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn run_step_id(&self, run: &str) -> StoreResult<Option<String>> {
        let id = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT step_id FROM workflow_step_runs WHERE id = $1")
                .bind(run)
                .fetch_optional(pool)
                .await?
        });
        Ok(id)
    }

    /// Whether any execution of `project` waits for `event_name` (so that a batch of events of
    /// that name needs no per-contact look-up when none does).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn any_waiting_for(
        &self,
        project: &ProjectId,
        event_name: &str,
    ) -> StoreResult<bool> {
        let found: Option<i32> = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT 1 FROM workflow_executions WHERE project_id = $1 AND status = 'WAITING' \
                 AND waiting_event = $2 LIMIT 1",
            )
            .bind(project.as_str())
            .bind(event_name)
            .fetch_optional(pool)
            .await?
        });
        Ok(found.is_some())
    }

    /// What the step jobs of `runs` need about their step runs, in one read; a run that is
    /// gone (deleted with its workflow or contact) is left out.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = runs.len()))]
    pub async fn run_contexts(&self, runs: &[&str]) -> StoreResult<Vec<RunContext>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT r.id AS run_id, r.status AS run_status, r.step_id, r.execution_id, e.project_id, \
             e.workflow_id, e.contact_id, e.status AS execution_status, e.trigger, e.context, \
             s.type AS step_type, s.config \
             FROM workflow_step_runs r JOIN workflow_executions e ON e.id = r.execution_id \
             LEFT JOIN workflow_steps s ON s.id = r.step_id WHERE r.id IN ({})",
            placeholders(1, runs.len())
        );
        let sql = bound_in_order(self.db().backend(), sql);
        let rows = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for run in runs {
                q = q.bind(*run);
            }
            q.fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Every transition of each of `workflows`, by the step it leaves (a step with no
    /// transition is left out), in one read: a round follows its step runs' transitions and
    /// those of the steps it runs on to in memory.
    #[tracing::instrument(level = "debug", skip_all, fields(workflows = workflows.len()))]
    pub async fn transitions_of_workflows(
        &self,
        workflows: &[&str],
    ) -> StoreResult<std::collections::HashMap<String, Vec<Exit>>> {
        let mut out: std::collections::HashMap<String, Vec<Exit>> = Default::default();
        if workflows.is_empty() {
            return Ok(out);
        }
        let sql = format!(
            "SELECT t.from_step_id, t.to_step_id, t.branch, s.type AS to_step_type, s.config AS to_step_config \
             FROM workflow_transitions t JOIN workflow_steps s ON s.id = t.to_step_id \
             WHERE t.workflow_id IN ({}) ORDER BY t.id",
            placeholders(1, workflows.len())
        );
        let sql = bound_in_order(self.db().backend(), sql);
        type Row = (String, String, Option<String>, String, Json<Value>);
        let rows: Vec<Row> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for workflow in workflows {
                q = q.bind(*workflow);
            }
            q.fetch_all(pool).await?
        });
        for (from, to_step_id, branch, to_step_type, to_step_config) in rows {
            out.entry(from).or_default().push(Exit {
                to_step_id,
                branch,
                to_step_type,
                to_step_config,
            });
        }
        Ok(out)
    }

    /// The contact's event history by name (`name`, count, last time) and the ids of the
    /// segments it is a stored member of (static segments and tracked dynamic ones).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact_summary(
        &self,
        contact: &ContactId,
    ) -> StoreResult<(Vec<EventCount>, Vec<String>)> {
        let out = on_db!(self.db(), pool => {
            let events: Vec<EventCount> = sqlx::query_as(
                "SELECT name, count, last_at FROM event_summaries WHERE contact_id = $1 ORDER BY name",
            )
            .bind(contact.as_str())
            .fetch_all(pool)
            .await?;
            let segments: Vec<String> = sqlx::query_scalar(
                "SELECT segment_id FROM segment_members WHERE contact_id = $1 ORDER BY segment_id",
            )
            .bind(contact.as_str())
            .fetch_all(pool)
            .await?;
            (events, segments)
        });
        Ok(out)
    }

    /// An execution of a workflow of the project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn execution(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &ExecutionId,
    ) -> StoreResult<ExecutionRecord> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM workflow_executions WHERE project_id = $1 AND workflow_id = $2 AND id = $3"
        );
        let row: Option<ExecutionRecord> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(workflow.as_str())
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::NotFound)
    }

    /// The step runs of an execution, in order.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn step_runs(&self, execution: &ExecutionId) -> StoreResult<Vec<StepRunRecord>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM workflow_step_runs WHERE execution_id = $1 ORDER BY id"
        );
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(execution.as_str()).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// A page of a workflow's executions, newest first, optionally of some statuses.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_executions(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        statuses: &[&str],
        page: &PageRequest,
    ) -> StoreResult<Page<ExecutionRecord>> {
        let mut from_where =
            String::from("FROM workflow_executions WHERE project_id = $1 AND workflow_id = $2");
        if !statuses.is_empty() {
            from_where.push_str(&format!(
                " AND status IN ({})",
                placeholders(3, statuses.len())
            ));
        }
        let mut binds = vec![project.as_str(), workflow.as_str()];
        binds.extend_from_slice(statuses);
        let (rows, total) = self
            .newest_first_rows(EXECUTION_COLUMNS, &from_where, &binds, page)
            .await?;
        Ok(Page::from_rows(rows, page, total, |e: &ExecutionRecord| {
            e.id.as_str()
        }))
    }

    /// A page of a contact's executions of every workflow of the project, newest first, with
    /// their count on the first page (the `workflow_executions_by_contact` index).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact_executions(
        &self,
        project: &ProjectId,
        contact: &ContactId,
        page: &PageRequest,
    ) -> StoreResult<Page<ExecutionRecord>> {
        let (rows, total) = self
            .newest_first_rows(
                EXECUTION_COLUMNS,
                "FROM workflow_executions WHERE project_id = $1 AND contact_id = $2",
                &[project.as_str(), contact.as_str()],
                page,
            )
            .await?;
        Ok(Page::from_rows(rows, page, total, |e: &ExecutionRecord| {
            e.id.as_str()
        }))
    }

    /// Every `PLUGIN` step of every workflow (for `herald plugins check`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn plugin_steps(&self) -> StoreResult<Vec<PluginStep>> {
        let plugin = super::dialect::json_text(self.db().backend(), "s.config", "plugin");
        let sql = format!(
            "SELECT w.project_id, w.id AS workflow_id, w.name AS workflow_name, w.enabled, s.id AS step_id, \
             {plugin} AS plugin FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id \
             WHERE s.type = 'PLUGIN' ORDER BY w.id, s.id"
        );
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// The oldest `limit` active executions of a project with their workflow's name, and how
    /// many are active in all (for `/activity/upcoming`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn active_executions(
        &self,
        project: &ProjectId,
        limit: i64,
    ) -> StoreResult<(Vec<ActiveExecution>, i64)> {
        let out = on_db!(self.db(), pool => {
            let rows: Vec<ActiveExecution> = sqlx::query_as(
                "SELECT e.id, e.workflow_id, w.name AS workflow_name, e.contact_id, e.status, e.current_step_id, \
                 e.waiting_event, e.created_at FROM workflow_executions e JOIN workflows w ON w.id = e.workflow_id \
                 WHERE e.project_id = $1 AND e.status IN ('RUNNING', 'WAITING') ORDER BY e.id LIMIT $2",
            )
            .bind(project.as_str())
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM workflow_executions WHERE project_id = $1 AND status IN ('RUNNING', 'WAITING')",
            )
            .bind(project.as_str())
            .fetch_one(pool)
            .await?;
            (rows, n)
        });
        Ok(out)
    }
}
