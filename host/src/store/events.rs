//! Events and their outbox.

use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::BeginWrite;
use super::{Store, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::event::StoredEvent;
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;

#[derive(FromRow)]
struct EventRow {
    id: String,
    project_id: String,
    contact_id: Option<String>,
    contact_email: Option<String>,
    name: String,
    data: Json<Map<String, Value>>,
    created_at: i64,
}

impl From<EventRow> for StoredEvent {
    fn from(r: EventRow) -> StoredEvent {
        StoredEvent {
            id: EventId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            contact_id: r.contact_id.map(ContactId::from_trusted),
            contact_email: r.contact_email,
            name: r.name,
            data: r.data.0,
            created_at: r.created_at,
        }
    }
}

/// The most events one insert statement carries (six binds each, well under SQLite's 32,766 and
/// PostgreSQL's 65,535); a longer list is inserted in several statements.
pub(super) const MAX_EVENTS_PER_INSERT: usize = 1_000;

/// Inserts `n` events in one statement (their outbox rows follow by trigger); binds id, project,
/// contact, name, data and time of each in turn.
pub(super) fn insert_events_sql(n: usize) -> String {
    format!(
        "INSERT INTO events (id, project_id, contact_id, name, data, created_at) VALUES {}",
        super::dialect::value_rows(1, n, 6)
    )
}

const SELECT_EVENTS: &str = "SELECT e.id, e.project_id, e.contact_id, c.email AS contact_email, e.name, e.data, e.created_at \
     FROM events e LEFT JOIN contacts c ON c.id = e.contact_id";

/// [`SELECT_EVENTS`] of the events whose ids are the array `$1`, in id order (PostgreSQL).
const SELECT_EVENTS_BY_KEY: &str = "SELECT e.id, e.project_id, e.contact_id, c.email AS contact_email, e.name, e.data, e.created_at \
     FROM unnest($1::text[]) AS k(id) JOIN events e ON e.id = k.id \
     LEFT JOIN contacts c ON c.id = e.contact_id ORDER BY e.id";

/// Filters of an event list.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    /// Only events with this name.
    pub name: Option<String>,
    /// Only events of this contact.
    pub contact: Option<ContactId>,
}

/// A distinct event name with its usage.
#[derive(Clone, Debug, PartialEq, FromRow)]
pub struct EventNameCount {
    pub name: String,
    /// How many events have it.
    pub count: i64,
    /// When it was last seen (unix ms).
    pub last_seen_at: i64,
}

/// Totals for `/events/stats`.
#[derive(Clone, Debug, PartialEq)]
pub struct EventTotals {
    /// Events in all.
    pub total: i64,
    /// Events in the last 24 hours.
    pub last_24h: i64,
    /// Events in the last 7 days.
    pub last_7d: i64,
    /// Distinct contacts with events.
    pub contacts: i64,
}

/// An outbox entry claimed by a dispatcher.
#[derive(Clone, Debug)]
pub struct ClaimedEvent {
    pub event: StoredEvent,
    /// Delivery attempts so far, this one included.
    pub attempts: i32,
}

impl Store {
    /// A page of a project's events, newest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_events(
        &self,
        project: &ProjectId,
        filter: &EventFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<StoredEvent>> {
        let mut conds = vec!["e.project_id = $1".to_string()];
        let mut n = 1;
        if filter.name.is_some() {
            n += 1;
            conds.push(format!("e.name = ${n}"));
        }
        if filter.contact.is_some() {
            n += 1;
            conds.push(format!("e.contact_id = ${n}"));
        }
        let where_ = conds.join(" AND ");
        let mut sql = format!("{SELECT_EVENTS} WHERE {where_}");
        if page.after.is_some() {
            sql.push_str(&format!(" AND e.id < ${}", n + 1));
        }
        sql.push_str(&format!(" ORDER BY e.id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) FROM events e WHERE {where_}");
        let (rows, total): (Vec<EventRow>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
            if let Some(name) = &filter.name {
                q = q.bind(name);
                c = c.bind(name);
            }
            if let Some(contact) = &filter.contact {
                q = q.bind(contact.as_str());
                c = c.bind(contact.as_str());
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() { c.fetch_one(pool).await? } else { 0 };
            (rows, total)
        });
        let items: Vec<StoredEvent> = rows.into_iter().map(Into::into).collect();
        Ok(Page::from_rows(items, page, total, |e| e.id.as_str()))
    }

    /// The `data` of the latest `limit` events named `name` in a project, newest first (the
    /// keys a workflow condition may test on its trigger event).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn recent_event_data(
        &self,
        project: &ProjectId,
        name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Map<String, Value>>> {
        let sql = format!(
            "SELECT data FROM events WHERE project_id = $1 AND name = $2 \
             ORDER BY id DESC LIMIT {limit}"
        );
        let rows: Vec<Json<Map<String, Value>>> = on_db!(self.db(), pool => {
            sqlx::query_scalar(&sql).bind(project.as_str()).bind(name).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(|d| d.0).collect())
    }

    /// Distinct event names of a project, most used first: the counts `event_name_counts`
    /// keeps (a few rows per name), each name's last time read from its newest event (one probe
    /// of `events_project_name` per name; ids are time-ordered).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn event_names(&self, project: &ProjectId) -> StoreResult<Vec<EventNameCount>> {
        let rows: Vec<EventNameCount> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT k.name, k.count, \
                        COALESCE((SELECT e.created_at FROM events e \
                                  WHERE e.project_id = $1 AND e.name = k.name \
                                  ORDER BY e.id DESC LIMIT 1), 0) AS last_seen_at \
                 FROM (SELECT name, CAST(SUM(n) AS BIGINT) AS count FROM event_name_counts \
                       WHERE project_id = $1 GROUP BY name HAVING SUM(n) > 0) k \
                 ORDER BY k.count DESC, k.name",
            )
            .bind(project.as_str())
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// How many events of a project have `name` (from `event_name_counts`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_events_named(&self, project: &ProjectId, name: &str) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM event_name_counts \
                 WHERE project_id = $1 AND name = $2",
            )
            .bind(project.as_str())
            .bind(name)
            .fetch_one(pool)
            .await?
        });
        Ok(n)
    }

    /// Totals of a project's events.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn event_totals(&self, project: &ProjectId) -> StoreResult<EventTotals> {
        let now = now_ms();
        let row: (i64, i64, i64, i64) = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT COUNT(*), \
                        COALESCE(SUM(CASE WHEN created_at >= $2 THEN 1 ELSE 0 END), 0), \
                        COALESCE(SUM(CASE WHEN created_at >= $3 THEN 1 ELSE 0 END), 0), \
                        COUNT(DISTINCT contact_id) \
                 FROM events WHERE project_id = $1",
            )
            .bind(project.as_str())
            .bind(now - 24 * 3_600_000)
            .bind(now - 7 * 24 * 3_600_000)
            .fetch_one(pool)
            .await?
        });
        Ok(EventTotals {
            total: row.0,
            last_24h: row.1,
            last_7d: row.2,
            contacts: row.3,
        })
    }

    /// Deletes every event of a project with `name` that the dispatcher has handed on (never one
    /// whose outbox row is still waiting), and counts the contacts' summaries of the name again
    /// from the events left (and, when none is left, drops the name from the project's tracked
    /// names); answers how many were deleted and how many wait.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_events_named(
        &self,
        project: &ProjectId,
        name: &str,
    ) -> StoreResult<(u64, u64)> {
        if let super::Db::Sqlite { writer, .. } = self.db() {
            let (deleted, pending) = delete_events_named_in_chunks(writer, project, name).await?;
            if pending == 0 {
                self.known_events.forget(project.as_str(), name);
            }
            return Ok((deleted, pending));
        }
        let (deleted, pending) = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let deleted = sqlx::query(
                "DELETE FROM events WHERE project_id = $1 AND name = $2 \
                 AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = events.id)",
            )
            .bind(project.as_str())
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            // The contacts' summaries of the name are counted again from what is left (not
            // when nothing went: a repeated delete waiting for the outbox changes none).
            if deleted > 0 {
                sqlx::query("DELETE FROM event_summaries WHERE project_id = $1 AND name = $2")
                    .bind(project.as_str())
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO event_summaries (contact_id, name, project_id, count, last_at) \
                     SELECT contact_id, name, MIN(project_id), COUNT(*), MAX(created_at) \
                     FROM events WHERE project_id = $1 AND name = $2 AND contact_id IS NOT NULL \
                     GROUP BY contact_id, name",
                )
                .bind(project.as_str())
                .bind(name)
                .execute(&mut *tx)
                .await?;
            }
            let pending = events_left(&mut tx, project, name).await?;
            tx.commit().await?;
            (deleted, pending)
        });
        if pending == 0 {
            self.known_events.forget(project.as_str(), name);
        }
        Ok((deleted, pending))
    }

    /// Claims up to `limit` outbox entries that are due, leasing them until `lease_until`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn claim_outbox(
        &self,
        limit: i64,
        lease_until: i64,
    ) -> StoreResult<Vec<ClaimedEvent>> {
        let now = now_ms();
        let backend = self.db().backend();
        let lock = super::dialect::skip_locked(backend);
        let due = super::dialect::in_subquery(
            backend,
            "event_id",
            &format!(
                "SELECT event_id FROM event_outbox WHERE available_at <= $2 \
                 ORDER BY available_at LIMIT $3{lock}"
            ),
        );
        let claim_sql = format!(
            "UPDATE event_outbox SET available_at = $1, attempts = attempts + 1 WHERE {due} \
             RETURNING event_id, attempts"
        );
        let claimed: Vec<(String, i32)> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&claim_sql).bind(lease_until).bind(now).bind(limit).fetch_all(pool).await?
        });
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<EventRow> = match self.db() {
            super::Db::Sqlite { pool, .. } => {
                let sql = format!(
                    "{SELECT_EVENTS} WHERE e.id IN ({}) ORDER BY e.id",
                    super::dialect::placeholders(1, claimed.len())
                );
                let mut q = sqlx::query_as(&sql);
                for (id, _) in &claimed {
                    q = q.bind(id);
                }
                q.fetch_all(pool).await?
            }
            // The ids as one array joined by key: PostgreSQL reads each event and its contact
            // by primary key. With an `IN` list of a few hundred ids it planned a scan of the
            // whole events table while that table is small enough for the estimate (measured
            // with 60,000 events: a parallel scan, 18 ms for a batch of 500, against 8 ms by
            // key); one array parameter also makes it one statement whatever the batch's size.
            super::Db::Postgres(pool) => {
                let ids: Vec<&str> = claimed.iter().map(|(id, _)| id.as_str()).collect();
                sqlx::query_as(SELECT_EVENTS_BY_KEY)
                    .bind(&ids)
                    .fetch_all(pool)
                    .await?
            }
        };
        let attempts: std::collections::HashMap<String, i32> = claimed.into_iter().collect();
        Ok(rows
            .into_iter()
            .map(|r| {
                let attempts = attempts.get(&r.id).copied().unwrap_or(1);
                ClaimedEvent {
                    event: r.into(),
                    attempts,
                }
            })
            .collect())
    }

    /// Drops up to `limit` due entries at once (when no consumer is registered, delivery is a
    /// no-op); answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn drop_outbox(&self, limit: i64) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM event_outbox WHERE event_id IN \
                 (SELECT event_id FROM event_outbox WHERE available_at <= $1 ORDER BY available_at LIMIT $2)",
            )
            .bind(now_ms())
            .bind(limit)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Removes delivered entries from the outbox.
    #[tracing::instrument(level = "debug", skip(self, events))]
    pub async fn complete_outbox(&self, events: &[EventId]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let placeholders: Vec<String> = (1..=events.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "DELETE FROM event_outbox WHERE event_id IN ({})",
            placeholders.join(", ")
        );
        on_db_write!(self.db(), pool => {
            let mut q = sqlx::query(&sql);
            for id in events {
                q = q.bind(id.as_str());
            }
            q.execute(pool).await?;
        });
        Ok(())
    }

    /// Schedules another delivery attempt of an entry (or parks it for good at `i64::MAX`).
    #[tracing::instrument(level = "debug", skip(self, error))]
    pub async fn retry_outbox(
        &self,
        event: &EventId,
        available_at: i64,
        error: &str,
    ) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query("UPDATE event_outbox SET available_at = $2, last_error = $3 WHERE event_id = $1")
                .bind(event.as_str())
                .bind(available_at)
                .bind(error)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Entries waiting in the outbox (for tests and monitoring).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn outbox_len(&self) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM event_outbox").fetch_one(pool).await?
        });
        Ok(n)
    }
}

/// How many events one write transaction of `DELETE /events/:name` takes on SQLite.
const DELETE_EVENTS_CHUNK: usize = 500;

/// [`Store::delete_events_named`] on SQLite: [`DELETE_EVENTS_CHUNK`] events a transaction, each
/// with the summaries of its contacts counted again from the events they have left, so that
/// the one writer is never held long and every commit leaves the summaries right.
async fn delete_events_named_in_chunks(
    writer: &sqlx::SqlitePool,
    project: &ProjectId,
    name: &str,
) -> StoreResult<(u64, u64)> {
    let mut deleted = 0u64;
    loop {
        let mut tx = writer.begin_write().await?;
        let contacts: Vec<(Option<String>,)> = sqlx::query_as(&format!(
            "DELETE FROM events WHERE rowid IN (SELECT rowid FROM events \
             WHERE project_id = $1 AND name = $2 \
             AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = events.id) \
             LIMIT {DELETE_EVENTS_CHUNK}) RETURNING contact_id"
        ))
        .bind(project.as_str())
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        let n = contacts.len();
        deleted += n as u64;
        let mut ids: Vec<String> = contacts.into_iter().filter_map(|(c,)| c).collect();
        ids.sort();
        ids.dedup();
        if !ids.is_empty() {
            let list = serde_json::to_string(&ids).expect("ids serialize");
            sqlx::query(
                "DELETE FROM event_summaries WHERE name = $2 \
                 AND contact_id IN (SELECT value FROM json_each($3)) AND project_id = $1",
            )
            .bind(project.as_str())
            .bind(name)
            .bind(&list)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO event_summaries (contact_id, name, project_id, count, last_at) \
                 SELECT contact_id, name, MIN(project_id), COUNT(*), MAX(created_at) \
                 FROM events WHERE project_id = $1 AND name = $2 \
                 AND contact_id IN (SELECT value FROM json_each($3)) \
                 GROUP BY contact_id, name",
            )
            .bind(project.as_str())
            .bind(name)
            .bind(&list)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if n < DELETE_EVENTS_CHUNK {
            break;
        }
    }
    let mut tx = writer.begin_write().await?;
    let pending = events_left(&mut tx, project, name).await?;
    tx.commit().await?;
    Ok((deleted, pending))
}

/// How many events of `name` `project` has left, inside `tx`; once none, the name is taken out
/// of `event_names`: it no longer counts against the project's cap once no event has it.
async fn events_left<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &ProjectId,
    name: &str,
) -> sqlx::Result<u64>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    let pending: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE project_id = $1 AND name = $2")
            .bind(project.as_str())
            .bind(name)
            .fetch_one(&mut **tx)
            .await?;
    if pending == 0 {
        sqlx::query("DELETE FROM event_names WHERE project_id = $1 AND name = $2")
            .bind(project.as_str())
            .bind(name)
            .execute(&mut **tx)
            .await?;
    }
    Ok(pending as u64)
}
