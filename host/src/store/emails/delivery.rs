//! What a delivery reads of an email and how its outcome is recorded.

use std::collections::HashSet;

use sqlx::FromRow;

use super::insert::insert_activity_sql;
use super::status;
use crate::domain::ids::{ActivityId, EmailId};
use crate::domain::time::now_ms;
use crate::store::dialect::{BeginWrite, bound_in_order};
use crate::store::{Store, StoreResult};
use crate::store::{on_db, on_db_write};

/// What a delivery needs of its email.
#[derive(Clone, Debug, FromRow)]
pub struct Deliverable {
    /// The email's id.
    pub id: String,
    pub project_id: String,
    pub contact_id: Option<String>,
    pub status: String,
    /// The `from` address (its domain may choose the transport).
    pub from_address: String,
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
pub(crate) const DELIVERABLE_COLUMNS: &str = "id, project_id, contact_id, status, from_address, envelope_from, to_address, raw, \
     draft, content_id, handed_off_at, attempts, created_at";

/// How one hand-off of a batch ends (see [`Store::finish_deliveries`]).
#[derive(Clone, Copy, Debug)]
pub enum HandOffEnd<'a> {
    /// The delivery is over: the transport accepted the message, or it never will.
    Delivered(DeliveryOutcome<'a>),
    /// The transport could not take it now: the email is due again at `retry_at` (unix ms),
    /// and its history and the activity feed get a `deferred` entry saying why.
    Deferred {
        /// When it is due again.
        retry_at: i64,
        /// Why (the transport's answer, with the failovers before it).
        reason: &'a str,
    },
}

/// The history entry (and activity kind) of a hand-off the transport could not take now.
pub const DEFERRED: &str = "deferred";

/// How a delivery ended.
#[derive(Clone, Copy, Debug)]
pub enum DeliveryOutcome<'a> {
    /// The transport accepted it.
    Sent {
        /// The provider's id.
        provider_id: &'a str,
        /// The provider's answer.
        detail: Option<&'a str>,
        /// The transport that took it.
        transport: Option<&'a str>,
    },
    /// It cannot be delivered.
    Failed {
        /// Why.
        error: &'a str,
        /// The transport that answered last, if one was called.
        transport: Option<&'a str>,
    },
}

impl Store {
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
    ///   message (so a retry is not reported as a possible duplicate), the email is due
    ///   again at `retry_at`, and its history entry ([`DEFERRED`]) says why.
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
            // The history entries to write: (email, kind, detail).
            let mut entries: Vec<(&Deliverable, &str, Option<&str>)> = Vec::new();
            for (at, (email, end)) in ends.iter().enumerate() {
                match end {
                    HandOffEnd::Delivered(outcome) => {
                        delivered.push(Outcome::of(at, email, outcome));
                    }
                    HandOffEnd::Deferred { retry_at, reason } => {
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
                        if n == 1 {
                            entries.push((email, DEFERRED, Some(reason)));
                        }
                    }
                }
            }
            if !delivered.is_empty() {
                // One statement for the whole batch: the outcomes written where the hand-off
                // is still the email's (their history entries are written below).
                let sql = bound_in_order(backend, finish_outcomes_sql(delivered.len()));
                let mut q = sqlx::query_scalar::<_, String>(&sql);
                for d in &delivered {
                    q = q
                        .bind(&d.email.id)
                        .bind(d.status)
                        .bind(d.provider_id)
                        .bind(d.error)
                        .bind(token)
                        .bind(d.transport);
                }
                q = q.bind(now).bind(now).bind(now);
                let updated: HashSet<String> = q.fetch_all(&mut *tx).await?.into_iter().collect();
                entries.extend(
                    delivered
                        .iter()
                        .filter(|d| updated.contains(&d.email.id))
                        .map(|d| (d.email, d.status, d.detail)),
                );
                for d in &delivered {
                    recorded[d.at] = updated.contains(&d.email.id);
                }
            }
            if !entries.is_empty() {
                // One statement for every history entry of the batch.
                let sql = bound_in_order(backend, insert_activity_sql(entries.len()));
                let mut q = sqlx::query(&sql);
                for (email, kind, detail) in &entries {
                    q = q
                        .bind(ActivityId::generate().into_string())
                        .bind(&email.project_id)
                        .bind(&email.id)
                        .bind(email.contact_id.as_deref())
                        .bind(*kind)
                        .bind(*detail)
                        .bind(now);
                }
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            recorded
        });
        Ok(recorded)
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
    transport: Option<&'a str>,
}

impl<'a> Outcome<'a> {
    fn of(at: usize, email: &'a Deliverable, outcome: &'a DeliveryOutcome<'a>) -> Outcome<'a> {
        let (status, detail, provider_id, error, transport) = match outcome {
            DeliveryOutcome::Sent {
                provider_id,
                detail,
                transport,
            } => (status::SENT, *detail, Some(*provider_id), None, *transport),
            DeliveryOutcome::Failed { error, transport } => {
                (status::FAILED, Some(*error), None, Some(*error), *transport)
            }
        };
        Outcome {
            at,
            email,
            status,
            detail,
            provider_id,
            error,
            transport,
        }
    }
}

/// Records the outcomes of `n` deliveries, each keyed on its hand-off (the email still queued
/// and its token the claim's), and answers the ids written; binds, a row: id, status (`sent` or
/// `failed`), provider id, error, hand-off token, transport; then now three times (each placeholder once
/// and in order: `dialect::bound_in_order`). The stored message and draft go. The email is
/// found by id for each row (`dialect::unindexed_equals`).
pub(in crate::store) fn finish_outcomes_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_provider, v_error, v_token, v_transport) AS (VALUES {}) \
         UPDATE emails SET status = v_status, provider_id = COALESCE(v_provider, provider_id), error = v_error, \
         transport = COALESCE(v_transport, transport), \
         raw = NULL, draft = {draft}, hand_off_token = NULL, \
         sent_at = CASE WHEN v_status = '{sent}' THEN ${a} ELSE sent_at END, \
         failed_at = CASE WHEN v_status = '{sent}' THEN failed_at ELSE ${b} END, updated_at = ${c} \
         FROM v WHERE id = v_id AND {queued} AND hand_off_token = v_token RETURNING id",
        crate::store::dialect::value_rows(1, n, 6),
        sent = status::SENT,
        a = 6 * n + 1,
        b = 6 * n + 2,
        c = 6 * n + 3,
        queued = crate::store::dialect::unindexed_equals("status", status::QUEUED),
        draft = super::view::draft_after_delivery(),
    )
}
