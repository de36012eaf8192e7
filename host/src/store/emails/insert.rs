//! A new email and the SQL text of its insert, with its history entry and, on PostgreSQL, with
//! the new contacts it goes to ([`crate::store::statements::Statements::insert_emails`]).

use super::status;
use crate::domain::ids::{ContactId, EmailId};

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

/// The most emails one insert of [`Statements::insert_emails`](crate::store::statements::Statements::insert_emails) takes (21 values a row, 22 on
/// PostgreSQL).
pub(crate) const MAX_EMAILS_PER_INSERT: usize = 500;

/// Inserts `n` emails; binds, a row: id, project, contact, template, kind, from, to, subject,
/// status, message id, envelope sender, signer, links, draft, error, created, updated,
/// campaign, test, due, content (each placeholder once and in order:
/// `dialect::bound_in_order`).
pub(crate) fn insert_emails_sql(n: usize) -> String {
    let rows = crate::store::dialect::value_rows(1, n, 21);
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
    let rows = crate::store::dialect::value_rows(1, n, 22);
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
/// a transaction or outside one. Binds the 9 values of each contact, then the 22 of each email,
/// then `contacts` once more. The emails' foreign keys to the contacts are checked at the end of
/// the statement, after every insert in it.
pub(crate) fn insert_contacts_with_emails_sql(contacts: usize, emails: usize) -> String {
    let first_email = 1 + crate::store::contacts::rows::NEW_CONTACT_VALUES * contacts;
    let expected = first_email + 22 * emails;
    let insert_contacts = crate::store::contacts::rows::insert_contacts_from(1, contacts);
    let rows = crate::store::dialect::value_rows(first_email, emails, 22);
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

/// One email to insert, with what the send around it decided (the insert itself suppresses it
/// when its recipient is on its project's suppression list: `statements::listed_emails`).
#[derive(Clone, Copy)]
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

pub(crate) fn insert_activity_sql(n: usize) -> String {
    format!(
        "INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) VALUES {}",
        crate::store::dialect::value_rows(1, n, 7)
    )
}
