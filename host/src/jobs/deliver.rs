//! Delivery of one email (`emails.deliver`): takes a slot of the project's send throttle, hands
//! the stored message to the transport plugin, and records the outcome.
//!
//! What a crash can cause, exactly:
//! - before the hand-off starts: nothing; the job runs again after its lease and sends once;
//! - after the transport accepted the message but before the outcome was committed: the job runs
//!   again and the message is handed to the transport a second time (same Message-ID, which
//!   receivers may use to drop the copy). This window is one database round trip long; a
//!   re-delivery after an interrupted hand-off is logged as a warning;
//! - after the outcome was committed: nothing; the job is complete and the email no longer queued.
//!
//! Transient transport errors are retried with the queue's backoff up to the job's attempt
//! limit; the last one, and every permanent error, marks the email `failed` with the reason.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{JobContext, JobError, JobHandler};
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins};
use crate::store::emails::{DELIVER_KIND, DeliveryOutcome, status};
use crate::store::jobs::DeliverPayload;

/// Runs deliveries.
pub struct Deliveries {
    /// The plugins (the transport).
    pub plugins: Arc<Plugins>,
    /// Messages per second per project handed to the transport (0: no limit).
    pub per_second: u32,
    /// A hand-off started longer ago than this (the job lease) was interrupted.
    pub stale_hand_off: std::time::Duration,
}

impl JobHandler for Deliveries {
    fn kinds(&self) -> &'static [&'static str] {
        &[DELIVER_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let lease = &ctx.lease;
            let DeliverPayload { email_id } = ctx.payload()?;
            // The throttle comes first, so that a postponed job does not read its message.
            if self.per_second > 0
                && let Some(project) = &ctx.job.project_id
                && let Err(next) = ctx
                    .store
                    .take_send_slot(project.as_str(), self.per_second)
                    .await?
            {
                // The project's budget for this second is used: wait for the next window
                // without counting an attempt.
                ctx.store.postpone_job(lease, next).await?;
                return Ok(());
            }
            let Some(mut email) = ctx.store.deliverable(&email_id).await? else {
                let why = Value::from("the email was deleted");
                ctx.store.complete_job(lease, &why).await?;
                return Ok(());
            };
            let Some(raw) = email.raw.take().filter(|_| email.status == status::QUEUED) else {
                let why = Value::from("the email was already handed off");
                ctx.store.complete_job(lease, &why).await?;
                return Ok(());
            };
            let stale_ms = self.stale_hand_off.as_millis() as i64;
            if !ctx.store.start_hand_off(&email.id, stale_ms).await? {
                // Another worker is handing this email off right now (this job's lease lapsed
                // meanwhile): look again once that hand-off is stale.
                let again = crate::domain::time::now_ms() + stale_ms;
                ctx.store.postpone_job(lease, again).await?;
                return Ok(());
            }
            if email.handed_off_at.is_some() {
                tracing::warn!(email_id = %email.id, "re-delivering after an interrupted hand-off; the recipient may receive this email twice");
            }
            let message = OutgoingMessage {
                id: email.id.clone(),
                sender: email.envelope_from.clone(),
                recipients: vec![email.to_address.clone()],
                raw,
            };
            let last_attempt = ctx.job.attempts >= ctx.job.max_attempts;
            let outcome = match self.plugins.deliver(None, &message).await {
                Ok(Ok(receipt)) => {
                    let detail = receipt.detail.clone();
                    let done = ctx
                        .store
                        .finish_delivery(
                            &email,
                            lease,
                            DeliveryOutcome::Sent {
                                provider_id: &receipt.provider_id,
                                detail: detail.as_deref(),
                            },
                        )
                        .await?;
                    return done.then_some(()).ok_or(JobError::LeaseLost);
                }
                Ok(Err(DeliveryError::Permanent(reason))) => reason,
                Ok(Err(DeliveryError::Transient(reason))) if last_attempt => format!(
                    "gave up after {} attempts; last error: {reason}",
                    ctx.job.attempts
                ),
                Ok(Err(DeliveryError::Transient(reason))) => {
                    ctx.store.end_hand_off(&email.id).await?;
                    return Err(JobError::Retry(reason.into()));
                }
                Err(err) if last_attempt => format!(
                    "gave up after {} attempts; the transport plugin failed: {err}",
                    ctx.job.attempts
                ),
                Err(err) => {
                    ctx.store.end_hand_off(&email.id).await?;
                    return Err(JobError::Retry(err.into()));
                }
            };
            tracing::warn!(email_id = %email.id, error = %outcome, "email delivery failed");
            let done = ctx
                .store
                .finish_delivery(&email, lease, DeliveryOutcome::Failed { error: &outcome })
                .await?;
            done.then_some(()).ok_or(JobError::LeaseLost)
        })
    }
}
