//! Billing caps, metered usage (written by the triggers of migration 0020) and the subscription
//! state reported by the billing plugin.

use super::{Store, StoreResult, on_db, on_db_write};
use crate::domain::billing::{BillingLimits, UsageCategory};
use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;

/// A project's subscription as the billing provider last reported it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct BillingState {
    /// The plan, when known.
    pub plan: Option<String>,
    /// The provider's status, e.g. `active`, `past_due`, `canceled`.
    pub status: String,
    /// When it last changed, unix ms.
    pub updated_at: i64,
}

impl Store {
    /// The project's caps (none set: no caps).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn billing_limits(&self, project: &ProjectId) -> StoreResult<BillingLimits> {
        let row: Option<(Option<i64>, Option<i64>, Option<i64>)> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT emails, contacts, events FROM billing_limits WHERE project_id = $1",
            )
            .bind(project.as_str())
            .fetch_optional(pool)
            .await?
        });
        Ok(row
            .map(|(emails, contacts, events)| BillingLimits {
                emails,
                contacts,
                events,
            })
            .unwrap_or_default())
    }

    /// Replaces the project's caps.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn set_billing_limits(
        &self,
        project: &ProjectId,
        limits: &BillingLimits,
    ) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query(
                "INSERT INTO billing_limits (project_id, emails, contacts, events, updated_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project_id) DO UPDATE SET \
                 emails = excluded.emails, contacts = excluded.contacts, \
                 events = excluded.events, updated_at = excluded.updated_at",
            )
            .bind(project.as_str())
            .bind(limits.emails)
            .bind(limits.contacts)
            .bind(limits.events)
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The project's use of each category in `period` (a `YYYY-MM` key), zero where none.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn usage_in_period(
        &self,
        project: &ProjectId,
        period: &str,
    ) -> StoreResult<Vec<(UsageCategory, i64)>> {
        let rows: Vec<(String, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT category, CAST(SUM(n) AS BIGINT) FROM usage_counters \
                 WHERE project_id = $1 AND period = $2 GROUP BY category",
            )
            .bind(project.as_str())
            .bind(period)
            .fetch_all(pool)
            .await?
        });
        Ok(UsageCategory::ALL
            .into_iter()
            .map(|category| {
                let used = rows
                    .iter()
                    .find(|(name, _)| name == category.name())
                    .map_or(0, |(_, n)| *n);
                (category, used)
            })
            .collect())
    }

    /// The subscription state, if the provider ever reported one.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn billing_state(&self, project: &ProjectId) -> StoreResult<Option<BillingState>> {
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT plan, status, updated_at FROM project_billing WHERE project_id = $1",
            )
            .bind(project.as_str())
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Records a subscription change reported by the provider: `plan` replaces the stored one
    /// when given (a cancellation clears it with `clear_plan`). False when the project does not
    /// exist.
    #[tracing::instrument(level = "debug", skip(self, detail))]
    pub async fn record_billing_state(
        &self,
        project_id: &str,
        plan: Option<&str>,
        clear_plan: bool,
        status: &str,
        detail: &serde_json::Value,
    ) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "INSERT INTO project_billing (project_id, plan, status, detail, updated_at) \
                 SELECT id, $2, $3, $4, $5 FROM projects WHERE id = $1 \
                 ON CONFLICT (project_id) DO UPDATE SET \
                 plan = CASE WHEN $6 THEN NULL ELSE COALESCE(excluded.plan, project_billing.plan) END, \
                 status = excluded.status, detail = excluded.detail, updated_at = excluded.updated_at",
            )
            .bind(project_id)
            .bind(plan)
            .bind(status)
            .bind(detail.to_string())
            .bind(now_ms())
            .bind(clear_plan)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }
}
