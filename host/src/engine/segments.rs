//! Live membership of tracked dynamic segments.
//!
//! The outbox hands [`LiveSegments`] each claimed batch of events (tracked events,
//! `contact.subscribed`/`contact.unsubscribed`, `email.*`; never `segment.*`, which are this
//! module's own output and would only loop). Per project of the batch it reads the tracked
//! segments once, keeps for each contact only the segments one of its events can affect
//! ([`affects`]: the filter names the event, reads the contact's own fields and the event may
//! come with a contact change, or reads memberships), and evaluates those in memory with
//! `herald-filter` over what [`Store::reconcile_contacts_segments`] reads for all the batch's
//! contacts at once (three queries per 250 contacts, on a read connection). Only contacts whose
//! membership differs are read again under a lock, in write transactions of 50, where every entry
//! or exit is written with its `segment.<slug>.entry`/`.exit` event. Delivery is at least once:
//! the store diffs against the stored membership it reads under the contacts' lock and counts a
//! change only when its row was really inserted or deleted, so a re-delivered event, or one that
//! races a compute, fires nothing twice.
//!
//! Time-relative conditions (`within`, `olderThan`, `triggeredWithin`, `notTriggeredWithin`) are
//! evaluated at the time of the event; a contact that drifts in or out with time alone, without
//! any event, is picked up by the periodic `segments.reevaluate` job (`jobs/segments.rs`), which
//! recomputes those segments.

use std::collections::{BTreeSet, HashMap};

use futures::future::BoxFuture;
use herald_filter::{EventStats, Field, Subject};

use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::outbox::{ConsumerError, EventConsumer, OutboxWake};
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
        topics: live.topics.clone(),
        now_ms,
        ..Subject::default()
    }
}

/// Re-evaluates `contact`'s membership of every tracked dynamic segment of the project now and
/// fires an entry or exit event per change, in one transaction (after a contact write that
/// emits no event, and in tests). Answers the changes.
pub async fn reevaluate_contact(
    store: &Store,
    project: &ProjectId,
    contact: &ContactId,
) -> StoreResult<Vec<MembershipChange>> {
    let segments = store.tracked_segments(project).await?;
    let now = now_ms();
    let changes = store
        .reconcile_contacts_segments(
            project,
            &segments,
            std::slice::from_ref(contact),
            |live, segments: &[TrackedSegment]| {
                let subject = subject(live, now);
                segments
                    .iter()
                    .map(|s| Some(s.filter.matches(&subject)))
                    .collect()
            },
        )
        .await?;
    Ok(changes.into_iter().map(|(_, change)| change).collect())
}

/// Whether an event can change a contact's tracked segments: it names a contact and is not one
/// of the segments' own entry/exit events.
pub fn triggers_reevaluation(event: &StoredEvent) -> bool {
    event.contact_id.is_some() && !event.name.starts_with("segment.")
}

/// What a tracked segment's filter reads, to tell which events can affect it.
pub struct Reads {
    /// The event names of its `event.<name>` conditions.
    pub events: BTreeSet<String>,
    /// Whether it reads the contact's own fields.
    pub contact: bool,
    /// Whether it reads memberships (`segment.<id>`).
    pub memberships: bool,
}

impl Reads {
    /// What `segment`'s filter reads.
    pub fn of(segment: &TrackedSegment) -> Reads {
        Reads {
            events: segment.filter.event_names(),
            contact: segment.filter.reads_contact_fields(),
            memberships: segment
                .filter
                .conditions()
                .iter()
                .any(|c| matches!(c.field, Field::Segment(_))),
        }
    }
}

/// Whether `event` can change the answer, for its contact, of a filter that reads `reads`: the
/// filter names the event (`event.<name>`); or it reads the contact's own fields and the event
/// may come with a change of the contact (every event but `email.*`, which only record
/// deliveries and engagement: a tracked event may create the contact or write its data,
/// `contact.*` come with a change of `subscribed`); or it reads memberships, which change
/// without events of their own reaching this consumer (as before, such filters follow every
/// event). Segments an event cannot affect are not read for it; a time-relative filter that
/// drifts without events is the periodic job's.
pub fn affects(event: &StoredEvent, reads: &Reads) -> bool {
    reads.events.contains(&event.name)
        || (reads.contact && !event.name.starts_with("email."))
        || reads.memberships
}

/// The outbox consumer that keeps tracked membership live.
pub struct LiveSegments {
    store: Store,
    /// Woken when a batch wrote entry or exit events, so that they are dispatched right after
    /// it (a workflow triggered by an entry starts then, not a poll interval later).
    wake: OutboxWake,
}

impl LiveSegments {
    /// A consumer over `store` that wakes the dispatcher by `wake` after writing events.
    pub fn new(store: Store, wake: OutboxWake) -> LiveSegments {
        LiveSegments { store, wake }
    }

    /// Re-evaluates `contact` after a write that emits no event ([`reevaluate_contact`]), and
    /// wakes the dispatcher when that fired entry or exit events, so that they do not wait for
    /// its next poll.
    pub async fn after_contact_write(
        &self,
        project: &ProjectId,
        contact: &ContactId,
    ) -> StoreResult<()> {
        let changes = reevaluate_contact(&self.store, project, contact).await?;
        if !changes.is_empty() {
            self.wake.wake();
        }
        Ok(())
    }

    /// Re-evaluates, for one project's events of a batch, the segments each event can affect,
    /// with one read of the tracked segments and batched reads of the contacts.
    async fn reevaluate(&self, project: &ProjectId, events: &[&StoredEvent]) -> StoreResult<usize> {
        let segments = self.store.tracked_segments(project).await?;
        if segments.is_empty() {
            return Ok(0);
        }
        let reads: Vec<Reads> = segments.iter().map(Reads::of).collect();
        // Per contact, which segments at least one of its events can affect.
        let mut affected: HashMap<&str, Vec<bool>> = HashMap::new();
        for event in events {
            let Some(contact) = &event.contact_id else {
                continue;
            };
            let mask: Vec<bool> = reads.iter().map(|r| affects(event, r)).collect();
            if !mask.iter().any(|a| *a) {
                continue;
            }
            let entry = affected
                .entry(contact.as_str())
                .or_insert_with(|| vec![false; segments.len()]);
            for (a, m) in entry.iter_mut().zip(mask) {
                *a |= m;
            }
        }
        if affected.is_empty() {
            return Ok(0);
        }
        // Only the segments some contact needs are read for.
        let wanted: Vec<usize> = (0..segments.len())
            .filter(|&i| affected.values().any(|mask| mask[i]))
            .collect();
        let used: Vec<TrackedSegment> = wanted.iter().map(|&i| segments[i].clone()).collect();
        let contacts: Vec<ContactId> = affected
            .keys()
            .map(|c| ContactId::from_trusted(c.to_string()))
            .collect();
        let now = now_ms();
        let changes = self
            .store
            .reconcile_contacts_segments(project, &used, &contacts, |live, used| {
                let mask = affected.get(live.contact.id.as_str());
                let subject = subject(live, now);
                used.iter()
                    .zip(&wanted)
                    .map(|(s, &i)| {
                        mask.is_some_and(|m| m[i])
                            .then(|| s.filter.matches(&subject))
                    })
                    .collect()
            })
            .await?;
        Ok(changes.len())
    }
}

impl EventConsumer for LiveSegments {
    fn name(&self) -> &'static str {
        "live-segments"
    }

    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>> {
        Box::pin(async move {
            let mut outcome = self.handle_batch(&[event]).await;
            outcome.pop().unwrap_or(Ok(()))
        })
    }

    fn handle_batch<'a>(
        &'a self,
        events: &'a [&'a StoredEvent],
    ) -> BoxFuture<'a, Vec<Result<(), ConsumerError>>> {
        Box::pin(async move {
            // The events of each project, in claim order.
            let mut projects: Vec<(&ProjectId, Vec<&StoredEvent>)> = Vec::new();
            for event in events.iter().copied().filter(|e| triggers_reevaluation(e)) {
                match projects.iter_mut().find(|(p, _)| *p == &event.project_id) {
                    Some((_, list)) => list.push(event),
                    None => projects.push((&event.project_id, vec![event])),
                }
            }
            let mut failed: HashMap<&ProjectId, String> = HashMap::new();
            for (project, list) in &projects {
                match self.reevaluate(project, list).await {
                    Ok(0) => {}
                    Ok(changes) => {
                        tracing::debug!(project_id = %project, events = list.len(), changes, "tracked segment membership changed");
                        self.wake.wake();
                    }
                    Err(err) => {
                        failed.insert(project, err.to_string());
                    }
                }
            }
            events
                .iter()
                .map(|e| match failed.get(&e.project_id) {
                    Some(err) if triggers_reevaluation(e) => {
                        Err(ConsumerError::Failed(err.clone()))
                    }
                    _ => Ok(()),
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use herald_filter::{Scope, parse};
    use serde_json::{Map, json};

    use super::*;
    use crate::domain::ids::SegmentId;

    fn reads(condition: serde_json::Value) -> Reads {
        Reads::of(&TrackedSegment {
            id: SegmentId::generate(),
            name: "s".into(),
            filter: parse(&condition, Scope::Contacts).unwrap(),
        })
    }

    fn event(name: &str) -> StoredEvent {
        StoredEvent {
            id: crate::domain::ids::EventId::generate(),
            project_id: ProjectId::generate(),
            contact_id: Some(ContactId::generate()),
            contact_email: None,
            name: name.into(),
            data: Map::new(),
            created_at: 0,
        }
    }

    fn one(field: &str, operator: &str, value: serde_json::Value) -> serde_json::Value {
        let mut condition = json!({ "field": field, "operator": operator });
        if !value.is_null() {
            condition["value"] = value;
        }
        json!({ "logic": "AND", "groups": [ { "filters": [condition] } ] })
    }

    #[test]
    fn an_event_affects_the_filters_that_name_it_read_the_contact_or_read_memberships() {
        let purchases = reads(one("event.purchase", "triggered", json!(null)));
        assert!(affects(&event("purchase"), &purchases));
        assert!(!affects(&event("login"), &purchases));
        assert!(!affects(&event("contact.subscribed"), &purchases));
        assert!(!affects(&event("email.opened"), &purchases));

        let opened = reads(one("event.email.opened", "triggered", json!(null)));
        assert!(affects(&event("email.opened"), &opened));
        assert!(!affects(&event("email.clicked"), &opened));

        let pro = reads(one("data.plan", "equals", json!("pro")));
        assert!(affects(&event("login"), &pro));
        assert!(affects(&event("contact.unsubscribed"), &pro));
        assert!(!affects(&event("email.delivered"), &pro));

        let members = reads(one("segment.seg_0123", "memberOf", json!(null)));
        assert!(affects(&event("email.delivered"), &members));
        assert!(affects(&event("login"), &members));
    }
}
