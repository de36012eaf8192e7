//! A segment's member count: counted by its filter (on SQLite in parts for a large project),
//! cached per filter and stored.

use herald_filter::SqlValue;

use super::rows::Segment;
use crate::domain::ids::ProjectId;
use crate::domain::segment::SegmentType;
use crate::domain::time::now_ms;
use crate::store::contacts::fields::CONTACT_COUNT;
use crate::store::{Db, Store, StoreError, StoreResult};
use crate::store::{on_db, on_db_write};

/// A project's contacts from which SQLite counts a dynamic segment in parts
/// ([`Store::count_members`]); below it one statement takes a few hundred milliseconds at most.
const SPLIT_COUNT_AT: i64 = 100_000;

/// How many parts SQLite counts a large dynamic segment in: one per core, 2 to 4, which is half
/// the read pool's default size ([`crate::store::sqlite_readers`]). Read once: finding the cores reads
/// the cgroup's files.
static COUNT_PARTS: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| i64::from(crate::store::sqlite_readers() / 2).clamp(2, 4));

/// The rowid ranges (inclusive) to count a segment in, from the contacts table's lowest and
/// highest rowid and the project's contact count: `parts` equal spans of the rowids when the
/// project has at least [`SPLIT_COUNT_AT`] contacts and fills at least half of the span (so a
/// scan of the table is the plan either way); otherwise one range of every rowid. The first
/// and last ranges are open-ended, so a contact inserted after the bounds were read is counted
/// as by one statement.
fn split_count(low: Option<i64>, high: Option<i64>, contacts: i64, parts: i64) -> Vec<(i64, i64)> {
    let whole = vec![(i64::MIN, i64::MAX)];
    let (Some(low), Some(high)) = (low, high) else {
        return whole;
    };
    let span = i128::from(high) - i128::from(low) + 1;
    if contacts < SPLIT_COUNT_AT || i128::from(contacts) * 2 < span || parts < 2 {
        return whole;
    }
    // The first rowid of part i, for i in 1..parts (within low..=high, so no overflow).
    let start = |i: i64| {
        i64::try_from(i128::from(low) + span * i128::from(i) / i128::from(parts)).unwrap_or(high)
    };
    (0..parts)
        .map(|i| {
            let from = if i == 0 { i64::MIN } else { start(i) };
            let to = if i == parts - 1 {
                i64::MAX
            } else {
                start(i + 1) - 1
            };
            (from, to)
        })
        .collect()
}

impl Store {
    /// The member count of `segment` counted with the filter of `hash` at `not_before` or
    /// later, if any.
    pub(super) async fn cached_member_count(
        &self,
        segment: &Segment,
        hash: &str,
        not_before: i64,
    ) -> StoreResult<Option<i64>> {
        let total: Option<i64> = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT total FROM segment_member_counts WHERE segment_id = $1 \
                 AND project_id = $2 AND condition_hash = $3 AND counted_at >= $4",
            )
            .bind(segment.id.as_str())
            .bind(segment.project_id.as_str())
            .bind(hash)
            .bind(not_before)
            .fetch_optional(pool)
            .await?
        });
        Ok(total)
    }

    /// Keeps a fresh member count for the next pages. Best effort: the page is answered with its
    /// count whether or not this is stored (the segment may have just been deleted).
    pub(super) async fn cache_member_count(
        &self,
        segment: &Segment,
        hash: &str,
        total: i64,
        now: i64,
    ) {
        let stored: StoreResult<()> = async {
            on_db_write!(self.db(), pool => {
                sqlx::query(
                    "INSERT INTO segment_member_counts \
                     (segment_id, project_id, condition_hash, total, counted_at) \
                     SELECT id, project_id, $3, $4, $5 FROM segments \
                     WHERE id = $1 AND project_id = $2 \
                     ON CONFLICT (segment_id) DO UPDATE SET condition_hash = excluded.condition_hash, \
                     total = excluded.total, counted_at = excluded.counted_at",
                )
                .bind(segment.id.as_str())
                .bind(segment.project_id.as_str())
                .bind(hash)
                .bind(total)
                .bind(now)
                .execute(pool)
                .await?;
            });
            Ok(())
        }
        .await;
        if let Err(e) = stored {
            tracing::warn!(segment = %segment.id.as_str(), error = %e, "segment member count not cached");
        }
    }

    /// Counts a segment's members now (live for a dynamic segment) and stores the count.
    #[tracing::instrument(level = "debug", skip(self, segment))]
    pub async fn refresh_segment(&self, segment: &Segment) -> StoreResult<i64> {
        let (from, binds) = self.members_from(segment, now_ms())?;
        let count = self
            .count_members(&segment.project_id, &segment.segment_type, &from, &binds)
            .await?;
        self.store_member_count(segment, count).await?;
        Ok(count)
    }

    /// `SELECT COUNT(*) {from}` for [`Store::members_from`]'s answer. PostgreSQL spreads a
    /// large count over its parallel workers itself; SQLite runs a statement on one thread, so
    /// there a dynamic segment's count over a project that fills most of the contacts table
    /// ([`split_count`]) is counted in parts, ranges of the table's rowids, each on a read
    /// connection of its own at once, and summed. Each part reads its own snapshot, as the
    /// page beside the count already does: a contact written meanwhile is counted as of one
    /// of those moments.
    pub(super) async fn count_members(
        &self,
        project: &ProjectId,
        segment_type: &SegmentType,
        from: &str,
        binds: &[SqlValue],
    ) -> StoreResult<i64> {
        let count_sql = format!("SELECT COUNT(*) {from}");
        if let Db::Sqlite { pool, .. } = self.db()
            && matches!(segment_type, SegmentType::Dynamic)
        {
            let (low, high, contacts): (Option<i64>, Option<i64>, i64) = sqlx::query_as(&format!(
                "SELECT (SELECT MIN(rowid) FROM contacts), (SELECT MAX(rowid) FROM contacts), \
                     ({CONTACT_COUNT})"
            ))
            .bind(project.as_str())
            .fetch_one(pool)
            .await?;
            let parts = split_count(low, high, contacts, *COUNT_PARTS);
            // One part is counted whole below, without a rowid range the planner might prefer
            // to the project's index.
            if parts.len() > 1 {
                let part_sql = format!(
                    "{count_sql} AND c.rowid BETWEEN ${} AND ${}",
                    binds.len() + 1,
                    binds.len() + 2
                );
                let counts = futures::future::try_join_all(parts.into_iter().map(|(from, to)| {
                    bind_all!(sqlx::query_scalar::<_, i64>(&part_sql), binds)
                        .bind(from)
                        .bind(to)
                        .persistent(false)
                        .fetch_one(pool)
                }))
                .await?;
                return Ok(counts.into_iter().sum());
            }
        }
        let count: i64 = on_db!(self.db(), pool => {
            bind_all!(sqlx::query_scalar(&count_sql), binds)
                .persistent(false)
                .fetch_one(pool)
                .await?
        });
        Ok(count)
    }

    async fn store_member_count(&self, segment: &Segment, count: i64) -> StoreResult<()> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("UPDATE segments SET member_count = $3 WHERE project_id = $1 AND id = $2")
                .bind(segment.project_id.as_str())
                .bind(segment.id.as_str())
                .bind(count)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_project_filling_the_table_is_counted_in_equal_open_ended_parts() {
        assert_eq!(
            split_count(Some(1), Some(1_000_000), 1_000_000, 2),
            [(i64::MIN, 500_000), (500_001, i64::MAX)]
        );
        assert_eq!(
            split_count(Some(11), Some(300_010), 200_000, 3),
            [(i64::MIN, 100_010), (100_011, 200_010), (200_011, i64::MAX)]
        );
        // The extremes of rowids do not overflow.
        let parts = split_count(Some(0), Some(i64::MAX), i64::MAX, 4);
        assert_eq!(parts.len(), 4);
        assert!(parts.windows(2).all(|w| w[0].1 + 1 == w[1].0));
    }

    #[test]
    fn a_small_project_a_minority_of_the_table_or_an_empty_table_is_counted_whole() {
        let whole = [(i64::MIN, i64::MAX)];
        assert_eq!(split_count(Some(1), Some(99_999), 99_999, 2), whole);
        assert_eq!(split_count(Some(1), Some(1_000_000), 400_000, 2), whole);
        assert_eq!(split_count(None, None, 0, 2), whole);
        assert_eq!(split_count(Some(1), Some(1_000_000), 1_000_000, 1), whole);
    }
}
