//! Emails and their history.
//!
//! A send writes every email of the request, due for delivery at once, and the request's
//! idempotency key, in one transaction: either the whole request is queued or nothing is. A
//! queued email's history starts with no row: its `queued` entry is read off the email itself
//! (its creation time), so queuing writes the email alone. A `suppressed` email is written with
//! its one history entry saying why. A delivery worker claims due emails (`delivery.rs`),
//! hands their messages to the transport, then records each outcome and the email's new status
//! in one transaction (see `jobs/deliver.rs` for what a crash between the two can cause).

use std::collections::HashMap;

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::BeginWrite;
use super::idempotency::IdempotentWrite;
use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{ContactId, EmailId, ProjectId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;

pub mod status;

pub(in crate::store) mod delivery;
pub(in crate::store) mod insert;
pub(in crate::store) mod send;
pub(in crate::store) mod view;

pub(crate) use delivery::DELIVERABLE_COLUMNS;
pub use delivery::{Deliverable, DeliveryOutcome, HandOffEnd};
pub use insert::{EmailContent, NewEmail};
pub(crate) use insert::{EmailInsert, MAX_EMAILS_PER_INSERT, QUEUED_ENTRY, insert_activity_sql};
pub use send::PreparedSend;
pub(in crate::store) use send::{SendWrite, sends_fresh_in, write_send_in, write_sends_in};

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
    /// The transport that took it.
    pub transport: Option<String>,
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
    /// The campaign it is part of.
    pub campaign_id: Option<String>,
    /// For an email of a campaign with an A/B test: the variant it was sent with (its test
    /// group's, or the winner for the rest of the audience).
    pub campaign_variant: Option<i32>,
}

/// The columns of an [`EmailRecord`], from `emails`.
const EMAIL_COLUMNS: &str = "id, contact_id, template_id, kind, from_address, to_address, subject, \
     status, message_id, provider_id, transport, error, attempts, created_at, sent_at, open_count, \
     click_count, campaign_id, (SELECT COALESCE(r.variant, c.ab_winner) FROM campaign_recipients r \
     JOIN campaigns c ON c.id = r.campaign_id AND c.ab_test IS NOT NULL \
     WHERE r.campaign_id = emails.campaign_id AND r.contact_id = emails.contact_id \
     AND r.email_id = emails.id) AS campaign_variant";

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

/// Where an email's bounces go, and whom it was sent to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnPath {
    /// The envelope sender it was sent with (`bounces+<id>@bounces.<domain>`, or the `from`
    /// address of an unsigned email).
    pub envelope_from: String,
    /// Its recipient.
    pub to_address: String,
}

/// Inserts `n` history entries; binds, a row: id, project, email, contact, kind, detail, at.
/// Opens and clicks of one email counted since the last flush ([`Store::add_email_counts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmailCounts {
    /// The email.
    pub email_id: String,
    /// Opens to add.
    pub opens: i32,
    /// Clicks to add.
    pub clicks: i32,
}

/// Emails a statement of [`Store::add_email_counts`] updates at most (3 parameters each).
const COUNTS_PER_STATEMENT: usize = 300;

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
            let record: Option<EmailRecord> = sqlx::query_as(&format!(
                "SELECT {EMAIL_COLUMNS} FROM emails WHERE project_id = $1 AND id = $2"
            ))
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

    /// A page of the emails to a contact, newest first, with their count on the first page. The
    /// caller has checked that the contact is the project's (its id is unique, so its emails
    /// are the project's). One range of the `emails_contact` index: a page reads its rows only,
    /// the count the contact's entries of the index. The project is not in the condition: with
    /// it, SQLite may walk the project's emails in `emails_project` (id order too) instead.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact_emails(
        &self,
        contact: &ContactId,
        page: &PageRequest,
    ) -> StoreResult<Page<EmailRecord>> {
        let (rows, total) = self
            .newest_first_rows(
                EMAIL_COLUMNS,
                "FROM emails WHERE contact_id = $1",
                &[contact.as_str()],
                page,
            )
            .await?;
        Ok(Page::from_rows(rows, page, total, |e: &EmailRecord| {
            e.id.as_str()
        }))
    }

    /// Which of `ids` name emails of `project` (an inbound message's `In-Reply-To` and
    /// `References`), in no particular order.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn project_emails(
        &self,
        project: &ProjectId,
        ids: &[String],
    ) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id FROM emails WHERE project_id = $1 AND id IN ({})",
            super::dialect::placeholders(2, ids.len())
        );
        let found = on_db!(self.db(), pool => {
            let mut q = sqlx::query_scalar(&sql).bind(project.as_str());
            for id in ids {
                q = q.bind(id);
            }
            q.fetch_all(pool).await?
        });
        Ok(found)
    }

    /// The envelope sender (return path) email `email_id` was sent with and its recipient, or
    /// `None` when there is no such email: the SMTP server accepts mail for a return path only
    /// when an email was sent with exactly it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_return_path(&self, email_id: &str) -> StoreResult<Option<ReturnPath>> {
        let row: Option<(String, String)> = on_db!(self.db(), pool => {
            sqlx::query_as("SELECT envelope_from, to_address FROM emails WHERE id = $1")
                .bind(email_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|(envelope_from, to_address)| ReturnPath {
            envelope_from,
            to_address,
        }))
    }

    /// The `index`th tracked link of an email, and whether its first click is recorded
    /// (`clicked_at` set): a read, so that a later click is counted without a write of its own.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_link(
        &self,
        email_id: &str,
        index: usize,
    ) -> StoreResult<Option<(String, bool)>> {
        let row: Option<(Json<Vec<String>>, bool)> = on_db!(self.db(), pool => {
            sqlx::query_as("SELECT links, clicked_at IS NOT NULL FROM emails WHERE id = $1")
                .bind(email_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.and_then(|(links, clicked)| links.0.get(index).cloned().map(|url| (url, clicked))))
    }

    /// Whether an email's first open is recorded (`opened_at` set); `None` when there is no such
    /// email. A read, so that a later open is counted without a write of its own.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn email_opened(&self, email_id: &str) -> StoreResult<Option<bool>> {
        let opened = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT opened_at IS NOT NULL FROM emails WHERE id = $1")
                .bind(email_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(opened)
    }

    /// Adds opens and clicks counted in memory to the emails' stored counts, in one transaction
    /// (a statement per [`COUNTS_PER_STATEMENT`] emails, in the order of their ids). Additive
    /// (`open_count = open_count + n`), so instances that share a database each add their own;
    /// an email that is gone is skipped.
    #[tracing::instrument(level = "debug", skip_all, fields(emails = counts.len()))]
    pub async fn add_email_counts(&self, counts: &[EmailCounts]) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let mut sorted: Vec<&EmailCounts> = counts.iter().collect();
        sorted.sort_by(|a, b| a.email_id.cmp(&b.email_id));
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            for chunk in sorted.chunks(COUNTS_PER_STATEMENT) {
                let sql = format!(
                    "WITH v (v_id, v_opens, v_clicks) AS (VALUES {}) UPDATE emails \
                     SET open_count = open_count + v_opens, click_count = click_count + v_clicks \
                     FROM v WHERE id = v_id",
                    super::dialect::value_rows(1, chunk.len(), 3)
                );
                let mut query = sqlx::query(&sql);
                for c in chunk {
                    query = query.bind(c.email_id.as_str()).bind(c.opens).bind(c.clicks);
                }
                query.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
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
