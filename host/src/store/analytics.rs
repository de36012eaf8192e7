//! The analytics queries: email milestones over time, campaigns ranked and broken down, and
//! event names by count. One set of definitions (`docs/decisions.md`, "Stats and analytics"):
//! each milestone counts distinct emails by the time it first happened (`sent_at`,
//! `delivered_at`, `opened_at`, …), test sends never count, and a click is also an open.

use std::collections::HashMap;

use super::{Store, StoreResult, on_db};
use crate::domain::ids::ProjectId;

/// The milestones a time series counts, with the column that dates each.
pub const MILESTONES: [(&str, &str); 6] = [
    ("sent", "sent_at"),
    ("delivered", "delivered_at"),
    ("opened", "COALESCE(opened_at, clicked_at)"),
    ("clicked", "clicked_at"),
    ("bounced", "bounced_at"),
    ("complained", "complained_at"),
];

/// Counts of one slot of a time series: `(milestone index, slot, count)`.
pub type SlotCount = (usize, i64, i64);

impl Store {
    /// Each milestone's count per slot of `slot_ms` from `from` (inclusive) to `to`
    /// (exclusive): slot `n` covers `[from + n·slot_ms, from + (n+1)·slot_ms)`. Slots without
    /// any email are absent.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn milestone_slots(
        &self,
        project: &ProjectId,
        from: i64,
        to: i64,
        slot_ms: i64,
    ) -> StoreResult<Vec<SlotCount>> {
        let sql = MILESTONES
            .iter()
            .enumerate()
            .map(|(i, (_, column))| {
                format!(
                    "SELECT {i} AS m, ({column} - $2) / $4 AS slot, COUNT(*) AS n FROM emails \
                     WHERE project_id = $1 AND {column} >= $2 AND {column} < $3 AND NOT test \
                     GROUP BY ({column} - $2) / $4"
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let rows: Vec<(i32, i64, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(from)
                .bind(to)
                .bind(slot_ms)
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .map(|(m, slot, n)| (m as usize, slot, n))
            .collect())
    }

    /// The project's custom event names (not the service's own `contact.*`, `email.*` and
    /// `segment.*`) by how often they were tracked in `[from, to)`, most first, up to `limit`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn top_event_names(
        &self,
        project: &ProjectId,
        from: i64,
        to: i64,
        limit: u32,
    ) -> StoreResult<Vec<(String, i64)>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&format!(
                "SELECT name, COUNT(*) AS n FROM events WHERE project_id = $1 \
                 AND created_at >= $2 AND created_at < $3 \
                 AND name NOT IN ('contact.subscribed', 'contact.unsubscribed') \
                 AND name NOT LIKE 'email.%' AND name NOT LIKE 'segment.%' \
                 GROUP BY name ORDER BY n DESC, name LIMIT {limit}"
            ))
            .bind(project.as_str())
            .bind(from)
            .bind(to)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}

/// Sums slot counts into buckets: `starts` are the buckets' starts (ascending, the first at or
/// before every slot), slot `n` starts at `from + n·slot_ms`. Answers one row of counts (in
/// [`MILESTONES`] order) per bucket.
pub fn bucket(slots: &[SlotCount], from: i64, slot_ms: i64, starts: &[i64]) -> Vec<[i64; 6]> {
    let mut out = vec![[0i64; 6]; starts.len()];
    let mut by_slot: HashMap<i64, usize> = HashMap::new();
    for &(m, slot, n) in slots {
        let at = from + slot * slot_ms;
        let index = *by_slot
            .entry(slot)
            .or_insert_with(|| starts.partition_point(|&s| s <= at).saturating_sub(1));
        if let Some(row) = out.get_mut(index)
            && m < 6
        {
            row[m] += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fall_into_the_bucket_that_starts_at_or_before_them() {
        // Buckets of 2 hours from 0; slots of one hour.
        let hour = 3_600_000;
        let starts = [0, 2 * hour, 4 * hour];
        let slots = [(0, 0, 1), (0, 1, 2), (1, 2, 5), (5, 5, 7)];
        let rows = bucket(&slots, 0, hour, &starts);
        assert_eq!(rows[0], [3, 0, 0, 0, 0, 0]);
        assert_eq!(rows[1], [0, 5, 0, 0, 0, 0]);
        assert_eq!(rows[2], [0, 0, 0, 0, 0, 7]);
    }
}
