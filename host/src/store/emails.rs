//! Emails and their history.
//!
//! A send writes every email of the request, due for delivery at once, and the request's
//! idempotency key, in one transaction: either the whole request is queued or nothing is. A
//! queued email's history starts with no row: its `queued` entry is read off the email itself
//! (its creation time), so queuing writes the email alone. A `suppressed` email is written with
//! its one history entry saying why. A delivery worker claims due emails (`delivery.rs`),
//! hands their messages to the transport, then records each outcome and the email's new status
//! in one transaction (see `jobs/deliver.rs` for what a crash between the two can cause).

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::contacts::ContactWrites;
use super::dialect::{BeginWrite, bound_in_order};
use super::idempotency::IdempotentWrite;
use super::statements::Statements;
use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ActivityId, ContactId, EmailId, EventId, ProjectId};
use crate::domain::time::now_ms;

/// Statuses of an email, in the order they progress.
pub mod status {
    /// Waiting for its hand-off to the transport.
    pub const QUEUED: &str = "queued";
    /// Accepted by the transport.
    pub const SENT: &str = "sent";
    /// Accepted by the recipient's server.
    pub const DELIVERED: &str = "delivered";
    /// Opened.
    pub const OPENED: &str = "opened";
    /// A link was clicked.
    pub const CLICKED: &str = "clicked";
    /// Bounced.
    pub const BOUNCED: &str = "bounced";
    /// Marked as spam.
    pub const COMPLAINED: &str = "complained";
    /// Could not be delivered.
    pub const FAILED: &str = "failed";
    /// Never handed to the transport: marketing mail to an unsubscribed contact.
    pub const SUPPRESSED: &str = "suppressed";

    /// How far along a status is; a later event never moves an email back.
    pub fn rank(s: &str) -> u8 {
        match s {
            QUEUED => 0,
            SENT => 1,
            DELIVERED => 2,
            OPENED => 3,
            CLICKED => 4,
            BOUNCED | COMPLAINED | FAILED | SUPPRESSED => 5,
            _ => 0,
        }
    }
}

/// An email to queue.
#[derive(Clone, Debug)]
pub struct NewEmail {
    pub id: EmailId,
    /// The contact it goes to.
    pub contact_id: ContactId,
    /// The template it was rendered from.
    pub template_id: Option<String>,
    /// `transactional` or `marketing`.
    pub kind: &'static str,
    /// The From address.
    pub from_address: String,
    /// The recipient.
    pub to_address: String,
    /// The rendered subject.
    pub subject: String,
    /// `Message-ID` without brackets.
    pub message_id: String,
    /// The envelope sender (bounces go here).
    pub envelope_from: String,
    /// The domain whose DKIM key signed it.
    pub signed_by: Option<String>,
    /// The links that click redirects may lead to, by index.
    pub links: Vec<String>,
    /// The rendered message to build and sign at hand-off (a
    /// [`crate::domain::message::MessageDraft`] as JSON); `None` for a suppressed email, which is
    /// never sent.
    pub draft: Option<String>,
    /// The request's shared content (its attachments), stored once; `None` without attachments.
    pub content_id: Option<String>,
    /// Why the email is not sent at all (it is recorded as `suppressed`).
    pub suppressed: Option<String>,
}

/// What a send request's emails share, stored once: the attachments.
#[derive(Clone, Debug)]
pub struct EmailContent {
    /// `ect_…`.
    pub id: String,
    /// The attachments (see [`crate::domain::message::encode_attachments`]).
    pub attachments: String,
}

/// One send request planned and rendered, ready to be written whole: by [`Store::commit_send`]
/// in a transaction of its own, or in a workflow round's commit.
#[derive(Clone, Debug)]
pub struct PreparedSend {
    /// One plan per distinct recipient address, made from the contacts read before rendering.
    pub(crate) contacts: Vec<super::contacts::Plan>,
    /// The field types of the request's data patch.
    pub(crate) field_types: Vec<(String, &'static str)>,
    /// Where a subscription change came from.
    pub(crate) source: SubscriptionSource,
    /// The request's attachments, stored once for every recipient.
    pub(crate) content: Option<EmailContent>,
    /// One email per recipient.
    pub(crate) emails: Vec<NewEmail>,
}

impl PreparedSend {
    /// The recipients' contact plans in address order: the order their contacts are locked in,
    /// so that two sends to overlapping recipients never deadlock.
    pub(super) fn in_address_order(&self) -> Vec<&super::contacts::Plan> {
        let mut ordered: Vec<_> = self.contacts.iter().collect();
        ordered.sort_by(|a, b| a.contact().email.as_str().cmp(b.contact().email.as_str()));
        ordered
    }

    /// The rows of its emails, as a send writes them at `now`: each to its contact, queued and
    /// due at once unless suppressed.
    pub(super) fn email_inserts<'a>(
        &'a self,
        project: &'a ProjectId,
        now: i64,
    ) -> impl Iterator<Item = EmailInsert<'a>> {
        self.emails.iter().map(move |e| {
            let (status, due_at) = match e.suppressed {
                None => (status::QUEUED, Some(now)),
                Some(_) => (status::SUPPRESSED, None),
            };
            EmailInsert {
                project: project.as_str(),
                email: e,
                contact_id: Some(e.contact_id.as_str()),
                status,
                campaign_id: None,
                test: false,
                due_at,
                now,
            }
        })
    }

    /// The field types of the data patch, borrowed.
    pub(crate) fn types(&self) -> Vec<(&str, &'static str)> {
        self.field_types
            .iter()
            .map(|(k, t)| (k.as_str(), *t))
            .collect()
    }
}

/// Whether the contacts each of `sends` (of `project`) was planned from are still as they were
/// read, checked inside `tx` by one select of their ids and versions (per
/// [`MAX_FRESH_PER_SELECT`] addresses), locked with `lock` (the backend's `FOR UPDATE`; the rows
/// stay locked on PostgreSQL) in address order, so that two sends to overlapping recipients lock
/// them in the same order and never deadlock. A new recipient's contact must still be missing.
/// Answers whether each send is fresh, in order.
pub(super) async fn sends_fresh_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    sends: &[&PreparedSend],
    lock: &str,
) -> StoreResult<Vec<bool>>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
{
    let addresses: std::collections::BTreeSet<&str> = sends
        .iter()
        .flat_map(|send| send.contacts.iter().map(|p| p.contact().email.as_str()))
        .collect();
    let addresses: Vec<&str> = addresses.into_iter().collect();
    let mut found: HashMap<String, (String, i64)> = HashMap::with_capacity(addresses.len());
    for chunk in addresses.chunks(MAX_FRESH_PER_SELECT) {
        let sql = format!(
            "SELECT email, id, version FROM contacts WHERE project_id = $1 AND email IN ({}) \
             ORDER BY email{lock}",
            super::dialect::placeholders(2, chunk.len())
        );
        let mut q = sqlx::query_as::<_, (String, String, i64)>(&sql).bind(project.as_str());
        for address in chunk {
            q = q.bind(*address);
        }
        for (email, id, version) in q.fetch_all(&mut **tx).await? {
            found.insert(email, (id, version));
        }
    }
    Ok(sends
        .iter()
        .map(|send| {
            send.contacts.iter().all(|plan| {
                let now = found.get(plan.contact().email.as_str());
                match plan.based_on() {
                    Some(c) => now.is_some_and(|(id, v)| id == c.id.as_str() && *v == c.version),
                    None => now.is_none(),
                }
            })
        })
        .collect())
}

/// The most recipients one select of [`sends_fresh_in`] names.
const MAX_FRESH_PER_SELECT: usize = 500;

/// One send to write with others ([`write_sends_in`]).
pub(super) struct SendWrite<'a> {
    /// The project.
    pub(super) project: &'a ProjectId,
    /// The send, planned and rendered.
    pub(super) send: &'a PreparedSend,
    /// The field types its data patch shows for the first time.
    pub(super) types: &'a [(&'a str, &'a str)],
    /// Its idempotency key, with the response to replay.
    pub(super) idempotency: Option<&'a IdempotentWrite<'a, &'a Value>>,
}

/// Writes a send whose contacts [`sends_fresh_in`] found fresh, inside `tx`: each recipient's
/// contact as planned (with its subscription event), the new field types `types`, the stored
/// attachments, every email (a suppressed one with its history entry) and, unless suppressed,
/// due for delivery now, and the idempotency key. `false` when a new recipient's address was
/// taken meanwhile (part of the send may be written: roll back).
pub(super) async fn write_send_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    send: &PreparedSend,
    types: &[(&str, &str)],
    idempotency: Option<&IdempotentWrite<'_, &Value>>,
    now: i64,
) -> StoreResult<bool>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let one = SendWrite {
        project,
        send,
        types,
        idempotency,
    };
    write_sends_in(tx, std::slice::from_ref(&one), now).await
}

/// Writes sends as [`write_send_in`] writes one, all of them in one statement per table: the
/// recipients' contacts, their subscription events, the emails, the suppressed ones'
/// history entries and the idempotency keys (field types and attachments per send that has
/// them). A contact several sends plan is written once, as the last of them planned it. On
/// PostgreSQL the emails and their history are one statement, and new contacts without
/// subscription events join it too ([`Statements::write_contacts_and_emails`]).
pub(super) async fn write_sends_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    sends: &[SendWrite<'_>],
    now: i64,
) -> StoreResult<bool>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut contacts = ContactWrites::default();
    let mut events = Vec::new();
    for w in sends {
        for plan in w.send.in_address_order() {
            contacts.add(plan);
            if let Some(subscribed) = plan.subscription_changed_to() {
                let event = NewEvent::subscription(subscribed, w.send.source, None);
                events.push(StoredEvent {
                    id: EventId::generate(),
                    project_id: w.project.clone(),
                    contact_id: Some(plan.contact().id.clone()),
                    contact_email: None,
                    name: event.name.as_str().to_string(),
                    data: event.data,
                    created_at: now,
                });
            }
        }
    }
    // The contacts are written with the emails (one statement on PostgreSQL) unless events
    // that name them come first.
    let with_emails = events.is_empty();
    if !with_emails {
        if !tx.write_contacts(&contacts).await? {
            return Ok(false);
        }
        tx.insert_events(&events).await?;
    }
    for w in sends {
        if !w.types.is_empty() && w.send.contacts.iter().any(|p| p.changes()) {
            tx.insert_field_types(w.project.as_str(), w.types, now, None)
                .await?;
        }
        if let Some(content) = &w.send.content {
            sqlx::query(INSERT_CONTENT)
                .bind(content.id.as_str())
                .bind(w.project.as_str())
                .bind(content.attachments.as_str())
                .bind(now)
                .execute(&mut **tx)
                .await?;
        }
    }
    let mut inserts = Vec::new();
    for w in sends {
        inserts.extend(w.send.email_inserts(w.project, now));
    }
    if with_emails {
        if !tx.write_contacts_and_emails(&contacts, &inserts).await? {
            return Ok(false);
        }
    } else {
        tx.insert_emails(&inserts).await?;
    }
    let keys: Vec<_> = sends
        .iter()
        .filter_map(|w| {
            w.idempotency
                .map(|idem| (w.project.as_str(), idem, idem.response))
        })
        .collect();
    tx.store_idempotent_responses(&keys).await?;
    Ok(true)
}

/// The most emails one insert of [`Statements::insert_emails`] takes (21 values a row, 22 on
/// PostgreSQL).
pub(crate) const MAX_EMAILS_PER_INSERT: usize = 500;

/// Inserts `n` emails; binds, a row: id, project, contact, template, kind, from, to, subject,
/// status, message id, envelope sender, signer, links, draft, error, created, updated,
/// campaign, test, due, content (each placeholder once and in order:
/// `dialect::bound_in_order`).
pub(crate) fn insert_emails_sql(n: usize) -> String {
    let rows = super::dialect::value_rows(1, n, 21);
    format!("INSERT INTO emails ({INSERT_COLUMNS}) VALUES {rows}")
}

/// The columns an insert of emails fills, in the order of its binds.
const INSERT_COLUMNS: &str = "id, project_id, contact_id, template_id, kind, from_address, \
     to_address, subject, status, message_id, envelope_from, signed_by, links, draft, error, \
     created_at, updated_at, campaign_id, test, due_at, content_id";

/// PostgreSQL: inserts `n` emails, and the history entry of each suppressed one, in one
/// statement (a data-modifying CTE over one `VALUES` list; the history's foreign key and the
/// triggers on `emails` run at the end of the statement, after both inserts). Binds, a row: the
/// history entry's id (`NULL` for none: a queued email gets no entry, [`QUEUED_ENTRY`]), then
/// the 21 values of [`insert_emails_sql`] in its order; the entry is the email's status
/// (`suppressed`), with its error as detail, at its creation time.
pub(crate) fn insert_emails_with_activity_sql(n: usize) -> String {
    let rows = super::dialect::value_rows(1, n, 22);
    format!(
        "WITH v (activity_id, {INSERT_COLUMNS}) AS (VALUES {rows}), \
         e AS (INSERT INTO emails ({INSERT_COLUMNS}) SELECT {INSERT_COLUMNS} FROM v) \
         INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) \
         SELECT activity_id, project_id, id, contact_id, status, error, created_at FROM v \
         WHERE activity_id IS NOT NULL"
    )
}

/// The first entry of a queued email's history, which is not stored: [`Store::email`] reads it
/// off the email's creation time, for every email not created `suppressed` (an email is created
/// `queued` or `suppressed`, and only a suppressed one's creation writes a `suppressed` entry).
/// Releases before this one stored it; such rows are passed over when read.
pub(crate) const QUEUED_ENTRY: &str = status::QUEUED;

/// PostgreSQL: inserts `contacts` new contacts (as `contacts::insert_contacts_sql`) and
/// `emails` emails with the suppressed ones' history entries (as
/// [`insert_emails_with_activity_sql`]) in one statement, which writes nothing when one
/// contact's address is taken: the emails are inserted only when every contact was, and
/// otherwise the statement raises [`ADDRESS_TAKEN`] (`herald_require`, migration 0031), inside
/// a transaction or outside one. Binds the 8 values of each contact, then the 22 of each email,
/// then `contacts` once more. The emails' foreign keys to the contacts are checked at the end of
/// the statement, after every insert in it.
pub(crate) fn insert_contacts_with_emails_sql(contacts: usize, emails: usize) -> String {
    let first_email = 1 + 8 * contacts;
    let expected = first_email + 22 * emails;
    let insert_contacts = super::contacts::insert_contacts_from(1, contacts);
    let rows = super::dialect::value_rows(first_email, emails, 22);
    format!(
        "WITH c AS ({insert_contacts}), \
         v (activity_id, {INSERT_COLUMNS}) AS (VALUES {rows}), \
         all_in AS (SELECT (SELECT count(*) FROM c) = ${expected} AS yes), \
         e AS (INSERT INTO emails ({INSERT_COLUMNS}) SELECT {INSERT_COLUMNS} FROM v \
               WHERE (SELECT yes FROM all_in)), \
         a AS (INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) \
               SELECT activity_id, project_id, id, contact_id, status, error, created_at FROM v \
               WHERE (SELECT yes FROM all_in) AND activity_id IS NOT NULL) \
         SELECT herald_require((SELECT yes FROM all_in), 'a new contact''s address was taken')"
    )
}

/// The SQLSTATE of [`insert_contacts_with_emails_sql`]'s refusal: an address was taken.
pub(crate) const ADDRESS_TAKEN: &str = "HR001";

/// Inserts a request's shared content; binds id, project, attachments, created.
pub(crate) const INSERT_CONTENT: &str = "INSERT INTO email_contents (id, project_id, attachments, created_at) \
     VALUES ($1, $2, $3, $4)";

/// One email to insert, with what the send around it decided.
pub(crate) struct EmailInsert<'a> {
    /// The project.
    pub project: &'a str,
    /// The rendered email.
    pub email: &'a NewEmail,
    /// Its contact; `None` for a test send to an address without one.
    pub contact_id: Option<&'a str>,
    /// `queued` or `suppressed`.
    pub status: &'a str,
    /// The campaign it is part of.
    pub campaign_id: Option<&'a str>,
    /// A test send, which no statistic counts.
    pub test: bool,
    /// When it is due for delivery (none for a suppressed email).
    pub due_at: Option<i64>,
    /// When.
    pub now: i64,
}

/// What a delivery needs of its email.
#[derive(Clone, Debug, FromRow)]
pub struct Deliverable {
    /// The email's id.
    pub id: String,
    pub project_id: String,
    pub contact_id: Option<String>,
    pub status: String,
    /// The envelope sender.
    pub envelope_from: String,
    /// The recipient.
    pub to_address: String,
    /// The complete message of an email queued before messages were built at hand-off.
    pub raw: Option<Vec<u8>>,
    /// The rendered draft to build and sign, until handed off.
    pub draft: Option<String>,
    /// The shared content (attachments), if any.
    pub content_id: Option<String>,
    /// When a hand-off last started.
    pub handed_off_at: Option<i64>,
    /// Hand-offs started so far.
    pub attempts: i32,
    /// When it was queued (a delivery gives up once it is older than the retry lifetime).
    pub created_at: i64,
}

/// The columns of [`Deliverable`], in its order.
pub(crate) const DELIVERABLE_COLUMNS: &str = "id, project_id, contact_id, status, envelope_from, to_address, raw, \
     draft, content_id, handed_off_at, attempts, created_at";

/// How one hand-off of a batch ends (see [`Store::finish_deliveries`]).
#[derive(Clone, Copy, Debug)]
pub enum HandOffEnd<'a> {
    /// The delivery is over: the transport accepted the message, or it never will.
    Delivered(DeliveryOutcome<'a>),
    /// The transport could not take it now (its answer is logged): the email is due again at
    /// `retry_at` (unix ms).
    Deferred {
        /// When it is due again.
        retry_at: i64,
    },
}

/// How a delivery ended.
#[derive(Clone, Copy, Debug)]
pub enum DeliveryOutcome<'a> {
    /// The transport accepted it.
    Sent {
        /// The provider's id.
        provider_id: &'a str,
        /// The provider's answer.
        detail: Option<&'a str>,
    },
    /// It cannot be delivered.
    Failed {
        /// Why.
        error: &'a str,
    },
}

/// An email as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct EmailRecord {
    pub id: String,
    pub contact_id: Option<String>,
    pub template_id: Option<String>,
    /// `transactional` or `marketing`.
    pub kind: String,
    /// From.
    pub from_address: String,
    /// To.
    pub to_address: String,
    /// Subject.
    pub subject: String,
    /// Status.
    pub status: String,
    /// Message-ID.
    pub message_id: String,
    /// The provider's id.
    pub provider_id: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Delivery attempts.
    pub attempts: i32,
    /// Created.
    pub created_at: i64,
    /// Handed to the transport.
    pub sent_at: Option<i64>,
    /// Opens recorded (the first is in the history).
    pub open_count: i32,
    /// Clicks recorded (the first is in the history).
    pub click_count: i32,
}

/// One entry of an email's history.
#[derive(Clone, Debug, FromRow)]
pub struct HistoryEntry {
    /// What happened.
    pub kind: String,
    /// Detail (the provider's answer, the bounce reason, the clicked link).
    pub detail: Option<String>,
    /// When.
    pub created_at: i64,
}

/// An email's `history` (its stored entries, oldest first, without any `queued` one) with its
/// `queued` entry first unless it was created `suppressed` ([`QUEUED_ENTRY`]).
fn with_queued_entry(email: &EmailRecord, history: Vec<HistoryEntry>) -> Vec<HistoryEntry> {
    if history.iter().any(|h| h.kind == status::SUPPRESSED) {
        return history;
    }
    let queued = HistoryEntry {
        kind: QUEUED_ENTRY.to_string(),
        detail: None,
        created_at: email.created_at,
    };
    std::iter::once(queued).chain(history).collect()
}

/// An event recorded for an email.
#[derive(Clone, Debug)]
pub struct RecordedEvent {
    /// The email's project.
    pub project_id: ProjectId,
    /// The email's contact.
    pub contact_id: Option<ContactId>,
    /// Whether this is the first event of its kind for the email.
    pub first: bool,
}

/// Inserts `n` history entries; binds, a row: id, project, email, contact, kind, detail, at.
pub(crate) fn insert_activity_sql(n: usize) -> String {
    format!(
        "INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) VALUES {}",
        super::dialect::value_rows(1, n, 7)
    )
}

impl Store {
    /// Writes one send request whole, in one transaction: each recipient's contact as planned
    /// (created or changed, with its subscription event and field types), then every email (a
    /// suppressed one with its history entry) and, unless suppressed, due for delivery, and the
    /// request's idempotency key. The plans were made from contacts read before rendering; when
    /// any of them changed since, nothing is written and the answer is `false` (plan and render
    /// again). `Conflict(IdempotencyKey)` when the key was taken meanwhile.
    #[tracing::instrument(level = "debug", skip_all, fields(emails = send.emails.len()))]
    pub(crate) async fn commit_send(
        &self,
        project: &ProjectId,
        send: &PreparedSend,
        idempotency: Option<IdempotentWrite<'_, &Value>>,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let types = self.known_fields.unknown(project.as_str(), &send.types());
        let lock = super::dialect::for_update(self.db().backend());
        let wrote = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let fresh = sends_fresh_in(&mut tx, project, &[send], lock).await?[0]
                && write_send_in(&mut tx, project, send, &types, idempotency.as_ref(), now).await?;
            if fresh {
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            fresh
        });
        if wrote {
            self.known_fields.remember(project.as_str(), &types);
        }
        Ok(wrote)
    }

    /// An email of a project with its history, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email(
        &self,
        project: &ProjectId,
        id: &EmailId,
    ) -> StoreResult<(EmailRecord, Vec<HistoryEntry>)> {
        let (record, history) = on_db!(self.db(), pool => {
            let record: Option<EmailRecord> = sqlx::query_as(
                "SELECT id, contact_id, template_id, kind, from_address, to_address, subject, status, \
                 message_id, provider_id, error, attempts, created_at, sent_at, open_count, click_count \
                 FROM emails WHERE project_id = $1 AND id = $2",
            )
            .bind(project.as_str())
            .bind(id.as_str())
            .fetch_optional(pool)
            .await?;
            let history: Vec<HistoryEntry> = sqlx::query_as(&format!(
                "SELECT kind, detail, created_at FROM email_events WHERE email_id = $1 \
                 AND kind <> '{QUEUED_ENTRY}' ORDER BY id"
            ))
            .bind(id.as_str())
            .fetch_all(pool)
            .await?;
            (record, history)
        });
        let record = record.ok_or(StoreError::NotFound)?;
        let history = with_queued_entry(&record, history);
        Ok((record, history))
    }

    /// Records what happened to an email (`delivered`, `opened`, `clicked`, `bounced`,
    /// `soft_bounced`, `complained`): a history entry, the first time of the kind, and the status
    /// when it moves forward (never back). Opens and clicks after the first are only counted
    /// (no history entry), so repeated hits add no rows. With `recipient`, the email must have
    /// been sent to that address (a provider's notification names it). `None` when there is no
    /// such email.
    #[tracing::instrument(level = "debug", skip(self, detail))]
    pub async fn record_email_event(
        &self,
        email_id: &str,
        kind: &str,
        detail: Option<&str>,
        recipient: Option<&str>,
    ) -> StoreResult<Option<RecordedEvent>> {
        let now = now_ms();
        let lock = super::dialect::for_update(self.db().backend());
        let column = match kind {
            status::DELIVERED => Some("delivered_at"),
            status::OPENED => Some("opened_at"),
            status::CLICKED => Some("clicked_at"),
            status::BOUNCED => Some("bounced_at"),
            status::COMPLAINED => Some("complained_at"),
            _ => None,
        };
        let counter = match kind {
            status::OPENED => Some("open_count"),
            status::CLICKED => Some("click_count"),
            _ => None,
        };
        let first_sql = match column {
            Some(c) => format!("{c} IS NULL"),
            None => "TRUE".to_string(),
        };
        let select = format!(
            "SELECT project_id, contact_id, status, to_address, {first_sql} FROM emails WHERE id = $1{lock}"
        );
        let recorded = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<(String, Option<String>, String, String, bool)> =
                sqlx::query_as(&select).bind(email_id).fetch_optional(&mut *tx).await?;
            let Some((project_id, contact_id, current, to, first)) = row else {
                return Ok(None);
            };
            if recipient.is_some_and(|r| !r.trim().eq_ignore_ascii_case(&to)) {
                return Ok(None);
            }
            if let Some(counter) = counter {
                sqlx::query(&format!("UPDATE emails SET {counter} = {counter} + 1 WHERE id = $1"))
                    .bind(email_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if first || counter.is_none() {
                sqlx::query(&insert_activity_sql(1))
                    .bind(ActivityId::generate().as_str())
                    .bind(&project_id)
                    .bind(email_id)
                    .bind(contact_id.as_deref())
                    .bind(kind)
                    .bind(detail)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
            let advance = status::rank(kind) > status::rank(&current) && kind != "soft_bounced";
            if let (Some(column), true) = (column, first) {
                sqlx::query(&format!(
                    "UPDATE emails SET {column} = $2, status = CASE WHEN $3 THEN $4 ELSE status END, \
                     updated_at = $2 WHERE id = $1"
                ))
                .bind(email_id)
                .bind(now)
                .bind(advance)
                .bind(kind)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            RecordedEvent {
                project_id: ProjectId::from_trusted(project_id),
                contact_id: contact_id.map(ContactId::from_trusted),
                first,
            }
        });
        Ok(Some(recorded))
    }

    /// The `index`th tracked link of an email.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_link(&self, email_id: &str, index: usize) -> StoreResult<Option<String>> {
        let links: Option<Json<Vec<String>>> = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT links FROM emails WHERE id = $1")
                .bind(email_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(links.and_then(|l| l.0.get(index).cloned()))
    }

    /// The attachments of a request's shared content.
    ///
    /// The content is megabytes where a row is usually bytes, so the connection that read it
    /// shrinks its buffers before it goes back to the pool: a PostgreSQL connection's read
    /// buffer would otherwise stay as large as the largest row it ever received, one such buffer
    /// per pooled connection.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_content(&self, id: &str) -> StoreResult<Option<String>> {
        let row = on_db!(self.db(), pool => {
            let mut conn = pool.acquire().await?;
            let row = sqlx::query_scalar("SELECT attachments FROM email_contents WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *conn)
                .await;
            sqlx::Connection::shrink_buffers(&mut *conn);
            row?
        });
        Ok(row)
    }

    /// The size in bytes of a shared content's stored attachments (0 when it is gone), without
    /// reading them: `octet_length` of a column is answered from the row's header on SQLite
    /// (where `LENGTH` of text reads the whole value to count its characters, a copy of megabytes
    /// for every message of a batch, before the hand-off budget is even asked) and from the
    /// TOAST pointer on PostgreSQL.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_content_size(&self, id: &str) -> StoreResult<u64> {
        let n: Option<i64> = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT CAST(octet_length(attachments) AS BIGINT) FROM email_contents WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// Deletes shared contents that no queued email needs any more (their emails were handed
    /// off, failed or deleted); answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_email_contents(&self) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM email_contents WHERE NOT EXISTS (SELECT 1 FROM emails e \
                 WHERE e.content_id = email_contents.id AND e.status = 'queued')",
            )
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// An email as a delivery reads it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn deliverable(&self, id: &EmailId) -> StoreResult<Option<Deliverable>> {
        let sql = format!("SELECT {DELIVERABLE_COLUMNS} FROM emails WHERE id = $1");
        let row = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// Ends the hand-offs of a batch, all started by the claim `token`, in one transaction,
    /// each keyed on that hand-off (the email still queued and its token `token`), so that an
    /// email another hand-off took over meanwhile is left to it:
    /// - [`HandOffEnd::Delivered`]: the email's new status, its history entry, and no more
    ///   stored message;
    /// - [`HandOffEnd::Deferred`]: the hand-off is over without the transport taking the
    ///   message (so a retry is not reported as a possible duplicate), and the email is due
    ///   again at `retry_at`.
    ///
    /// Answers, per entry, whether it was written.
    #[tracing::instrument(level = "debug", skip_all, fields(emails = ends.len()))]
    pub async fn finish_deliveries(
        &self,
        token: &str,
        ends: &[(&Deliverable, HandOffEnd<'_>)],
    ) -> StoreResult<Vec<bool>> {
        let now = now_ms();
        let backend = self.db().backend();
        let recorded = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let mut recorded = vec![false; ends.len()];
            let mut delivered: Vec<Outcome<'_>> = Vec::with_capacity(ends.len());
            for (at, (email, end)) in ends.iter().enumerate() {
                match end {
                    HandOffEnd::Delivered(outcome) => {
                        delivered.push(Outcome::of(at, email, outcome));
                    }
                    HandOffEnd::Deferred { retry_at } => {
                        let n = sqlx::query(
                            "UPDATE emails SET handed_off_at = NULL, hand_off_token = NULL, due_at = $3, updated_at = $4 \
                             WHERE id = $1 AND hand_off_token = $2 AND status = 'queued'",
                        )
                        .bind(&email.id)
                        .bind(token)
                        .bind(*retry_at)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                        recorded[at] = n == 1;
                    }
                }
            }
            if !delivered.is_empty() {
                // Two statements for the whole batch: the outcomes written where the hand-off
                // is still the email's, and a history entry for each outcome written.
                let sql = bound_in_order(backend, finish_outcomes_sql(delivered.len()));
                let mut q = sqlx::query_scalar::<_, String>(&sql);
                for d in &delivered {
                    q = q
                        .bind(&d.email.id)
                        .bind(d.status)
                        .bind(d.provider_id)
                        .bind(d.error)
                        .bind(token);
                }
                q = q.bind(now).bind(now).bind(now);
                let updated: HashSet<String> = q.fetch_all(&mut *tx).await?.into_iter().collect();
                let written: Vec<&Outcome<'_>> =
                    delivered.iter().filter(|d| updated.contains(&d.email.id)).collect();
                if !written.is_empty() {
                    let sql = bound_in_order(backend, insert_activity_sql(written.len()));
                    let mut q = sqlx::query(&sql);
                    for d in &written {
                        q = q
                            .bind(ActivityId::generate().into_string())
                            .bind(&d.email.project_id)
                            .bind(&d.email.id)
                            .bind(d.email.contact_id.as_deref())
                            .bind(d.status)
                            .bind(d.detail)
                            .bind(now);
                    }
                    q.execute(&mut *tx).await?;
                }
                for d in &delivered {
                    recorded[d.at] = updated.contains(&d.email.id);
                }
            }
            tx.commit().await?;
            recorded
        });
        Ok(recorded)
    }

    /// What each of `projects` has left of its `per_second` sending budget in the current
    /// one-second window (see [`Store::claim_deliveries`]), and when the next window starts.
    #[tracing::instrument(level = "debug", skip(self, projects))]
    pub async fn send_budgets_left(
        &self,
        projects: &[&str],
        per_second: u32,
    ) -> StoreResult<(HashMap<String, i64>, i64)> {
        let now = now_ms();
        let window = now - now.rem_euclid(1000);
        let mut left: HashMap<String, i64> = projects
            .iter()
            .map(|p| (p.to_string(), i64::from(per_second)))
            .collect();
        if !projects.is_empty() {
            let sql = format!(
                "SELECT project_id, sent FROM send_windows WHERE window_start = $1 AND project_id IN ({})",
                super::dialect::placeholders(2, projects.len())
            );
            let rows: Vec<(String, i32)> = on_db!(self.db(), pool => {
                let mut query = sqlx::query_as(&sql).bind(window);
                for p in projects {
                    query = query.bind(*p);
                }
                query.fetch_all(pool).await?
            });
            for (project, sent) in rows {
                left.insert(project, (i64::from(per_second) - i64::from(sent)).max(0));
            }
        }
        Ok((left, window + 1000))
    }

    /// Forgets send windows older than a minute.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_send_windows(&self) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM send_windows WHERE window_start < $1")
                .bind(now_ms() - 60_000)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n)
    }
}

/// One delivered entry of a batch that [`Store::finish_deliveries`] ends.
struct Outcome<'a> {
    /// Its place in the batch.
    at: usize,
    email: &'a Deliverable,
    status: &'static str,
    detail: Option<&'a str>,
    provider_id: Option<&'a str>,
    error: Option<&'a str>,
}

impl<'a> Outcome<'a> {
    fn of(at: usize, email: &'a Deliverable, outcome: &'a DeliveryOutcome<'a>) -> Outcome<'a> {
        let (status, detail, provider_id, error) = match outcome {
            DeliveryOutcome::Sent {
                provider_id,
                detail,
            } => (status::SENT, *detail, Some(*provider_id), None),
            DeliveryOutcome::Failed { error } => (status::FAILED, Some(*error), None, Some(*error)),
        };
        Outcome {
            at,
            email,
            status,
            detail,
            provider_id,
            error,
        }
    }
}

/// Records the outcomes of `n` deliveries, each keyed on its hand-off (the email still queued
/// and its token the claim's), and answers the ids written; binds, a row: id, status (`sent` or
/// `failed`), provider id, error, hand-off token; then now three times (each placeholder once
/// and in order: `dialect::bound_in_order`). The stored message and draft go. The email is
/// found by id for each row (`dialect::unindexed_equals`).
pub(super) fn finish_outcomes_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_provider, v_error, v_token) AS (VALUES {}) \
         UPDATE emails SET status = v_status, provider_id = COALESCE(v_provider, provider_id), error = v_error, \
         raw = NULL, draft = NULL, hand_off_token = NULL, \
         sent_at = CASE WHEN v_status = '{sent}' THEN ${a} ELSE sent_at END, \
         failed_at = CASE WHEN v_status = '{sent}' THEN failed_at ELSE ${b} END, updated_at = ${c} \
         FROM v WHERE id = v_id AND {queued} AND hand_off_token = v_token RETURNING id",
        super::dialect::value_rows(1, n, 5),
        sent = status::SENT,
        a = 5 * n + 1,
        b = 5 * n + 2,
        c = 5 * n + 3,
        queued = super::dialect::unindexed_equals("status", status::QUEUED),
    )
}
