//! The backend-specific corner of the store: everything else is one query text for both.
//!
//! - Write transactions: SQLite starts them with `BEGIN IMMEDIATE`, so that a transaction never
//!   has to upgrade a read lock (which SQLite refuses with `SQLITE_BUSY` instead of waiting);
//!   PostgreSQL uses a plain `BEGIN`.
//! - Locking: [`for_update`] and [`skip_locked`] are PostgreSQL suffixes that SQLite's single
//!   writer makes unnecessary.
//! - JSON: [`json_text`] reads a key of a JSON column, [`sqlite_json_path`] names a data key.
//! - The `data` column is `TEXT` holding JSON on SQLite and `JSONB` on PostgreSQL; both are bound
//!   and read through `sqlx::types::Json`, so no query text differs for it.

use sqlx::{PgPool, Postgres, Sqlite, SqlitePool, Transaction};

/// Opens a transaction that will write.
pub(crate) trait BeginWrite {
    /// The backend.
    type Database: sqlx::Database;

    /// Begins the transaction.
    fn begin_write(
        &self,
    ) -> impl Future<Output = Result<Transaction<'static, Self::Database>, sqlx::Error>> + Send;
}

impl BeginWrite for SqlitePool {
    type Database = Sqlite;

    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for PgPool {
    type Database = Postgres;

    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin().await
    }
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
pub(crate) fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether a statement whose best plan depends on how many rows match right now (the queued
/// jobs, from none to a burst between two `ANALYZE`s) stays prepared: on SQLite, yes (its plans
/// do not follow statistics this way); on PostgreSQL, no, so that each execution is planned
/// for its parameters and the table's current size instead of reusing a generic plan made
/// from statistics of another moment.
pub(crate) fn keeps_plans(backend: super::Backend) -> bool {
    match backend {
        super::Backend::Sqlite => true,
        super::Backend::Postgres => false,
    }
}

/// The statement that, at the start of a transaction whose every statement finds its rows by
/// key, keeps PostgreSQL from planning them as scans of whole tables (`None` on SQLite, whose
/// planner takes the key). A multi-row update joins its `VALUES` to the table by primary key
/// and filters on a status (`status NOT IN (…ended)`) that statistics say almost no row has, so
/// PostgreSQL estimated one matching row and scanned the table for it, then compared it with
/// every value: a workflow round of 256 took 203 ms a call that way on a table of 21,000
/// executions, and 4.5 ms as 256 lookups by key (docs/benchmarks.md, "Workflow engine").
/// Transaction-local (`SET LOCAL`): later transactions of the connection plan as before, and a
/// statement that has no index to use still scans.
pub(crate) fn lookups_by_key(backend: super::Backend) -> Option<&'static str> {
    match backend {
        super::Backend::Sqlite => None,
        super::Backend::Postgres => Some("SET LOCAL enable_seqscan = off"),
    }
}

/// The suffix that lets concurrent claimers on PostgreSQL skip each other's rows. SQLite has a
/// single writer, so a claim there is atomic without it.
pub(crate) fn skip_locked(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Sqlite => "",
        super::Backend::Postgres => " FOR UPDATE SKIP LOCKED",
    }
}

/// `column` is one of the rows `subquery` selects: the shape of a claim (`UPDATE … WHERE id IN
/// (SELECT id … LIMIT n FOR UPDATE SKIP LOCKED)`). On PostgreSQL it is written
/// `column = ANY(ARRAY(subquery))`, an init plan that runs once: as `IN`, a queue table last
/// analyzed while empty (planned as one row) gets a nested-loop semi-join that re-runs the
/// locking subquery for every row of the table, which took minutes for a claim of 256 events
/// out of a sudden 65,000. SQLite evaluates `IN (subquery)` once.
pub(crate) fn in_subquery(backend: super::Backend, column: &str, subquery: &str) -> String {
    match backend {
        super::Backend::Sqlite => format!("{column} IN ({subquery})"),
        super::Backend::Postgres => format!("{column} = ANY(ARRAY({subquery}))"),
    }
}

/// The suffix that locks selected rows until the transaction ends. SQLite's write transaction
/// already excludes every other writer.
pub(crate) fn for_update(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Sqlite => "",
        super::Backend::Postgres => " FOR UPDATE",
    }
}

/// A fresh random token, as an SQL expression evaluated per row (a claim's own id).
pub(crate) fn random_token(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Sqlite => "lower(hex(randomblob(8)))",
        super::Backend::Postgres => "substr(md5(random()::text || clock_timestamp()::text), 1, 16)",
    }
}

/// `$first, $first+1, …` for `n` values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($first, …), (…)`: `rows` rows of `cols` numbered placeholders each, for a multi-row
/// `VALUES`.
pub(crate) fn value_rows(first: usize, rows: usize, cols: usize) -> String {
    (0..rows)
        .map(|r| format!("({})", placeholders(first + r * cols, cols)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `id IN ($first, $first + width, …)`: the ids of a multi-row update's `n` `VALUES` rows of
/// `width` placeholders each (the id first in each), named once more as a condition on the
/// table, so that it is reached by one seek an id whatever the planner estimates. With the
/// join condition alone, PostgreSQL may scan a partial index that the statement's state
/// condition matches (`state = 'running'`, `status = 'queued'`) in full for the join, which
/// statistics taken while few rows were in that state make look cheap.
pub(crate) fn by_ids(first: usize, n: usize, width: usize) -> String {
    let ids: Vec<String> = (0..n).map(|r| format!("${}", first + r * width)).collect();
    format!("id IN ({})", ids.join(", "))
}

/// The JSON text at the top-level `key` of the JSON `column`, as SQL text (`key` is a fixed
/// identifier or an already validated data key, never raw user input).
pub(crate) fn json_text(backend: super::Backend, column: &str, key: &str) -> String {
    match backend {
        super::Backend::Sqlite => format!("json_extract({column}, '$.{key}')"),
        super::Backend::Postgres => format!("{column}->>'{key}'"),
    }
}

/// A SQLite JSON path (`$."a"."b"`) for the keys of a dotted field path.
pub(crate) fn sqlite_json_path(keys: &[String]) -> String {
    let mut path = String::from("$");
    for k in keys {
        path.push_str(".\"");
        // SQLite ends a quoted label at the first `"` and unescapes JSON escapes in it, so a
        // backslash is written `\\` and a quote `\u0022`.
        path.push_str(&k.replace('\\', "\\\\").replace('"', "\\u0022"));
        path.push('"');
    }
    path
}
