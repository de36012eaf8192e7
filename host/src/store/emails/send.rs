//! A send written whole: its recipients' contacts as planned, its emails and its idempotency
//! key, alone or with other sends in one transaction.

use std::collections::HashMap;

use serde_json::Value;

use super::insert::{EmailContent, EmailInsert, INSERT_CONTENT, NewEmail};
use super::status;
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::topic::TopicChange;
use crate::store::StoreResult;
use crate::store::contacts::rows::ContactWrites;
use crate::store::idempotency::IdempotentWrite;
use crate::store::statements::Statements;

/// One send request planned and rendered, ready to be written whole: by [`Store::commit_send`]
/// in a transaction of its own, or in a workflow round's commit.
#[derive(Clone, Debug)]
pub struct PreparedSend {
    /// One plan per distinct recipient address, made from the contacts read before rendering.
    pub(crate) contacts: Vec<crate::store::contacts::plan::Plan>,
    /// The field types of the request's data patch.
    pub(crate) field_types: Vec<(String, &'static str)>,
    /// Where a subscription change came from.
    pub(crate) source: SubscriptionSource,
    /// The changes of the recipients' topic states the send makes (its `topics`), each an
    /// event.
    pub(crate) topic_changes: Vec<(ContactId, TopicChange)>,
    /// The request's attachments, stored once for every recipient.
    pub(crate) content: Option<EmailContent>,
    /// One email per recipient.
    pub(crate) emails: Vec<NewEmail>,
}

impl PreparedSend {
    /// The recipients' contact plans in address order: the order their contacts are locked in,
    /// so that two sends to overlapping recipients never deadlock.
    pub(in crate::store) fn in_address_order(&self) -> Vec<&crate::store::contacts::plan::Plan> {
        let mut ordered: Vec<_> = self.contacts.iter().collect();
        ordered.sort_by(|a, b| a.contact().email.as_str().cmp(b.contact().email.as_str()));
        ordered
    }

    /// The rows of its emails, as a send writes them at `now`: each to its contact, queued and
    /// due at once unless suppressed.
    pub(in crate::store) fn email_inserts<'a>(
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
pub(in crate::store) async fn sends_fresh_in<DB>(
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
            crate::store::dialect::placeholders(2, chunk.len())
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
pub(in crate::store) struct SendWrite<'a> {
    /// The project.
    pub(in crate::store) project: &'a ProjectId,
    /// The send, planned and rendered.
    pub(in crate::store) send: &'a PreparedSend,
    /// The field types its data patch shows for the first time.
    pub(in crate::store) types: &'a [(&'a str, &'a str)],
    /// Its idempotency key, with the response to replay.
    pub(in crate::store) idempotency: Option<&'a IdempotentWrite<'a, &'a Value>>,
}

/// Writes a send whose contacts [`sends_fresh_in`] found fresh, inside `tx`: each recipient's
/// contact as planned (with its subscription event), the new field types `types`, the stored
/// attachments, every email (a suppressed one with its history entry) and, unless suppressed,
/// due for delivery now, and the idempotency key. `false` when a new recipient's address was
/// taken meanwhile (part of the send may be written: roll back).
pub(in crate::store) async fn write_send_in<DB>(
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
pub(in crate::store) async fn write_sends_in<DB>(
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
        for (contact, change) in &w.send.topic_changes {
            let event =
                NewEvent::topic_subscription(&change.topic, change.subscribed, w.send.source);
            events.push(StoredEvent {
                id: EventId::generate(),
                project_id: w.project.clone(),
                contact_id: Some(contact.clone()),
                contact_email: None,
                name: event.name.as_str().to_string(),
                data: event.data,
                created_at: now,
            });
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
