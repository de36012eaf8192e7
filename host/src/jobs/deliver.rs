//! Delivery of emails, in batches. Queued emails are their own queue (`store::delivery`): no
//! job is written for them. Each instance runs delivery workers (`jobs_concurrency` batches at
//! once) that list the projects with queued email, deal their free slots to the projects with
//! due emails in turn (`fairness::plan`, as the job workers do), and for each slot claim up to
//! `sending.batch_size` of that project's due emails within its send throttle (one
//! transaction, which also starts their hand-off under a token of its own); build and DKIM-sign
//! their messages from the stored drafts (on the CPU pool, through a [`MessageBuilder`]); hand
//! them to their transports, one call per transport (`deliver-batch`, which the SMTP transport
//! sends over one pooled connection; [`super::routing`] chooses each email's transport and fails
//! over to a transport's fallback); and record every outcome in one transaction. A heartbeat keeps
//! the claimed emails held while the batch runs.
//!
//! What a crash can cause, exactly:
//! - before the hand-off starts: nothing; the emails are due again once their hold lapses
//!   (`jobs_lease_seconds`) and are sent once;
//! - after the transport accepted some messages of the batch but before the outcomes were
//!   committed: once the hold lapses, those messages are handed to the transport a second time
//!   (same Message-ID, which receivers may use to drop the copy). At most one batch per slot
//!   is in this window, for as long as the rest of its hand-off and one commit take; a smaller
//!   `sending.batch_size` narrows it. A re-delivery after an interrupted hand-off is logged as a
//!   warning;
//! - after the outcomes were committed: nothing; the emails are no longer queued.
//!
//! Outcomes are recorded keyed on the hand-off (the claim's token), and a claim never takes an
//! email whose last hand-off started less than a lease ago, so a batch whose heartbeat stalled
//! still records what happened and its messages are not handed off again meanwhile. That
//! write is retried in place: while the database is unavailable, until it lands (its heartbeat
//! keeps the emails held meanwhile whenever the database answers); for any other failure, a
//! few times before the batch gives up on it. A database outage longer than the hold is, to
//! the queue, a crash of the batch.
//!
//! Transient transport errors are retried with the queue's backoff (exponential, with jitter,
//! capped at 5 minutes) until the email is older than `sending.retry_lifetime_seconds` (24 hours
//! by default, like an MTA's queue lifetime); then, and on every permanent error, the email is
//! marked `failed` with the reason. One refused message never holds back the rest of its batch.
//!
//! A batch stays within the hand-off memory budget (only its first message waits for room; the
//! others join when there is room at once) and within a quarter of the transport plugin's
//! memory limit; a message left out is put back, due at once, for the next batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, Semaphore, watch};
use tracing::Instrument;

use super::fairness;
use crate::domain::time::now_ms;
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins};
use crate::store::domains::SigningDomain;
use crate::store::emails::{Deliverable, DeliveryOutcome, HandOffEnd};
use crate::store::{Store, StoreError};

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

/// The delivery workers of an instance (see the module docs).
pub struct Deliveries {
    /// Where the emails are queued.
    pub store: Store,
    /// The plugins (the transport).
    pub plugins: Arc<Plugins>,
    /// Builds messages from drafts.
    pub builder: Arc<dyn MessageBuilder>,
    /// Batches handed off at once by this instance (`jobs_concurrency`).
    pub concurrency: usize,
    /// How often idle workers look for due emails (`jobs_poll_interval_ms`).
    pub poll_interval: Duration,
    /// Wakes the workers when emails are queued (`JobQueue::wake`).
    pub wake: Arc<Notify>,
    /// Messages per second per project handed to the transport (0: no limit).
    pub per_second: u32,
    /// Most emails handed to the transport in one call (`sending.batch_size`).
    pub batch_size: usize,
    /// Most bytes of messages in one call (a quarter of the plugin memory limit).
    pub batch_bytes: usize,
    /// How long a claim holds its emails without a heartbeat (`jobs_lease_seconds`); a hand-off
    /// started longer ago than this was interrupted.
    pub lease: Duration,
    /// How long transient failures are retried, from when the email was queued.
    pub retry_lifetime: Duration,
    /// Set once the workers are stopping: a batch no longer waits out an unavailable database
    /// to record its outcomes.
    pub stopped: AtomicBool,
}

/// Times the outcome write is tried in place before the batch gives up on it (its emails are
/// then due again once their hold lapses), unless the database is unavailable.
const OUTCOME_WRITES: u32 = 6;

/// The longest pause between two tries of the outcome write.
const OUTCOME_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Records the ends of a batch's hand-offs (see [`Store::finish_deliveries`]), retrying a
/// failed write in place with a doubling pause (0.2 s, 0.4 s, … then every 2 s): a database
/// blip right after the transport accepted the messages must not leave them to be handed off
/// again. While the database is unavailable (unreachable, refusing connections, locked past
/// the busy timeout), the write is retried until it lands, however long that takes, unless
/// the workers are stopping (`stopped`); any other failure ends the tries after
/// [`OUTCOME_WRITES`]. The batch's heartbeat runs meanwhile, so the emails stay held whenever
/// the database answers; an outage longer than the hold (`jobs_lease_seconds`) is to the queue
/// what a crash is, and may re-send.
async fn record(
    store: &Store,
    token: &str,
    ends: &[(&Deliverable, HandOffEnd<'_>)],
    stopped: &AtomicBool,
) -> Result<Vec<bool>, StoreError> {
    let mut pause = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match store.finish_deliveries(token, ends).await {
            Err(err)
                if attempt < OUTCOME_WRITES
                    || (matches!(err, StoreError::Unavailable(_))
                        && !stopped.load(Ordering::Acquire)) =>
            {
                tracing::warn!(emails = ends.len(), error = %err, attempt, "could not record the delivery outcomes; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(OUTCOME_PAUSE_MAX);
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// A claimed batch: one project's emails under one hand-off token.
struct Batch {
    token: String,
    emails: Vec<Deliverable>,
}

/// A claimed email whose message is built and ready to hand off.
struct Ready {
    email: Deliverable,
    raw: Vec<u8>,
    _room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How an email's hand-off ended, before it is recorded.
enum End {
    Delivered {
        provider_id: String,
        detail: Option<String>,
        /// The transport that took it.
        transport: String,
    },
    Failed {
        error: String,
        /// The transport that refused it last, when one was called.
        transport: Option<String>,
    },
    Deferred {
        error: String,
        retry_at: i64,
    },
}

/// A failure without a transport's answer (the message could not be built).
fn failed(error: String) -> End {
    End::Failed {
        error,
        transport: None,
    }
}

impl Deliveries {
    /// Runs the delivery workers until `stop` turns true, then waits for running batches to end
    /// (an unfinished one is due again after its hold lapses, on any instance).
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let slots = Arc::new(Semaphore::new(self.concurrency.max(1)));
        // The project served last: the next claim starts after it (see `fairness`).
        let mut cursor = None;
        loop {
            if *stop.borrow() {
                self.stopped.store(true, Ordering::Release);
                break;
            }
            let free = slots.available_permits();
            let mut started = 0;
            let mut wake_at = None;
            if free > 0 {
                match self.plan(free, &mut cursor).await {
                    Ok((takes, next)) => {
                        wake_at = next;
                        // Each batch starts as soon as it is claimed.
                        let claims = self.claim(takes, &mut wake_at, |batch| {
                            // The plan dealt no more slots than were free, and only this loop
                            // takes them, so a permit is there; a claimed batch runs regardless.
                            let permit = slots.clone().try_acquire_owned().ok();
                            started += 1;
                            let this = self.clone();
                            let span = tracing::info_span!("delivery", emails = batch.emails.len());
                            tokio::spawn(
                                async move {
                                    this.deliver(batch).await;
                                    drop(permit);
                                    // A slot is free: look for due emails now rather than at
                                    // the next poll.
                                    this.wake.notify_one();
                                }
                                .instrument(span),
                            );
                        });
                        if let Err(err) = claims.await {
                            tracing::warn!(error = %err, "could not claim emails to deliver");
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "could not look for emails to deliver")
                    }
                }
            }
            let idle = started == 0;
            if idle || slots.available_permits() == 0 {
                let pause = super::pause_until(wake_at, self.poll_interval);
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        let _ = slots.acquire_many(self.concurrency.max(1) as u32).await;
    }

    /// Plans up to `free` batches fairly: lists the projects with queued email after `cursor`
    /// (wrapping), reads the throttled ones' budgets, and deals the slots to those with due
    /// emails in turn. Answers the slots of each project and, when nothing is due now, when
    /// something will be.
    async fn plan(
        &self,
        free: usize,
        cursor: &mut Option<String>,
    ) -> Result<(Vec<(String, i64)>, Option<i64>), StoreError> {
        let store = &self.store;
        let heads = fairness::heads_after(cursor.as_deref(), |after, limit| async move {
            store.delivery_heads(&after, limit).await
        })
        .await?;
        let batch = self.batch_size.max(1) as i64;
        let mut left = HashMap::new();
        let mut next_window = None;
        if self.per_second > 0 && !heads.is_empty() {
            let projects: Vec<&str> = heads.iter().map(|h| h.queue.as_str()).collect();
            let (budgets, next) = store.send_budgets_left(&projects, self.per_second).await?;
            for (project, n) in budgets {
                // A slot takes a batch of the budget: a project with `n` left gets `n / batch`
                // slots, rounded up.
                left.insert(project, (n + batch - 1) / batch);
            }
            next_window = Some(next);
        }
        let now = now_ms();
        let plan = fairness::plan(&heads, &left, cursor.as_deref(), free, now);
        if plan.cursor.is_some() {
            *cursor = plan.cursor;
        }
        // When to look again if nothing was due: the earliest head, or the next budget window.
        let wake_at = heads
            .iter()
            .map(|h| h.next_run_at)
            .filter(|at| *at > now)
            .chain(next_window)
            .min();
        Ok((plan.takes, wake_at))
    }

    /// Claims a batch for each slot of `takes` (project, slots), handing each to `start` as
    /// soon as it is claimed; stops taking a project's slots once it has no more due emails,
    /// and moves `wake_at` to the next budget window when its budget is spent.
    async fn claim(
        &self,
        takes: Vec<(String, i64)>,
        wake_at: &mut Option<i64>,
        mut start: impl FnMut(Batch),
    ) -> Result<(), StoreError> {
        let batch = self.batch_size.max(1) as i64;
        let lease_ms = self.lease.as_millis() as i64;
        for (project, slots) in takes {
            for _ in 0..slots {
                let token = format!("dlv_{}", uuid::Uuid::new_v4().simple());
                let claimed = self
                    .store
                    .claim_deliveries(&project, &token, batch, self.per_second, lease_ms)
                    .await?;
                match claimed {
                    Ok(emails) if !emails.is_empty() => {
                        let full = emails.len() as i64 == batch;
                        start(Batch { token, emails });
                        if !full {
                            // The project has no more due emails now.
                            break;
                        }
                    }
                    Ok(_) => break,
                    Err(next) => {
                        *wake_at = Some(wake_at.map_or(next, |at| at.min(next)));
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a transient failure of an email is its last, and the email's age.
    fn last_attempt(&self, email: &Deliverable) -> (bool, i64) {
        let age = now_ms() - email.created_at;
        (age >= self.retry_lifetime.as_millis() as i64, age)
    }

    /// The end of a transient failure: retried later, or failed when it was the last attempt.
    fn transient(&self, email: &Deliverable, reason: String) -> End {
        let attempts = email.attempts + 1;
        let (last, age) = self.last_attempt(email);
        if last {
            failed(format!(
                "gave up after {attempts} attempts over {} s; last error: {reason}",
                age / 1000
            ))
        } else {
            // No sooner than the transport asked (`(retry after N s)`, a provider's 429).
            End::Deferred {
                retry_at: super::retry_time(attempts, &reason),
                error: reason,
            }
        }
    }

    /// Delivers one claimed batch, with a heartbeat that keeps its emails held meanwhile.
    async fn deliver(&self, batch: Batch) {
        let (done_tx, mut done_rx) = watch::channel(false);
        let heartbeat = {
            let store = self.store.clone();
            let token = batch.token.clone();
            let ids: Vec<String> = batch.emails.iter().map(|e| e.id.clone()).collect();
            let lease_ms = self.lease.as_millis() as i64;
            let every = self.lease / 3;
            tokio::spawn(async move {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {
                            match store.extend_hand_offs(&ids, &token, lease_ms).await {
                                Ok(0) => break,
                                Ok(_) => {}
                                Err(err) => tracing::warn!(error = %err, "could not extend the hold of a delivery batch"),
                            }
                        }
                        _ = done_rx.changed() => break,
                    }
                }
            })
        };
        let started = std::time::Instant::now();
        let count = batch.emails.len();
        let result = std::panic::AssertUnwindSafe(self.hand_off(batch));
        let outcome = match futures::FutureExt::catch_unwind(result).await {
            Ok(Ok(())) => "ok",
            Ok(Err(err)) => {
                tracing::warn!(error = %err, emails = count, "a delivery batch could not be recorded; its emails are due again once their hold lapses");
                "retry"
            }
            Err(_) => {
                tracing::error!(
                    emails = count,
                    "a delivery batch panicked; its emails are due again once their hold lapses"
                );
                "panicked"
            }
        };
        let _ = done_tx.send(true);
        let _ = heartbeat.await;
        metrics::counter!("herald_delivery_batches_total", "outcome" => outcome).increment(1);
        metrics::histogram!("herald_delivery_batch_seconds")
            .record(started.elapsed().as_secs_f64());
    }

    /// Builds, hands off and records one claimed batch.
    async fn hand_off(&self, batch: Batch) -> Result<(), StoreError> {
        let store = &self.store;
        let Batch { token, emails } = batch;
        // Build the messages: the first waits for room in the memory budget, the others join
        // only when there is room now.
        let mut ends: Vec<(Deliverable, End)> = Vec::new();
        let mut ready: Vec<Ready> = Vec::new();
        let mut to_build: Vec<Deliverable> = Vec::new();
        let mut drafts: Vec<ToBuild> = Vec::new();
        for mut email in emails {
            match (email.raw.take(), email.draft.take()) {
                // Queued before messages were built at hand-off.
                (Some(raw), _) => ready.push(Ready {
                    email,
                    raw,
                    _room: None,
                }),
                (None, Some(draft)) => {
                    drafts.push(ToBuild {
                        draft,
                        content_id: email.content_id.clone(),
                    });
                    to_build.push(email);
                }
                (None, None) => {
                    ends.push((email, failed("the email has no message to send".into())))
                }
            }
        }
        let built = match to_build.first() {
            Some(email) => {
                let project = email.project_id.clone();
                self.builder.build_batch(&project, drafts).await
            }
            None => Vec::new(),
        };
        let mut bytes = ready.iter().map(|r| r.raw.len()).sum::<usize>();
        let mut put_back: Vec<String> = Vec::new();
        for (email, built) in to_build.into_iter().zip(built) {
            match built {
                Ok(Built { raw, room }) => {
                    if !ready.is_empty() && bytes + raw.len() > self.batch_bytes {
                        // Over the transport's share of memory: the next batch takes it.
                        put_back.push(email.id);
                        continue;
                    }
                    bytes += raw.len();
                    ready.push(Ready {
                        email,
                        raw,
                        _room: room,
                    });
                }
                Err(BuildError::NoRoom) => put_back.push(email.id),
                Err(BuildError::Retry(reason)) => {
                    let end = self.transient(&email, reason);
                    ends.push((email, end));
                }
                Err(BuildError::Permanent(reason)) => {
                    tracing::warn!(email_id = %email.id, error = %reason, "email could not be built");
                    ends.push((email, failed(reason)));
                }
            }
        }
        if !put_back.is_empty() {
            let ids: Vec<&str> = put_back.iter().map(String::as_str).collect();
            store.release_hand_offs(&ids, &token).await?;
        }

        let mut messages = Vec::with_capacity(ready.len());
        let mut handed = Vec::with_capacity(ready.len());
        if !ready.is_empty() {
            // Each email's transport: its `from` domain's, else its project's, else the default.
            let choices = store.transport_choices(&ready[0].email.project_id).await?;
            for r in ready {
                if r.email.handed_off_at.is_some() {
                    tracing::warn!(email_id = %r.email.id, "re-delivering after an interrupted hand-off; the recipient may receive this email twice");
                }
                let transport = super::routing::choose(&choices, &r.email.from_address);
                messages.push((
                    OutgoingMessage {
                        id: r.email.id.clone(),
                        sender: r.email.envelope_from.clone(),
                        recipients: vec![r.email.to_address.clone()],
                        raw: r.raw,
                    },
                    transport,
                ));
                handed.push((r.email, r._room));
            }
        }

        if !messages.is_empty() {
            let outcomes = super::routing::hand_off(&self.plugins, messages).await;
            for ((email, _room), handed) in handed.into_iter().zip(outcomes) {
                let label = match &handed.outcome {
                    Ok(Ok(_)) => "sent",
                    Ok(Err(DeliveryError::Permanent(_))) => "refused",
                    Ok(Err(DeliveryError::Transient(_))) => "deferred",
                    Err(_) => "plugin_error",
                };
                metrics::counter!("herald_deliveries_total", "outcome" => label).increment(1);
                let note = handed.failover_note();
                let end = match handed.outcome {
                    Ok(Ok(receipt)) => End::Delivered {
                        provider_id: receipt.provider_id,
                        detail: match (note.is_empty(), receipt.detail) {
                            (true, detail) => detail,
                            (false, Some(detail)) => Some(format!("{note}{detail}")),
                            (false, None) => Some(note.trim_end_matches("; ").to_string()),
                        },
                        transport: handed.transport,
                    },
                    Ok(Err(DeliveryError::Permanent(reason))) => End::Failed {
                        error: format!("{note}{reason}"),
                        transport: Some(handed.transport),
                    },
                    // A deferral names the transport that gave its reason.
                    Ok(Err(DeliveryError::Transient(reason))) => {
                        self.transient(&email, format!("{note}`{}`: {reason}", handed.transport))
                    }
                    Err(err) => self.transient(
                        &email,
                        format!(
                            "{note}`{}`: the transport plugin failed: {err}",
                            handed.transport
                        ),
                    ),
                };
                ends.push((email, end));
            }
        }
        if ends.is_empty() {
            return Ok(());
        }

        // Record every end in one transaction.
        let records: Vec<(&Deliverable, HandOffEnd<'_>)> = ends
            .iter()
            .map(|(email, end)| {
                let end = match end {
                    End::Delivered {
                        provider_id,
                        detail,
                        transport,
                    } => HandOffEnd::Delivered(DeliveryOutcome::Sent {
                        provider_id,
                        detail: detail.as_deref(),
                        transport: Some(transport),
                    }),
                    End::Failed { error, transport } => {
                        tracing::warn!(email_id = %email.id, error = %error, "email delivery failed");
                        HandOffEnd::Delivered(DeliveryOutcome::Failed {
                            error,
                            transport: transport.as_deref(),
                        })
                    }
                    End::Deferred { error, retry_at } => {
                        tracing::info!(email_id = %email.id, error = %error, "email delivery deferred");
                        HandOffEnd::Deferred {
                            retry_at: *retry_at,
                            reason: error,
                        }
                    }
                };
                (email, end)
            })
            .collect();
        let recorded = record(store, &token, &records, &self.stopped).await?;
        for ((email, _), ok) in ends.iter().zip(recorded) {
            if !ok {
                tracing::warn!(email_id = %email.id, "the email's hand-off was taken over by another claim; its outcome is left to it");
            }
        }
        Ok(())
    }
}
