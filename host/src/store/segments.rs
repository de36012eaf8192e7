//! Segments and their stored members.
//!
//! A `DYNAMIC` segment's filter is compiled to SQL by `herald-filter` ([`Filter::to_sql`]) over
//! `contacts c`, with the caller's binds first (`$1` the project, `$2` the segment) and the
//! filter's after them. A `STATIC` segment's members are rows of `segment_members`; so are those
//! of a tracked dynamic segment, reconciled with its filter by [`Store::compute_segment`] in
//! chunks (keyset-paginated by contact id), each chunk one transaction with its `segment.<slug>.entry`/`.exit` events (and their
//! outbox rows, by trigger). `member_count` caches the last count.

use std::collections::{HashMap, HashSet};

use herald_filter::{Dialect, Filter, Scope, SqlValue};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::contacts::CONTACT_COUNT;
use super::contacts::ContactRow;
use super::dialect::{BeginWrite, for_key_share, for_update, placeholders};
use super::statements::Statements;
use super::{Backend, Db, Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::contact::Contact;
use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, EventId, ProjectId, SegmentId};
use crate::domain::segment::{
    SegmentType, entry_event_name, exit_event_name, membership_event_data,
};
use crate::domain::time::now_ms;

/// The fingerprint of a dynamic segment's filter that a cached member count was made with.
fn condition_hash(condition: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(condition.to_string().as_bytes()))
}

/// How many entries (then exits) one transaction of a compute writes.
pub const COMPUTE_CHUNK: usize = 500;

/// How many contacts (or members, for exits) one window of a compute spans at most: every
/// chunk's scan stays inside a window, so a sparse segment's compute holds the writer briefly.
pub const COMPUTE_WINDOW: usize = 5_000;

/// How many contacts one read (and at most one write transaction) of live re-evaluation takes.
pub const RECONCILE_CHUNK: usize = 250;

/// How many contacts whose membership changes one write transaction of live re-evaluation
/// takes: each may enter or leave every tracked segment, with an event each, and SQLite's one
/// writer is held meanwhile.
pub const RECONCILE_WRITE_CHUNK: usize = 50;

/// The job kind of the periodic re-evaluation of time-relative tracked segments; a singleton
/// (a unique index allows one queued or running, across instances).
pub const REEVALUATE_KIND: &str = "segments.reevaluate";

/// The columns of `contacts c`, in the order of `ContactRow`.
const CONTACT_COLUMNS: &str =
    "c.id, c.project_id, c.email, c.subscribed, c.data, c.version, c.created_at, c.updated_at";

const COLUMNS: &str = "id, project_id, name, description, type, condition, track_membership, \
     member_count, created_at, updated_at";

/// A stored segment.
#[derive(Clone, Debug)]
pub struct Segment {
    pub id: SegmentId,
    pub project_id: ProjectId,
    pub name: String,
    pub description: Option<String>,
    pub segment_type: SegmentType,
    /// The filter of a dynamic segment (as sent; valid when stored).
    pub condition: Option<Value>,
    /// Whether compute stores the members of a dynamic segment and records entries and exits.
    pub track_membership: bool,
    /// The count of the last compute, refresh or static change.
    pub member_count: i64,
    /// Created, unix ms.
    pub created_at: i64,
    /// Last changed, unix ms.
    pub updated_at: i64,
}

impl Segment {
    /// The parsed filter of a dynamic segment (`None` for a static one).
    pub fn filter(&self) -> StoreResult<Option<Filter>> {
        match (&self.segment_type, &self.condition) {
            (SegmentType::Dynamic, Some(c)) => herald_filter::parse(c, Scope::Contacts)
                .map(Some)
                .map_err(|_| StoreError::Corrupt(format!("condition of segment {}", self.id))),
            (SegmentType::Dynamic, None) => Err(StoreError::Corrupt(format!(
                "dynamic segment {} without a condition",
                self.id
            ))),
            (SegmentType::Static, _) => Ok(None),
        }
    }
}

#[derive(FromRow)]
struct SegmentRow {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    #[sqlx(rename = "type")]
    segment_type: String,
    condition: Option<Json<Value>>,
    track_membership: bool,
    member_count: i64,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<SegmentRow> for Segment {
    type Error = StoreError;

    fn try_from(r: SegmentRow) -> Result<Segment, StoreError> {
        let segment_type = SegmentType::parse(&r.segment_type)
            .ok_or_else(|| StoreError::Corrupt(format!("segment type `{}`", r.segment_type)))?;
        Ok(Segment {
            id: SegmentId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            name: r.name,
            description: r.description,
            segment_type,
            condition: r.condition.map(|c| c.0),
            track_membership: r.track_membership,
            member_count: r.member_count,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A new segment (validated).
#[derive(Clone, Debug)]
pub struct NewSegment {
    pub name: String,
    pub description: Option<String>,
    pub segment_type: SegmentType,
    /// Required for a dynamic segment, absent for a static one.
    pub condition: Option<Value>,
    pub track_membership: bool,
}

/// A change (validated); `None` keeps a field, `Some(None)` clears the description.
#[derive(Clone, Debug, Default)]
pub struct SegmentPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    /// A new filter (dynamic segments only).
    pub condition: Option<Value>,
    pub track_membership: Option<bool>,
}

/// What a compute changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComputeOutcome {
    /// Contacts that entered (events `segment.<slug>.entry`).
    pub added: i64,
    /// Contacts that left (events `segment.<slug>.exit`).
    pub removed: i64,
    /// Members after the compute.
    pub total: i64,
}

/// A tracked dynamic segment with its parsed filter, for live re-evaluation.
#[derive(Clone, Debug)]
pub struct TrackedSegment {
    pub id: SegmentId,
    pub name: String,
    pub filter: Filter,
}

/// What live re-evaluation sees of one contact, read inside its transaction: the contact, its
/// events by name (only the names the tracked filters reference) and the ids of every segment
/// it is a stored member of.
#[derive(Clone, Debug)]
pub struct LiveContact {
    pub contact: Contact,
    /// Count and latest `created_at` per event name.
    pub events: Vec<(String, u64, i64)>,
    /// Every `segment_members` row of the contact (static and tracked segments).
    pub memberships: std::collections::BTreeSet<String>,
}

/// One change live re-evaluation made: the contact entered or left a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    pub segment_id: SegmentId,
    /// `true` for an entry, `false` for an exit.
    pub entered: bool,
}

/// The filter's dialect on a backend.
fn dialect(backend: Backend) -> Dialect {
    match backend {
        Backend::Sqlite => Dialect::Sqlite,
        Backend::Postgres => Dialect::Postgres,
    }
}

/// A project's contacts from which SQLite counts a dynamic segment in parts
/// ([`Store::count_members`]); below it one statement takes a few hundred milliseconds at most.
const SPLIT_COUNT_AT: i64 = 100_000;

/// How many parts SQLite counts a large dynamic segment in: one per core, 2 to 4, which is half
/// the read pool's default size ([`super::sqlite_readers`]). Read once: finding the cores reads
/// the cgroup's files.
static COUNT_PARTS: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| i64::from(super::sqlite_readers() / 2).clamp(2, 4));

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

/// What [`Store::reconcile_contacts_segments`] decides on, read through `$conn` (a transaction's
/// connection) with `$lock` after the contacts' select: the [`LiveContact`] of each of
/// `$contacts` that still exists, in id order, with its events of the names `$names` and every
/// stored membership. Three queries, whatever the number of contacts.
macro_rules! read_live {
    ($conn:expr, $project:expr, $contacts:expr, $names:expr, $lock:expr) => {{
        let ids: &[ContactId] = $contacts;
        let names: &[String] = $names;
        let contact_sql = format!(
            "SELECT {CONTACT_COLUMNS} FROM contacts c WHERE c.project_id = $1 AND c.id IN ({}) \
             ORDER BY c.id{}",
            placeholders(2, ids.len()),
            $lock
        );
        let mut q = sqlx::query_as(&contact_sql).bind($project.as_str());
        for id in ids {
            q = q.bind(id.as_str());
        }
        let rows: Vec<ContactRow> = q.fetch_all($conn).await?;
        let found: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let mut events: HashMap<String, Vec<(String, u64, i64)>> = HashMap::new();
        let mut memberships: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        if !found.is_empty() {
            if !names.is_empty() {
                let sql = format!(
                    "SELECT contact_id, name, count, last_at FROM event_summaries \
                     WHERE project_id = $1 AND contact_id IN ({}) AND name IN ({})",
                    placeholders(2, found.len()),
                    placeholders(2 + found.len(), names.len())
                );
                let mut q = sqlx::query_as(&sql).bind($project.as_str());
                for id in &found {
                    q = q.bind(id.as_str());
                }
                for n in names {
                    q = q.bind(n.as_str());
                }
                let stats: Vec<(String, String, i64, i64)> = q.fetch_all($conn).await?;
                for (contact, name, count, at) in stats {
                    events
                        .entry(contact)
                        .or_default()
                        .push((name, count.max(0) as u64, at));
                }
            }
            let sql = format!(
                "SELECT contact_id, segment_id FROM segment_members \
                 WHERE project_id = $1 AND contact_id IN ({})",
                placeholders(2, found.len())
            );
            let mut q = sqlx::query_as(&sql).bind($project.as_str());
            for id in &found {
                q = q.bind(id.as_str());
            }
            let rows: Vec<(String, String)> = q.fetch_all($conn).await?;
            for (contact, segment) in rows {
                memberships.entry(contact).or_default().insert(segment);
            }
        }
        rows.into_iter()
            .map(|row| {
                let events = events.remove(&row.id).unwrap_or_default();
                let memberships = memberships.remove(&row.id).unwrap_or_default();
                LiveContact {
                    contact: row.into(),
                    events,
                    memberships,
                }
            })
            .collect::<Vec<LiveContact>>()
    }};
}

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
            Some(filter) => {
                let (expr, binds) = self.compile(&segment.project_id, None, &filter, now)?;
                Ok((
                    format!("FROM contacts c WHERE c.project_id = $1 AND ({expr})"),
                    binds,
                ))
            }
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
        let offset = u64::from(page.saturating_sub(1)) * u64::from(page_size);
        let sql = format!(
            "SELECT {CONTACT_COLUMNS} {from} ORDER BY c.id DESC LIMIT {page_size} OFFSET {offset}"
        );
        // The page and the count on connections of their own at once: on a large segment the
        // count is the long part, and the page should not wait for it. Neither is kept as a
        // prepared statement: the text is the filter's own, and PostgreSQL plans an unnamed
        // statement with its values (a kept one turns generic after five runs, blind to the
        // time cutoffs and the filter's values).
        let rows = async {
            let rows: Vec<ContactRow> = on_db!(self.db(), pool => {
                bind_all!(sqlx::query_as(&sql), &binds)
                    .persistent(false)
                    .fetch_all(pool)
                    .await?
            });
            Ok::<_, StoreError>(rows)
        };
        let total = async {
            if let Some(total) = cached {
                return Ok(total);
            }
            let total = self.count_members(segment, &from, &binds).await?;
            if let Some(hash) = &cache {
                self.cache_member_count(segment, hash, total, now).await;
            }
            Ok::<_, StoreError>(total)
        };
        let (rows, total) = tokio::try_join!(rows, total)?;
        Ok((rows.into_iter().map(Into::into).collect(), total))
    }

    /// The member count of `segment` counted with the filter of `hash` at `not_before` or
    /// later, if any.
    async fn cached_member_count(
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
    async fn cache_member_count(&self, segment: &Segment, hash: &str, total: i64, now: i64) {
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
        let count = self.count_members(segment, &from, &binds).await?;
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
    async fn count_members(
        &self,
        segment: &Segment,
        from: &str,
        binds: &[SqlValue],
    ) -> StoreResult<i64> {
        let count_sql = format!("SELECT COUNT(*) {from}");
        if let Db::Sqlite { pool, .. } = self.db()
            && matches!(segment.segment_type, SegmentType::Dynamic)
        {
            let (low, high, contacts): (Option<i64>, Option<i64>, i64) = sqlx::query_as(&format!(
                "SELECT (SELECT MIN(rowid) FROM contacts), (SELECT MAX(rowid) FROM contacts), \
                     ({CONTACT_COUNT})"
            ))
            .bind(segment.project_id.as_str())
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

impl Store {
    /// The tracked dynamic segments of every project whose filters change with time alone
    /// ([`Filter::is_time_relative`]), in id order, for the periodic re-evaluation. A segment
    /// whose stored filter does not parse is left out (its `compute` reports it).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn time_relative_segments(&self) -> StoreResult<Vec<Segment>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM segments WHERE type = $1 AND track_membership ORDER BY id"
        );
        let rows: Vec<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(SegmentType::Dynamic.as_str()).fetch_all(pool).await?
        });
        let mut segments = Vec::new();
        for row in rows {
            let segment = Segment::try_from(row)?;
            if matches!(segment.filter(), Ok(Some(f)) if f.is_time_relative()) {
                segments.push(segment);
            }
        }
        Ok(segments)
    }

    /// The project's tracked dynamic segments with their parsed filters, in id order (one
    /// indexed read).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn tracked_segments(&self, project: &ProjectId) -> StoreResult<Vec<TrackedSegment>> {
        let rows: Vec<SegmentRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&tracked_segments_sql())
                .bind(project.as_str())
                .bind(SegmentType::Dynamic.as_str())
                .fetch_all(pool)
                .await?
        });
        tracked(rows)
    }

    /// Re-evaluates the membership of `contacts` (of one project) in `segments` (tracked
    /// segments of the project, as [`Store::tracked_segments`] answered them): reads each
    /// contact, its event stats for the names the segments' filters reference and its stored
    /// memberships, and asks `decide`, per contact, whether it belongs to each segment (in the
    /// order given; `None` leaves that membership as it is). Most events change no membership,
    /// so this first happens on a read connection, without taking the writer, in three queries
    /// for up to [`RECONCILE_CHUNK`] contacts; only the contacts whose membership differs are
    /// read again, [`RECONCILE_WRITE_CHUNK`] to a write transaction that locks them (`FOR
    /// UPDATE`, in id order; `BEGIN IMMEDIATE` on SQLite), with the segments still tracked then,
    /// and for each change the `segment_members` row is inserted or deleted and one
    /// `segment.<slug>.entry` or `.exit` event written (data as compute's); each segment's
    /// `member_count` moves once per transaction by the sum of its changes. A change
    /// counts only when its row was really inserted or deleted, so a repeated call, or one
    /// racing a compute, fires nothing twice. Deleted contacts change nothing. Answers every
    /// change with its contact.
    #[tracing::instrument(level = "debug", skip_all, fields(contacts = contacts.len(), segments = segments.len()))]
    pub async fn reconcile_contacts_segments<F>(
        &self,
        project: &ProjectId,
        segments: &[TrackedSegment],
        contacts: &[ContactId],
        decide: F,
    ) -> StoreResult<Vec<(ContactId, MembershipChange)>>
    where
        F: Fn(&LiveContact, &[TrackedSegment]) -> Vec<Option<bool>>,
    {
        let mut changes = Vec::new();
        if segments.is_empty() {
            return Ok(changes);
        }
        let names: Vec<String> = segments
            .iter()
            .flat_map(|s| s.filter.event_names())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut unique: Vec<ContactId> = contacts.to_vec();
        unique.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        unique.dedup();
        for chunk in unique.chunks(RECONCILE_CHUNK) {
            let differing = on_db!(self.db(), pool => {
                let mut tx = pool.begin().await?;
                let live = read_live!(&mut *tx, project, chunk, &names, "");
                tx.rollback().await?;
                live.into_iter()
                    .filter(|l| differs(l, segments, &decide(l, segments)))
                    .map(|l| l.contact.id)
                    .collect::<Vec<ContactId>>()
            });
            if differing.is_empty() {
                continue;
            }
            for part in differing.chunks(RECONCILE_WRITE_CHUNK) {
                changes.extend(
                    self.write_membership_changes(project, segments, part, &names, &decide)
                        .await?,
                );
            }
        }
        Ok(changes)
    }

    /// The write half of [`Store::reconcile_contacts_segments`], for the contacts found to differ.
    async fn write_membership_changes<F>(
        &self,
        project: &ProjectId,
        segments: &[TrackedSegment],
        contacts: &[ContactId],
        names: &[String],
        decide: &F,
    ) -> StoreResult<Vec<(ContactId, MembershipChange)>>
    where
        F: Fn(&LiveContact, &[TrackedSegment]) -> Vec<Option<bool>>,
    {
        let count = "UPDATE segments SET member_count = member_count + $3 \
             WHERE project_id = $1 AND id = $2";
        let lock = for_update(self.db().backend());
        let now = now_ms();
        let changes = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let live = read_live!(&mut *tx, project, contacts, names, lock);
            // The ids of the segments still tracked now (one may have been untracked or deleted
            // since); their filters are the caller's.
            let current: HashSet<String> = sqlx::query_scalar(
                "SELECT id FROM segments WHERE project_id = $1 AND type = $2 AND track_membership",
            )
            .bind(project.as_str())
            .bind(SegmentType::Dynamic.as_str())
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
            // What each contact's answer changes (segment, contact, enters), in contact order.
            let mut wanted: Vec<(usize, &ContactId, bool)> = Vec::new();
            for contact in &live {
                let answers = decide(contact, segments);
                for (i, (segment, want)) in segments.iter().zip(answers).enumerate() {
                    let Some(want) = want else { continue };
                    if !current.contains(segment.id.as_str())
                        || want == contact.memberships.contains(segment.id.as_str())
                    {
                        continue;
                    }
                    wanted.push((i, &contact.contact.id, want));
                }
            }
            // The rows each statement wrote (a compute may have written one since the read),
            // by segment.
            let mut written: Vec<HashSet<String>> = vec![HashSet::new(); segments.len()];
            for (i, segment) in segments.iter().enumerate() {
                for enters in [true, false] {
                    let these: Vec<&str> = wanted
                        .iter()
                        .filter(|(s, _, e)| *s == i && *e == enters)
                        .map(|(_, c, _)| c.as_str())
                        .collect();
                    if these.is_empty() {
                        continue;
                    }
                    let at = enters.then_some(now);
                    written[i].extend(
                        tx.write_members(project.as_str(), segment.id.as_str(), &these, at)
                            .await?,
                    );
                }
            }
            // Each segment's count moves once per transaction (in id order, as every
            // transaction does), by the sum of its changes; the events go in one insert.
            let mut deltas: Vec<i64> = vec![0; segments.len()];
            let mut events = Vec::new();
            let mut changes = Vec::new();
            for (i, id, want) in wanted {
                if !written[i].contains(id.as_str()) {
                    continue;
                }
                let segment = &segments[i];
                deltas[i] += if want { 1 } else { -1 };
                events.push(membership_event(
                    project,
                    id.clone(),
                    segment.id.as_str(),
                    &segment.name,
                    want,
                    now,
                ));
                changes.push((
                    id.clone(),
                    MembershipChange {
                        segment_id: segment.id.clone(),
                        entered: want,
                    },
                ));
            }
            for (segment, delta) in segments.iter().zip(deltas) {
                if delta != 0 {
                    sqlx::query(count)
                        .bind(project.as_str())
                        .bind(segment.id.as_str())
                        .bind(delta)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.insert_events(&events).await?;
            tx.commit().await?;
            changes
        });
        Ok(changes)
    }
}

/// Whether `decide`'s answer (`wanted`) for `live` differs from its stored membership.
fn differs(live: &LiveContact, segments: &[TrackedSegment], wanted: &[Option<bool>]) -> bool {
    segments
        .iter()
        .zip(wanted)
        .any(|(s, want)| want.is_some_and(|want| want != live.memberships.contains(s.id.as_str())))
}

/// The tracked segments of `rows` with their parsed filters.
fn tracked(rows: Vec<SegmentRow>) -> StoreResult<Vec<TrackedSegment>> {
    rows.into_iter()
        .map(|r| {
            let segment = Segment::try_from(r)?;
            let filter = segment.filter()?.ok_or_else(|| {
                StoreError::Corrupt(format!("tracked segment {} without a filter", segment.id))
            })?;
            Ok(TrackedSegment {
                id: segment.id,
                name: segment.name,
                filter,
            })
        })
        .collect()
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

/// The most contacts one membership statement names ([`add_members_sql`],
/// [`remove_members_sql`]; `Statements::write_members`).
pub(super) const MEMBERS_PER_STATEMENT: usize = 500;

/// Adds `n` contacts to a segment of a project at a time, leaving members as they are; binds,
/// a row: segment, contact, project, time (each placeholder once and in order:
/// `dialect::bound_in_order`). Returns the contact of each row added.
pub(super) fn add_members_sql(n: usize) -> String {
    let rows = super::dialect::value_rows(1, n, 4);
    format!(
        "INSERT INTO segment_members (segment_id, contact_id, project_id, added_at) VALUES {rows} \
         ON CONFLICT (segment_id, contact_id) DO NOTHING RETURNING contact_id"
    )
}

/// Removes `n` contacts (`$3`…) from a segment (`$2`) of a project (`$1`); returns the contact
/// of each row removed.
pub(super) fn remove_members_sql(n: usize) -> String {
    format!(
        "DELETE FROM segment_members WHERE project_id = $1 AND segment_id = $2 \
         AND contact_id IN ({}) RETURNING contact_id",
        placeholders(3, n)
    )
}

/// The tracked dynamic segments of a project (`$1`; `$2` is the dynamic type), in id order.
fn tracked_segments_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM segments WHERE project_id = $1 AND type = $2 \
         AND track_membership ORDER BY id"
    )
}

/// The `segment.<slug>.entry` (or `.exit`) event of `contact` for the segment `id` named `name`.
fn membership_event(
    project: &ProjectId,
    contact: ContactId,
    id: &str,
    name: &str,
    entered: bool,
    now: i64,
) -> StoredEvent {
    StoredEvent {
        id: EventId::generate(),
        project_id: project.clone(),
        contact_id: Some(contact),
        contact_email: None,
        name: if entered {
            entry_event_name(name)
        } else {
            exit_event_name(name)
        },
        data: membership_event_data(id, name),
        created_at: now,
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
