//! Group commit of contact writes by address (`/v1/track`, `POST /contacts`) and of sends to one
//! recipient (`/v1/send`).
//!
//! A tracked event is one small write: the contact read and written, its new field types, the
//! event (its outbox row follows by trigger) and, with an `Idempotency-Key`, the key. Written one
//! transaction a request, the serial part of each request is the transaction itself: on SQLite
//! the wait for the one writer connection, `BEGIN IMMEDIATE` and the `COMMIT` that appends the
//! request's pages to the WAL; on PostgreSQL a connection and a commit (a WAL flush) each.
//!
//! Here every request that is waiting when the writer is free goes into one transaction (up to
//! [`MAX_BATCH`]), in the order of its contact's address so that concurrent groups on PostgreSQL
//! lock contacts in one order. The group's contacts are read (and locked, in that order) by one
//! statement per project at the start (but for the new contacts of sends, which their insert
//! checks: [`read_group`]). Each request is still written by the one contact write
//! (`contacts::write_contact_in`), so the rules are those of a single write; several requests for
//! one contact see each other's writes in order, each starting from the contact as the group
//! read or last wrote it. The contacts themselves are written at the end, in one statement per
//! kind (the new ones inserted, the others updated; [`ContactWrites`]), each once in its last
//! state, however many requests of the group changed it; then the group's events are inserted in
//! one statement. So the triggers that run per statement (counters and billing's metering on
//! PostgreSQL, the outbox rows of events there) run once a group, and a group is five statements
//! or so whatever its size.
//!
//! A request is answered only after its group committed. When one request fails for a reason of
//! its own (its idempotency key taken, its project's cap reached, a contact that kept racing), the
//! group is rolled back and written again with a savepoint per request, so that the refused one is
//! rolled back alone and answered with its error: one tenant's refusals never fail another's
//! requests, and cost a group at most one more transaction. The first try has no savepoints,
//! since they are two statements more a request and refusals are rare. Any other failure (the
//! connection lost, a deadlock) rolls the group back and writes each of its requests alone, as
//! without grouping.
//!
//! A send to one recipient (planned and rendered by the sending service) joins the same groups:
//! its contact is locked with the others at the start and checked, against that read (or the
//! group's own last write of it), to be still as the send was planned from (a send planned from
//! an older contact is answered `false` without writing, to be planned again; only a contact that
//! an earlier send of the group wrote is read again, by [`super::emails::sends_fresh_in`]).
//! The group's fresh sends are then written together by [`super::emails::write_sends_in`], one
//! statement per table (contacts, events, emails, their history, keys; on PostgreSQL the new
//! contacts, the emails and their history are one) as one send to many recipients is, before a
//! later request of the same contact and at the end (when the group is written again with
//! savepoints, each send is written under its own). Sends to several recipients lock several
//! contacts and are written alone ([`Store::commit_send`]). On PostgreSQL a group of sends alone
//! that create their contacts (and write nothing else: no idempotency key, no new field type) is
//! that one insert, run on its own without `BEGIN` and `COMMIT`, which writes all of it or
//! nothing ([`write_creating_sends`]).
//!
//! There is no timer: the writer takes what is queued and goes. An idle server writes each
//! request at once; a loaded one writes larger groups. SQLite has one writer task (it has one
//! writer connection); PostgreSQL has [`POSTGRES_WRITERS`], each with its own queue, and a
//! contact's writes always go to the same one (by a hash of project and address): two writers
//! never wait on each other's lock of one contact, which a burst of events for one contact would
//! otherwise make them do in turn.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::contacts::{
    Attempt, COLUMNS, ContactRow, ContactWrites, Current, Effects, IdempotencyClaim, MAX_ATTEMPTS,
    Request, Target, field_types, write_contact_in,
};
use super::dialect::BeginWrite;
use super::emails::{PreparedSend, SendWrite, sends_fresh_in, write_send_in, write_sends_in};
use super::idempotency::IdempotentWrite;
use super::statements::Statements;
use super::{Backend, Conflict, Store, StoreError, StoreResult, on_db_write};
use crate::domain::contact::{Contact, ContactUpsert, UpsertOutcome};
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::ProjectId;

/// The most requests one transaction takes.
pub const MAX_BATCH: usize = 64;
/// Requests that may wait for the writer before a new one waits to be queued.
const QUEUE: usize = 4 * MAX_BATCH;
/// Writer tasks on PostgreSQL, each with a connection while it writes; a contact's writes always
/// go to the same one. Two measured best on 2 cores (`/v1/track`: 1,430/s with one, 1,630-1,800/s
/// with two, 1,400-1,560/s with four): one group is written while the other commits, and more
/// writers only make smaller groups.
pub const POSTGRES_WRITERS: usize = 2;

/// Builds the response stored under an idempotency key from what was written.
pub type ResponseFn = fn(&Contact, Option<&StoredEvent>) -> Value;

/// An `Idempotency-Key` stored with a grouped write, owned so that it can wait in the writer's
/// queue. `R` is the response to replay, or what builds it from the writes.
pub struct OwnedIdempotency<R> {
    /// The caller's key.
    pub key: String,
    /// The endpoint it was used on.
    pub endpoint: &'static str,
    /// Hash of the request body.
    pub request_hash: String,
    /// The status to replay.
    pub status: u16,
    /// The body to replay, or what builds it.
    pub response: R,
}

impl<R> OwnedIdempotency<R> {
    /// The key as a write stores it.
    fn as_write(&self) -> IdempotentWrite<'_, &R> {
        IdempotentWrite {
            key: &self.key,
            endpoint: self.endpoint,
            request_hash: &self.request_hash,
            status: self.status,
            response: &self.response,
        }
    }
}

/// An `Idempotency-Key` claimed by a grouped contact write: its response is built from what was
/// written.
pub type OwnedClaim = OwnedIdempotency<ResponseFn>;

/// The `Idempotency-Key` of a grouped send: its response is known before the write.
pub type OwnedResponse = OwnedIdempotency<Value>;

/// A contact upsert by address with its effects, owned so that it can wait in the writer's queue.
pub struct GroupedUpsert {
    /// The project.
    pub project: ProjectId,
    /// The contact to create or change.
    pub upsert: ContactUpsert,
    /// Where a change of `subscribed` comes from.
    pub source: SubscriptionSource,
    /// The event to record with the write.
    pub event: Option<NewEvent>,
    /// Makes the write idempotent under a key.
    pub idempotency: Option<OwnedClaim>,
}

/// What a grouped write answers: the contact's outcome and the stored event.
pub type GroupedOutcome = StoreResult<(UpsertOutcome, Option<StoredEvent>)>;

/// A send to one recipient, planned and rendered, owned so that it can wait in the writer's
/// queue.
pub struct GroupedSend {
    /// The project.
    pub project: ProjectId,
    /// The send; its one contact plan names the address that orders and routes it.
    pub send: PreparedSend,
    /// Makes the send idempotent under a key.
    pub idempotency: Option<OwnedResponse>,
}

impl GroupedSend {
    fn email(&self) -> &str {
        self.send.contacts[0].contact().email.as_str()
    }

    /// The plan of its one recipient's contact when the send creates that contact (the address
    /// was missing when the send was planned).
    fn creating(&self) -> Option<&super::contacts::Plan> {
        match &self.send.contacts[..] {
            [plan] if plan.based_on().is_none() => Some(plan),
            _ => None,
        }
    }

    fn idempotent_write(&self) -> Option<IdempotentWrite<'_, &Value>> {
        self.idempotency.as_ref().map(OwnedIdempotency::as_write)
    }

    /// The send in a transaction of its own ([`Store::commit_send`]).
    async fn commit_alone(&self, store: &Store) -> SendOutcome {
        store
            .commit_send(&self.project, &self.send, self.idempotent_write())
            .await
    }
}

/// What a grouped send answers: `true` when written, `false` when its contact changed since it
/// was planned (nothing written).
pub type SendOutcome = StoreResult<bool>;

/// A write waiting for the writer, with where its answer goes.
enum Pending {
    Upsert(PendingUpsert),
    Send {
        write: GroupedSend,
        reply: oneshot::Sender<SendOutcome>,
    },
}

impl Pending {
    /// The project and address that order the group and choose the writer.
    fn key(&self) -> (&str, &str) {
        match self {
            Pending::Upsert(p) => (p.write.project.as_str(), p.write.upsert.email.as_str()),
            Pending::Send { write, .. } => (write.project.as_str(), write.email()),
        }
    }
}

/// What one member of a group answers, with the field types it saw first (remembered once the
/// group committed).
// Answers live only until the group's replies are sent, and upserts (the larger) are the common
// kind: boxing them would add an allocation a track.
#[allow(clippy::large_enum_variant)]
enum Answer<'p> {
    Upsert(GroupedOutcome, NewTypes<'p>),
    Send(SendOutcome, NewTypes<'p>),
}

struct PendingUpsert {
    write: GroupedUpsert,
    reply: oneshot::Sender<GroupedOutcome>,
}

impl PendingUpsert {
    fn request(&self) -> Request<'_> {
        Request {
            email: None,
            subscribed: self.write.upsert.subscribed,
            subscribed_default: self.write.upsert.subscribed_default,
            resubscribe: self.write.upsert.resubscribe,
            data: &self.write.upsert.data,
            topics: &self.write.upsert.topics,
        }
    }

    fn effects(&self) -> Effects<'_> {
        Effects {
            source: self.write.source,
            reason: None,
            event: self.write.event.as_ref(),
            idempotency: self.write.idempotency.as_ref().map(|c| IdempotencyClaim {
                key: &c.key,
                endpoint: c.endpoint,
                request_hash: &c.request_hash,
                status: c.status,
                response: &c.response,
            }),
        }
    }
}

/// The queues in front of the writer tasks, one a task. The tasks end when their queue's last
/// sender is gone.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    lanes: Vec<mpsc::Sender<Pending>>,
}

impl GroupCommit {
    /// Starts the writer tasks over `store` (which must not hold these queues itself, or the
    /// tasks would never end).
    fn start(store: Store) -> GroupCommit {
        let writers = match store.db().backend() {
            Backend::Sqlite => 1,
            Backend::Postgres => POSTGRES_WRITERS,
        };
        let lanes = (0..writers)
            .map(|_| {
                let (queue, receiver) = mpsc::channel(QUEUE);
                tokio::spawn(run(store.clone(), receiver));
                queue
            })
            .collect();
        GroupCommit { lanes }
    }

    /// The queue of the writer that takes every write of `email` in `project`, so that one
    /// contact's writes never wait on each other's locks across writers.
    fn lane(&self, project: &ProjectId, email: &str) -> &mpsc::Sender<Pending> {
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(project.as_str(), email), &mut hasher);
        let at = std::hash::Hasher::finish(&hasher) as usize % self.lanes.len();
        &self.lanes[at]
    }
}

/// One writer task: takes every queued request (up to [`MAX_BATCH`]) and writes them as a group.
async fn run(store: Store, receiver: mpsc::Receiver<Pending>) {
    drain(receiver, MAX_BATCH, |batch| {
        let span = tracing::debug_span!("group_commit", size = batch.len());
        write_group(&store, batch).instrument(span)
    })
    .await;
}

/// The loop of a writer task: hands every queued item (up to `max` at once) to `write` as one
/// group, until the last sender is gone.
pub(super) async fn drain<T, F, Fut>(mut receiver: mpsc::Receiver<T>, max: usize, mut write: F)
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut batch = Vec::with_capacity(max);
    while receiver.recv_many(&mut batch, max).await > 0 {
        write(std::mem::take(&mut batch)).await;
    }
}

/// Whether `err` is a refusal of one request alone, which the rest of its group does not share.
fn refuses_one(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::NotFound
            | StoreError::BillingLimit(_)
            | StoreError::Cap(_)
            | StoreError::Conflict(
                Conflict::IdempotencyKey | Conflict::ContactBusy | Conflict::Gone
            )
    )
}

/// The field types a request's write saw for the first time (to remember once it is committed).
type NewTypes<'p> = Vec<(&'p str, &'static str)>;

/// How writing a group inside one transaction ended.
enum GroupEnd<'p> {
    /// Committed: each request's answer and new field types, by position (with savepoints, a
    /// refusal among them).
    Committed(Vec<Answer<'p>>),
    /// Without savepoints, a request was refused alone; nothing was committed.
    Refused,
}

async fn write_group(store: &Store, mut batch: Vec<Pending>) {
    // Lock order on PostgreSQL; the sort is stable, so one contact's requests keep their order.
    batch.sort_by(|a, b| a.key().cmp(&b.key()));
    let mut written = try_group(store, &batch, false).await;
    if let Ok(GroupEnd::Refused) = written {
        written = try_group(store, &batch, true).await;
    }
    match written {
        Ok(GroupEnd::Committed(answers)) => {
            let sends = answers
                .iter()
                .filter(|a| matches!(a, Answer::Send(..)))
                .count();
            tracing::debug!(size = answers.len(), sends, "group committed");
            let mut replies = Vec::with_capacity(answers.len());
            for (pending, answer) in batch.iter().zip(answers) {
                let project = pending.key().0;
                match answer {
                    Answer::Upsert(outcome, types) => {
                        if let Ok((o, _)) = &outcome
                            && (o.created || o.updated)
                        {
                            store.known_fields.remember(project, &types);
                        }
                        // Remembered only when new to the instance, so that the entry
                        // expires and the name is recorded again after a minute (another
                        // instance may have deleted it).
                        if let Ok((_, Some(tracked))) = &outcome {
                            let name = [(tracked.name.as_str(), "")];
                            if !store.known_events.unknown(project, &name).is_empty() {
                                store.known_events.remember(project, &name);
                            }
                        }
                        replies.push(Answer::Upsert(outcome, Vec::new()));
                    }
                    Answer::Send(outcome, types) => {
                        if let Ok(true) = outcome {
                            store.known_fields.remember(project, &types);
                        }
                        replies.push(Answer::Send(outcome, Vec::new()));
                    }
                }
            }
            for (pending, answer) in batch.into_iter().zip(replies) {
                match (pending, answer) {
                    (Pending::Upsert(p), Answer::Upsert(outcome, _)) => {
                        let _ = p.reply.send(outcome);
                    }
                    (Pending::Send { reply, .. }, Answer::Send(outcome, _)) => {
                        let _ = reply.send(outcome);
                    }
                    // Answers are made member by member, each of its member's kind, so this never
                    // happens; were it to, the caller would see its answer dropped (an error).
                    _ => tracing::error!("a group's answer does not match its member"),
                }
            }
        }
        // The database cannot take the group now (unreachable, or its lock held past the busy
        // timeout): each request alone would wait as long again, one after the other, so every
        // one hears why at once.
        Err(StoreError::Unavailable(cause)) => {
            tracing::debug!(error = %cause, size = batch.len(), "group write failed: database unavailable");
            for pending in batch {
                let err = StoreError::Unavailable(cause.clone());
                match pending {
                    Pending::Upsert(p) => {
                        let _ = p.reply.send(Err(err));
                    }
                    Pending::Send { reply, .. } => {
                        let _ = reply.send(Err(err));
                    }
                }
            }
        }
        Ok(GroupEnd::Refused) | Err(_) => {
            if let Err(err) = written {
                tracing::debug!(error = %err, size = batch.len(), "group write failed; writing each request alone");
            }
            for pending in batch {
                match pending {
                    Pending::Upsert(p) => {
                        let outcome = write_alone(store, &p).await;
                        let _ = p.reply.send(outcome);
                    }
                    Pending::Send { write, reply } => {
                        let _ = reply.send(write.commit_alone(store).await);
                    }
                }
            }
        }
    }
}

/// One request in a transaction of its own (a group that failed as a whole).
async fn write_alone(store: &Store, pending: &PendingUpsert) -> GroupedOutcome {
    store
        .write_contact(
            &pending.write.project,
            Target::Email(&pending.write.upsert.email),
            &pending.request(),
            &pending.effects(),
        )
        .await
}

/// Writes `batch` in one transaction. Without `savepoints`, the first request refused alone rolls
/// the group back ([`GroupEnd::Refused`]); with them, each request is written under a savepoint
/// of its own and a refused one is rolled back to it. `Err` for a failure of the whole group.
async fn try_group<'p>(
    store: &Store,
    batch: &'p [Pending],
    savepoints: bool,
) -> StoreResult<GroupEnd<'p>> {
    if !savepoints
        && let super::Db::Postgres(pool) = store.db()
        && let Some(sends) = creating_sends(store, batch)
    {
        return write_creating_sends(pool, &sends).await;
    }
    let lock = super::dialect::for_update(store.db().backend());
    let end = on_db_write!(store.db(), pool => {
        let mut tx = pool.begin_write().await?;
        match write_each_in(&mut tx, store, batch, lock, savepoints).await {
            Ok(Some(outcomes)) => {
                tx.commit().await?;
                GroupEnd::Committed(outcomes)
            }
            Ok(None) => {
                tx.rollback().await?;
                GroupEnd::Refused
            }
            Err(err) => {
                let _ = tx.rollback().await;
                return Err(err);
            }
        }
    });
    Ok(end)
}

/// The sends of `batch` when it is sends alone, each to one new address of its own and writing
/// nothing but its contact and its emails (no subscription event, no field type seen for the
/// first time, no attachments, no idempotency key), with no more emails than one insert takes:
/// a group that one statement writes whole.
fn creating_sends<'p>(store: &Store, batch: &'p [Pending]) -> Option<Vec<&'p GroupedSend>> {
    let mut sends = Vec::with_capacity(batch.len());
    let mut emails = 0;
    for (at, pending) in batch.iter().enumerate() {
        let Pending::Send { write, .. } = pending else {
            return None;
        };
        let send = &write.send;
        let plan = write.creating()?;
        // The batch is in address order: a second send to one address follows the first.
        let repeated = at > 0 && batch[at - 1].key() == pending.key();
        if repeated
            || plan.subscription_changed_to().is_some()
            || !send.topic_changes.is_empty()
            || send.content.is_some()
            || write.idempotency.is_some()
            || !store
                .known_fields
                .unknown(write.project.as_str(), &send.types())
                .is_empty()
        {
            return None;
        }
        emails += send.emails.len();
        sends.push(write);
    }
    (emails <= super::emails::MAX_EMAILS_PER_INSERT).then_some(sends)
}

/// Writes [`creating_sends`] in one statement on its own, without `BEGIN` and `COMMIT`: their
/// contacts, emails and first history entries, all or nothing. An address taken meanwhile, or a
/// refusal of one send (its project's cap), writes nothing and has the group written again with
/// a savepoint each ([`GroupEnd::Refused`]).
async fn write_creating_sends<'p>(
    pool: &sqlx::PgPool,
    sends: &[&GroupedSend],
) -> StoreResult<GroupEnd<'p>> {
    let now = crate::domain::time::now_ms();
    let contacts: Vec<&Contact> = sends.iter().map(|w| w.send.contacts[0].contact()).collect();
    let emails: Vec<_> = sends
        .iter()
        .flat_map(|w| w.send.email_inserts(&w.project, now))
        .collect();
    // The suppression list is read on the connection that writes, just before.
    let mut conn = pool.acquire().await?;
    let listed = super::statements::listed_emails::<sqlx::Postgres>(&mut conn, &emails).await?;
    let emails = super::statements::with_listed(&emails, &listed);
    match super::statements::insert_contacts_with_emails(&mut *conn, &contacts, &emails).await {
        Ok(true) => Ok(GroupEnd::Committed(
            sends
                .iter()
                .map(|_| Answer::Send(Ok(true), Vec::new()))
                .collect(),
        )),
        Ok(false) => Ok(GroupEnd::Refused),
        Err(err) if refuses_one(&err) => Ok(GroupEnd::Refused),
        Err(err) => Err(err),
    }
}

/// The contacts of a group as it read them at the start or last wrote them, by project and
/// address: a request starts from it instead of reading it (the group's transaction holds it:
/// locked on PostgreSQL, the one writer on SQLite).
type Written<'a> = HashMap<(&'a str, &'a str), Contact>;

/// The most addresses one read of a group's contacts names.
const READ_CHUNK: usize = 500;

/// Reads (and locks, in address order, with `lock`) the contacts of `batch` (sorted by project
/// and address) in one statement per project: answers those found and the addresses missing.
/// A send's contact is locked here too, so that a group takes every lock in address order.
///
/// With `trust_new_sends`, an address whose first request is a send planned to create its
/// contact is not read but taken as missing, as the send found it: the send's insert (`ON
/// CONFLICT DO NOTHING`) is then what checks it, and a contact created meanwhile makes the group
/// be written again with savepoints, where every address is read. There is nothing to lock of a
/// missing contact, so the lock order is unchanged; a group of such sends alone reads nothing.
async fn read_group<'p, DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    batch: &'p [Pending],
    lock: &str,
    trust_new_sends: bool,
) -> StoreResult<(Written<'p>, HashSet<(&'p str, &'p str)>)>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let mut keys: Vec<(&str, &str)> = Vec::with_capacity(batch.len());
    let mut missing: HashSet<(&str, &str)> = HashSet::with_capacity(batch.len());
    for pending in batch {
        let key = pending.key();
        if !missing.insert(key) {
            continue;
        }
        let creates = matches!(pending, Pending::Send { write, .. } if write.creating().is_some());
        if !(trust_new_sends && creates) {
            keys.push(key);
        }
    }
    let mut found = Written::new();
    for project_keys in keys.chunk_by(|a, b| a.0 == b.0) {
        let project = project_keys[0].0;
        for chunk in project_keys.chunks(READ_CHUNK) {
            let sql = format!(
                "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND email IN ({}) \
                 ORDER BY email{lock}",
                super::dialect::placeholders(2, chunk.len())
            );
            let sql = super::dialect::bound_in_order(super::dialect::backend_of::<DB>(), sql);
            let mut q = sqlx::query_as::<_, ContactRow>(&sql).bind(project);
            for (_, email) in chunk {
                q = q.bind(*email);
            }
            let by_email: HashMap<&str, (&str, &str)> =
                chunk.iter().map(|&key| (key.1, key)).collect();
            for row in q.fetch_all(&mut **tx).await? {
                let contact: Contact = row.into();
                if let Some(&key) = by_email.get(contact.email.as_str()) {
                    missing.remove(&key);
                    found.insert(key, contact);
                }
            }
        }
    }
    Ok((found, missing))
}

/// Whether a send to one recipient is still as it was planned, answered from the state of its
/// contact that the group read (and locked) at its start or last wrote, without reading it again;
/// `None` when the group holds no state of it (a send of the same contact wrote it since), or the
/// send has several recipients.
fn fresh_in_group(
    written: &Written<'_>,
    absent: &HashSet<(&str, &str)>,
    key: (&str, &str),
    send: &PreparedSend,
) -> Option<bool> {
    let [plan] = send.in_address_order()[..] else {
        return None;
    };
    if let Some(now) = written.get(&key) {
        return Some(
            plan.based_on()
                .is_some_and(|c| c.id == now.id && c.version == now.version),
        );
    }
    absent.contains(&key).then(|| plan.based_on().is_none())
}

/// Each request of `batch`, in order, inside `tx` (each under a savepoint with `savepoints`);
/// `Ok(None)` at the first request refused alone without savepoints.
async fn write_each_in<'p, DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    store: &Store,
    batch: &'p [Pending],
    lock: &str,
    savepoints: bool,
) -> StoreResult<Option<Vec<Answer<'p>>>>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
{
    let mut answers = Vec::with_capacity(batch.len());
    let (mut written, mut absent) = read_group(tx, batch, lock, !savepoints).await?;
    // Without savepoints, the group's contacts are written in one statement per kind (before a
    // send, which reads them, and at the end) and its events in one statement at the end.
    let mut events = Vec::new();
    let mut later = ContactWrites::default();
    // Without savepoints, sends found fresh wait here (by position) and are written together,
    // one statement per table ([`write_sends`]): before a later member of the same contact
    // (which must see what its send wrote) and at the end.
    let mut sends: Vec<usize> = Vec::new();
    for (at, member) in batch.iter().enumerate() {
        let key = member.key();
        if sends.last().is_some_and(|&last| batch[last].key() == key)
            && !write_sends(tx, batch, &answers, &mut sends).await?
        {
            return Ok(None);
        }
        let pending = match member {
            Pending::Upsert(pending) => pending,
            Pending::Send { write, .. } => {
                if !later.is_empty() {
                    if !tx.write_contacts(&later).await? {
                        return Ok(None);
                    }
                    later.clear();
                }
                // `false` (the contact changed since the send was planned) has its caller plan
                // and render it again.
                let answer = if savepoints {
                    let mut savepoint = sqlx::Acquire::begin(&mut *tx).await?;
                    let (end, types) = write_send(&mut savepoint, store, write, lock).await;
                    let outcome = match end {
                        Ok(SendEnd::Written) => {
                            savepoint.commit().await?;
                            Ok(true)
                        }
                        Ok(SendEnd::Stale | SendEnd::Raced) => {
                            savepoint.rollback().await?;
                            Ok(false)
                        }
                        Err(err) if refuses_one(&err) => {
                            savepoint.rollback().await?;
                            Err(err)
                        }
                        Err(err) => return Err(err),
                    };
                    Answer::Send(outcome, types)
                } else {
                    let types = store
                        .known_fields
                        .unknown(write.project.as_str(), &write.send.types());
                    let fresh = match fresh_in_group(&written, &absent, key, &write.send) {
                        Some(fresh) => Ok(fresh),
                        None => sends_fresh_in(tx, &write.project, &[&write.send], lock)
                            .await
                            .map(|fresh| fresh[0]),
                    };
                    match fresh {
                        // Written with the others; answered `true` once the group committed.
                        Ok(true) => {
                            sends.push(at);
                            Answer::Send(Ok(true), types)
                        }
                        // Nothing of it is written.
                        Ok(false) => Answer::Send(Ok(false), types),
                        Err(err) if refuses_one(&err) => return Ok(None),
                        Err(err) => return Err(err),
                    }
                };
                if let Answer::Send(Ok(true), _) = answer {
                    // A later request for this contact reads it as the send left it.
                    written.remove(&key);
                    absent.remove(&key);
                }
                answers.push(answer);
                continue;
            }
        };
        let current = match written.get(&key) {
            Some(contact) => Current::Known(contact),
            None if absent.contains(&key) => Current::Absent,
            None => Current::Read(lock),
        };
        let (outcome, types) = if savepoints {
            let mut savepoint = sqlx::Acquire::begin(&mut *tx).await?;
            let (outcome, types) =
                match write_one_in(&mut savepoint, store, pending, current, lock, None).await {
                    Ok(one) => (
                        savepoint
                            .insert_events(&one.events)
                            .await
                            .map(|()| (one.outcome, one.tracked))
                            .map_err(StoreError::from),
                        one.types,
                    ),
                    Err(err) => (Err(err), Vec::new()),
                };
            match &outcome {
                Ok(_) => savepoint.commit().await?,
                Err(err) if refuses_one(err) => savepoint.rollback().await?,
                Err(_) => return outcome.map(|_| None),
            }
            (outcome, types)
        } else {
            match write_one_in(tx, store, pending, current, lock, Some(&mut later)).await {
                Ok(one) => {
                    events.extend(one.events);
                    (Ok((one.outcome, one.tracked)), one.types)
                }
                Err(err) if refuses_one(&err) => return Ok(None),
                Err(err) => return Err(err),
            }
        };
        if let Ok((o, _)) = &outcome {
            absent.remove(&key);
            written.insert(key, o.contact.clone());
        }
        answers.push(Answer::Upsert(outcome, types));
    }
    // Part of them may be written: again, with a savepoint each.
    if !write_sends(tx, batch, &answers, &mut sends).await? {
        return Ok(None);
    }
    // Another writer created one of the group's new contacts since the read: written again
    // with a savepoint each, where that request reads the contact again.
    if !tx.write_contacts(&later).await? {
        return Ok(None);
    }
    match tx.insert_events(&events).await.map_err(StoreError::from) {
        Ok(()) => Ok(Some(answers)),
        Err(err) if refuses_one(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Writes the sends of `batch` at the positions `sends` (found fresh, answered in `answers`
/// with the field types they see first) in one statement per table, and empties `sends`;
/// `false` when a new recipient's address was taken meanwhile or one of them was refused alone
/// (its key taken, its project's cap reached): part of them may be written, so the group is
/// written again with a savepoint each.
async fn write_sends<'p, DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    batch: &'p [Pending],
    answers: &[Answer<'p>],
    sends: &mut Vec<usize>,
) -> StoreResult<bool>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if sends.is_empty() {
        return Ok(true);
    }
    let members: Vec<(&GroupedSend, &NewTypes<'p>)> = sends
        .iter()
        .filter_map(|&at| match (&batch[at], &answers[at]) {
            (Pending::Send { write, .. }, Answer::Send(_, types)) => Some((write, types)),
            _ => None,
        })
        .collect();
    let keys: Vec<_> = members.iter().map(|(w, _)| w.idempotent_write()).collect();
    let writes: Vec<SendWrite<'_>> = members
        .iter()
        .zip(&keys)
        .map(|((write, types), key)| SendWrite {
            project: &write.project,
            send: &write.send,
            types: types.as_slice(),
            idempotency: key.as_ref(),
        })
        .collect();
    sends.clear();
    match write_sends_in(tx, &writes, crate::domain::time::now_ms()).await {
        Err(err) if refuses_one(&err) => Ok(false),
        written => written,
    }
}

/// How [`write_send`] ended.
enum SendEnd {
    /// Written whole.
    Written,
    /// Its contact changed since the send was planned; nothing was written.
    Stale,
    /// Its contact changed under the write after it was found fresh; part of it may be written.
    Raced,
}

/// One send inside `tx`: its contact checked (locked with `lock`), then written as planned.
async fn write_send<'p, DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    store: &Store,
    write: &'p GroupedSend,
    lock: &str,
) -> (StoreResult<SendEnd>, NewTypes<'p>)
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
{
    let project = &write.project;
    let types = store
        .known_fields
        .unknown(project.as_str(), &write.send.types());
    let outcome = async {
        if !sends_fresh_in(tx, project, &[&write.send], lock).await?[0] {
            return Ok(SendEnd::Stale);
        }
        let now = crate::domain::time::now_ms();
        let idempotency = write.idempotent_write();
        let wrote =
            write_send_in(tx, project, &write.send, &types, idempotency.as_ref(), now).await?;
        Ok(if wrote {
            SendEnd::Written
        } else {
            SendEnd::Raced
        })
    }
    .await;
    (outcome, types)
}

/// What [`write_one_in`] wrote of one request.
struct OneWritten<'p> {
    outcome: UpsertOutcome,
    /// The stored tracked event, when the request tracks one.
    tracked: Option<StoredEvent>,
    /// The request's events, the caller's to insert.
    events: Vec<StoredEvent>,
    /// The field types the write saw for the first time.
    types: NewTypes<'p>,
}

/// One request inside `tx` from `current`, read again (locked with `lock`) while another writer
/// keeps creating its address. With `later`, its contact is planned there instead of written
/// (see [`write_contact_in`]).
async fn write_one_in<'p, DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    store: &Store,
    pending: &'p PendingUpsert,
    mut current: Current<'_>,
    lock: &str,
    mut later: Option<&mut ContactWrites>,
) -> StoreResult<OneWritten<'p>>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let project = &pending.write.project;
    let types = store.known_fields.unknown(
        project.as_str(),
        &field_types(&pending.write.upsert.data.set),
    );
    let target = Target::Email(&pending.write.upsert.email);
    let (req, effects) = (pending.request(), pending.effects());
    let caps = store.caps(project, pending.write.event.as_ref());
    for _ in 0..MAX_ATTEMPTS {
        let writes = later.as_deref_mut();
        match write_contact_in(
            tx, project, &target, current, &req, &effects, &types, caps, writes,
        )
        .await?
        {
            Attempt::Written(outcome, tracked, events) => {
                return Ok(OneWritten {
                    outcome,
                    tracked,
                    events,
                    types,
                });
            }
            Attempt::Unchanged(outcome, tracked) => {
                return Ok(OneWritten {
                    outcome,
                    tracked,
                    events: Vec::new(),
                    types,
                });
            }
            // Another writer created the address since the read (only a contact that was read,
            // and missing, is inserted), and nothing was written: read it again.
            Attempt::Raced => current = Current::Read(lock),
        }
    }
    Err(StoreError::Conflict(Conflict::ContactBusy))
}

impl Store {
    /// The group writers, started on first use.
    fn group_commit(&self) -> &GroupCommit {
        self.group.get_or_init(|| {
            GroupCommit::start(Store {
                group: Default::default(),
                event_writer: Default::default(),
                ..self.clone()
            })
        })
    }

    /// [`Store::upsert_contact`] through the group writer: the write shares one transaction
    /// with the others waiting at the same time (see the module's doc); the answer comes once it
    /// is committed.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn upsert_contact_grouped(&self, write: GroupedUpsert) -> GroupedOutcome {
        let (reply, answer) = oneshot::channel();
        let lane = self
            .group_commit()
            .lane(&write.project, write.upsert.email.as_str());
        let pending = Pending::Upsert(PendingUpsert { write, reply });
        if let Err(mpsc::error::SendError(Pending::Upsert(pending))) = lane.send(pending).await {
            // The writers are gone (the runtime is shutting down): write it here.
            return write_alone(self, &pending).await;
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Database(sqlx::Error::WorkerCrashed)))
    }

    /// [`Store::commit_send`] of a send to one recipient through the group writer: the send
    /// shares one transaction, and one statement per table, with the other sends and writes
    /// waiting at the same time (see the module's doc); the answer comes once it is committed. A
    /// send to several recipients is written alone.
    #[tracing::instrument(level = "debug", skip_all)]
    pub(crate) async fn commit_send_grouped(&self, write: GroupedSend) -> SendOutcome {
        if write.send.contacts.len() != 1 {
            return write.commit_alone(self).await;
        }
        let (reply, answer) = oneshot::channel();
        let lane = self.group_commit().lane(&write.project, write.email());
        if let Err(mpsc::error::SendError(Pending::Send { write, .. })) =
            lane.send(Pending::Send { write, reply }).await
        {
            // The writers are gone (the runtime is shutting down): write it here.
            return write.commit_alone(self).await;
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Database(sqlx::Error::WorkerCrashed)))
    }
}
