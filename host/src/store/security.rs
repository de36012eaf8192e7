//! Sending health over a window and the project suspensions it causes.

use sqlx::FromRow;

use super::dialect::BeginWrite;
use super::{Store, StoreResult, on_db, on_db_write};
use crate::domain::ids::ProjectId;
use crate::domain::security::SendingHealth;
use crate::domain::time::now_ms;

/// A suspension of a project's sending.
#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct Suspension {
    pub id: String,
    /// Why, with the figures.
    pub reason: String,
    /// The window's figures when it was decided.
    pub sent: i64,
    pub bounced: i64,
    pub complained: i64,
    /// When, unix ms.
    pub created_at: i64,
    /// When an operator lifted it, unix ms; `None` while it holds.
    pub lifted_at: Option<i64>,
}

const COLUMNS: &str = "id, reason, sent, bounced, complained, created_at, lifted_at";

/// Where the suspension in force of the project whose id is `project` (an SQL expression: a
/// parameter, or an outer query's column) is read from: the newest one not lifted.
pub(super) fn in_force(project: &str) -> String {
    format!(
        "FROM project_suspensions WHERE project_id = {project} AND lifted_at IS NULL \
         ORDER BY created_at DESC LIMIT 1"
    )
}

impl Store {
    /// What a project sent since `since` (unix ms) and how much of it bounced or was reported:
    /// one range of the `emails_project_sent` index.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn sending_health(
        &self,
        project: &ProjectId,
        since: i64,
    ) -> StoreResult<SendingHealth> {
        let (sent, bounced, complained): (i64, i64, i64) = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT COUNT(*), \
                 CAST(COALESCE(SUM(CASE WHEN bounced_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS BIGINT), \
                 CAST(COALESCE(SUM(CASE WHEN complained_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS BIGINT) \
                 FROM emails WHERE project_id = $1 AND sent_at >= $2 AND test = FALSE",
            )
            .bind(project.as_str())
            .bind(since)
            .fetch_one(pool)
            .await?
        });
        Ok(SendingHealth {
            sent,
            bounced,
            complained,
        })
    }

    /// A project's suspensions, newest first, at most `limit`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn suspensions(
        &self,
        project: &ProjectId,
        limit: i64,
    ) -> StoreResult<Vec<Suspension>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM project_suspensions WHERE project_id = $1 \
             ORDER BY created_at DESC, id DESC LIMIT $2"
        );
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(limit).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// The suspension in force, if any.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn active_suspension(&self, project: &ProjectId) -> StoreResult<Option<Suspension>> {
        let sql = format!("SELECT {COLUMNS} {}", in_force("$1"));
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// Suspends a project's sending with `reason`, unless a suspension is in force already
    /// (then `None`); the project row is locked meanwhile, so two instances suspend once.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn suspend_project(
        &self,
        project: &ProjectId,
        health: &SendingHealth,
        reason: &str,
    ) -> StoreResult<Option<Suspension>> {
        let lock = super::dialect::for_update(self.db().backend());
        let now = now_ms();
        let id = format!("sus_{}", uuid::Uuid::new_v4().simple());
        let created = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query(&format!("SELECT id FROM projects WHERE id = $1{lock}"))
                .bind(project.as_str())
                .execute(&mut *tx)
                .await?;
            let active: Option<String> = sqlx::query_scalar(
                "SELECT id FROM project_suspensions WHERE project_id = $1 AND lifted_at IS NULL",
            )
            .bind(project.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            if active.is_some() {
                return Ok(None);
            }
            sqlx::query(
                "INSERT INTO project_suspensions (id, project_id, reason, sent, bounced, complained, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&id)
            .bind(project.as_str())
            .bind(reason)
            .bind(health.sent)
            .bind(health.bounced)
            .bind(health.complained)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Suspension {
                id,
                reason: reason.to_string(),
                sent: health.sent,
                bounced: health.bounced,
                complained: health.complained,
                created_at: now,
                lifted_at: None,
            }
        });
        Ok(Some(created))
    }

    /// Lifts the suspension in force; false when there was none.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn lift_suspension(&self, project: &ProjectId) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("UPDATE project_suspensions SET lifted_at = $2 WHERE project_id = $1 AND lifted_at IS NULL")
                .bind(project.as_str())
                .bind(now_ms())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// The addresses of a project's owners (to tell them of a suspension).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn owner_emails(&self, project: &ProjectId) -> StoreResult<Vec<String>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id \
                 WHERE m.project_id = $1 AND m.role = 'OWNER' ORDER BY u.email",
            )
            .bind(project.as_str())
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}
