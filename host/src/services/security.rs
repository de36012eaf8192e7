//! The sending-health guard: after a hard bounce or a complaint is recorded, it measures the
//! project's rates over the window and, when one crosses its threshold, suspends the project's
//! sending once and mails its owners. Sends are refused while a suspension holds
//! (`Sending::send`, campaign batches); an operator lifts it (`herald projects
//! lift-suspension`).

use std::time::Duration;

use crate::domain::ids::ProjectId;
use crate::domain::security::{SendingHealth, Thresholds, verdict};
use crate::domain::time::now_ms;
use crate::services::account_mail::{AccountMail, AccountMailError};
use crate::store::Store;
use crate::store::security::Suspension;

/// Checks projects' sending health; cheap to clone.
#[derive(Clone)]
pub struct HealthGuard {
    store: Store,
    mail: AccountMail,
    /// The thresholds in force.
    pub thresholds: Thresholds,
    /// The window rates are measured over.
    pub window: Duration,
    dashboard_url: String,
}

impl HealthGuard {
    /// A guard suspending by `thresholds` over `window`, telling owners through `mail` with a
    /// link to `dashboard_url`.
    pub fn new(
        store: Store,
        mail: AccountMail,
        thresholds: Thresholds,
        window: Duration,
        dashboard_url: String,
    ) -> HealthGuard {
        HealthGuard {
            store,
            mail,
            thresholds,
            window,
            dashboard_url,
        }
    }

    /// The project's figures over the window.
    pub async fn health(&self, project: &ProjectId) -> Result<SendingHealth, AccountMailError> {
        let since = now_ms() - self.window.as_millis() as i64;
        Ok(self.store.sending_health(project, since).await?)
    }

    /// Measures the project and suspends it when a rate crosses its threshold (once: nothing
    /// happens while a suspension holds); answers the new suspension.
    pub async fn check(&self, project: &ProjectId) -> Result<Option<Suspension>, AccountMailError> {
        let health = self.health(project).await?;
        let Some(reason) = verdict(&health, &self.thresholds) else {
            return Ok(None);
        };
        let reason = format!(
            "sending is suspended: the {reason} over the last {} days",
            self.window.as_secs() / 86_400
        );
        let Some(suspension) = self
            .store
            .suspend_project(project, &health, &reason)
            .await?
        else {
            return Ok(None);
        };
        tracing::warn!(project_id = %project, %reason, "project sending suspended");
        let project_name = self.store.project(project).await?.name;
        for owner in self.store.owner_emails(project).await? {
            let vars = serde_json::json!({
                "project": project_name.as_str(), "reason": reason, "link": self.dashboard_url,
            });
            self.mail
                .send("project-suspended", &owner, crate::i18n::DEFAULT, &vars)
                .await?;
        }
        Ok(Some(suspension))
    }
}
