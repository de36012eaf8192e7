//! A campaign's A/B test in the ledger: the test group's draw written with each snapshot chunk
//! (`variant` of its rows), each variant's counts from its emails, and the winner's choice,
//! which queues the batches of the rest of the audience and the finish job in the same
//! transaction, once (guarded by `ab_winner IS NULL`).

use serde_json::json;

use super::records::{Campaign, PENDING_BATCHES, batch_job, finish_job};
use crate::domain::campaign_ab::{VariantCounts, draw_test_group};
use crate::domain::time::now_ms;
use crate::store::dialect::{BeginWrite, placeholders};
use crate::store::jobs::{Lease, NewJob};
use crate::store::statements::Statements;
use crate::store::{Store, StoreResult, on_db, on_db_write};

/// The statements that write a snapshot chunk's draw of the test group: for each variant, an
/// `UPDATE campaign_recipients` (binding `$1` the campaign, `$2` the variant, then the ids) with
/// its variant and ids. Nothing for a campaign without an A/B test.
pub(super) fn variant_updates<'a>(
    c: &Campaign,
    taken: &'a [String],
) -> Vec<(String, i32, Vec<&'a str>)> {
    let Some(test) = &c.content.ab else {
        return Vec::new();
    };
    let mut by_variant: Vec<Vec<&str>> = vec![Vec::new(); test.variants.len()];
    for (id, variant) in draw_test_group(c.id.as_str(), taken, c.recipient_count, test) {
        by_variant[variant].push(id);
    }
    by_variant
        .into_iter()
        .enumerate()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(variant, ids)| {
            let sql = format!(
                "UPDATE campaign_recipients SET variant = $2 WHERE campaign_id = $1 AND contact_id IN ({})",
                placeholders(3, ids.len())
            );
            (sql, variant as i32, ids)
        })
        .collect()
}

/// One variant of a test group: its recipients and their emails' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VariantTally {
    /// Contacts of the test group drawn for it.
    pub recipients: i64,
    pub counts: VariantCounts,
}

impl Store {
    /// Each variant's tally in the test group of campaign `c`, in variant order (empty without
    /// a test): its ledger rows and their emails (a click also counts as an open).
    #[tracing::instrument(level = "debug", skip_all, fields(campaign = %c.id))]
    pub async fn ab_variant_tallies(&self, c: &Campaign) -> StoreResult<Vec<VariantTally>> {
        let Some(test) = &c.content.ab else {
            return Ok(Vec::new());
        };
        let rows: Vec<(Option<i32>, i64, i64, i64, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT r.variant, COUNT(*), COUNT(e.sent_at), \
                 COUNT(CASE WHEN e.opened_at IS NOT NULL OR e.clicked_at IS NOT NULL THEN 1 END), \
                 COUNT(e.clicked_at) \
                 FROM campaign_recipients r LEFT JOIN emails e ON e.id = r.email_id \
                 WHERE r.campaign_id = $1 AND r.variant IS NOT NULL GROUP BY r.variant",
            )
            .bind(c.id.as_str())
            .fetch_all(pool)
            .await?
        });
        let mut tallies = vec![VariantTally::default(); test.variants.len()];
        for (variant, recipients, sent, opened, clicked) in rows {
            let Some(t) = variant
                .and_then(|v| usize::try_from(v).ok())
                .and_then(|v| tallies.get_mut(v))
            else {
                continue;
            };
            *t = VariantTally {
                recipients,
                counts: VariantCounts {
                    sent,
                    opened,
                    clicked,
                },
            };
        }
        Ok(tallies)
    }

    /// Records `winner` as the A/B test's winner of sending campaign `c` and, in the same
    /// transaction, queues a batch job for each of its batches with pending rows (the rest of
    /// the audience, and test rows a pause left), the finish job, and completes `lease`'s job
    /// with `result`. False when nothing was written: the campaign is no longer sending, its
    /// winner was chosen already, or the lease was lost.
    #[tracing::instrument(level = "debug", skip(self, c, lease, result), fields(campaign = %c.id))]
    pub async fn choose_ab_winner(
        &self,
        c: &Campaign,
        winner: usize,
        lease: &Lease,
        result: &serde_json::Value,
        max_attempts: i32,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let (project, id) = (&c.project_id, &c.id);
        let finish = finish_job(project, id, max_attempts, now)?;
        let chosen = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let moved = sqlx::query(
                "UPDATE campaigns SET ab_winner = $2, ab_decided_at = $3, updated_at = $3 \
                 WHERE id = $1 AND status = 'SENDING' AND ab_winner IS NULL",
            )
            .bind(id.as_str())
            .bind(winner as i32)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if moved == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            let batches: Vec<i32> = sqlx::query_scalar(PENDING_BATCHES)
            .bind(id.as_str())
            .fetch_all(&mut *tx)
            .await?;
            let mut jobs = Vec::with_capacity(batches.len() + 1);
            for batch in batches {
                jobs.push(batch_job(project, id, batch, max_attempts, now)?);
            }
            jobs.push(finish);
            let jobs: Vec<&NewJob> = jobs.iter().collect();
            tx.insert_jobs(&jobs, now).await?;
            if !tx.complete_job(lease, result, now).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            tx.commit().await?;
            true
        });
        Ok(chosen)
    }
}

/// The result a winner job records.
pub fn winner_result(winner: usize, tallies: &[VariantTally]) -> serde_json::Value {
    let variants: Vec<_> = tallies
        .iter()
        .map(|t| json!({ "sent": t.counts.sent, "opened": t.counts.opened, "clicked": t.counts.clicked }))
        .collect();
    json!({ "winner": winner, "variants": variants })
}
