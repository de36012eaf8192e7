//! Delivery of one email (`emails.deliver`): takes a slot of the project's send throttle, builds
//! and DKIM-signs the message from its stored draft (on the CPU pool, through a
//! [`MessageBuilder`]), hands it to the transport plugin, and records the outcome.
//!
//! What a crash can cause, exactly:
//! - before the hand-off starts: nothing; the job runs again after its lease and sends once;
//! - after the transport accepted the message but before the outcome was committed: the job runs
//!   again and the message is handed to the transport a second time (same Message-ID, which
//!   receivers may use to drop the copy). This window is one database round trip long; a
//!   re-delivery after an interrupted hand-off is logged as a warning;
//! - after the outcome was committed: nothing; the job is complete and the email no longer queued.
//!
//! The outcome is recorded keyed on the hand-off (the job claim that started it), not on the
//! job's lease: a claim whose lease lapsed while the transport was accepting the message still
//! records what happened, so the message is not handed off again. That write is retried in place
//! a few times before the job gives up on it.
//!
//! Transient transport errors are retried with the queue's backoff (exponential, with jitter,
//! capped at 5 minutes) until the email is older than `sending.retry_lifetime_seconds` (24 hours
//! by default, like an MTA's queue lifetime); then, and on every permanent error, the email is
//! marked `failed` with the reason.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{JobContext, JobError, JobHandler};
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins};
use crate::store::Store;
use crate::store::emails::{DELIVER_KIND, Deliverable, DeliveryOutcome, status};
use crate::store::jobs::DeliverPayload;
use crate::store::jobs::Lease;

/// Why a message could not be built at hand-off.
#[derive(Debug)]
pub enum BuildError {
    /// It never will be (the draft is unreadable, the domain lost its verification, the message
    /// is too large): the email fails with this reason.
    Permanent(String),
    /// Try again later (the database did not answer).
    Retry(String),
}

/// A built message, with its share of the hand-off memory budget, held until the hand-off ends.
pub struct Built {
    /// The complete signed message.
    pub raw: Vec<u8>,
    /// Released when the hand-off is over.
    pub room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Builds and signs the MIME message of a stored draft (`services::sending` implements it).
pub trait MessageBuilder: Send + Sync {
    /// The complete signed message of `draft` (JSON) with the shared content `content_id`.
    fn build<'a>(
        &'a self,
        project_id: &'a str,
        draft: String,
        content_id: Option<String>,
    ) -> BoxFuture<'a, Result<Built, BuildError>>;
}

/// Runs deliveries.
pub struct Deliveries {
    /// The plugins (the transport).
    pub plugins: Arc<Plugins>,
    /// Builds messages from drafts.
    pub builder: Arc<dyn MessageBuilder>,
    /// Messages per second per project handed to the transport (0: no limit).
    pub per_second: u32,
    /// A hand-off started longer ago than this (the job lease) was interrupted.
    pub stale_hand_off: Duration,
    /// How long transient failures are retried, from when the email was queued.
    pub retry_lifetime: Duration,
}

/// Times the outcome write is tried in place before the job gives up on it (and runs again).
const OUTCOME_WRITES: u32 = 6;

/// Records `outcome` (see [`Store::finish_delivery`]), retrying a failed write in place with a
/// doubling pause (0.2 s, 0.4 s, … 3.2 s): a database blip right after the transport accepted
/// the message must not leave the email to be handed off again.
async fn record(
    store: &Store,
    email: &Deliverable,
    lease: &Lease,
    outcome: DeliveryOutcome<'_>,
) -> Result<(), JobError> {
    let mut pause = Duration::from_millis(200);
    for attempt in 1..=OUTCOME_WRITES {
        match store.finish_delivery(email, lease, outcome).await {
            Ok(true) => return Ok(()),
            Ok(false) => return Err(JobError::LeaseLost),
            Err(err) if attempt < OUTCOME_WRITES => {
                tracing::warn!(email_id = %email.id, error = %err, attempt, "could not record the delivery outcome; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(err) => return Err(err.into()),
        }
    }
    Err(JobError::LeaseLost)
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
            let handed_off = || Value::from("the email was already handed off");
            if email.status != status::QUEUED {
                ctx.store.complete_job(lease, &handed_off()).await?;
                return Ok(());
            }
            let (raw, _room) = match (email.raw.take(), email.draft.take()) {
                // Queued before messages were built at hand-off.
                (Some(raw), _) => (raw, None),
                (None, Some(draft)) => {
                    let built = self
                        .builder
                        .build(&email.project_id, draft, email.content_id.clone())
                        .await;
                    match built {
                        Ok(Built { raw, room }) => (raw, room),
                        Err(BuildError::Retry(reason)) => {
                            return Err(JobError::Retry(reason.into()));
                        }
                        Err(BuildError::Permanent(reason)) => {
                            tracing::warn!(email_id = %email.id, error = %reason, "email could not be built");
                            let failed = DeliveryOutcome::Failed { error: &reason };
                            return record(&ctx.store, &email, lease, failed).await;
                        }
                    }
                }
                (None, None) => {
                    ctx.store.complete_job(lease, &handed_off()).await?;
                    return Ok(());
                }
            };
            let stale_ms = self.stale_hand_off.as_millis() as i64;
            if !ctx
                .store
                .start_hand_off(&email.id, stale_ms, &lease.worker)
                .await?
            {
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
            let age = crate::domain::time::now_ms() - email.created_at;
            let last_attempt = ctx.job.attempts >= ctx.job.max_attempts
                || age >= self.retry_lifetime.as_millis() as i64;
            let handing_off = std::time::Instant::now();
            let delivered = self.plugins.deliver(None, &message).await;
            metrics::histogram!("herald_transport_seconds")
                .record(handing_off.elapsed().as_secs_f64());
            let label = match &delivered {
                Ok(Ok(_)) => "sent",
                Ok(Err(DeliveryError::Permanent(_))) => "refused",
                Ok(Err(DeliveryError::Transient(_))) => "deferred",
                Err(_) => "plugin_error",
            };
            metrics::counter!("herald_deliveries_total", "outcome" => label).increment(1);
            let outcome = match delivered {
                Ok(Ok(receipt)) => {
                    let detail = receipt.detail.clone();
                    let sent = DeliveryOutcome::Sent {
                        provider_id: &receipt.provider_id,
                        detail: detail.as_deref(),
                    };
                    return record(&ctx.store, &email, lease, sent).await;
                }
                Ok(Err(DeliveryError::Permanent(reason))) => reason,
                Ok(Err(DeliveryError::Transient(reason))) if last_attempt => format!(
                    "gave up after {} attempts over {} s; last error: {reason}",
                    ctx.job.attempts,
                    age / 1000
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
            record(
                &ctx.store,
                &email,
                lease,
                DeliveryOutcome::Failed { error: &outcome },
            )
            .await
        })
    }
}
