//! Background checks of sending domains: one `domains.check` job per domain at a time. Each run
//! looks the records up, then stores the result, completes itself and schedules the next check
//! in one transaction (pending and failed domains again after `domains.check_interval_seconds`,
//! verified ones after `domains.verified_check_interval_seconds`).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{JobContext, JobError, JobHandler};
use crate::config::Settings;
use crate::domain::sending_domain::DomainStatus;
use crate::domain::time::now_ms;
use crate::plugins::Plugins;
use crate::store::domains::CHECK_KIND;
use crate::store::jobs::{DomainCheckPayload, NewJob};

/// The next check of a domain in `status`.
pub fn next_check(settings: &Settings, status: DomainStatus, max_attempts: i32) -> NewJob {
    let seconds = match status {
        DomainStatus::Verified => settings.domains.verified_check_interval_seconds,
        DomainStatus::Pending | DomainStatus::Failed => settings.domains.check_interval_seconds,
    };
    NewJob {
        kind: CHECK_KIND.to_string(),
        project_id: None,
        payload: Value::Null,
        input: None,
        max_attempts,
        run_at: now_ms() + (seconds.max(1) as i64) * 1000,
    }
}

/// Runs domain checks.
pub struct DomainChecks {
    /// The plugins (the DNS verifier).
    pub plugins: Arc<Plugins>,
    /// Settings (intervals, mail host, SPF).
    pub settings: Settings,
}

impl JobHandler for DomainChecks {
    fn kinds(&self) -> &'static [&'static str] {
        &[CHECK_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let DomainCheckPayload { domain_id } = ctx.payload()?;
            let Some(domain) = ctx.store.domain_by_id(&domain_id).await? else {
                ctx.store
                    .complete_job(&ctx.lease, &Value::from("domain deleted"))
                    .await?;
                return Ok(());
            };
            let checked = crate::domains::check(&self.plugins, &self.settings, &domain)
                .await
                .map_err(|e| JobError::Retry(e.into()))?;
            if checked.status != domain.status {
                tracing::info!(
                    domain = %domain.name,
                    from = domain.status.as_str(),
                    to = checked.status.as_str(),
                    reason = checked.failure_reason.as_deref().unwrap_or(""),
                    "domain status changed"
                );
            }
            let next = next_check(&self.settings, checked.status, ctx.job.max_attempts);
            ctx.store
                .finish_domain_check(&domain, &ctx.lease, &checked, &next)
                .await?
                .ok_or(JobError::LeaseLost)
        })
    }
}
