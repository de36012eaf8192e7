//! Live membership of tracked dynamic segments.
//!
//! On each event of a contact (tracked events, `contact.subscribed`/`contact.unsubscribed`,
//! `email.*`; never `segment.*`, which are this module's own output and would only loop), the
//! contact's tracked dynamic segments are evaluated in memory with `herald-filter` over what
//! [`Store::reconcile_contact_segments`] reads inside its transaction, and every entry or exit is
//! written there with its `segment.<slug>.entry`/`.exit` event. Delivery is at least once: the
//! store diffs against the stored membership it reads under the contact's lock and counts a
//! change only when its row was really inserted or deleted, so a re-delivered event, or one that
//! races a compute, fires nothing twice.
//!
//! Time-relative conditions (`within`, `olderThan`, `triggeredWithin`, `notTriggeredWithin`) are
//! evaluated at the time of the event; a contact that drifts in or out with time alone, without
//! any event, is picked up by the periodic `segments.reevaluate` job (`jobs/segments.rs`), which
//! recomputes those segments.

use futures::future::BoxFuture;
use herald_filter::{EventStats, Subject};

use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::outbox::{ConsumerError, EventConsumer};
use crate::store::segments::{LiveContact, MembershipChange, TrackedSegment};
use crate::store::{Store, StoreResult};

/// The filter's view of a contact read by the store, at `now_ms`.
pub fn subject(live: &LiveContact, now_ms: i64) -> Subject {
    let c = &live.contact;
    Subject {
        email: c.email.as_str().to_string(),
        subscribed: c.subscribed,
        created_at: c.created_at,
        updated_at: c.updated_at,
        data: c.data.clone(),
        events: live
            .events
            .iter()
            .map(|(name, count, last_at)| {
                (
                    name.clone(),
                    EventStats {
                        count: *count,
                        last_at: *last_at,
                    },
                )
            })
            .collect(),
        segments: live.memberships.clone(),
        now_ms,
        ..Subject::default()
    }
}

/// Re-evaluates `contact`'s membership of the project's tracked dynamic segments now and fires
/// an entry or exit event per change, in one transaction. Answers the changes.
pub async fn reevaluate_contact(
    store: &Store,
    project: &ProjectId,
    contact: &ContactId,
) -> StoreResult<Vec<MembershipChange>> {
    let now = now_ms();
    store
        .reconcile_contact_segments(project, contact, |live, segments: &[TrackedSegment]| {
            let subject = subject(live, now);
            segments
                .iter()
                .map(|s| s.filter.matches(&subject))
                .collect()
        })
        .await
}

/// Whether an event can change a contact's tracked segments: it names a contact and is not one
/// of the segments' own entry/exit events.
pub fn triggers_reevaluation(event: &StoredEvent) -> bool {
    event.contact_id.is_some() && !event.name.starts_with("segment.")
}

/// The outbox consumer that keeps tracked membership live.
pub struct LiveSegments {
    store: Store,
}

impl LiveSegments {
    /// A consumer over `store`.
    pub fn new(store: Store) -> LiveSegments {
        LiveSegments { store }
    }
}

impl EventConsumer for LiveSegments {
    fn name(&self) -> &'static str {
        "live-segments"
    }

    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>> {
        Box::pin(async move {
            let Some(contact) = event
                .contact_id
                .as_ref()
                .filter(|_| triggers_reevaluation(event))
            else {
                return Ok(());
            };
            let changes = reevaluate_contact(&self.store, &event.project_id, contact).await?;
            if !changes.is_empty() {
                tracing::debug!(event_id = %event.id, contact_id = %contact, changes = changes.len(), "tracked segment membership changed");
            }
            Ok(())
        })
    }
}
