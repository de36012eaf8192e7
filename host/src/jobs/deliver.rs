//! Delivery of emails (`emails.deliver`, one job per email), in batches: the job a worker
//! claimed gathers up to `sending.batch_size` further due delivery jobs of its project under its
//! own claim, within the project's send throttle (one transaction); builds and DKIM-signs their
//! messages from the stored drafts (on the CPU pool, through a [`MessageBuilder`]); hands them
//! to the transport plugin in one call (`deliver-batch`, which the SMTP transport sends over one
//! pooled connection); and records every outcome in one transaction.
//!
//! What a crash can cause, exactly:
//! - before the hand-off starts: nothing; the jobs run again after their lease and send once;
//! - after the transport accepted some messages of the batch but before the outcomes were
//!   committed: the jobs run again and those messages are handed to the transport a second time
//!   (same Message-ID, which receivers may use to drop the copy). At most one batch per job slot
//!   is in this window, for as long as the rest of its hand-off and one commit take; a smaller
//!   `sending.batch_size` narrows it. A re-delivery after an interrupted hand-off is logged as a
//!   warning;
//! - after the outcomes were committed: nothing; the jobs are complete and the emails no
//!   longer queued.
//!
//! Outcomes are recorded keyed on the hand-off (the job claim that started it), not on the
//! jobs' lease: a claim whose lease lapsed while the transport was accepting the messages still
//! records what happened, so they are not handed off again. That write is retried in place a
//! few times before the job gives up on it.
//!
//! Transient transport errors are retried with the queue's backoff (exponential, with jitter,
//! capped at 5 minutes) until the email is older than `sending.retry_lifetime_seconds` (24 hours
//! by default, like an MTA's queue lifetime); then, and on every permanent error, the email is
//! marked `failed` with the reason. One refused message never holds back the rest of its batch.
//!
//! A batch stays within the hand-off memory budget (only its first message waits for room; the
//! others join when there is room at once) and within a quarter of the transport plugin's
//! memory limit; a message left out waits for the next batch.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{JobContext, JobError, JobHandler, backoff_ms, jittered};
use crate::domain::ids::EmailId;
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins};
use crate::store::Store;
use crate::store::domains::SigningDomain;
use crate::store::emails::{DELIVER_KIND, Deliverable, DeliveryOutcome, HandOffEnd, status};
use crate::store::jobs::{DeliverPayload, Lease};

/// Why a message could not be built at hand-off.
#[derive(Debug)]
pub enum BuildError {
    /// It never will be (the draft is unreadable, the domain lost its verification, the message
    /// is too large): the email fails with this reason.
    Permanent(String),
    /// Try again later (the database did not answer).
    Retry(String),
    /// The hand-off memory budget has no room for it now, and it is not the first of its batch.
    NoRoom,
}

/// A built message, with its share of the hand-off memory budget, held until the hand-off ends.
pub struct Built {
    /// The complete signed message.
    pub raw: Vec<u8>,
    /// Released when the hand-off is over.
    pub room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// One message of a batch to build: its stored draft and the content it shares with the other
/// emails of its send.
pub struct ToBuild {
    /// The stored draft (JSON).
    pub draft: String,
    /// The shared content (the attachments), when the send had any.
    pub content_id: Option<String>,
}

/// Builds and signs the MIME messages of stored drafts (`services::sending` implements it).
pub trait MessageBuilder: Send + Sync {
    /// The complete signed messages of one batch's drafts (one project): one result a draft,
    /// in their order. The first waits for room in the hand-off memory budget; each other fails
    /// with [`BuildError::NoRoom`] when there is no room for it at once. What the builds read
    /// alike (the signing domain) is read once for the batch.
    fn build_batch<'a>(
        &'a self,
        project_id: &'a str,
        drafts: Vec<ToBuild>,
    ) -> BoxFuture<'a, Vec<Result<Built, BuildError>>>;
}

/// What the builds of one batch (one project, one claim) share: the signing domains read for
/// it, by name (`None`: not verified). It lives for one batch, so a domain that loses its
/// verification stops signing from the next batch on.
#[derive(Default)]
pub struct BatchMemo {
    signing: std::sync::Mutex<std::collections::HashMap<String, Option<Arc<SigningDomain>>>>,
}

impl BatchMemo {
    /// The signing domain `name` (`None`: not verified), read by `read` the first time this
    /// batch asks for it and remembered for the rest of the batch. Two builds asking at once
    /// may both read; both find the same.
    pub async fn signing<E, F>(&self, name: &str, read: F) -> Result<Option<Arc<SigningDomain>>, E>
    where
        F: std::future::Future<Output = Result<Option<SigningDomain>, E>>,
    {
        let known = self
            .signing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned();
        if let Some(known) = known {
            return Ok(known);
        }
        let read = read.await?.map(Arc::new);
        self.signing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_string(), read.clone());
        Ok(read)
    }
}

/// Runs deliveries.
pub struct Deliveries {
    /// The plugins (the transport).
    pub plugins: Arc<Plugins>,
    /// Builds messages from drafts.
    pub builder: Arc<dyn MessageBuilder>,
    /// Messages per second per project handed to the transport (0: no limit).
    pub per_second: u32,
    /// Most emails handed to the transport in one call (`sending.batch_size`).
    pub batch_size: usize,
    /// Most bytes of messages in one call (a quarter of the plugin memory limit).
    pub batch_bytes: usize,
    /// A hand-off started longer ago than this (the job lease) was interrupted.
    pub stale_hand_off: Duration,
    /// How long transient failures are retried, from when the email was queued.
    pub retry_lifetime: Duration,
}

/// Times the outcome write is tried in place before the job gives up on it (and runs again).
const OUTCOME_WRITES: u32 = 6;

/// Records the ends of a batch's hand-offs (see [`Store::finish_deliveries`]), retrying a
/// failed write in place with a doubling pause (0.2 s, 0.4 s, … 3.2 s): a database blip right
/// after the transport accepted the messages must not leave them to be handed off again.
async fn record(
    store: &Store,
    ends: &[(&Deliverable, &Lease, HandOffEnd<'_>)],
) -> Result<Vec<bool>, JobError> {
    let mut pause = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match store.finish_deliveries(ends).await {
            Ok(recorded) => return Ok(recorded),
            Err(err) if attempt < OUTCOME_WRITES => {
                tracing::warn!(emails = ends.len(), error = %err, attempt, "could not record the delivery outcomes; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// One job of a batch.
struct Member {
    lease: Lease,
    /// Attempts, this one included.
    attempts: i32,
    max_attempts: i32,
    email_id: EmailId,
}

/// A member whose message is built and ready to hand off.
struct Ready {
    member: usize,
    email: Deliverable,
    raw: Vec<u8>,
    _room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How a member's hand-off ended, before it is recorded.
enum End {
    Delivered {
        provider_id: String,
        detail: Option<String>,
    },
    Failed(String),
    Deferred {
        error: String,
        retry_at: i64,
    },
}

impl Deliveries {
    /// Whether a transient failure of `member`'s email, queued at `created_at`, is its last.
    fn last_attempt(&self, member: &Member, created_at: i64) -> (bool, i64) {
        let age = crate::domain::time::now_ms() - created_at;
        let last =
            member.attempts >= member.max_attempts || age >= self.retry_lifetime.as_millis() as i64;
        (last, age)
    }

    /// The end of a transient failure: retried later, or failed when it was the last attempt.
    fn transient(&self, member: &Member, created_at: i64, reason: String) -> End {
        let (last, age) = self.last_attempt(member, created_at);
        if last {
            End::Failed(format!(
                "gave up after {} attempts over {} s; last error: {reason}",
                member.attempts,
                age / 1000
            ))
        } else {
            End::Deferred {
                error: reason,
                retry_at: crate::domain::time::now_ms() + jittered(backoff_ms(member.attempts)),
            }
        }
    }

    /// Puts a member's job back to run again at `at` without counting the attempt.
    async fn release(store: &Store, member: &Member, at: i64) -> Result<(), JobError> {
        store.postpone_job(&member.lease, at).await?;
        Ok(())
    }
}

impl JobHandler for Deliveries {
    fn kinds(&self) -> &'static [&'static str] {
        &[DELIVER_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let store = &ctx.store;
            let lease = &ctx.lease;
            let DeliverPayload { email_id } = ctx.payload()?;
            let mut members = vec![Member {
                lease: lease.clone(),
                attempts: ctx.job.attempts,
                max_attempts: ctx.job.max_attempts,
                email_id,
            }];
            // The batch (and the throttle) comes first, so that a postponed job does not read
            // its message.
            if let Some(project) = &ctx.job.project_id {
                let more = self.batch_size.saturating_sub(1) as i64;
                let lease_ms = self.stale_hand_off.as_millis() as i64;
                match store
                    .take_delivery_batch(project.as_str(), lease, more, self.per_second, lease_ms)
                    .await?
                {
                    Err(next) => {
                        // The project's budget for this second is used: wait for the next
                        // window without counting an attempt.
                        store.postpone_job(lease, next).await?;
                        return Ok(());
                    }
                    Ok(joined) => {
                        for job in joined {
                            let member_lease = Lease {
                                job: job.id.clone(),
                                worker: job.claim.clone(),
                            };
                            match serde_json::from_value::<DeliverPayload>(job.payload) {
                                Ok(payload) => members.push(Member {
                                    lease: member_lease,
                                    attempts: job.attempts,
                                    max_attempts: job.max_attempts,
                                    email_id: payload.email_id,
                                }),
                                Err(e) => {
                                    let why =
                                        format!("the emails.deliver job's payload is invalid: {e}");
                                    store.fail_job(&member_lease, &why, None).await?;
                                }
                            }
                        }
                    }
                }
            }
            let ids: Vec<&str> = members.iter().map(|m| m.email_id.as_str()).collect();
            let mut emails: std::collections::HashMap<String, Deliverable> = store
                .deliverables(&ids)
                .await?
                .into_iter()
                .map(|e| (e.id.clone(), e))
                .collect();

            // Build the messages: the first waits for room in the memory budget, the others
            // join only when there is room now.
            let mut ends: Vec<(usize, Deliverable, End)> = Vec::new();
            let mut ready: Vec<Ready> = Vec::new();
            let mut to_build: Vec<(usize, Deliverable)> = Vec::new();
            let mut drafts: Vec<ToBuild> = Vec::new();
            for (i, member) in members.iter().enumerate() {
                let Some(mut email) = emails.remove(member.email_id.as_str()) else {
                    let why = Value::from("the email was deleted");
                    store.complete_job(&member.lease, &why).await?;
                    continue;
                };
                let handed_off = || Value::from("the email was already handed off");
                if email.status != status::QUEUED {
                    store.complete_job(&member.lease, &handed_off()).await?;
                    continue;
                }
                match (email.raw.take(), email.draft.take()) {
                    // Queued before messages were built at hand-off.
                    (Some(raw), _) => ready.push(Ready {
                        member: i,
                        email,
                        raw,
                        _room: None,
                    }),
                    (None, Some(draft)) => {
                        drafts.push(ToBuild {
                            draft,
                            content_id: email.content_id.clone(),
                        });
                        to_build.push((i, email));
                    }
                    (None, None) => {
                        store.complete_job(&member.lease, &handed_off()).await?;
                    }
                }
            }
            let mut unbuildable: Vec<(usize, Deliverable, String)> = Vec::new();
            let built = match to_build.first() {
                Some((_, email)) => {
                    let project = email.project_id.clone();
                    self.builder.build_batch(&project, drafts).await
                }
                None => Vec::new(),
            };
            let mut bytes = ready.iter().map(|r| r.raw.len()).sum::<usize>();
            let now = crate::domain::time::now_ms();
            for ((i, email), built) in to_build.into_iter().zip(built) {
                let member = &members[i];
                match built {
                    Ok(Built { raw, room }) => {
                        if !ready.is_empty() && bytes + raw.len() > self.batch_bytes {
                            // Over the transport's share of memory: the next batch takes it.
                            Self::release(store, member, now).await?;
                            continue;
                        }
                        bytes += raw.len();
                        ready.push(Ready {
                            member: i,
                            email,
                            raw,
                            _room: room,
                        });
                    }
                    Err(BuildError::NoRoom) => Self::release(store, member, now).await?,
                    Err(BuildError::Retry(reason)) => {
                        let end = self.transient(member, email.created_at, reason);
                        ends.push((i, email, end));
                    }
                    Err(BuildError::Permanent(reason)) => {
                        tracing::warn!(email_id = %email.id, error = %reason, "email could not be built");
                        unbuildable.push((i, email, reason));
                    }
                }
            }

            // Start the hand-offs, all under this claim: of the messages built, and of those that
            // never will be (their failure is recorded keyed on this hand-off, like any outcome).
            let stale_ms = self.stale_hand_off.as_millis() as i64;
            let ids: Vec<&str> = ready
                .iter()
                .map(|r| r.email.id.as_str())
                .chain(unbuildable.iter().map(|(_, email, _)| email.id.as_str()))
                .collect();
            let started: std::collections::HashSet<String> = store
                .start_hand_offs(&ids, stale_ms, &lease.worker)
                .await?
                .into_iter()
                .collect();
            for (i, email, reason) in unbuildable {
                if started.contains(&email.id) {
                    ends.push((i, email, End::Failed(reason)));
                } else {
                    Self::release(store, &members[i], now + stale_ms).await?;
                }
            }
            let mut messages = Vec::with_capacity(ready.len());
            let mut handed = Vec::with_capacity(ready.len());
            for r in ready {
                let member = &members[r.member];
                if !started.contains(&r.email.id) {
                    // Another claim is handing this email off right now (a lapsed lease), or it
                    // is no longer queued: look again once that hand-off is stale.
                    Self::release(store, member, now + stale_ms).await?;
                    continue;
                }
                if r.email.handed_off_at.is_some() {
                    tracing::warn!(email_id = %r.email.id, "re-delivering after an interrupted hand-off; the recipient may receive this email twice");
                }
                messages.push(OutgoingMessage {
                    id: r.email.id.clone(),
                    sender: r.email.envelope_from.clone(),
                    recipients: vec![r.email.to_address.clone()],
                    raw: r.raw,
                });
                handed.push((r.member, r.email, r._room));
            }

            if !messages.is_empty() {
                let handing_off = std::time::Instant::now();
                let count = messages.len();
                let delivered = self.plugins.deliver_batch(None, messages).await;
                metrics::histogram!("herald_transport_seconds")
                    .record(handing_off.elapsed().as_secs_f64());
                metrics::histogram!("herald_delivery_batch_size").record(count as f64);
                let outcomes: Vec<Result<Result<_, _>, String>> = match delivered {
                    Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
                    Err(err) => {
                        tracing::warn!(error = %err, emails = count, "the transport plugin failed");
                        (0..count).map(|_| Err(err.to_string())).collect()
                    }
                };
                for ((i, email, _room), outcome) in handed.into_iter().zip(outcomes) {
                    let member = &members[i];
                    let label = match &outcome {
                        Ok(Ok(_)) => "sent",
                        Ok(Err(DeliveryError::Permanent(_))) => "refused",
                        Ok(Err(DeliveryError::Transient(_))) => "deferred",
                        Err(_) => "plugin_error",
                    };
                    metrics::counter!("herald_deliveries_total", "outcome" => label).increment(1);
                    let end = match outcome {
                        Ok(Ok(receipt)) => End::Delivered {
                            provider_id: receipt.provider_id,
                            detail: receipt.detail,
                        },
                        Ok(Err(DeliveryError::Permanent(reason))) => End::Failed(reason),
                        Ok(Err(DeliveryError::Transient(reason))) => {
                            self.transient(member, email.created_at, reason)
                        }
                        Err(err) => {
                            let (last, _) = self.last_attempt(member, email.created_at);
                            if last {
                                End::Failed(format!(
                                    "gave up after {} attempts; the transport plugin failed: {err}",
                                    member.attempts
                                ))
                            } else {
                                self.transient(member, email.created_at, err)
                            }
                        }
                    };
                    ends.push((i, email, end));
                }
            }
            if ends.is_empty() {
                return Ok(());
            }

            // Record every end in one transaction.
            let records: Vec<(&Deliverable, &Lease, HandOffEnd<'_>)> = ends
                .iter()
                .map(|(i, email, end)| {
                    let end = match end {
                        End::Delivered {
                            provider_id,
                            detail,
                        } => HandOffEnd::Delivered(DeliveryOutcome::Sent {
                            provider_id,
                            detail: detail.as_deref(),
                        }),
                        End::Failed(error) => {
                            tracing::warn!(email_id = %email.id, error = %error, "email delivery failed");
                            HandOffEnd::Delivered(DeliveryOutcome::Failed { error })
                        }
                        End::Deferred { error, retry_at } => {
                            tracing::info!(email_id = %email.id, error = %error, "email delivery deferred");
                            HandOffEnd::Deferred {
                                error,
                                retry_at: *retry_at,
                            }
                        }
                    };
                    (email, &members[*i].lease, end)
                })
                .collect();
            let recorded = record(store, &records).await?;
            let mut primary_lost = false;
            for ((i, email, _), ok) in ends.iter().zip(recorded) {
                if !ok {
                    tracing::warn!(email_id = %email.id, "the delivery's job is owned by another claim now");
                    primary_lost |= *i == 0;
                }
            }
            if primary_lost {
                return Err(JobError::LeaseLost);
            }
            Ok(())
        })
    }
}
