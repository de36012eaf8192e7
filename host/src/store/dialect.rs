//! The backend-specific corner of the store: everything else is one query text for both.
//!
//! - Write transactions: SQLite starts them with `BEGIN IMMEDIATE`, so that a transaction never
//!   has to upgrade a read lock (which SQLite refuses with `SQLITE_BUSY` instead of waiting);
//!   PostgreSQL uses a plain `BEGIN`.
//! - Locking: [`for_update`] and [`skip_locked`] are PostgreSQL suffixes that SQLite's single
//!   writer makes unnecessary.
//! - JSON: [`json_text`] reads a key of a JSON column, [`sqlite_json_path`] names a data key.
//! - Placeholders: statements are written with numbered `$N`; [`bound_in_order`] turns those of
//!   a SQLite statement that names each once and in order into anonymous `?`, which SQLite binds
//!   in constant time each (see there).
//! - The `data` column is `TEXT` holding JSON on SQLite and `JSONB` on PostgreSQL; both are bound
//!   and read through `sqlx::types::Json`, so no query text differs for it.

use sqlx::{Database, PgPool, Postgres, Sqlite, SqlitePool, Transaction};

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

/// The locking clause that keeps a read parent row from being deleted until the transaction
/// ends, so that the children the transaction then inserts cannot fail their foreign key on a
/// concurrent `DELETE` (PostgreSQL's `FOR KEY SHARE`, which other readers and updates of non-key
/// columns pass). SQLite's one writer serializes write transactions, so it needs none.
pub(crate) fn for_key_share(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Sqlite => "",
        super::Backend::Postgres => " FOR KEY SHARE",
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

/// `column = 'value'` written so that no index answers it (`column || '' = 'value'`, the same
/// test), for a multi-row update that joins its `VALUES` rows by id and also checks the row's
/// state. Written plainly, the state test is the predicate of a partial index (`state =
/// 'running'`, `status = 'queued'`), and PostgreSQL, estimating a few rows in that state
/// (statistics taken while few were), either scans that index whole for a hash join or, given
/// the ids once more as `id IN (…)`, reads the rows from it and loops over every `VALUES` row
/// for each one: `n²` comparisons, 2.7 ms of a 50-row outcome write's 4.5 ms, and 468 ms a
/// write of 500 rows. Unanswerable by an index, the test leaves one plan: for each `VALUES`
/// row, one seek of the primary key (2.0-2.7 ms and 50 ms; docs/benchmarks.md, "Batch writes
/// joined by primary key"). SQLite plans it the same either way. Both are fixed names of the
/// caller's, never input. (`executions::executions_update_sql` gets the same effect from its
/// two active states written as "not ended".)
pub(crate) fn unindexed_equals(column: &'static str, value: &'static str) -> String {
    format!("{column} || '' = '{value}'")
}

/// The JSON text at the top-level `key` of the JSON `column`, as SQL text (`key` is a fixed
/// identifier or an already validated data key, never raw user input).
pub(crate) fn json_text(backend: super::Backend, column: &str, key: &str) -> String {
    match backend {
        super::Backend::Sqlite => format!("json_extract({column}, '$.{key}')"),
        super::Backend::Postgres => format!("{column}->>'{key}'"),
    }
}

/// A SQLite JSON path (`$."a"."b"`) for the keys of a field path, to bind: the filter
/// language's, so that the field endpoints and filters read a key alike.
pub(crate) fn sqlite_json_path(keys: &[String]) -> String {
    herald_filter::sqlite_json_path(keys)
}

/// The backend that the sqlx database type `DB` is, for code written once for both.
pub(crate) fn backend_of<DB: Database>() -> super::Backend {
    if DB::NAME == Sqlite::NAME {
        super::Backend::Sqlite
    } else {
        super::Backend::Postgres
    }
}

/// `sql` with its numbered placeholders made anonymous (`$1, $2, …` to `?, ?, …`) on SQLite,
/// when each of `$1…$K` appears exactly once and in that order outside quoted text and
/// comments; otherwise (and on PostgreSQL) `sql` as it is, which binds the same values.
///
/// Why: sqlx binds a SQLite statement by asking the name of each of its placeholders
/// (`sqlite3_bind_parameter_name`), and SQLite finds a numbered placeholder's name by walking
/// the statement's list of names, so binding `P` numbered placeholders costs `O(P²)`: a
/// multi-row write of a few hundred values spent about 12 % of the SQLite writer's time there
/// (docs/benchmarks.md, "Workflow engine", placeholders bound in order). An anonymous
/// placeholder has no name to look up, and sqlx binds anonymous placeholders in the order they
/// appear, which is the order of `$1…$K` exactly when each appears once and in order, so the
/// same binds stay right.
/// A statement that repeats or reorders its placeholders keeps them numbered (correct, only
/// slower); the hot multi-row statements are written to qualify, and their tests say so.
pub(crate) fn bound_in_order(backend: super::Backend, sql: String) -> String {
    match backend {
        super::Backend::Sqlite => anonymous_placeholders(&sql).unwrap_or(sql),
        super::Backend::Postgres => sql,
    }
}

/// [`bound_in_order`]'s rewrite: `None` when `sql` does not qualify (a placeholder repeated,
/// out of order, already anonymous or named by a word) or has none.
fn anonymous_placeholders(sql: &str) -> Option<String> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut next = 1usize;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // A quoted literal or identifier: skipped whole (a doubled quote inside ends it and
            // opens the next at once, which skips the same text).
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'?' => return None,
            b'$' => {
                // `$` inside a word belongs to an identifier, not a placeholder.
                if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
                    i += 1;
                    continue;
                }
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                let number: usize = sql.get(i + 1..i + 1 + digits)?.parse().ok()?;
                let end = i + 1 + digits;
                if number != next
                    || b.get(end)
                        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
                {
                    return None;
                }
                out.push_str(&sql[copied..i]);
                out.push('?');
                copied = end;
                next += 1;
                i = end;
            }
            _ => i += 1,
        }
    }
    if next == 1 {
        return None;
    }
    out.push_str(&sql[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Backend;

    #[test]
    fn placeholders_in_order_become_anonymous_on_sqlite_only() {
        let sql = "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)".to_string();
        assert_eq!(
            bound_in_order(Backend::Sqlite, sql.clone()),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?)"
        );
        assert_eq!(bound_in_order(Backend::Postgres, sql.clone()), sql);
    }

    #[test]
    fn a_repeated_or_reordered_placeholder_keeps_the_numbers() {
        for sql in [
            "UPDATE t SET a = $1, b = $1",
            "SELECT $2, $1",
            "SELECT $1, $3",
            "SELECT $1, ?",
            "SELECT $1, $name",
            "SELECT $1a",
            "SELECT 1",
        ] {
            assert_eq!(
                bound_in_order(Backend::Sqlite, sql.to_string()),
                sql,
                "{sql}"
            );
        }
    }

    #[test]
    fn dollars_in_literals_identifiers_and_comments_are_not_placeholders() {
        let sql = "SELECT json_extract(data, '$.a''$2'), \"c$1\", x$1 -- $9\n, $1 /* $7 */ , $2";
        assert_eq!(
            bound_in_order(Backend::Sqlite, sql.to_string()),
            "SELECT json_extract(data, '$.a''$2'), \"c$1\", x$1 -- $9\n, ? /* $7 */ , ?"
        );
    }

    #[test]
    fn the_backend_of_a_database_type() {
        assert_eq!(backend_of::<Sqlite>(), Backend::Sqlite);
        assert_eq!(backend_of::<Postgres>(), Backend::Postgres);
    }
}
