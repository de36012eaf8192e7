//! The sending-health guard: after a hard bounce or a complaint is recorded, it measures the
//! project's rates over the window and, when one crosses its threshold, suspends the project's
//! sending once and mails its owners. Sends are refused while a suspension holds
//! (`Sending::send`, campaign batches); an operator lifts it (`herald projects
//! lift-suspension`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    /// When this instance last measured each project, for [`HealthGuard::check_soon`].
    measured: Arc<Mutex<HashMap<ProjectId, Measured>>>,
}

/// A project's health is measured by one instance at most once in this long after a bounce or
/// a complaint ([`HealthGuard::check_soon`]): the measure counts the project's emails over the
/// whole window, so a storm of bounces, measured at each, would cost the square of its size.
pub const MEASURE_EVERY: Duration = Duration::from_secs(5);

/// Above this many projects remembered, those measured longer ago than [`MEASURE_EVERY`] with
/// no measure due are forgotten.
const MEASURED_KEPT: usize = 10_000;

/// The last measure of a project by this instance.
struct Measured {
    at: Instant,
    /// A measure is scheduled for the end of the interval.
    due: bool,
}

/// What [`HealthGuard::check_soon`] is to do about a project.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Measure now.
    Now,
    /// Schedule a measure in this long.
    Later(Duration),
    /// A measure is scheduled already.
    Scheduled,
}

/// The next step for `project` at `now`, recording it in `measured`.
fn next(measured: &mut HashMap<ProjectId, Measured>, project: &ProjectId, now: Instant) -> Next {
    if measured.len() > MEASURED_KEPT {
        measured.retain(|_, m| m.due || now.duration_since(m.at) < MEASURE_EVERY);
    }
    match measured.get_mut(project) {
        None => {
            measured.insert(
                project.clone(),
                Measured {
                    at: now,
                    due: false,
                },
            );
            Next::Now
        }
        Some(m) if now.duration_since(m.at) >= MEASURE_EVERY => {
            *m = Measured {
                at: now,
                due: false,
            };
            Next::Now
        }
        Some(m) if m.due => Next::Scheduled,
        Some(m) => {
            m.due = true;
            Next::Later(MEASURE_EVERY - now.duration_since(m.at))
        }
    }
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
            measured: Arc::default(),
        }
    }

    /// [`HealthGuard::check`] after a new bounce or complaint, at most once per
    /// [`MEASURE_EVERY`] for a project on this instance: at once when it was not measured
    /// within that time, else once at the end of it (in the background; a stop before then
    /// leaves it to the next bounce or complaint). Errors are logged: the events that caused it
    /// are applied already.
    pub async fn check_soon(&self, project: &ProjectId) {
        let step = next(&mut lock(&self.measured), project, Instant::now());
        match step {
            Next::Now => self.check_logged(project).await,
            Next::Scheduled => {}
            Next::Later(wait) => {
                let (guard, project) = (self.clone(), project.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    if let Some(m) = lock(&guard.measured).get_mut(&project) {
                        *m = Measured {
                            at: Instant::now(),
                            due: false,
                        };
                    }
                    guard.check_logged(&project).await;
                });
            }
        }
    }

    async fn check_logged(&self, project: &ProjectId) {
        if let Err(err) = self.check(project).await {
            // The next bounce or complaint measures again.
            tracing::warn!(project_id = %project, error = %err, "could not check the project's sending health");
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_is_measured_at_once_then_once_at_the_end_of_the_interval() {
        let mut measured = HashMap::new();
        let p = ProjectId::from_trusted("prj_a".to_string());
        let t0 = Instant::now();
        assert_eq!(next(&mut measured, &p, t0), Next::Now);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            next(&mut measured, &p, t1),
            Next::Later(MEASURE_EVERY - Duration::from_secs(1))
        );
        assert_eq!(next(&mut measured, &p, t1), Next::Scheduled);
        assert_eq!(next(&mut measured, &p, t0 + MEASURE_EVERY), Next::Now);
        let other = ProjectId::from_trusted("prj_b".to_string());
        assert_eq!(next(&mut measured, &other, t1), Next::Now);
    }
}
