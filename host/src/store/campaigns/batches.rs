//! A campaign's batches: their pending recipients, each batch's emails written with its ledger
//! rows' moves, and the campaign finished once every email is final.

use std::collections::HashMap;

use super::records::{BatchCommit, PendingRecipient, recipient};
use crate::domain::campaign::CampaignStatus;
use crate::domain::contact::Contact;
use crate::domain::ids::{CampaignId, ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::store::contacts::{COLUMNS as CONTACT_COLUMNS, ContactRow};
use crate::store::dialect::{BeginWrite, placeholders};
use crate::store::emails::{EmailInsert, NewEmail, status as email_status};
use crate::store::statements::{Statements, with_listed};
use crate::store::{Store, StoreResult, on_db, on_db_write};

impl Store {
    /// Up to `limit` pending ledger rows of a batch, in contact id order, with their contacts
    /// and A/B variants; with `tested_only`, only the rows of an A/B test's group (the rest wait
    /// for the winner).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn pending_recipients(
        &self,
        campaign: &CampaignId,
        batch: i32,
        limit: usize,
        tested_only: bool,
    ) -> StoreResult<Vec<PendingRecipient>> {
        let tested = if tested_only {
            " AND variant IS NOT NULL"
        } else {
            ""
        };
        let rows: Vec<(String, Option<i32>)> = on_db!(self.db(), pool => {
            sqlx::query_as(&format!(
                "SELECT contact_id, variant FROM campaign_recipients WHERE campaign_id = $1 AND batch = $2 \
                 AND status = 'pending'{tested} ORDER BY contact_id LIMIT {limit}"
            ))
            .bind(campaign.as_str())
            .bind(batch)
            .fetch_all(pool)
            .await?
        });
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
        let sql = format!(
            "SELECT {CONTACT_COLUMNS} FROM contacts WHERE id IN ({})",
            placeholders(1, ids.len())
        );
        let found: Vec<ContactRow> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for id in &ids {
                q = q.bind(*id);
            }
            q.fetch_all(pool).await?
        });
        let mut contacts: HashMap<String, Contact> = found
            .into_iter()
            .map(Contact::from)
            .map(|c| (c.id.as_str().to_string(), c))
            .collect();
        Ok(rows
            .into_iter()
            .map(|(id, variant)| {
                let contact = contacts.remove(&id);
                let variant = variant.and_then(|v| usize::try_from(v).ok());
                (ContactId::from_trusted(id), contact, variant)
            })
            .collect())
    }

    /// Writes a group of a batch in one transaction: each email (unless suppressed, due for
    /// delivery at once, or at its contact's time in `local_due` when that is later) only with
    /// its ledger row's move out of `pending`, so a recipient whose row
    /// moved already (a second run of the batch) gets nothing; and the rows in `closed` with
    /// their final status (`skipped` for a deleted contact, `failed`). Nothing is written when
    /// the campaign is no longer sending: `Paused` leaves the rows pending for the resume.
    #[tracing::instrument(level = "debug", skip_all, fields(campaign = %campaign, emails = emails.len()))]
    pub async fn commit_campaign_batch(
        &self,
        project: &ProjectId,
        campaign: &CampaignId,
        emails: &[NewEmail],
        local_due: &HashMap<ContactId, i64>,
        closed: &[(ContactId, &str)],
    ) -> StoreResult<BatchCommit> {
        let now = now_ms();
        // A plain read, no row lock: the snapshot locks the campaign row for each chunk, and
        // batch commits waiting on it (or holding it) would serialise the two. A cancel or a
        // pause that commits while this group is being written (PostgreSQL) is seen by the next
        // group; the emails of this group are neither suppressed nor held by it and go out.
        // (On SQLite the write transaction reads the status the last commit left.)
        let status_sql = "SELECT status FROM campaigns WHERE id = $1";
        let mark = "UPDATE campaign_recipients SET status = $3, email_id = $4 \
                    WHERE campaign_id = $1 AND contact_id = $2 AND status = 'pending'";
        let commit = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let status: Option<String> = sqlx::query_scalar(status_sql)
                .bind(campaign.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            if status.as_deref() != Some(CampaignStatus::Sending.as_str()) {
                tx.rollback().await?;
                return Ok(if status.as_deref() == Some(CampaignStatus::Paused.as_str()) {
                    BatchCommit::Paused
                } else {
                    BatchCommit::Stopped
                });
            }
            // Every email is written with its ledger row's move, a recipient on the project's
            // suppression list as suppressed (read here, in the transaction that writes them).
            let all: Vec<EmailInsert> = emails
                .iter()
                .map(|e| EmailInsert {
                    project: project.as_str(),
                    email: e,
                    contact_id: Some(e.contact_id.as_str()),
                    status: if e.suppressed.is_some() {
                        email_status::SUPPRESSED
                    } else {
                        email_status::QUEUED
                    },
                    campaign_id: Some(campaign.as_str()),
                    test: false,
                    due_at: e.suppressed.is_none().then(|| {
                        local_due
                            .get(&e.contact_id)
                            .map_or(now, |&due| due.max(now))
                    }),
                    now,
                })
                .collect();
            let listed = tx.listed_emails(&all).await?;
            let all = with_listed(&all, &listed);
            let mut wrote = 0;
            let mut inserts = Vec::with_capacity(all.len());
            for w in &all {
                let row_status = if w.status == email_status::SUPPRESSED {
                    recipient::SUPPRESSED
                } else {
                    recipient::QUEUED
                };
                let moved = sqlx::query(mark)
                    .bind(campaign.as_str())
                    .bind(w.email.contact_id.as_str())
                    .bind(row_status)
                    .bind(w.email.id.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if moved == 0 {
                    continue;
                }
                wrote += 1;
                inserts.push(*w);
            }
            tx.insert_emails(&inserts).await?;
            for (contact, row_status) in closed {
                wrote += sqlx::query(mark)
                    .bind(campaign.as_str())
                    .bind(contact.as_str())
                    .bind(*row_status)
                    .bind(None::<&str>)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected() as usize;
            }
            tx.commit().await?;
            BatchCommit::Wrote(wrote)
        });
        Ok(commit)
    }

    /// Marks a batch's pending rows `cancelled` when the campaign stopped for good before their
    /// turn (`CANCELLED` or `FAILED`, read in the statement); a paused campaign's rows stay
    /// pending, for its resume.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_pending_recipients(
        &self,
        campaign: &CampaignId,
        batch: i32,
    ) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaign_recipients SET status = 'cancelled' \
                 WHERE campaign_id = $1 AND batch = $2 AND status = 'pending' \
                 AND EXISTS (SELECT 1 FROM campaigns WHERE id = $1 AND status IN ('CANCELLED', 'FAILED'))",
            )
            .bind(campaign.as_str())
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Marks a sending campaign `SENT` when its snapshot is done, no ledger row is pending and
    /// none of its emails waits for the transport; false otherwise (look again later).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn finish_campaign_if_done(&self, id: &str) -> StoreResult<bool> {
        let now = now_ms();
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE campaigns SET status = 'SENT', finished_at = $2, updated_at = $2 \
                 WHERE id = $1 AND status = 'SENDING' AND snapshot_done \
                 AND NOT EXISTS (SELECT 1 FROM campaign_recipients r WHERE r.campaign_id = $1 AND r.status = 'pending') \
                 AND NOT EXISTS (SELECT 1 FROM emails e WHERE e.campaign_id = $1 AND e.status = 'queued')",
            )
            .bind(id)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }
}
