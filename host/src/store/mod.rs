//! The store: the only module that holds SQL.
//!
//! Herald runs on SQLite (embedded, one process) or PostgreSQL (one or many processes). Both
//! backends share one schema shape and, wherever the dialects agree, one query text: every query
//! uses numbered `$N` placeholders (which sqlx accepts on SQLite too), timestamps are `BIGINT` unix
//! milliseconds and booleans are `BOOLEAN`. A query is written once and compiled for both pools by
//! the [`on_db!`] macro; the few fragments that differ live in [`dialect`]. Each table's SQL lives
//! in its own module; the statements that several writes share inside one transaction (events,
//! jobs, idempotency keys) are the methods of [`statements::Statements`].

pub mod accounts;
pub mod activity;
pub mod analytics;
pub mod backup;
pub mod billing;
pub mod bulk;
pub mod campaigns;
pub mod confirmations;
pub mod contacts;
pub mod delivery;
pub mod delivery_events;
pub mod dialect;
pub mod domains;
pub mod emails;
pub mod events;
pub mod executions;
pub mod gauges;
pub mod group_commit;
pub mod idempotency;
pub mod jobs;
pub mod members;
pub mod migrations;
mod paging;
pub mod projects;
pub mod rate_limits;
pub mod rounds;
pub mod security;
pub mod segments;
pub mod settings;
pub mod statements;
pub mod suppressions;
pub mod templates;
pub mod topics;
pub mod usage;
pub mod workflows;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row asked for does not exist (in the caller's project).
    #[error("not found")]
    NotFound,
    /// A uniqueness rule was broken, or a write lost a race it cannot retry.
    #[error("conflict: {0}")]
    Conflict(Conflict),
    /// The database URL is not one Herald understands.
    #[error("unsupported database URL `{0}`: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// The project's cap of a usage category is reached (raised by the metering triggers).
    #[error("the project's {} cap for this period is reached", .0.name())]
    BillingLimit(crate::domain::billing::UsageCategory),
    /// A write would take a project past one of the caps of [`StoreLimits`]; nothing of it was
    /// written.
    #[error(transparent)]
    Cap(CapReached),
    /// The database could not be reached or could not take the work now: a lost or refused
    /// connection (PostgreSQL restarting, the network), no free connection within the pool's
    /// timeout, a full disk, a SQLite file locked past its busy timeout. Nothing the request
    /// did is known to have been written (a commit whose answer was lost may have been), and
    /// the same request may pass later.
    /// Holds the cause's message, so that every request of a group can be answered with it.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// PostgreSQL cancelled a statement that ran longer than the serving pool's
    /// `statement_timeout` (`database_statement_timeout_ms`); nothing of it was written.
    #[error("a statement ran longer than the database's statement timeout: {0}")]
    StatementTimeout(String),
    /// Any other database failure.
    #[error(transparent)]
    Database(sqlx::Error),
    /// A migration failed.
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored data could not be read back.
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    /// The data directory could not be prepared.
    #[error("data directory: {0}")]
    Io(#[from] std::io::Error),
}

/// Caps on what writes may add to a project, from the settings `contact_data_max_bytes`,
/// `contact_fields_max_per_project` and `event_names_max_per_project`: whoever can write (the
/// public key, which anyone can use, among them) cannot grow a project's state without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// Largest custom data of one contact, serialized as JSON, in bytes.
    pub contact_data_max_bytes: usize,
    /// Most distinct custom fields (`contact_fields` rows) of one project.
    pub contact_fields_max: u64,
    /// Most distinct tracked event names (`event_names` rows) of one project.
    pub event_names_max: u64,
}

impl Default for StoreLimits {
    fn default() -> StoreLimits {
        StoreLimits {
            contact_data_max_bytes: 65_536,
            contact_fields_max: 2_000,
            event_names_max: 10_000,
        }
    }
}

/// The cap of [`StoreLimits`] a write would break.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapReached {
    /// The contact's data would be larger than the cap.
    #[error(
        "the contact's data would be {size} bytes serialized as JSON; a contact's data may be at \
         most {max} bytes (contact_data_max_bytes)"
    )]
    ContactData {
        /// Its size after the write.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// The write would add a custom field to a project that has as many as the cap.
    #[error(
        "the project has {max} custom fields, the most it may have \
         (contact_fields_max_per_project); `{field}` would be one more"
    )]
    ContactFields {
        /// A field the write would add.
        field: String,
        /// The cap.
        max: u64,
    },
    /// The write would track a new event name in a project that has as many as the cap.
    #[error(
        "the project tracks {max} distinct event names, the most it may have \
         (event_names_max_per_project); `{name}` would be one more"
    )]
    EventNames {
        /// The new name.
        name: String,
        /// The cap.
        max: u64,
    },
}

/// Which rule a [`StoreError::Conflict`] broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// Another contact or user of the scope has the address.
    #[error("email")]
    Email,
    /// A concurrent request took the same `Idempotency-Key` (its transaction rolled back).
    #[error("idempotency_key")]
    IdempotencyKey,
    /// The project already has the sending domain.
    #[error("the project already has this domain")]
    Domain,
    /// A contact kept changing under a write until it gave up.
    #[error("contact is being changed concurrently; retry")]
    ContactBusy,
    /// The database ended the transaction to break a deadlock with a concurrent one, or could
    /// not serialize it (PostgreSQL `40P01`, `40001`); nothing was written and a retry may pass.
    #[error("a concurrent write held the same rows and this one was rolled back; retry")]
    Busy,
    /// A row the write refers to (its project, contact, workflow…) was deleted by a concurrent
    /// request after it was read: a foreign key no longer holds, and the transaction wrote
    /// nothing.
    #[error(
        "something this request refers to was deleted by a concurrent request, so nothing was \
         written; check that it still exists"
    )]
    Gone,
    /// The user is a member of the project already.
    #[error("the user is already a member of this project")]
    Member,
    /// The change would leave the project without an `OWNER`.
    #[error(
        "the project's last OWNER cannot be removed or demoted; make another member OWNER first"
    )]
    LastOwner,
    /// The project has the most topics it may have (`domain::topic::MAX_TOPICS`).
    #[error("the project has 100 topics, the most it may have; delete one first")]
    TooManyTopics,
    /// A template or a campaign that is not finished names the topic.
    #[error(
        "a template or a campaign that is not finished names this topic; change or delete them first"
    )]
    TopicInUse,
}

/// The message prefix of the metering triggers' refusals (`migrations/*/0020_billing.sql`).
const BILLING_LIMIT_MARK: &str = "herald_billing_limit:";

impl From<sqlx::Error> for StoreError {
    /// A refusal of the metering triggers becomes [`StoreError::BillingLimit`], a deadlock or
    /// serialization failure [`Conflict::Busy`], a foreign key that no longer holds (every one
    /// cascades on delete, so only a parent deleted by a concurrent request breaks one)
    /// [`Conflict::Gone`], an unreachable or overwhelmed database [`StoreError::Unavailable`];
    /// anything else stays a database error.
    fn from(err: sqlx::Error) -> StoreError {
        if unavailable(&err) {
            return StoreError::Unavailable(err.to_string());
        }
        if let sqlx::Error::Database(db) = &err
            && db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            && db.code().as_deref() == Some("57014")
        {
            return StoreError::StatementTimeout(err.to_string());
        }
        if let sqlx::Error::Database(db) = &err
            && let Some((_, category)) = db.message().split_once(BILLING_LIMIT_MARK)
            && let Some(category) = crate::domain::billing::UsageCategory::parse(
                category.trim_end_matches(|c: char| !c.is_ascii_alphabetic()),
            )
        {
            return StoreError::BillingLimit(category);
        }
        if let sqlx::Error::Database(db) = &err
            && matches!(db.code().as_deref(), Some("40P01" | "40001"))
        {
            return StoreError::Conflict(Conflict::Busy);
        }
        if let sqlx::Error::Database(db) = &err
            && db.is_foreign_key_violation()
        {
            return StoreError::Conflict(Conflict::Gone);
        }
        StoreError::Database(err)
    }
}

/// Whether `err` says the database cannot be reached or cannot take work now, rather than that
/// the statement was wrong: the connection failed or was closed (I/O, TLS, a worker thread gone),
/// the pool had no connection to give, or the database answered so (PostgreSQL's classes 08
/// connection exception and 53 insufficient resources, and 57P01-57P03 shutting down or
/// starting; SQLite's `BUSY`, `LOCKED`, `NOMEM`, `IOERR`, `FULL` and `CANTOPEN`).
fn unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                let code = pg.code();
                code.starts_with("08")
                    || code.starts_with("53")
                    || matches!(code, "57P01" | "57P02" | "57P03")
            } else if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // The primary result code is the extended code's low byte.
                db.code()
                    .and_then(|c| c.parse::<i32>().ok())
                    .is_some_and(|c| matches!(c & 0xff, 5 | 6 | 7 | 10 | 13 | 14))
            } else {
                false
            }
        }
        _ => false,
    }
}

impl StoreError {
    /// Maps a unique-constraint violation to [`StoreError::Conflict`].
    pub(crate) fn unique(err: sqlx::Error, what: Conflict) -> StoreError {
        match &err {
            sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what),
            _ => StoreError::from(err),
        }
    }
}

/// Tries of a delete that PostgreSQL rolls back to break a deadlock, 20 ms then 40 ms apart,
/// before the caller hears [`Conflict::Busy`].
const DEADLOCK_TRIES: u64 = 3;

/// Runs `write` (one statement, e.g. a delete whose cascade reaches rows that concurrent writes
/// hold) again when PostgreSQL picks it to break a deadlock, as the writer that lost would be.
pub(crate) async fn retrying_deadlocks<T, F, Fut>(mut write: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match write().await {
            Err(StoreError::Conflict(Conflict::Busy)) if attempt < DEADLOCK_TRIES => {
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
            }
            other => return other,
        }
    }
}

/// Result alias of the store layer.
pub type StoreResult<T> = Result<T, StoreError>;

/// A connection pool on one of the two supported backends.
#[derive(Clone, Debug)]
pub enum Db {
    /// Embedded SQLite (WAL, foreign keys on, busy timeout). Reads use `pool`; every write goes
    /// through `writer`, a pool of one connection, so that writers queue in order inside the
    /// process instead of spinning in SQLite's busy handler.
    Sqlite {
        /// Readers.
        pool: SqlitePool,
        /// The single writer.
        writer: SqlitePool,
    },
    /// PostgreSQL, possibly shared by several Herald instances.
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the concrete (reading) pool of either backend, so that one
/// query text is compiled for both.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite { pool: $pool, .. } => $body,
            $crate::store::Db::Postgres($pool) => $body,
        }
    };
}

pub(crate) use on_db;

/// Like [`on_db!`], for statements that write: on SQLite `$pool` is the single writer.
macro_rules! on_db_write {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite { writer: $pool, .. } => $body,
            $crate::store::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_db_write;

/// Which backend a [`Db`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    /// A short name for logs and `/ready`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The most SQLite reader connections: twice the cores, at least 4 and at most 16. Each
/// connection runs on a thread of its own and keeps its own page and statement caches (about
/// 3.5 MB each under load), so readers beyond what the cores can run hold memory without adding
/// throughput: on 2 cores, 4 readers served `GET /contacts` and the send benchmark as fast as 16,
/// with a peak RSS 23-43 MB lower (docs/benchmarks.md, "The SQLite reader pool").
fn sqlite_readers() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores * 2).unwrap_or(u32::MAX).clamp(4, 16)
}

/// A pooled connection idle longer than this is pinged before it is handed out.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// PostgreSQL pool options that ping a connection before handing it out only when it has been
/// idle for [`PING_AFTER_IDLE`]. sqlx pings every connection it takes back into the pool (and
/// closes it when the ping fails), and by default pings it again when it hands it out: two
/// round trips to a backend around every statement run on the pool, each a wake-up of that
/// backend on the database server that every instance shares. A connection handed out within a
/// second of such a check is used as it is; one that died since (the server restarted) fails
/// that one statement, and the ping when it is taken back closes it. The SQLite pools keep
/// sqlx's default: there a ping is a hand-off to the connection's own thread, and the send and
/// track benchmarks showed no gain without it (docs/benchmarks.md, "Fewer pings of pooled
/// connections").
fn checked_when_idle(options: PgPoolOptions) -> PgPoolOptions {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

impl Db {
    /// Opens a pool for `url` (`sqlite://…` or `postgres://…`), with no statement timeout: the
    /// pool of the commands (`herald migrate`, `backup`, `restore`…), whose work may be long.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Db> {
        Db::connect_with_timeout(url, max_connections, None).await
    }

    /// Opens a pool for `url`; on PostgreSQL, every statement of its connections is cancelled
    /// by the server after `statement_timeout` (its `statement_timeout` parameter), so that no
    /// one query holds a connection and a backend without bound. SQLite has no such timeout: a
    /// statement there runs on the process's own threads (the pool of `herald serve` on SQLite
    /// is bounded by the busy timeout of its writes instead).
    pub async fn connect_with_timeout(
        url: &str,
        max_connections: u32,
        statement_timeout: Option<Duration>,
    ) -> StoreResult<Db> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut options = PgConnectOptions::from_str(url)?;
            if let Some(timeout) = statement_timeout {
                options = options
                    .options([("statement_timeout", timeout.as_millis().max(1).to_string())]);
            }
            let pool = checked_when_idle(PgPoolOptions::new())
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await?;
            Ok(Db::Postgres(pool))
        } else if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            if let Some(parent) = Path::new(path.split('?').next().unwrap_or(path)).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent)?;
            }
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let writer = SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options.clone())
                .await?;
            let pool = SqlitePoolOptions::new()
                .max_connections(max_connections.clamp(1, sqlite_readers()))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await?;
            Ok(Db::Sqlite { pool, writer })
        } else {
            Err(StoreError::UnsupportedUrl(url.to_string()))
        }
    }

    /// The backend of this pool.
    pub fn backend(&self) -> Backend {
        match self {
            Db::Sqlite { .. } => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> StoreResult<()> {
        on_db!(self, pool => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()))?;
        Ok(())
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        if let Db::Sqlite { writer, .. } = self {
            writer.close().await;
        }
        on_db!(self, pool => pool.close().await)
    }
}

/// The store: typed operations over a [`Db`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
    known_fields: std::sync::Arc<KnownFields>,
    /// Tracked event names this instance has recently seen recorded in `event_names` (the type
    /// of each entry is empty).
    known_events: std::sync::Arc<KnownFields>,
    /// Caps on what writes may add to a project.
    limits: StoreLimits,
    /// The group writer of contact writes by address, started on first use.
    group: std::sync::Arc<std::sync::OnceLock<group_commit::GroupCommit>>,
    /// The group writer of delivery events, started on first use.
    event_writer: std::sync::Arc<std::sync::OnceLock<delivery_events::EventWriter>>,
    /// The lookups of projects by API key in flight, shared by the requests that present one key.
    key_lookups: std::sync::Arc<projects::KeyLookups>,
    /// The reads of verified sending domains in flight, shared by concurrent sends from one.
    domain_lookups: std::sync::Arc<domains::DomainLookups>,
    /// The reads of contacts by address in flight, shared by concurrent sends of one project.
    contact_reads: std::sync::Arc<contacts::ContactReads>,
}

/// Custom field types this instance has recently seen recorded, so that writes skip
/// re-inserting them. Entries expire after a minute: a field deleted by another instance is
/// registered again by this one at most that much later.
#[derive(Debug, Default)]
pub(crate) struct KnownFields(std::sync::Mutex<std::collections::HashMap<(String, String), i64>>);

impl KnownFields {
    const TTL_MS: i64 = 60_000;

    /// The `(key, type)` pairs of `types` not known for `project`.
    pub(crate) fn unknown<'a>(
        &self,
        project: &str,
        types: &[(&'a str, &'static str)],
    ) -> Vec<(&'a str, &'static str)> {
        let now = crate::domain::time::now_ms();
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        types
            .iter()
            .filter(|(k, _)| {
                map.get(&(project.to_string(), k.to_string()))
                    .is_none_or(|exp| *exp <= now)
            })
            .copied()
            .collect()
    }

    /// Marks keys as recorded.
    pub(crate) fn remember(&self, project: &str, keys: &[(&str, &'static str)]) {
        if keys.is_empty() {
            return;
        }
        let expires = crate::domain::time::now_ms() + Self::TTL_MS;
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 100_000 {
            map.clear();
        }
        for (k, _) in keys {
            map.insert((project.to_string(), k.to_string()), expires);
        }
    }

    /// Forgets a key (after the field was deleted).
    pub(crate) fn forget(&self, project: &str, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(project.to_string(), key.to_string()));
    }

    /// Forgets every key of a project (after its reset or deletion).
    pub(crate) fn forget_project(&self, project: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(p, _), _| p != project);
    }
}

impl Store {
    /// Wraps an open pool.
    pub fn new(db: Db) -> Store {
        Store {
            db,
            known_fields: Default::default(),
            known_events: Default::default(),
            limits: StoreLimits::default(),
            group: Default::default(),
            event_writer: Default::default(),
            key_lookups: Default::default(),
            domain_lookups: Default::default(),
            contact_reads: Default::default(),
        }
    }

    /// The store with caps `limits` on what writes may add (before its first write).
    pub fn with_limits(mut self, limits: StoreLimits) -> Store {
        self.limits = limits;
        self
    }

    /// The caps on what writes may add to a project.
    pub fn limits(&self) -> StoreLimits {
        self.limits
    }

    /// The pool underneath.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multi-row statements of the tables' modules qualify for anonymous placeholders on
    /// SQLite ([`dialect::bound_in_order`]).
    #[test]
    fn the_hot_multi_row_statements_bind_in_order() {
        use super::dialect::bound_in_order;
        use super::{contacts, emails, events, executions, idempotency, jobs, segments};
        type Builder = fn(usize) -> String;
        let builders: [(&str, Builder); 17] = [
            ("insert_events", events::insert_events_sql),
            ("insert_contacts", contacts::rows::insert_contacts_sql),
            ("update_contacts", contacts::rows::update_contacts_sql),
            ("field_types", contacts::rows::field_types_sql),
            ("insert_emails", emails::insert::insert_emails_sql),
            ("insert_activity", emails::insert::insert_activity_sql),
            ("finish_outcomes", emails::delivery::finish_outcomes_sql),
            ("insert_jobs", jobs::sql::insert_jobs_sql),
            ("complete_jobs", jobs::sql::complete_jobs_sql),
            ("chain_jobs", jobs::sql::chain_jobs_sql),
            ("step_runs_update", executions::sql::step_runs_update_sql),
            ("executions_update", executions::sql::executions_update_sql),
            (
                "finished_runs_insert",
                executions::sql::finished_runs_insert_sql,
            ),
            ("add_members", segments::members::add_members_sql),
            ("remove_members", segments::members::remove_members_sql),
            ("delete_expired_keys", idempotency::delete_expired_keys_sql),
            ("insert_keys", idempotency::insert_keys_sql),
        ];
        for (name, build) in builders {
            for n in [1, 3] {
                let sql = bound_in_order(Backend::Sqlite, build(n));
                assert!(
                    !sql.contains('$'),
                    "{name}({n}) keeps numbered placeholders: {sql}"
                );
                assert!(sql.contains('?'), "{name}({n})");
            }
        }
    }
}
