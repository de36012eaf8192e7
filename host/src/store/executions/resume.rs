//! Waiting executions resumed (by event or timeout, whichever commits first), failed, skipped
//! and cancelled.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::records::{ExecutionRecord, NextRun, STEP_KIND, TIMEOUT_KIND, is_final};
use super::start::insert_runs;
use crate::domain::ids::{ContactId, ExecutionId, ProjectId, WorkflowId};
use crate::domain::time::now_ms;
use crate::domain::workflow::{execution_status as es, step_run_status as rs};
use crate::store::dialect::BeginWrite;
use crate::store::jobs::Lease;
use crate::store::statements::Statements;
use crate::store::{Store, StoreResult, on_db, on_db_write};

/// A waiting execution to resume.
pub struct Resume<'a> {
    pub execution_id: &'a str,
    pub project_id: &'a str,
    /// The step run that waits.
    pub waiting_run_id: &'a str,
    /// `event` or `timeout`; `None` for a trailing `DELAY`'s end.
    pub branch: Option<&'a str>,
    /// The step run's output; `None` keeps the one it has.
    pub output: Option<&'a Value>,
    /// The step after the branch; `None` completes the execution.
    pub next: Option<&'a NextRun>,
    /// The timeout job's lease, when the timeout resumes it (completed with the resume).
    pub lease: Option<&'a Lease>,
}

/// A waiting execution of a contact.
#[derive(Clone, Debug, FromRow)]
pub struct Waiting {
    pub id: String,
    pub workflow_id: String,
    pub waiting_run_id: Option<String>,
    pub current_step_id: Option<String>,
    pub waiting_since: Option<i64>,
}

impl Store {
    /// Marks a step run and its execution failed because the step cannot run at all (its
    /// step was deleted, its contact is gone), completing the job.
    #[tracing::instrument(level = "debug", skip(self, lease))]
    pub async fn fail_execution(
        &self,
        lease: &Lease,
        run: &str,
        execution: &str,
        error: &str,
        attempts: i32,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let ok = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &serde_json::json!({ "stepRunId": run, "status": rs::FAILED }), now).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query("UPDATE workflow_step_runs SET status = 'FAILED', error = $2, finished_at = $3, attempts = $4 WHERE id = $1 AND status = 'PENDING'")
                .bind(run)
                .bind(error)
                .bind(now)
                .bind(attempts)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE workflow_executions SET status = 'FAILED', error = $2, updated_at = $3, finished_at = $3, \
                 waiting_event = NULL, waiting_run_id = NULL WHERE id = $1 AND status IN ('RUNNING', 'WAITING')",
            )
            .bind(execution)
            .bind(error)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            true
        });
        Ok(ok)
    }

    /// Completes a job that had nothing to do (its step run already ran, its execution ended),
    /// marking a pending step run of an ended execution `SKIPPED`.
    #[tracing::instrument(level = "debug", skip(self, lease))]
    pub async fn skip_step_run(&self, lease: &Lease, run: &str) -> StoreResult<bool> {
        let now = now_ms();
        let ok = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &serde_json::json!({ "stepRunId": run, "status": rs::SKIPPED }), now).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query(
                "UPDATE workflow_step_runs SET status = 'SKIPPED', finished_at = $2 WHERE id = $1 AND status = 'PENDING' \
                 AND execution_id IN (SELECT id FROM workflow_executions WHERE status NOT IN ('RUNNING', 'WAITING'))",
            )
            .bind(run)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            true
        });
        Ok(ok)
    }

    /// The executions of a contact waiting for `event_name`, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn waiting_executions(
        &self,
        project: &ProjectId,
        contact: &ContactId,
        event_name: &str,
    ) -> StoreResult<Vec<Waiting>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, workflow_id, waiting_run_id, current_step_id, waiting_since FROM workflow_executions \
                 WHERE project_id = $1 AND contact_id = $2 AND waiting_event = $3 AND status = 'WAITING' ORDER BY id",
            )
            .bind(project.as_str())
            .bind(contact.as_str())
            .bind(event_name)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Resumes a waiting execution along `branch`, if it still waits on that step run:
    /// completes the waiting step run, creates the next one with its job (or completes the
    /// execution), and completes the timeout job when that is what resumed it. `Ok(false)` when
    /// the other of event and timeout won, or the execution ended (nothing written but the
    /// timeout job's completion). `None` when the timeout job's lease was lost (nothing
    /// written).
    #[tracing::instrument(level = "debug", skip_all, fields(execution_id = %r.execution_id, branch = r.branch.unwrap_or_default()))]
    pub async fn resume_execution(&self, r: &Resume<'_>) -> StoreResult<Option<bool>> {
        let now = now_ms();
        let (status, finished) = match r.next {
            Some(_) => (es::RUNNING, None),
            None => (es::COMPLETED, Some(now)),
        };
        let resumed = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if let Some(lease) = r.lease
                && !tx.complete_job(lease, &serde_json::json!({ "stepRunId": r.waiting_run_id }), now).await?
            {
                tx.rollback().await?;
                return Ok(None);
            }
            let n = sqlx::query(
                "UPDATE workflow_executions SET status = $3, current_step_id = $4, waiting_event = NULL, \
                 waiting_run_id = NULL, waiting_since = NULL, updated_at = $5, finished_at = $6 \
                 WHERE id = $1 AND waiting_run_id = $2 AND status = 'WAITING'",
            )
            .bind(r.execution_id)
            .bind(r.waiting_run_id)
            .bind(status)
            .bind(r.next.map(|n| n.step_id.as_str()))
            .bind(now)
            .bind(finished)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 1 {
                sqlx::query(
                    "UPDATE workflow_step_runs SET status = 'COMPLETED', branch = $2, output = COALESCE($3, output), \
                     finished_at = $4 WHERE id = $1 AND status = 'WAITING'",
                )
                .bind(r.waiting_run_id)
                .bind(r.branch)
                .bind(r.output.map(Json))
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if let Some(next) = r.next {
                    insert_runs(&mut tx, &[(r.project_id, r.execution_id, next)], now).await?;
                    tx.insert_job(&next.job, now).await?;
                }
            }
            tx.commit().await?;
            n == 1
        });
        Ok(Some(resumed))
    }

    /// Cancels one active execution of a workflow: `NotFound` when it is not the project's,
    /// `Ok(None)` when it is no longer active. Its pending and waiting step runs are marked
    /// `SKIPPED` and its queued jobs dropped.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_execution(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &ExecutionId,
    ) -> StoreResult<Option<ExecutionRecord>> {
        let current = self.execution(project, workflow, id).await?;
        if is_final(&current.status) {
            return Ok(None);
        }
        let n = self
            .cancel_where(
                "id = $1 AND workflow_id = $2",
                &[id.as_str(), workflow.as_str()],
                "executionId",
                id.as_str(),
            )
            .await?;
        if n == 0 {
            return Ok(None);
        }
        self.execution(project, workflow, id).await.map(Some)
    }

    /// Cancels every active execution of a workflow; answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_all_executions(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
    ) -> StoreResult<u64> {
        self.cancel_where(
            "workflow_id = $1 AND project_id = $2",
            &[workflow.as_str(), project.as_str()],
            "workflowId",
            workflow.as_str(),
        )
        .await
    }

    async fn cancel_where(
        &self,
        filter: &str,
        binds: &[&str],
        job_key: &'static str,
        job_value: &str,
    ) -> StoreResult<u64> {
        let now = now_ms();
        let n = binds.len();
        let active = format!("{filter} AND status IN ('RUNNING', 'WAITING')");
        let skip_runs = format!(
            "UPDATE workflow_step_runs SET status = 'SKIPPED', finished_at = ${} \
             WHERE status IN ('PENDING', 'WAITING') AND execution_id IN (SELECT id FROM workflow_executions WHERE {active})",
            n + 1
        );
        let cancel = format!(
            "UPDATE workflow_executions SET status = 'CANCELLED', waiting_event = NULL, waiting_run_id = NULL, \
             waiting_since = NULL, updated_at = ${0}, finished_at = ${0} WHERE {active}",
            n + 1
        );
        let backend = self.db().backend();
        let drop_jobs = format!(
            "DELETE FROM jobs WHERE kind IN ('{STEP_KIND}', '{TIMEOUT_KIND}') AND state = 'queued' AND {} = $1",
            crate::store::dialect::json_text(backend, "payload", job_key)
        );
        let cancelled = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let mut q = sqlx::query(&skip_runs);
            for b in binds {
                q = q.bind(*b);
            }
            q.bind(now).execute(&mut *tx).await?;
            let mut q = sqlx::query(&cancel);
            for b in binds {
                q = q.bind(*b);
            }
            let cancelled = q.bind(now).execute(&mut *tx).await?.rows_affected();
            sqlx::query(&drop_jobs).bind(job_value).execute(&mut *tx).await?;
            tx.commit().await?;
            cancelled
        });
        Ok(cancelled)
    }
}
