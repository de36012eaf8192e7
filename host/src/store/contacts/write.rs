//! A contact write inside a transaction: one by address or id ([`write_contact_in`]) or a
//! group by id ([`change_contacts_in`]), with its events and idempotency key.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::plan::{Caps, Plan, Request, Target, check_data_size, plan, plan_change};
use super::rows::{COLUMNS, ContactRow, ContactWrites, MAX_CONTACTS_PER_WRITE};
use crate::domain::contact::{Contact, ContactChange, UpsertOutcome};
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::topic::{self, TopicChange};
use crate::store::idempotency::IdempotentWrite;
use crate::store::statements::Statements;
use crate::store::{Conflict, StoreError, StoreResult};

/// Recorded in the same transaction as a contact write.
#[derive(Default)]
pub struct Effects<'a> {
    /// Where a change of `subscribed` came from (for `contact.subscribed`/`unsubscribed`).
    pub source: SubscriptionSource,
    /// Why `subscribed` changed, when known (e.g. a bounce).
    pub reason: Option<&'a str>,
    /// An event about the contact to record (e.g. a tracked one).
    pub event: Option<&'a NewEvent>,
    /// Makes the write idempotent under a key.
    pub idempotency: Option<IdempotencyClaim<'a>>,
}

/// Builds the response stored with an idempotency key from what was written.
pub type Respond = dyn Fn(&Contact, Option<&StoredEvent>) -> Value + Sync;

/// An idempotency key claimed by a contact write; the response is built from what was written.
pub type IdempotencyClaim<'a> = IdempotentWrite<'a, &'a Respond>;

/// Events to insert with a write, their ids and time chosen before the transaction.
fn plan_events(
    project: &ProjectId,
    contact: &ContactId,
    subscription: Option<bool>,
    topics: &[TopicChange],
    effects: &Effects<'_>,
) -> (Vec<StoredEvent>, Option<StoredEvent>) {
    let now = now_ms();
    let stored = |e: &NewEvent| StoredEvent {
        id: EventId::generate(),
        project_id: project.clone(),
        contact_id: Some(contact.clone()),
        contact_email: None,
        name: e.name.as_str().to_string(),
        data: e.data.clone(),
        created_at: now,
    };
    let mut all = Vec::new();
    let tracked = effects.event.map(stored);
    if let Some(t) = &tracked {
        all.push(t.clone());
    }
    if let Some(subscribed) = subscription {
        all.push(stored(&NewEvent::subscription(
            subscribed,
            effects.source,
            effects.reason,
        )));
    }
    for t in topics {
        all.push(stored(&NewEvent::topic_subscription(
            &t.topic,
            t.subscribed,
            effects.source,
        )));
    }
    (all, tracked)
}

/// How a contact write has the contact it changes.
#[derive(Clone, Copy)]
pub(in crate::store) enum Current<'a> {
    /// Read in the transaction, locked with this suffix (the backend's `FOR UPDATE`).
    Read(&'a str),
    /// As this same transaction last read or wrote it (a group writing one contact again, or
    /// reading its contacts at once): not read.
    Known(&'a Contact),
    /// Read by this same transaction and missing: inserted without reading again (an insert that
    /// meets a contact created since by another writer answers [`Attempt::Raced`]).
    Absent,
}

/// What one contact write inside a transaction came to.
pub(in crate::store) enum Attempt {
    /// Written (not yet committed), but for its events (the tracked one among them), which the
    /// caller inserts, so that a group of writes inserts all of theirs in one statement.
    Written(UpsertOutcome, Option<StoredEvent>, Vec<StoredEvent>),
    /// Nothing to write: the contact is as asked and there is no event or key to record.
    Unchanged(UpsertOutcome, Option<StoredEvent>),
    /// Another writer created the address since the read: nothing was written; read again.
    Raced,
}

/// One attempt of a contact write inside `tx`: reads the contact as `current` says (locked with the
/// backend's `FOR UPDATE`), applies the rules, and writes it with its new field types (`types`)
/// and its idempotency key. The caller inserts the events it answers, and commits. With `later`,
/// the contact itself is not written but planned there, for the caller to write with others
/// ([`Statements::write_contacts`]) before the events and the commit.
#[allow(clippy::too_many_arguments)]
pub(in crate::store) async fn write_contact_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    target: &Target<'_>,
    current: Current<'_>,
    req: &Request<'_>,
    effects: &Effects<'_>,
    types: &[(&str, &str)],
    caps: Caps<'_>,
    later: Option<&mut ContactWrites>,
) -> StoreResult<Attempt>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let current = match current {
        Current::Known(contact) => Some(contact.clone()),
        Current::Absent => None,
        Current::Read(lock) => {
            let (column, key) = match target {
                Target::Email(e) => ("email", e.as_str()),
                Target::Id(id) => ("id", id.as_str()),
            };
            let select_sql = format!(
                "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND {column} = $2{lock}"
            );
            let row: Option<ContactRow> = sqlx::query_as(&select_sql)
                .bind(project.as_str())
                .bind(key)
                .fetch_optional(&mut **tx)
                .await?;
            row.map(Into::into)
        }
    };
    let plan = plan(project, target, current, req)?;
    check_data_size(&plan, caps.limits.contact_data_max_bytes)?;
    let (contact, created, previous) = match &plan {
        Plan::Insert(c) => (c.clone(), true, None),
        Plan::Update { before, after } => (after.clone(), false, Some(before.subscribed)),
        Plan::Keep(c) => (c.clone(), false, None),
    };
    let sub_changed = previous.is_some_and(|was| was != contact.subscribed);
    let topic_changes = if plan.changes() {
        topic::changes(plan.based_on().map(|c| &c.topics), req.topics)
    } else {
        Vec::new()
    };
    let (events, tracked) = plan_events(
        project,
        &contact.id,
        sub_changed.then_some(contact.subscribed),
        &topic_changes,
        effects,
    );
    let written = match later {
        Some(writes) => {
            writes.add(&plan);
            true
        }
        None => tx.write_contact_plan(&plan).await?,
    };
    if !written {
        return Ok(Attempt::Raced);
    }
    if matches!(plan, Plan::Keep(_)) && events.is_empty() && effects.idempotency.is_none() {
        let outcome = UpsertOutcome {
            contact,
            created: false,
            updated: false,
            subscription_changed_from: None,
        };
        return Ok(Attempt::Unchanged(outcome, tracked));
    }
    let types: &[(&str, &str)] = if matches!(plan, Plan::Keep(_)) {
        &[]
    } else {
        types
    };
    let now = now_ms();
    tx.insert_field_types(
        project.as_str(),
        types,
        now,
        Some(caps.limits.contact_fields_max),
    )
    .await?;
    if let (Some(name), Some(_)) = (caps.new_event_name, &tracked) {
        tx.insert_event_name(project.as_str(), name, now, caps.limits.event_names_max)
            .await?;
    }
    if let Some(claim) = &effects.idempotency {
        let body = (claim.response)(&contact, tracked.as_ref());
        tx.store_idempotent_response(project.as_str(), claim, &body)
            .await?;
    }
    let updated = matches!(plan, Plan::Update { .. });
    let outcome = UpsertOutcome {
        contact,
        created,
        updated,
        subscription_changed_from: if sub_changed { previous } else { None },
    };
    Ok(Attempt::Written(outcome, tracked, events))
}

/// One change of a group that [`change_contacts_in`] writes together.
pub(in crate::store) struct GroupChange<'a> {
    pub(in crate::store) id: &'a ContactId,
    pub(in crate::store) change: &'a ContactChange,
    pub(in crate::store) effects: Effects<'a>,
    /// The field types its data shows for the first time (see [`field_types`]).
    pub(in crate::store) types: Vec<(&'a str, &'static str)>,
}

/// Changes contacts of `project` by id inside the caller's transaction `tx`, as
/// [`Store::update_contact_with`] changes one in a transaction of its own, with one statement of
/// each kind for them all: one read of the contacts (locked with `lock`, in id
/// order, so that two groups lock them in the same order), each change applied in turn to the
/// contact as the changes before it left it, then the contacts written once each, their events,
/// the new field types of the changes that change their contact and the idempotency keys.
/// Nothing is written for a contact that is gone. Answers the field types it recorded.
pub(in crate::store) async fn change_contacts_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    changes: &[GroupChange<'_>],
    lock: &str,
) -> StoreResult<Vec<(String, &'static str)>>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let ids: BTreeSet<&str> = changes.iter().map(|c| c.id.as_str()).collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let mut state: HashMap<String, Contact> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(MAX_CONTACTS_PER_WRITE) {
        let sql = format!(
            "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND id IN ({}) ORDER BY id{lock}",
            crate::store::dialect::placeholders(2, chunk.len())
        );
        let sql =
            crate::store::dialect::bound_in_order(crate::store::dialect::backend_of::<DB>(), sql);
        let mut q = sqlx::query_as::<_, ContactRow>(&sql).bind(project.as_str());
        for id in chunk {
            q = q.bind(*id);
        }
        for row in q.fetch_all(&mut **tx).await? {
            let contact: Contact = row.into();
            state.insert(contact.id.as_str().to_string(), contact);
        }
    }
    let mut writes = ContactWrites::default();
    let mut events = Vec::new();
    let mut types: Vec<(&str, &'static str)> = Vec::new();
    let mut bodies = Vec::new();
    for c in changes {
        let Some(current) = state.get(c.id.as_str()) else {
            continue;
        };
        let req = Request {
            email: c.change.email.as_ref(),
            subscribed: c.change.subscribed,
            subscribed_default: false,
            resubscribe: true,
            data: &c.change.data,
            topics: &c.change.topics,
        };
        let plan = plan_change(current.clone(), &req);
        let contact = plan.contact().clone();
        let sub_changed = current.subscribed != contact.subscribed;
        let topic_changes = topic::changes(Some(&current.topics), &c.change.topics);
        let (planned, tracked) = plan_events(
            project,
            &contact.id,
            sub_changed.then_some(contact.subscribed),
            &topic_changes,
            &c.effects,
        );
        writes.add(&plan);
        events.extend(planned);
        if plan.changes() {
            for t in &c.types {
                if !types.contains(t) {
                    types.push(*t);
                }
            }
        }
        if let Some(claim) = &c.effects.idempotency {
            bodies.push((claim, (claim.response)(&contact, tracked.as_ref())));
        }
        state.insert(contact.id.as_str().to_string(), contact);
    }
    if !tx.write_contacts(&writes).await? {
        // Only an insert races, and a change inserts nothing.
        return Err(StoreError::Conflict(Conflict::ContactBusy));
    }
    tx.insert_events(&events).await?;
    // A workflow's changes are the project's own (its secret key or dashboard wrote the
    // workflow): uncapped, so that a step never fails on them.
    tx.insert_field_types(project.as_str(), &types, now_ms(), None)
        .await?;
    let keys: Vec<_> = bodies
        .iter()
        .map(|(claim, body)| (project.as_str(), *claim, body))
        .collect();
    if !keys.is_empty() {
        tx.store_idempotent_responses(&keys).await?;
    }
    Ok(types.into_iter().map(|(k, t)| (k.to_string(), t)).collect())
}
