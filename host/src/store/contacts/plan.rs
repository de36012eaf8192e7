//! What a contact write does, planned in memory by the domain rules before anything is written:
//! the [`Plan`] of an insert or a change, and the caps it checks.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::domain::contact::{Contact, ContactChange, ContactUpsert};
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::topic::TopicChoice;
use crate::store::{CapReached, StoreError, StoreLimits, StoreResult};

/// The caps a contact write checks (see [`StoreLimits`]).
#[derive(Clone, Copy)]
pub(in crate::store) struct Caps<'a> {
    pub(in crate::store) limits: StoreLimits,
    /// The tracked event's name, when this instance does not know it recorded in `event_names`.
    pub(in crate::store) new_event_name: Option<&'a str>,
}

/// The size of custom data serialized as JSON.
fn data_size(data: &Map<String, Value>) -> usize {
    serde_json::to_vec(data).map_or(usize::MAX, |v| v.len())
}

/// [`CapReached::ContactData`] when `plan` makes its contact's data larger than `max` bytes (a
/// write that leaves the data as it was, or shrinks data already over the cap, passes).
pub(in crate::store) fn check_data_size(plan: &Plan, max: usize) -> StoreResult<()> {
    let (before, after) = match plan {
        Plan::Keep(_) => return Ok(()),
        Plan::Insert(c) => (None, c),
        Plan::Update { before, after } => (Some(before), after),
    };
    if before.is_some_and(|b| b.data == after.data) {
        return Ok(());
    }
    let size = data_size(&after.data);
    if size <= max || before.is_some_and(|b| data_size(&b.data) >= size) {
        return Ok(());
    }
    Err(StoreError::Cap(CapReached::ContactData { size, max }))
}

/// Which contact a write applies to.
pub(in crate::store) enum Target<'a> {
    /// By address; created when missing.
    Email(&'a EmailAddress),
    /// By id; 404 when missing.
    Id(&'a ContactId),
}

/// What a write asks for.
pub(in crate::store) struct Request<'a> {
    pub(in crate::store) email: Option<&'a EmailAddress>,
    pub(in crate::store) subscribed: Option<bool>,
    pub(in crate::store) subscribed_default: bool,
    /// Whether `subscribed: Some(true)` may subscribe an unsubscribed contact again (see
    /// [`ContactUpsert::resubscribe`]).
    pub(in crate::store) resubscribe: bool,
    pub(in crate::store) data: &'a DataPatch,
    /// Topic choices to make, in order (the last choice of a topic counts).
    pub(in crate::store) topics: &'a [TopicChoice],
}

/// Applies topic choices to a contact's choices; answers whether any changed.
fn apply_topics(choices: &mut BTreeMap<String, bool>, topics: &[TopicChoice]) -> bool {
    let mut changed = false;
    for c in topics {
        changed |= choices.insert(c.topic.as_str().to_string(), c.subscribed) != Some(c.subscribed);
    }
    changed
}

/// What to do with the contact that was read.
#[derive(Clone, Debug)]
pub(crate) enum Plan {
    Insert(Contact),
    Update { before: Contact, after: Contact },
    Keep(Contact),
}

/// How an upsert by address changes `current` (the contact with that address, if any).
pub(crate) fn plan_upsert(
    project: &ProjectId,
    upsert: &ContactUpsert,
    current: Option<Contact>,
) -> Plan {
    let req = Request {
        email: None,
        subscribed: upsert.subscribed,
        subscribed_default: upsert.subscribed_default,
        resubscribe: upsert.resubscribe,
        data: &upsert.data,
        topics: &upsert.topics,
    };
    match current {
        None => plan_insert(project, &upsert.email, &req),
        Some(current) => plan_change(current, &req),
    }
}

impl Plan {
    /// The contact as the plan leaves it.
    pub(crate) fn contact(&self) -> &Contact {
        match self {
            Plan::Insert(c) | Plan::Keep(c) => c,
            Plan::Update { after, .. } => after,
        }
    }

    /// The contact the plan was made from (`None` for a new one).
    pub(crate) fn based_on(&self) -> Option<&Contact> {
        match self {
            Plan::Insert(_) => None,
            Plan::Update { before, .. } | Plan::Keep(before) => Some(before),
        }
    }

    /// Whether the plan writes anything.
    pub(crate) fn changes(&self) -> bool {
        !matches!(self, Plan::Keep(_))
    }

    /// The new subscription state, when the plan changes an existing contact's.
    pub(crate) fn subscription_changed_to(&self) -> Option<bool> {
        match self {
            Plan::Update { before, after } if before.subscribed != after.subscribed => {
                Some(after.subscribed)
            }
            _ => None,
        }
    }
}

pub(super) fn plan(
    project: &ProjectId,
    target: &Target<'_>,
    current: Option<Contact>,
    req: &Request<'_>,
) -> StoreResult<Plan> {
    match (current, target) {
        (None, Target::Id(_)) => Err(StoreError::NotFound),
        (None, Target::Email(email)) => Ok(plan_insert(project, email, req)),
        (Some(current), _) => Ok(plan_change(current, req)),
    }
}

/// A new contact with address `email`.
fn plan_insert(project: &ProjectId, email: &EmailAddress, req: &Request<'_>) -> Plan {
    let mut data = Map::new();
    req.data.apply(&mut data);
    let mut topics = BTreeMap::new();
    apply_topics(&mut topics, req.topics);
    let now = now_ms();
    Plan::Insert(Contact {
        id: ContactId::generate(),
        project_id: project.clone(),
        email: email.clone(),
        subscribed: req.subscribed.unwrap_or(req.subscribed_default),
        data,
        version: 0,
        created_at: now,
        updated_at: now,
        topics,
    })
}

/// `current` changed as `req` asks, or kept when nothing changes.
pub(super) fn plan_change(current: Contact, req: &Request<'_>) -> Plan {
    let mut after = current.clone();
    let data_changed = req.data.apply(&mut after.data);
    let topics_changed = apply_topics(&mut after.topics, req.topics);
    after.subscribed = match req.subscribed {
        // Only a caller trusted to (the secret key, the dashboard) subscribes again a contact
        // who opted out, bounced or complained.
        Some(true) if !current.subscribed && !req.resubscribe => false,
        Some(subscribed) => subscribed,
        None => current.subscribed,
    };
    if let Some(email) = req.email {
        after.email = email.clone();
    }
    if data_changed
        || topics_changed
        || after.subscribed != current.subscribed
        || after.email != current.email
    {
        after.version += 1;
        after.updated_at = now_ms().max(current.updated_at);
        Plan::Update {
            before: current,
            after,
        }
    } else {
        Plan::Keep(current)
    }
}

/// Whether `change` would change `current` (what an update's outcome calls `updated`), by the
/// same rules as the write.
pub(crate) fn would_change(current: &Contact, change: &ContactChange) -> bool {
    let req = Request {
        email: change.email.as_ref(),
        subscribed: change.subscribed,
        subscribed_default: false,
        resubscribe: true,
        data: &change.data,
        topics: &change.topics,
    };
    plan_change(current.clone(), &req).changes()
}

/// `current` as `change` leaves it, by the same rules as the write (what a workflow's step runs
/// run on in memory see after an `UPDATE_CONTACT` among them, before the commit writes it).
pub(crate) fn changed(current: &Contact, change: &ContactChange) -> Contact {
    let req = Request {
        email: change.email.as_ref(),
        subscribed: change.subscribed,
        subscribed_default: false,
        resubscribe: true,
        data: &change.data,
        topics: &change.topics,
    };
    plan_change(current.clone(), &req).contact().clone()
}
