//! Segments and their stored members.
//!
//! A `DYNAMIC` segment's filter is compiled to SQL by `herald-filter` ([`Filter::to_sql`]) over
//! `contacts c`, with the caller's binds first (`$1` the project, `$2` the segment) and the
//! filter's after them. A `STATIC` segment's members are rows of `segment_members`; so are those
//! of a tracked dynamic segment, reconciled with its filter by [`Store::compute_segment`] in
//! chunks (keyset-paginated by contact id), each chunk one transaction with its `segment.<slug>.entry`/`.exit` events (and their
//! outbox rows, by trigger). `member_count` caches the last count.

use herald_filter::{Filter, SqlValue};
use sqlx::types::Json;

use super::contacts::rows::ContactRow;
use super::dialect::{BeginWrite, for_key_share, for_update, placeholders};
use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::contact::Contact;
use crate::domain::ids::{ContactId, ProjectId, SegmentId};
use crate::domain::segment::SegmentType;
use crate::domain::time::now_ms;

/// Binds every value of `$binds` to the query `$q`, in order.
macro_rules! bind_all {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for v in $binds {
            q = match v {
                SqlValue::Text(s) => q.bind(s.clone()),
                SqlValue::Int(i) => q.bind(*i),
                SqlValue::Float(f) => q.bind(*f),
                SqlValue::Bool(b) => q.bind(*b),
            };
        }
        q
    }};
}
pub(super) use bind_all;

pub(in crate::store) mod compute;
pub(in crate::store) mod count;
pub(in crate::store) mod live;
pub(in crate::store) mod members;
pub(in crate::store) mod rows;

pub(in crate::store) use members::MEMBERS_PER_STATEMENT;
use rows::{COLUMNS, CONTACT_COLUMNS, SegmentRow, condition_hash, dialect};
pub use rows::{
    COMPUTE_CHUNK, COMPUTE_WINDOW, ComputeOutcome, LiveContact, MembershipChange, NewSegment,
    RECONCILE_CHUNK, RECONCILE_WRITE_CHUNK, REEVALUATE_KIND, Segment, SegmentPatch, TrackedSegment,
};

impl Store {
    /// A filter as SQL with `binds`: `$1` the project, `$2` the segment when one is given, then
    /// the filter's values.
    pub(super) fn compile(
        &self,
        project: &ProjectId,
        segment: Option<&SegmentId>,
        filter: &Filter,
        now: i64,
    ) -> StoreResult<(String, Vec<SqlValue>)> {
        let mut binds = vec![SqlValue::Text(project.as_str().to_string())];
        if let Some(segment) = segment {
            binds.push(SqlValue::Text(segment.as_str().to_string()));
        }
        let sql = filter
            .to_sql(dialect(self.db().backend()), now, &mut binds)
            .map_err(|e| match segment {
                Some(segment) => StoreError::Corrupt(format!("segment {segment} filter: {e}")),
                None => StoreError::Corrupt(format!("filter: {e}")),
            })?;
        Ok((sql, binds))
    }

    /// The ids of the project's contacts that `filter` selects at `now_ms`, in id order: the
    /// filter compiled to SQL and run, as a dynamic segment's members are (campaign audiences,
    /// and the property test that holds the SQL to [`Filter::matches`]).
    #[tracing::instrument(level = "debug", skip(self, filter))]
    pub async fn contacts_matching(
        &self,
        project: &ProjectId,
        filter: &Filter,
        now_ms: i64,
    ) -> StoreResult<Vec<ContactId>> {
        let (expr, binds) = self.compile(project, None, filter, now_ms)?;
        let sql = format!(
            "SELECT c.id FROM contacts c WHERE c.project_id = $1 AND ({expr}) ORDER BY c.id"
        );
        let ids: Vec<String> = on_db!(self.db(), pool => {
            bind_all!(sqlx::query_scalar(&sql), &binds).fetch_all(pool).await?
        });
        Ok(ids.into_iter().map(ContactId::from_trusted).collect())
    }

    /// The `FROM … WHERE …` of a segment's current members (contacts aliased `c`) and its binds
    /// (`$1` the project, then the segment or the filter's values): the filter's matches for a
    /// dynamic segment, the stored members for a static one.
    pub(super) fn members_from(
        &self,
        segment: &Segment,
        now: i64,
    ) -> StoreResult<(String, Vec<SqlValue>)> {
        match segment.filter()? {
            Some(filter) => self.matches_from(&segment.project_id, &filter, now),
            None => Ok((
                "FROM contacts c JOIN segment_members m ON m.contact_id = c.id \
                 WHERE c.project_id = $1 AND m.project_id = $1 AND m.segment_id = $2"
                    .to_string(),
                vec![
                    SqlValue::Text(segment.project_id.as_str().to_string()),
                    SqlValue::Text(segment.id.as_str().to_string()),
                ],
            )),
        }
    }

    /// The `FROM … WHERE …` of the project's contacts that `filter` selects at `now` (aliased
    /// `c`) and its binds (`$1` the project, then the filter's values).
    fn matches_from(
        &self,
        project: &ProjectId,
        filter: &Filter,
        now: i64,
    ) -> StoreResult<(String, Vec<SqlValue>)> {
        let (expr, binds) = self.compile(project, None, filter, now)?;
        Ok((
            format!("FROM contacts c WHERE c.project_id = $1 AND ({expr})"),
            binds,
        ))
    }

    /// Page `page` (from 1) of `page_size` contacts of `from` (a [`Store::members_from`]
    /// answer), newest first. Not kept as a prepared statement: the text is the filter's own,
    /// and PostgreSQL plans an unnamed statement with its values (a kept one turns generic after
    /// five runs, blind to the time cutoffs and the filter's values).
    async fn members_page(
        &self,
        from: &str,
        binds: &[SqlValue],
        page: u32,
        page_size: u32,
    ) -> StoreResult<Vec<Contact>> {
        let offset = u64::from(page.saturating_sub(1)) * u64::from(page_size);
        let sql = format!(
            "SELECT {CONTACT_COLUMNS} {from} ORDER BY c.id DESC LIMIT {page_size} OFFSET {offset}"
        );
        let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
            bind_all!(sqlx::query_as(&sql), binds)
                .persistent(false)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Adds a segment.
    #[tracing::instrument(level = "debug", skip(self, s))]
    pub async fn insert_segment(
        &self,
        project: &ProjectId,
        s: &NewSegment,
    ) -> StoreResult<Segment> {
        let id = SegmentId::generate();
        let sql = format!(
            "INSERT INTO segments ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $8) RETURNING {COLUMNS}"
        );
        let row: SegmentRow = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(project.as_str())
                .bind(&s.name)
                .bind(s.description.as_deref())
                .bind(s.segment_type.as_str())
                .bind(s.condition.as_ref().map(Json))
                .bind(s.track_membership)
                .bind(now_ms())
                .fetch_one(pool)
                .await?
        });
        row.try_into()
    }

    /// A segment of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn segment(&self, project: &ProjectId, id: &SegmentId) -> StoreResult<Segment> {
        let sql = format!("SELECT {COLUMNS} FROM segments WHERE project_id = $1 AND id = $2");
        let row: Option<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Every segment of a project, newest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_segments(&self, project: &ProjectId) -> StoreResult<Vec<Segment>> {
        let sql = format!("SELECT {COLUMNS} FROM segments WHERE project_id = $1 ORDER BY id DESC");
        let rows: Vec<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?
        });
        rows.into_iter().map(Segment::try_from).collect()
    }

    /// Applies a change to a segment and answers it. Turning `track_membership` off forgets the
    /// stored members of a dynamic segment in the same transaction.
    #[tracing::instrument(level = "debug", skip(self, patch))]
    pub async fn update_segment(
        &self,
        project: &ProjectId,
        id: &SegmentId,
        patch: &SegmentPatch,
    ) -> StoreResult<Segment> {
        let sql = format!(
            "UPDATE segments SET name = COALESCE($3, name), \
             description = CASE WHEN $4 THEN $5 ELSE description END, \
             condition = CASE WHEN $6 THEN $7 ELSE condition END, \
             track_membership = COALESCE($8, track_membership), updated_at = $9 \
             WHERE project_id = $1 AND id = $2 RETURNING {COLUMNS}"
        );
        let forget = patch.track_membership == Some(false);
        let row: Option<SegmentRow> = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<SegmentRow> = sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(patch.name.as_deref())
                .bind(patch.description.is_some())
                .bind(patch.description.clone().flatten())
                .bind(patch.condition.is_some())
                .bind(patch.condition.as_ref().map(Json))
                .bind(patch.track_membership)
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await?;
            if forget && row.as_ref().is_some_and(|r| r.segment_type == SegmentType::Dynamic.as_str()) {
                sqlx::query("DELETE FROM segment_members WHERE project_id = $1 AND segment_id = $2")
                    .bind(project.as_str())
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            row
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Removes a segment (its stored members go with it).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_segment(&self, project: &ProjectId, id: &SegmentId) -> StoreResult<()> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM segments WHERE project_id = $1 AND id = $2")
                .bind(project.as_str())
                .bind(id.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// One page of a segment's members (newest contacts first) and their total: live through
    /// the filter for a dynamic segment, the stored members for a static one. A dynamic
    /// segment's total is reused for `count_cache_ms` once counted (0: counted every time),
    /// from `segment_member_counts`, shared by every instance of the database, and only while
    /// the segment's filter is the one it was counted with.
    #[tracing::instrument(level = "debug", skip(self, segment))]
    pub async fn segment_contacts(
        &self,
        segment: &Segment,
        page: u32,
        page_size: u32,
        count_cache_ms: i64,
    ) -> StoreResult<(Vec<Contact>, i64)> {
        let cache = match (&segment.segment_type, &segment.condition) {
            (SegmentType::Dynamic, Some(condition)) if count_cache_ms > 0 => {
                Some(condition_hash(condition))
            }
            _ => None,
        };
        let now = now_ms();
        let cached = match &cache {
            Some(hash) => {
                self.cached_member_count(segment, hash, now.saturating_sub(count_cache_ms))
                    .await?
            }
            None => None,
        };
        let (from, binds) = self.members_from(segment, now_ms())?;
        // The page and the count on connections of their own at once: on a large segment the
        // count is the long part, and the page should not wait for it.
        let rows = self.members_page(&from, &binds, page, page_size);
        let total = async {
            if let Some(total) = cached {
                return Ok(total);
            }
            let total = self
                .count_members(&segment.project_id, &segment.segment_type, &from, &binds)
                .await?;
            if let Some(hash) = &cache {
                self.cache_member_count(segment, hash, total, now).await;
            }
            Ok::<_, StoreError>(total)
        };
        tokio::try_join!(rows, total)
    }

    /// The newest `size` contacts of the project that `filter` (a contacts filter) selects now
    /// and how many it selects in all: what a dynamic segment with that filter would list,
    /// counted as [`Store::segment_contacts`] counts one, with nothing stored. A `size` of 0
    /// reads no page, only the count.
    #[tracing::instrument(level = "debug", skip(self, filter))]
    pub async fn filter_preview(
        &self,
        project: &ProjectId,
        filter: &Filter,
        size: u32,
    ) -> StoreResult<(Vec<Contact>, i64)> {
        let (from, binds) = self.matches_from(project, filter, now_ms())?;
        let rows = async {
            if size == 0 {
                return Ok(Vec::new());
            }
            self.members_page(&from, &binds, 1, size).await
        };
        let total = self.count_members(project, &SegmentType::Dynamic, &from, &binds);
        tokio::try_join!(rows, total)
    }

    /// Adds contacts (of the project) to a static segment; answers how many were not members
    /// yet. Updates the cached count in the same transaction.
    #[tracing::instrument(level = "debug", skip(self, contacts))]
    pub async fn add_segment_members(
        &self,
        project: &ProjectId,
        id: &SegmentId,
        contacts: &[ContactId],
    ) -> StoreResult<i64> {
        let lock = for_update(self.db().backend());
        let check = format!("SELECT id FROM segments WHERE project_id = $1 AND id = $2{lock}");
        // The contact is locked as it is read: one a concurrent request deletes meanwhile is
        // skipped (not added), not a foreign-key failure of the whole request.
        let insert = format!(
            "INSERT INTO segment_members (segment_id, contact_id, project_id, added_at) \
             SELECT $2, c.id, c.project_id, $4 FROM contacts c \
             WHERE c.project_id = $1 AND c.id = $3{} \
             ON CONFLICT (segment_id, contact_id) DO NOTHING",
            for_key_share(self.db().backend())
        );
        let now = now_ms();
        let added = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let found: Option<String> = sqlx::query_scalar(&check)
                .bind(project.as_str()).bind(id.as_str()).fetch_optional(&mut *tx).await?;
            if found.is_none() {
                return Err(StoreError::NotFound);
            }
            let mut added = 0u64;
            for c in contacts {
                added += sqlx::query(&insert)
                    .bind(project.as_str())
                    .bind(id.as_str())
                    .bind(c.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            update_count(&mut tx, project, id).await?;
            tx.commit().await?;
            added
        });
        Ok(added as i64)
    }

    /// Removes contacts from a static segment; answers how many were members. Updates the
    /// cached count in the same transaction.
    #[tracing::instrument(level = "debug", skip(self, contacts))]
    pub async fn remove_segment_members(
        &self,
        project: &ProjectId,
        id: &SegmentId,
        contacts: &[ContactId],
    ) -> StoreResult<i64> {
        let lock = for_update(self.db().backend());
        let check = format!("SELECT id FROM segments WHERE project_id = $1 AND id = $2{lock}");
        let delete = format!(
            "DELETE FROM segment_members WHERE project_id = $1 AND segment_id = $2 \
             AND contact_id IN ({})",
            placeholders(3, contacts.len().max(1))
        );
        let removed = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let found: Option<String> = sqlx::query_scalar(&check)
                .bind(project.as_str()).bind(id.as_str()).fetch_optional(&mut *tx).await?;
            if found.is_none() {
                return Err(StoreError::NotFound);
            }
            let removed = if contacts.is_empty() {
                0
            } else {
                let mut q = sqlx::query(&delete).bind(project.as_str()).bind(id.as_str());
                for c in contacts {
                    q = q.bind(c.as_str());
                }
                q.execute(&mut *tx).await?.rows_affected()
            };
            update_count(&mut tx, project, id).await?;
            tx.commit().await?;
            removed
        });
        Ok(removed as i64)
    }
}

/// Sets a segment's cached count to its stored members, inside `tx`.
async fn update_count<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    id: &SegmentId,
) -> sqlx::Result<()>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query(
        "UPDATE segments SET member_count = (SELECT COUNT(*) FROM segment_members \
         WHERE project_id = $1 AND segment_id = $2), updated_at = updated_at \
         WHERE project_id = $1 AND id = $2",
    )
    .bind(project.as_str())
    .bind(id.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Takes contacts about to be deleted out of the cached counts of the segments that store them
/// as members (static and tracked ones), inside the transaction that deletes them; the rows
/// themselves go by the cascade. The caller holds the contacts' rows (`FOR UPDATE` on
/// PostgreSQL) so that no membership of theirs is added in between. Binds the project, then
/// each contact.
pub(super) async fn release_memberships<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    contacts: &[&str],
) -> sqlx::Result<()>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for chunk in contacts.chunks(MEMBERS_PER_STATEMENT) {
        let sql = format!(
            "UPDATE segments SET member_count = CASE WHEN member_count > m.n \
             THEN member_count - m.n ELSE 0 END \
             FROM (SELECT segment_id, COUNT(*) AS n FROM segment_members \
                   WHERE project_id = $1 AND contact_id IN ({}) GROUP BY segment_id) AS m \
             WHERE segments.id = m.segment_id",
            placeholders(2, chunk.len())
        );
        let mut q = sqlx::query(&sql).bind(project.as_str());
        for c in chunk {
            q = q.bind(*c);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
