//! The reconciliation of a tracked dynamic segment's stored members with its filter, in chunks.

use std::collections::HashSet;

use herald_filter::SqlValue;

use super::rows::{COMPUTE_CHUNK, COMPUTE_WINDOW, ComputeOutcome, Segment, membership_event};
use crate::domain::event::StoredEvent;
use crate::domain::ids::ContactId;
use crate::domain::time::now_ms;
use crate::store::dialect::BeginWrite;
use crate::store::statements::Statements;
use crate::store::{Store, StoreError, StoreResult};
use crate::store::{on_db, on_db_write};

impl Store {
    /// Reconciles a tracked dynamic segment's stored members with its filter: contacts that
    /// match and are not members enter, members that no longer match leave. Works in chunks of
    /// [`COMPUTE_CHUNK`], each one transaction that writes the membership rows and one event
    /// per change (`segment.<slug>.entry` / `.exit`, data `{ segmentId, segmentName }`) and
    /// moves the cached count by its changes, so a crash loses no event and repeats none, and an
    /// event is never seen before its count; the next compute finishes the work. Ends by
    /// recounting the members into the cached count. The filter's `now` is fixed at the start.
    #[tracing::instrument(level = "debug", skip(self, segment))]
    pub async fn compute_segment(&self, segment: &Segment) -> StoreResult<ComputeOutcome> {
        let Some(filter) = segment.filter()? else {
            return Err(StoreError::Corrupt("compute of a static segment".into()));
        };
        let now = now_ms();
        let (expr, binds) = self.compile(&segment.project_id, Some(&segment.id), &filter, now)?;
        // Keyset pagination: each chunk starts after the last contact id of the one before
        // (`$after`), so a compute reads each contact once however many chunks it takes. A
        // chunk also ends at the window's last id (`$upper`, [`COMPUTE_WINDOW`] rows further, read
        // before the write transaction): a sparse segment never has a chunk scan far, so no
        // transaction holds the writer for long.
        let after = format!("${}", binds.len() + 1);
        let upper = format!("${}", binds.len() + 2);
        let select = |enter: bool, windowed: bool| {
            let column = if enter { "c.id" } else { "m.contact_id" };
            let end = if windowed {
                format!(" AND {column} <= {upper}")
            } else {
                String::new()
            };
            if enter {
                format!(
                    "SELECT c.id FROM contacts c WHERE c.project_id = $1 AND c.id > {after}{end} \
                     AND ({expr}) AND NOT EXISTS (SELECT 1 FROM segment_members m \
                     WHERE m.segment_id = $2 AND m.contact_id = c.id) \
                     ORDER BY c.id LIMIT {COMPUTE_CHUNK}"
                )
            } else {
                format!(
                    "SELECT c.id FROM segment_members m JOIN contacts c ON c.id = m.contact_id \
                     WHERE m.project_id = $1 AND m.segment_id = $2 AND m.contact_id > {after}{end} \
                     AND NOT ({expr}) ORDER BY m.contact_id LIMIT {COMPUTE_CHUNK}"
                )
            }
        };
        let mut outcome = ComputeOutcome::default();
        for enter in [true, false] {
            let mut cursor = String::new();
            loop {
                let end = self.compute_window_end(segment, enter, &cursor).await?;
                let sql = select(enter, end.is_some());
                loop {
                    let mut chunk_binds = binds.clone();
                    chunk_binds.push(SqlValue::Text(cursor.clone()));
                    if let Some(end) = &end {
                        chunk_binds.push(SqlValue::Text(end.clone()));
                    }
                    let (selected, changed, last) = self
                        .compute_chunk(segment, enter, &sql, &chunk_binds)
                        .await?;
                    if enter {
                        outcome.added += changed;
                    } else {
                        outcome.removed += changed;
                    }
                    // A full chunk may have more after it in this window.
                    match last {
                        Some(last) if selected == COMPUTE_CHUNK => cursor = last,
                        _ => break,
                    }
                }
                match end {
                    Some(end) => cursor = end,
                    None => break,
                }
            }
        }
        // The full recount, in one statement: a live change committed meanwhile is counted or
        // not, never overwritten by a count read before it.
        let total: Option<i64> = on_db_write!(self.db(), pool => {
            sqlx::query_scalar(
                "UPDATE segments SET member_count = (SELECT COUNT(*) FROM segment_members \
                 WHERE project_id = $1 AND segment_id = $2) WHERE project_id = $1 AND id = $2 \
                 RETURNING member_count",
            )
            .bind(segment.project_id.as_str())
            .bind(segment.id.as_str())
            .fetch_optional(pool)
            .await?
        });
        outcome.total = total.ok_or(StoreError::NotFound)?;
        Ok(outcome)
    }

    /// The last id of the next compute window after `after` (the [`COMPUTE_WINDOW`]th contact of
    /// the project when entering, the [`COMPUTE_WINDOW`]th member when leaving); `None` when
    /// fewer are left, and the window runs to the end. An index-only read, on a read connection.
    async fn compute_window_end(
        &self,
        segment: &Segment,
        enter: bool,
        after: &str,
    ) -> StoreResult<Option<String>> {
        let offset = COMPUTE_WINDOW - 1;
        let project = segment.project_id.as_str();
        Ok(on_db!(self.db(), pool => {
            if enter {
                let sql = format!(
                    "SELECT id FROM contacts WHERE project_id = $1 AND id > $2 \
                     ORDER BY id LIMIT 1 OFFSET {offset}"
                );
                sqlx::query_scalar(&sql).bind(project).bind(after).fetch_optional(pool).await?
            } else {
                let sql = format!(
                    "SELECT contact_id FROM segment_members WHERE project_id = $1 \
                     AND segment_id = $2 AND contact_id > $3 \
                     ORDER BY contact_id LIMIT 1 OFFSET {offset}"
                );
                sqlx::query_scalar(&sql)
                    .bind(project)
                    .bind(segment.id.as_str())
                    .bind(after)
                    .fetch_optional(pool)
                    .await?
            }
        }))
    }

    /// One transaction of a compute: selects up to a chunk of contacts with `select` (in id
    /// order) and makes each enter (`enter`) or leave, with its event. Answers how many were
    /// selected, how many changed, and the last id selected.
    async fn compute_chunk(
        &self,
        segment: &Segment,
        enter: bool,
        select: &str,
        binds: &[SqlValue],
    ) -> StoreResult<(usize, i64, Option<String>)> {
        let project = segment.project_id.as_str();
        let id = segment.id.as_str();
        let now = now_ms();
        let outcome = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let ids: Vec<String> = bind_all!(sqlx::query_scalar(select), binds)
                .fetch_all(&mut *tx)
                .await?;
            let mut seen = HashSet::new();
            let unique: Vec<&str> = ids
                .iter()
                .map(String::as_str)
                .filter(|c| seen.insert(*c))
                .collect();
            let written: HashSet<String> = tx
                .write_members(project, id, &unique, enter.then_some(now))
                .await?
                .into_iter()
                .collect();
            // The chunk's entry or exit events, in id order, inserted together.
            let events: Vec<StoredEvent> = unique
                .iter()
                .filter(|c| written.contains(**c))
                .map(|c| {
                    membership_event(
                        &segment.project_id,
                        ContactId::from_trusted(c.to_string()),
                        id,
                        &segment.name,
                        enter,
                        now,
                    )
                })
                .collect();
            let changed = events.len() as i64;
            tx.insert_events(&events).await?;
            // The cached count moves with the members and their events, so that whoever sees
            // an entry or exit event also sees it counted.
            if changed > 0 {
                sqlx::query(
                    "UPDATE segments SET member_count = member_count + $3 WHERE project_id = $1 AND id = $2",
                )
                .bind(project)
                .bind(id)
                .bind(if enter { changed } else { -changed })
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            (ids.len(), changed, ids.last().cloned())
        });
        Ok(outcome)
    }
}
