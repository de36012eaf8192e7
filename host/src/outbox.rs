//! The outbox dispatcher: publishing events to the parts of Herald that react to them.
//!
//! Every event (tracked or emitted) is written with a row in `event_outbox` in the transaction
//! that creates it. The dispatcher of every instance claims due outbox rows with a lease, hands
//! each event to every registered [`EventConsumer`], and deletes the row once all of them
//! succeeded; a failure is retried with backoff. Delivery is at least once, in claim order, so
//! consumers must be idempotent (they get the event id to deduplicate). Because the outbox is in
//! the database, a crash between the write and the hand-off loses nothing, and a consumer
//! registered in a later release receives every event that was not yet dispatched.
//!
//! The dispatcher runs the consumers it is given (the application builder registers them) and
//! knows none of its own.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, watch};

use crate::domain::event::StoredEvent;
use crate::domain::time::now_ms;
use crate::store::{Store, StoreError};

/// Why a consumer could not handle an event; the dispatcher retries the event later.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The consumer failed for a reason of its own.
    #[error("{0}")]
    Failed(String),
}

/// Something that reacts to events (the workflow engine, segment membership, analytics).
pub trait EventConsumer: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &'static str;

    /// Handles one event; an error makes the dispatcher retry the event later.
    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>>;

    /// Handles a claimed batch of events, in claim order, answering one outcome per event (in
    /// the same order). The default hands them to [`EventConsumer::handle`] one at a time; a
    /// consumer that can share reads or a transaction across events overrides it.
    fn handle_batch<'a>(
        &'a self,
        events: &'a [&'a StoredEvent],
    ) -> BoxFuture<'a, Vec<Result<(), ConsumerError>>> {
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(events.len());
            for event in events {
                outcomes.push(self.handle(event).await);
            }
            outcomes
        })
    }
}

/// The largest batch after which a wake-up ([`OutboxWake`]) makes the dispatcher look again
/// early ([`WOKEN_GAP`] after its last look began) instead of after its poll interval.
pub const WOKEN_AFTER_AT_MOST: usize = 50;

/// The shortest time from the start of one look at the outbox to the next when woken
/// ([`OutboxWake`]); never more than the poll interval.
pub const WOKEN_GAP: Duration = Duration::from_millis(100);

/// Attempts before an event is parked (kept in the outbox with its error, not retried).
pub const MAX_DELIVERY_ATTEMPTS: i32 = 10;

/// Wakes this instance's dispatcher to look at the outbox again now rather than after its
/// poll interval, when it is not busy (its last batch was small: [`WOKEN_AFTER_AT_MOST`]). A
/// consumer that writes events of its own while it handles a batch (the segments' entry and exit
/// events) wakes it, so that those events are dispatched right after the batch that caused them
/// instead of one poll interval later. A hint within one process: every instance still polls
/// the shared outbox. Cheap to clone.
#[derive(Clone, Default)]
pub struct OutboxWake(Arc<Notify>);

impl OutboxWake {
    /// Asks for another look at the outbox once the batch being dispatched is done, or at once
    /// when the dispatcher is idle; at the earliest [`WOKEN_GAP`] after its last look began, and
    /// only when that look found a small batch.
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

/// Dispatches the outbox to the registered consumers.
#[derive(Clone)]
pub struct EventDispatcher {
    store: Store,
    consumers: Arc<Vec<Arc<dyn EventConsumer>>>,
    poll: Duration,
    lease: Duration,
    wake: OutboxWake,
}

impl EventDispatcher {
    /// A dispatcher for `consumers`, woken early by `wake`.
    pub fn new(
        store: Store,
        consumers: Vec<Arc<dyn EventConsumer>>,
        poll: Duration,
        lease: Duration,
        wake: OutboxWake,
    ) -> EventDispatcher {
        EventDispatcher {
            store,
            consumers: Arc::new(consumers),
            poll,
            lease,
            wake,
        }
    }

    /// Dispatches one batch; answers how many events were claimed.
    pub async fn dispatch_once(&self, limit: i64) -> usize {
        if self.consumers.is_empty() {
            return match self.store.drop_outbox(limit).await {
                Ok(n) => n as usize,
                Err(err) => {
                    tracing::warn!(error = %err, "could not clear the outbox");
                    0
                }
            };
        }
        let lease_until = now_ms() + self.lease.as_millis() as i64;
        let claimed = match self.store.claim_outbox(limit, lease_until).await {
            Ok(c) => c,
            Err(err) => {
                tracing::warn!(error = %err, "could not claim outbox events");
                return 0;
            }
        };
        let n = claimed.len();
        // Each consumer takes the whole batch at once (in claim order); an event that one
        // consumer fails is not handed to the next ones and is retried whole later.
        let mut failures: Vec<Option<String>> = vec![None; n];
        for consumer in self.consumers.iter() {
            let pending: Vec<usize> = (0..n).filter(|&i| failures[i].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            let events: Vec<&StoredEvent> = pending.iter().map(|&i| &claimed[i].event).collect();
            let mut outcomes = consumer.handle_batch(&events).await.into_iter();
            for i in pending {
                match outcomes.next() {
                    Some(Ok(())) => {}
                    Some(Err(err)) => failures[i] = Some(format!("{}: {err}", consumer.name())),
                    None => failures[i] = Some(format!("{}: no outcome", consumer.name())),
                }
            }
        }
        let mut delivered = Vec::with_capacity(n);
        for (item, failure) in claimed.iter().zip(failures) {
            match failure {
                None => delivered.push(item.event.id.clone()),
                Some(error) => {
                    let at = if item.attempts >= MAX_DELIVERY_ATTEMPTS {
                        tracing::error!(event_id = %item.event.id, error = %error, "event parked after repeated failures");
                        i64::MAX
                    } else {
                        tracing::warn!(event_id = %item.event.id, error = %error, "event delivery failed; will retry");
                        now_ms() + crate::jobs::backoff_ms(item.attempts)
                    };
                    if let Err(err) = self.store.retry_outbox(&item.event.id, at, &error).await {
                        tracing::warn!(error = %err, "could not reschedule event");
                    }
                }
            }
        }
        if let Err(err) = self.store.complete_outbox(&delivered).await {
            tracing::warn!(error = %err, "could not clear delivered events; they will be delivered again");
        }
        n
    }

    /// Dispatches until `stop` turns true: again at once after a full batch, or when woken
    /// ([`OutboxWake`]) after a small one, else after the poll interval.
    ///
    /// Only a small batch (at most [`WOKEN_AFTER_AT_MOST`] events) lets a wake-up cut the wait
    /// short, to [`WOKEN_GAP`] after that batch began: that is the quiet case, where an entry
    /// event would otherwise wait a whole poll interval alone. Under load the interval gathers
    /// the next batch, as before; waking at once after every batch that wrote entries made the
    /// batches smaller and their claims more numerous, which slowed tracking on SQLite while
    /// contacts entered segments (docs/benchmarks.md).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        const BATCH: i64 = 500;
        loop {
            if *stop.borrow() {
                break;
            }
            let started = tokio::time::Instant::now();
            let n = self.dispatch_once(BATCH).await;
            if n < BATCH as usize {
                tokio::select! {
                    _ = tokio::time::sleep(self.poll) => {}
                    _ = self.wake.0.notified(), if n <= WOKEN_AFTER_AT_MOST => {
                        // Not sooner than a short gap after the last look began, so that a
                        // chain of small batches, each waking the next, gathers events again.
                        tokio::time::sleep_until(started + self.poll.min(WOKEN_GAP)).await;
                    }
                    _ = stop.changed() => {}
                }
            }
        }
    }
}
