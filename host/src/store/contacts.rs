//! Contacts and the per-project types of their custom fields.
//!
//! Writes use optimistic concurrency: a contact is read, changed in memory by the domain rules,
//! and written back with `WHERE version = <read version>`; a lost race re-reads and retries. This
//! keeps the patch logic in Rust, identical on both backends, and holds no lock while thinking.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::{BeginWrite, like_escape};
use super::idempotency::IdempotentWrite;
use super::statements::Statements;
use super::{Backend, CapReached, Conflict, Store, StoreError, StoreLimits, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::contact::{Contact, ContactChange, ContactUpsert, UpsertOutcome};
use crate::domain::custom_data::{DataPatch, FieldType};
use crate::domain::email::EmailAddress;
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;

/// The columns of `contacts`, in the order of [`ContactRow`].
pub(super) const COLUMNS: &str =
    "id, project_id, email, subscribed, data, version, created_at, updated_at";
/// How often a write by address reads again after another writer created the address.
pub(super) const MAX_ATTEMPTS: usize = 16;
/// The most contacts one statement of [`ContactWrites`] writes (8 values a row).
pub(super) const MAX_CONTACTS_PER_WRITE: usize = 500;
/// The most addresses one read of contacts by address names.
const READ_CHUNK: usize = 500;

/// The reads of contacts by address in flight, per project, shared by concurrent sends.
pub(crate) type ContactReads = super::rounds::Rounds<String, Vec<Contact>, Vec<EmailAddress>>;

/// Inserts `n` contacts, each unless its address is taken; answers the ids of those inserted.
/// Binds, a row: id, project, email, subscribed, data, version, created, updated.
pub(super) fn insert_contacts_sql(n: usize) -> String {
    insert_contacts_from(1, n)
}

/// [`insert_contacts_sql`] with its placeholders numbered from `first`.
pub(super) fn insert_contacts_from(first: usize, n: usize) -> String {
    format!(
        "INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at) \
         VALUES {} ON CONFLICT (project_id, email) DO NOTHING RETURNING id",
        super::dialect::value_rows(first, n, 8)
    )
}

/// Writes the new state of `n` contacts. Binds, a row: id, project, email, subscribed, data,
/// version, updated.
pub(super) fn update_contacts_sql(n: usize) -> String {
    format!(
        "WITH v (id, project_id, email, subscribed, data, version, updated_at) AS (VALUES {}) \
         UPDATE contacts SET email = v.email, subscribed = v.subscribed, data = v.data, \
         version = v.version, updated_at = v.updated_at \
         FROM v WHERE contacts.project_id = v.project_id AND contacts.id = v.id",
        super::dialect::value_rows(1, n, 7)
    )
}

/// Planned contact writes, made by [`Statements::write_contacts`] in one statement per kind:
/// each contact's last planned state, inserted when a plan created it. A group of writes in one
/// transaction (`group_commit`, the recipients of a send) writes its contacts this way instead of
/// one statement a write; a contact written several times is written once.
#[derive(Default)]
pub(crate) struct ContactWrites {
    pub(super) inserts: Vec<Contact>,
    pub(super) updates: Vec<Contact>,
    /// Where each contact's planned state is: `(inserted, index)`.
    at: HashMap<String, (bool, usize)>,
}

impl ContactWrites {
    /// Adds a plan: its contact's state replaces what was planned for it before.
    pub(super) fn add(&mut self, plan: &Plan) {
        let (contact, insert) = match plan {
            Plan::Keep(_) => return,
            Plan::Insert(c) => (c, true),
            Plan::Update { after, .. } => (after, false),
        };
        match self.at.get(contact.id.as_str()) {
            Some(&(true, i)) => self.inserts[i] = contact.clone(),
            Some(&(false, i)) => self.updates[i] = contact.clone(),
            None if insert => {
                let at = (true, self.inserts.len());
                self.at.insert(contact.id.as_str().to_string(), at);
                self.inserts.push(contact.clone());
            }
            None => {
                let at = (false, self.updates.len());
                self.at.insert(contact.id.as_str().to_string(), at);
                self.updates.push(contact.clone());
            }
        }
    }

    /// Whether nothing is planned.
    pub(super) fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Forgets every plan (once written).
    pub(super) fn clear(&mut self) {
        self.inserts.clear();
        self.updates.clear();
        self.at.clear();
    }
}

#[derive(FromRow)]
pub(crate) struct ContactRow {
    pub(crate) id: String,
    project_id: String,
    email: String,
    subscribed: bool,
    data: Json<Map<String, Value>>,
    version: i64,
    created_at: i64,
    updated_at: i64,
}

impl From<ContactRow> for Contact {
    fn from(r: ContactRow) -> Contact {
        Contact {
            id: ContactId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            email: EmailAddress::from_trusted(r.email),
            subscribed: r.subscribed,
            data: r.data.0,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The field types first seen in `set`, as rows for `contact_fields`.
pub(crate) fn field_types(set: &Map<String, Value>) -> Vec<(&str, &'static str)> {
    set.iter()
        .filter_map(|(k, v)| FieldType::infer(v).map(|t| (k.as_str(), t.as_str())))
        .collect()
}

/// `INSERT … ON CONFLICT DO NOTHING` for the inferred types (the first type seen is kept); binds,
/// a row: project, key, type, now.
pub(super) fn field_types_sql(n: usize) -> String {
    let mut sql =
        String::from("INSERT INTO contact_fields (project_id, key, type, created_at) VALUES ");
    sql.push_str(&super::dialect::value_rows(1, n, 4));
    sql.push_str(" ON CONFLICT (project_id, key) DO NOTHING");
    sql
}

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
    (all, tracked)
}

/// The caps a contact write checks (see [`StoreLimits`]).
#[derive(Clone, Copy)]
pub(super) struct Caps<'a> {
    pub(super) limits: StoreLimits,
    /// The tracked event's name, when this instance does not know it recorded in `event_names`.
    pub(super) new_event_name: Option<&'a str>,
}

/// The size of custom data serialized as JSON.
fn data_size(data: &Map<String, Value>) -> usize {
    serde_json::to_vec(data).map_or(usize::MAX, |v| v.len())
}

/// [`CapReached::ContactData`] when `plan` makes its contact's data larger than `max` bytes (a
/// write that leaves the data as it was, or shrinks data already over the cap, passes).
pub(super) fn check_data_size(plan: &Plan, max: usize) -> StoreResult<()> {
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
pub(super) enum Target<'a> {
    /// By address; created when missing.
    Email(&'a EmailAddress),
    /// By id; 404 when missing.
    Id(&'a ContactId),
}

/// What a write asks for.
pub(super) struct Request<'a> {
    pub(super) email: Option<&'a EmailAddress>,
    pub(super) subscribed: Option<bool>,
    pub(super) subscribed_default: bool,
    /// Whether `subscribed: Some(true)` may subscribe an unsubscribed contact again (see
    /// [`ContactUpsert::resubscribe`]).
    pub(super) resubscribe: bool,
    pub(super) data: &'a DataPatch,
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

fn plan(
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
    })
}

/// `current` changed as `req` asks, or kept when nothing changes.
fn plan_change(current: Contact, req: &Request<'_>) -> Plan {
    let mut after = current.clone();
    let data_changed = req.data.apply(&mut after.data);
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
    if data_changed || after.subscribed != current.subscribed || after.email != current.email {
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
    };
    plan_change(current.clone(), &req).contact().clone()
}

/// How a contact write has the contact it changes.
#[derive(Clone, Copy)]
pub(super) enum Current<'a> {
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
pub(super) enum Attempt {
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
pub(super) async fn write_contact_in<DB>(
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
    let (events, tracked) = plan_events(
        project,
        &contact.id,
        sub_changed.then_some(contact.subscribed),
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
pub(super) struct GroupChange<'a> {
    pub(super) id: &'a ContactId,
    pub(super) change: &'a ContactChange,
    pub(super) effects: Effects<'a>,
    /// The field types its data shows for the first time (see [`field_types`]).
    pub(super) types: Vec<(&'a str, &'static str)>,
}

/// Changes contacts of `project` by id inside the caller's transaction `tx`, as
/// [`Store::update_contact_with`] changes one in a transaction of its own, with one statement of
/// each kind for them all: one read of the contacts (locked with `lock`, in id
/// order, so that two groups lock them in the same order), each change applied in turn to the
/// contact as the changes before it left it, then the contacts written once each, their events,
/// the new field types of the changes that change their contact and the idempotency keys.
/// Nothing is written for a contact that is gone. Answers the field types it recorded.
pub(super) async fn change_contacts_in<DB>(
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
            super::dialect::placeholders(2, chunk.len())
        );
        let sql = super::dialect::bound_in_order(super::dialect::backend_of::<DB>(), sql);
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
        };
        let plan = plan_change(current.clone(), &req);
        let contact = plan.contact().clone();
        let sub_changed = current.subscribed != contact.subscribed;
        let (planned, tracked) = plan_events(
            project,
            &contact.id,
            sub_changed.then_some(contact.subscribed),
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

impl Store {
    /// One contact of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact(&self, project: &ProjectId, id: &ContactId) -> StoreResult<Contact> {
        let sql = format!("SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND id = $2");
        let row: Option<ContactRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// The contacts of `project` among `ids`, in one read (unknown ids are left out).
    #[tracing::instrument(level = "debug", skip_all, fields(contacts = ids.len()))]
    pub async fn contacts_by_ids(
        &self,
        project: &ProjectId,
        ids: &[&str],
    ) -> StoreResult<Vec<Contact>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND id IN ({})",
            super::dialect::placeholders(2, ids.len())
        );
        let sql = super::dialect::bound_in_order(self.db().backend(), sql);
        let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            for id in ids {
                q = q.bind(*id);
            }
            q.fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// A contact by id alone, for signed links (the token names the contact; its project comes
    /// from the row).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact_by_id(&self, id: &ContactId) -> StoreResult<Contact> {
        let sql = format!("SELECT {COLUMNS} FROM contacts WHERE id = $1");
        let row: Option<ContactRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// A page of a project's contacts, newest first, optionally filtered by a case-insensitive
    /// substring of the address.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_contacts(
        &self,
        project: &ProjectId,
        page: &PageRequest,
        search: Option<&str>,
    ) -> StoreResult<Page<Contact>> {
        let pattern = search.map(|s| format!("%{}%", like_escape(&s.to_lowercase())));
        // SQLite: the trigram index (`contacts_search`) narrows a term of 3 characters or more
        // to the contacts that contain it, and the `LIKE` decides as before. PostgreSQL's
        // trigram index serves the `LIKE` itself (whose default escape is the backslash).
        let trigrams = match (self.db().backend(), search) {
            (Backend::Sqlite, Some(s)) if s.chars().count() >= 3 => {
                Some(format!("\"{}\"", s.to_lowercase().replace('"', "\"\"")))
            }
            _ => None,
        };
        // With the trigram index, the matches drive the search (`+` keeps SQLite from walking
        // the whole project by its index instead).
        let mut filter = String::from(match trigrams {
            Some(_) => "+project_id = $1",
            None => "project_id = $1",
        });
        if pattern.is_some() {
            filter.push_str(match self.db().backend() {
                Backend::Sqlite => " AND email LIKE $2 ESCAPE '\\'",
                Backend::Postgres => " AND email LIKE $2",
            });
        }
        if trigrams.is_some() {
            filter.push_str(
                " AND rowid IN (SELECT rowid FROM contacts_search WHERE contacts_search MATCH $3)",
            );
        }
        let mut sql = format!("SELECT {COLUMNS} FROM contacts WHERE {filter}");
        let next = 2 + usize::from(pattern.is_some()) + usize::from(trigrams.is_some());
        if page.after.is_some() {
            sql.push_str(&format!(" AND id < ${next}"));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", page.limit + 1));
        // Without a search, the count the triggers of `contact_counts` keep; with one, a count
        // of the matches.
        let count_sql = match &pattern {
            None => CONTACT_COUNT.to_string(),
            Some(_) => format!("SELECT COUNT(*) FROM contacts WHERE {filter}"),
        };

        let (rows, total): (Vec<ContactRow>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            if let Some(p) = &pattern {
                q = q.bind(p);
            }
            if let Some(t) = &trigrams {
                q = q.bind(t);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() {
                let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
                if let Some(p) = &pattern {
                    c = c.bind(p);
                }
                if let Some(t) = &trigrams {
                    c = c.bind(t);
                }
                c.fetch_one(pool).await?
            } else {
                0
            };
            (rows, total)
        });
        let items: Vec<Contact> = rows.into_iter().map(Into::into).collect();
        Ok(Page::from_rows(items, page, total, |c| c.id.as_str()))
    }

    /// Creates the contact of `upsert.email` or applies the upsert to the existing one.
    #[tracing::instrument(level = "debug", skip(self, upsert))]
    pub async fn upsert_contact(
        &self,
        project: &ProjectId,
        upsert: &ContactUpsert,
    ) -> StoreResult<UpsertOutcome> {
        let req = Request {
            email: None,
            subscribed: upsert.subscribed,
            subscribed_default: upsert.subscribed_default,
            resubscribe: upsert.resubscribe,
            data: &upsert.data,
        };
        self.write_contact(
            project,
            Target::Email(&upsert.email),
            &req,
            &Effects::default(),
        )
        .await
        .map(|(o, _)| o)
    }

    /// Applies `change` to a contact, recording a subscription change with `source`.
    #[tracing::instrument(level = "debug", skip(self, change))]
    pub async fn update_contact(
        &self,
        project: &ProjectId,
        id: &ContactId,
        change: &ContactChange,
        source: SubscriptionSource,
    ) -> StoreResult<UpsertOutcome> {
        let req = Request {
            email: change.email.as_ref(),
            subscribed: change.subscribed,
            subscribed_default: false,
            resubscribe: true,
            data: &change.data,
        };
        let effects = Effects {
            source,
            ..Effects::default()
        };
        self.write_contact(project, Target::Id(id), &req, &effects)
            .await
            .map(|(o, _)| o)
    }

    /// [`Store::update_contact`] that also records `effects` (an idempotency key) in the same
    /// transaction: a workflow's contact update.
    #[tracing::instrument(level = "debug", skip(self, change, effects))]
    pub async fn update_contact_with(
        &self,
        project: &ProjectId,
        id: &ContactId,
        change: &ContactChange,
        effects: &Effects<'_>,
    ) -> StoreResult<UpsertOutcome> {
        let req = Request {
            email: change.email.as_ref(),
            subscribed: change.subscribed,
            subscribed_default: false,
            resubscribe: true,
            data: &change.data,
        };
        self.write_contact(project, Target::Id(id), &req, effects)
            .await
            .map(|(o, _)| o)
    }

    /// Unsubscribes a contact because of `source` (a bounce, a complaint) with a reason that the
    /// `contact.unsubscribed` event carries.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn unsubscribe_contact(
        &self,
        project: &ProjectId,
        id: &ContactId,
        source: SubscriptionSource,
        reason: Option<&str>,
    ) -> StoreResult<UpsertOutcome> {
        let data = DataPatch::default();
        let req = Request {
            email: None,
            subscribed: Some(false),
            subscribed_default: false,
            resubscribe: true,
            data: &data,
        };
        let effects = Effects {
            source,
            reason,
            ..Effects::default()
        };
        self.write_contact(project, Target::Id(id), &req, &effects)
            .await
            .map(|(o, _)| o)
    }

    /// The caps of a contact write of `project` that tracks `event`.
    pub(super) fn caps<'a>(&self, project: &ProjectId, event: Option<&'a NewEvent>) -> Caps<'a> {
        let new_event_name = event.map(|e| e.name.as_str()).filter(|name| {
            !self
                .known_events
                .unknown(project.as_str(), &[(*name, "")])
                .is_empty()
        });
        Caps {
            limits: self.limits,
            new_event_name,
        }
    }

    /// Reads the contact inside a write transaction (locked on PostgreSQL; SQLite's write
    /// transaction already excludes other writers), applies the rules, and writes it with its
    /// side effects. Retries only when two writers create the same address at once.
    pub(super) async fn write_contact(
        &self,
        project: &ProjectId,
        target: Target<'_>,
        req: &Request<'_>,
        effects: &Effects<'_>,
    ) -> StoreResult<(UpsertOutcome, Option<StoredEvent>)> {
        let types = self
            .known_fields
            .unknown(project.as_str(), &field_types(&req.data.set));
        let caps = self.caps(project, effects.event);
        let lock = super::dialect::for_update(self.db().backend());
        for _ in 0..MAX_ATTEMPTS {
            let done: Option<(UpsertOutcome, Option<StoredEvent>)> = on_db_write!(self.db(), pool => {
                let mut tx = pool.begin_write().await?;
                match write_contact_in(&mut tx, project, &target, Current::Read(lock), req, effects, &types, caps, None).await {
                    Ok(Attempt::Written(outcome, tracked, events)) => {
                        tx.insert_events(&events).await?;
                        tx.commit().await?;
                        Some((outcome, tracked))
                    }
                    Ok(Attempt::Unchanged(outcome, tracked)) => {
                        tx.rollback().await?;
                        Some((outcome, tracked))
                    }
                    Ok(Attempt::Raced) => {
                        tx.rollback().await?;
                        None
                    }
                    Err(e) => {
                        tx.rollback().await?;
                        return Err(e);
                    }
                }
            });
            if let Some(done) = done {
                if done.0.created || done.0.updated {
                    self.known_fields.remember(project.as_str(), &types);
                }
                if let (Some(name), Some(_)) = (caps.new_event_name, &done.1) {
                    self.known_events.remember(project.as_str(), &[(name, "")]);
                }
                return Ok(done);
            }
        }
        Err(StoreError::Conflict(Conflict::ContactBusy))
    }

    /// Deletes a contact of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_contact(&self, project: &ProjectId, id: &ContactId) -> StoreResult<()> {
        // The cascade reaches the contact's events, memberships and executions, which writes
        // for the contact in flight hold: on PostgreSQL it may be chosen to break a deadlock.
        // The contact is locked first, so no membership is added while the segments' cached
        // counts drop by the ones it has.
        let lock = super::dialect::for_update(self.db().backend());
        let lock_contact =
            format!("SELECT id FROM contacts WHERE project_id = $1 AND id = $2{lock}");
        let done = super::retrying_deadlocks(|| async {
            Ok(on_db_write!(self.db(), pool => {
                let mut tx = pool.begin_write().await?;
                sqlx::query(&lock_contact)
                    .bind(project.as_str())
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await?;
                // A missing contact has no memberships and deletes nothing: 0 rows.
                super::segments::release_memberships(&mut tx, project, &[id.as_str()]).await?;
                let n = sqlx::query("DELETE FROM contacts WHERE project_id = $1 AND id = $2")
                    .bind(project.as_str())
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                n
            }))
        })
        .await?;
        if done == 0 {
            Err(StoreError::NotFound)
        } else {
            Ok(())
        }
    }
}

/// A custom field of a project: its inferred type and how many contacts have it.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomField {
    /// The key in `data`.
    pub key: String,
    /// The type inferred from the first non-null value.
    pub field_type: String,
    /// Contacts that have the key.
    pub contacts: i64,
}

/// A project's contact count as `contact_counts` keeps it (migration 0016); binds the project.
pub(super) const CONTACT_COUNT: &str =
    "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM contact_counts WHERE project_id = $1";

impl Store {
    /// How many contacts a project has (kept by triggers as contacts come and go, so this reads
    /// at most 16 rows).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_contacts(&self, project: &ProjectId) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar(CONTACT_COUNT)
                .bind(project.as_str())
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// The project's custom fields with their types and usage, by key.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn custom_fields(&self, project: &ProjectId) -> StoreResult<Vec<CustomField>> {
        let counts_sql = data_key_counts_sql(self.db().backend());
        type Rows = (Vec<(String, String)>, Vec<(String, i64)>);
        let (types, counts): Rows = on_db!(self.db(), pool => {
            let types = sqlx::query_as("SELECT key, type FROM contact_fields WHERE project_id = $1 ORDER BY key")
                .bind(project.as_str())
                .fetch_all(pool)
                .await?;
            let counts = sqlx::query_as(counts_sql).bind(project.as_str()).fetch_all(pool).await?;
            (types, counts)
        });
        let counts: std::collections::HashMap<String, i64> = counts.into_iter().collect();
        Ok(types
            .into_iter()
            .map(|(key, field_type)| CustomField {
                contacts: counts.get(&key).copied().unwrap_or(0),
                key,
                field_type,
            })
            .collect())
    }
}

/// `(key, contacts having it)` for every top-level custom data key of a project.
fn data_key_counts_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "SELECT j.key AS key, COUNT(*) AS n FROM contacts c, json_each(c.data) j \
             WHERE c.project_id = $1 GROUP BY j.key"
        }
        Backend::Postgres => {
            "SELECT k AS key, COUNT(*) AS n FROM contacts c, jsonb_object_keys(c.data) k \
             WHERE c.project_id = $1 GROUP BY k"
        }
    }
}

/// A standard column of contacts whose values [`Store::column_values`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContactColumn {
    Email,
    CreatedAt,
    UpdatedAt,
}

/// How often a value of a field occurs.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueCount {
    pub value: Value,
    /// Contacts with it.
    pub count: i64,
}

impl Store {
    /// The whole contacts of a project among `emails` (normalised). Concurrent reads of one
    /// project (the recipients of sends being planned) share a statement ([`super::rounds`]):
    /// each is answered by a read that started after it asked.
    #[tracing::instrument(level = "debug", skip(self, emails))]
    pub async fn contacts_with_emails(
        &self,
        project: &ProjectId,
        emails: &[EmailAddress],
    ) -> StoreResult<Vec<Contact>> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        self.contact_reads
            .gather(
                project.as_str().to_string(),
                emails.to_vec(),
                |asked| self.read_contacts_with_emails(project, asked),
                |found, _, mine| mine.iter().filter_map(|e| found.get(e).cloned()).collect(),
            )
            .await
    }

    /// Reads the contacts of a project among the addresses of `asked` (each caller's list), in
    /// statements of at most [`READ_CHUNK`] addresses; answers them by address.
    async fn read_contacts_with_emails(
        &self,
        project: &ProjectId,
        asked: Vec<Vec<EmailAddress>>,
    ) -> StoreResult<HashMap<EmailAddress, Contact>> {
        let mut emails: Vec<EmailAddress> = asked.into_iter().flatten().collect();
        emails.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        emails.dedup();
        let mut contacts = HashMap::with_capacity(emails.len());
        for chunk in emails.chunks(READ_CHUNK) {
            let sql = format!(
                "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND email IN ({})",
                super::dialect::placeholders(2, chunk.len())
            );
            let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
                let mut q = sqlx::query_as(&sql).bind(project.as_str());
                for e in chunk {
                    q = q.bind(e.as_str());
                }
                q.fetch_all(pool).await?
            });
            contacts.extend(
                rows.into_iter()
                    .map(Contact::from)
                    .map(|c| (c.email.clone(), c)),
            );
        }
        Ok(contacts)
    }

    /// The contacts of a project among `emails` (normalised), as `(id, email)`.
    #[tracing::instrument(level = "debug", skip(self, emails))]
    pub async fn contacts_by_emails(
        &self,
        project: &ProjectId,
        emails: &[EmailAddress],
    ) -> StoreResult<Vec<(String, String)>> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id, email FROM contacts WHERE project_id = $1 AND email IN ({})",
            super::dialect::placeholders(2, emails.len())
        );
        let rows: Vec<(String, String)> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            for e in emails {
                q = q.bind(e.as_str());
            }
            q.fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Distinct values of `subscribed`, most common first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn subscribed_values(&self, project: &ProjectId) -> StoreResult<Vec<ValueCount>> {
        let rows: Vec<(bool, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as("SELECT subscribed, COUNT(*) FROM contacts WHERE project_id = $1 GROUP BY subscribed ORDER BY COUNT(*) DESC")
                .bind(project.as_str())
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: Value::Bool(v),
                count,
            })
            .collect())
    }

    /// Distinct values of a standard column of contacts, most common first: `email` in address
    /// order (each is one contact's), `createdAt` and `updatedAt` then newest first, as RFC 3339
    /// dates (as the API writes them).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn column_values(
        &self,
        project: &ProjectId,
        column: ContactColumn,
        limit: i64,
    ) -> StoreResult<Vec<ValueCount>> {
        // The column's name is one of two constants, never the caller's text.
        let name = match column {
            ContactColumn::Email => {
                // An address is one contact's (unique in a project): each counts 1, in address
                // order, read from the (project, email) index without grouping every contact.
                let rows: Vec<String> = on_db!(self.db(), pool => {
                    sqlx::query_scalar("SELECT email FROM contacts WHERE project_id = $1 ORDER BY email LIMIT $2")
                        .bind(project.as_str())
                        .bind(limit)
                        .fetch_all(pool)
                        .await?
                });
                return Ok(rows
                    .into_iter()
                    .map(|v| ValueCount {
                        value: Value::String(v),
                        count: 1,
                    })
                    .collect());
            }
            ContactColumn::CreatedAt => "created_at",
            ContactColumn::UpdatedAt => "updated_at",
        };
        let sql = format!(
            "SELECT {name} AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
             GROUP BY {name} ORDER BY n DESC, v DESC LIMIT $2"
        );
        let rows: Vec<(i64, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(limit).fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: Value::String(crate::domain::time::to_rfc3339(v)),
                count,
            })
            .collect())
    }

    /// Distinct values of the custom field at `keys` (a field path's keys, unescaped), most
    /// common first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn data_values(
        &self,
        project: &ProjectId,
        keys: &[String],
        limit: i64,
    ) -> StoreResult<Vec<ValueCount>> {
        let rows: Vec<(String, i64)> = match self.db() {
            super::Db::Sqlite { pool, .. } => {
                sqlx::query_as(
                    "SELECT data -> $2 AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
                     AND json_type(data, $2) IS NOT NULL AND json_type(data, $2) != 'null' \
                     GROUP BY v ORDER BY n DESC, v LIMIT $3",
                )
                .bind(project.as_str())
                .bind(super::dialect::sqlite_json_path(keys))
                .bind(limit)
                .fetch_all(pool)
                .await?
            }
            super::Db::Postgres(pool) => sqlx::query_as(
                "SELECT (data #> $2)::text AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
                     AND data #> $2 IS NOT NULL AND jsonb_typeof(data #> $2) != 'null' \
                     GROUP BY v ORDER BY n DESC, v LIMIT $3",
            )
            .bind(project.as_str())
            .bind(keys)
            .bind(limit)
            .fetch_all(pool)
            .await?,
        };
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: serde_json::from_str(&v).unwrap_or(Value::String(v)),
                count,
            })
            .collect())
    }

    /// Removes the custom field at `keys` from every contact of a project; answers how many
    /// contacts had it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_data_field(
        &self,
        project: &ProjectId,
        keys: &[String],
    ) -> StoreResult<u64> {
        if let Some(key) = keys.first() {
            self.known_fields.forget(project.as_str(), key);
        }
        let now = now_ms();
        /// Removes the path from the contacts that have it, `$chunk` contacts a transaction
        /// (all at once for `None`), until none is left; the transaction that finds fewer also
        /// removes the field's type, so that when it commits no contact has the field. The SQL
        /// and the bound path are the backend's.
        macro_rules! delete_field {
            ($pool:expr, $sql:expr, $path:expr, $chunk:expr) => {{
                let mut total = 0u64;
                loop {
                    let mut tx = $pool.begin_write().await?;
                    let n = sqlx::query($sql)
                        .bind(project.as_str())
                        .bind($path)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    total += n;
                    let last = $chunk.is_none_or(|chunk: u64| n < chunk);
                    if last && keys.len() == 1 {
                        sqlx::query(
                            "DELETE FROM contact_fields WHERE project_id = $1 AND key = $2",
                        )
                        .bind(project.as_str())
                        .bind(&keys[0])
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    if last {
                        break total;
                    }
                }
            }};
        }
        let n = match self.db() {
            // SQLite: its one writer is held a chunk at a time.
            super::Db::Sqlite { writer, .. } => delete_field!(
                writer,
                &format!(
                    "UPDATE contacts SET data = json_remove(data, $2), version = version + 1, \
                     updated_at = $3 WHERE rowid IN (SELECT rowid FROM contacts \
                     WHERE project_id = $1 AND json_type(data, $2) IS NOT NULL LIMIT {})",
                    super::projects::DELETE_CHUNK
                ),
                super::dialect::sqlite_json_path(keys),
                Some(super::projects::DELETE_CHUNK)
            ),
            super::Db::Postgres(pool) => delete_field!(
                pool,
                "UPDATE contacts SET data = data #- $2, version = version + 1, updated_at = $3 \
                 WHERE project_id = $1 AND data #> $2 IS NOT NULL",
                keys,
                None::<u64>
            ),
        };
        Ok(n)
    }
}
