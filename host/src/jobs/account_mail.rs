//! `accounts.mail`: hands one message the service wrote for itself (see
//! `services::account_mail`) to the configured transport. The message is the job's input; a
//! transient failure retries with the queue's backoff up to `jobs_max_attempts`, a permanent one
//! fails the job with the transport's reason. A transport that is rate limited and says how
//! long to wait (`(retry after N s)`: a provider's `429` with `Retry-After`) has the job wait
//! that long without counting the attempt ([`JobError::RetryAfter`]). No email row, no project,
//! no usage.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{JobContext, JobError, JobHandler};
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins};
use crate::store::jobs::JobPayload;

/// The job kind.
pub const ACCOUNT_MAIL_KIND: &str = "accounts.mail";

/// The payload of an `accounts.mail` job (the message itself is the job's input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccountMailPayload {
    /// The message's id (its `Message-ID` local part).
    pub id: String,
    /// The envelope sender.
    pub sender: String,
    /// The one recipient.
    pub recipient: String,
}

impl JobPayload for AccountMailPayload {}

/// Delivers account mail.
pub struct AccountMailDeliveries {
    /// The plugins (the transport).
    pub plugins: Arc<Plugins>,
}

impl JobHandler for AccountMailDeliveries {
    fn kinds(&self) -> &'static [&'static str] {
        &[ACCOUNT_MAIL_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let payload: AccountMailPayload = ctx.payload()?;
            let raw = ctx
                .store
                .job_input(&ctx.job.id)
                .await?
                .ok_or_else(|| JobError::Fail("the message is missing".into()))?;
            let message = OutgoingMessage {
                id: payload.id,
                sender: payload.sender,
                recipients: vec![payload.recipient],
                raw,
            };
            // Through the default transport, failing over to its fallback like any email.
            let handed = super::routing::hand_off(&self.plugins, vec![(message, None)])
                .await
                .pop()
                .ok_or_else(|| JobError::Retry("no outcome from the transport".into()))?;
            match handed.outcome {
                Ok(Ok(receipt)) => {
                    let result = json!({
                        "providerId": receipt.provider_id,
                        "transport": handed.transport,
                    });
                    if !ctx.store.complete_job(&ctx.lease, &result).await? {
                        return Err(JobError::LeaseLost);
                    }
                    Ok(())
                }
                Ok(Err(DeliveryError::Permanent(reason))) => Err(JobError::Fail(reason)),
                Ok(Err(DeliveryError::Transient(reason))) => {
                    Err(match super::routing::retry_after(&reason) {
                        Some(wait) => JobError::RetryAfter {
                            seconds: wait.as_secs(),
                            reason,
                        },
                        None => JobError::Retry(reason.into()),
                    })
                }
                Err(err) => Err(JobError::Retry(err.into())),
            }
        })
    }
}
