//! Background checks of sending domains: one `domains.check` job per domain at a time. Each run
//! looks the records up, then stores the result, completes itself and schedules the next check
//! in one transaction (pending and failed domains again after `domains.check_interval_seconds`,
//! verified ones after `domains.verified_check_interval_seconds`). A check that cannot be made
//! (its last attempt fails too) keeps the domain's status and schedules the next check all the
//! same, so the chain of checks never ends.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{JobContext, JobError, JobHandler};
use crate::domain::sending_domain::DomainStatus;
use crate::domain::time::now_ms;
use crate::plugins::PluginError;
use crate::store::domains::{CHECK_KIND, CheckedDomain, Domain};
use crate::store::jobs::{DomainCheckPayload, NewJob};

/// Seconds between background checks of a domain.
#[derive(Clone, Copy, Debug)]
pub struct CheckIntervals {
    /// For pending and failed domains.
    pub unverified_seconds: u64,
    /// For verified domains.
    pub verified_seconds: u64,
}

/// Looks a domain's records up and decides its new status (the sending-domains service).
pub trait DomainChecker: Send + Sync {
    /// Checks `domain` now.
    fn check<'a>(&'a self, domain: &'a Domain)
    -> BoxFuture<'a, Result<CheckedDomain, PluginError>>;
}

/// The next check of a domain in `status`.
pub fn next_check(intervals: &CheckIntervals, status: DomainStatus, max_attempts: i32) -> NewJob {
    let seconds = match status {
        DomainStatus::Verified => intervals.verified_seconds,
        DomainStatus::Pending | DomainStatus::Failed => intervals.unverified_seconds,
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
    /// What checks a domain.
    pub checker: Arc<dyn DomainChecker>,
    /// When the next check is due.
    pub intervals: CheckIntervals,
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
            let checked = match self.checker.check(&domain).await {
                Ok(checked) => checked,
                Err(e) if ctx.job.attempts < ctx.job.max_attempts => {
                    return Err(JobError::Retry(e.into()));
                }
                Err(e) => {
                    // The last attempt of this check: keep the domain as it is and check again
                    // at the usual interval, so the chain never ends.
                    tracing::warn!(domain = %domain.name, error = %e, "domain check failed; checking again later");
                    let next = next_check(&self.intervals, domain.status, ctx.job.max_attempts);
                    return ctx
                        .store
                        .reschedule_domain_check(&domain, &ctx.lease, &e.to_string(), &next)
                        .await?
                        .ok_or(JobError::LeaseLost);
                }
            };
            if checked.status != domain.status {
                tracing::info!(
                    domain = %domain.name,
                    from = domain.status.as_str(),
                    to = checked.status.as_str(),
                    reason = checked.failure_reason.as_deref().unwrap_or(""),
                    "domain status changed"
                );
            }
            let next = next_check(&self.intervals, checked.status, ctx.job.max_attempts);
            ctx.store
                .finish_domain_check(&domain, &ctx.lease, &checked, &next)
                .await?
                .ok_or(JobError::LeaseLost)
        })
    }
}
