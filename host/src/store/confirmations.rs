//! Confirmed opt-in: the contacts waiting for the confirmation of a subscription
//! (`contact_confirmations`, one row per pending contact). A row says since when the contact is
//! pending (the confirmation link names that time, so a link of an earlier, expired wait confirms
//! nothing), until when its link works, and when its confirmation was last mailed. A contact is
//! pending while it has an unexpired row and is not subscribed: a contact subscribed by another
//! path meanwhile, or confirmed by a request that stopped before deleting its row, is not.
//! Expired rows are deleted by the periodic maintenance of any instance
//! ([`Store::prune_confirmations`]); until then every read treats them as gone.

use std::collections::HashMap;

use sqlx::FromRow;

use super::{Store, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{ContactId, ProjectId};

/// A contact's wait for its confirmation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromRow)]
pub struct Pending {
    /// Since when (unix ms); the confirmation link names it.
    pub pending_since: i64,
    /// Until when the link works (unix ms).
    pub expires_at: i64,
}

/// When a confirmation may be claimed: the wait's start and end for a new wait, and the time
/// before which the last mail must have gone for another to go now.
#[derive(Clone, Copy, Debug)]
pub struct ClaimTimes {
    /// Now (unix ms): a new wait starts now, and a mail claimed now is sent now.
    pub now: i64,
    /// The end of a wait that starts now.
    pub expires_at: i64,
    /// A wait whose last mail went at or before this time is mailed again.
    pub resend_before: i64,
}

impl Store {
    /// Claims the mailing of a confirmation to `contact`, atomically across instances: starts
    /// its wait (none, or an expired one) or, when its last mail went at or before
    /// `resend_before`, takes the next mail of the current wait (which keeps its start and end).
    /// Answers the wait when the caller is to mail it; `None` when a mail went too recently.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn claim_confirmation(
        &self,
        project: &ProjectId,
        contact: &ContactId,
        t: ClaimTimes,
    ) -> StoreResult<Option<Pending>> {
        let sql = "INSERT INTO contact_confirmations \
                   (contact_id, project_id, pending_since, expires_at, last_sent_at) \
                   VALUES ($1, $2, $3, $4, $3) ON CONFLICT (contact_id) DO UPDATE SET \
                   pending_since = CASE WHEN contact_confirmations.expires_at <= $3 THEN $3 \
                   ELSE contact_confirmations.pending_since END, \
                   expires_at = CASE WHEN contact_confirmations.expires_at <= $3 THEN $4 \
                   ELSE contact_confirmations.expires_at END, last_sent_at = $3 \
                   WHERE contact_confirmations.expires_at <= $3 \
                   OR contact_confirmations.last_sent_at <= $5 \
                   RETURNING pending_since, expires_at";
        let row: Option<Pending> = on_db_write!(self.db(), pool => {
            sqlx::query_as(sql)
                .bind(contact.as_str())
                .bind(project.as_str())
                .bind(t.now)
                .bind(t.expires_at)
                .bind(t.resend_before)
                .fetch_optional(pool)
                .await?
        });
        Ok(row)
    }

    /// The wait of `contact` (expired or not), if it has one.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn confirmation(&self, contact: &ContactId) -> StoreResult<Option<Pending>> {
        let row: Option<Pending> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT pending_since, expires_at FROM contact_confirmations WHERE contact_id = $1",
            )
            .bind(contact.as_str())
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Since when each of `contacts` of `project` is pending, for those that are at `now`
    /// (an unexpired wait, not subscribed).
    #[tracing::instrument(level = "debug", skip(self, contacts))]
    pub async fn pending_since(
        &self,
        project: &ProjectId,
        contacts: &[&ContactId],
        now: i64,
    ) -> StoreResult<HashMap<String, i64>> {
        if contacts.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT p.contact_id, p.pending_since FROM contact_confirmations p \
             JOIN contacts c ON c.id = p.contact_id \
             WHERE p.project_id = $1 AND p.expires_at > $2 AND NOT c.subscribed \
             AND p.contact_id IN ({})",
            super::dialect::placeholders(3, contacts.len())
        );
        let rows: Vec<(String, i64)> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str()).bind(now);
            for c in contacts {
                q = q.bind(c.as_str());
            }
            q.fetch_all(pool).await?
        });
        Ok(rows.into_iter().collect())
    }

    /// Ends the wait of `contact` (confirmed, or unsubscribed meanwhile); answers whether it had
    /// one.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn end_confirmation(
        &self,
        project: &ProjectId,
        contact: &ContactId,
    ) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM contact_confirmations WHERE project_id = $1 AND contact_id = $2")
                .bind(project.as_str())
                .bind(contact.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Deletes the waits that expired at or before `now`, at most 1,000 a call (maintenance
    /// calls it every minute); answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_confirmations(&self, now: i64) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM contact_confirmations WHERE contact_id IN \
                 (SELECT contact_id FROM contact_confirmations WHERE expires_at <= $1 LIMIT 1000)",
            )
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }
}
