//! The SQLite and PostgreSQL migration sets describe one schema: after migrating both, their
//! tables, columns and indexes (explicit ones by name, unique ones by their columns) are the same.
//! The comparison needs PostgreSQL (`HERALD_TEST_POSTGRES_URL`, set in CI's PostgreSQL pass); a
//! SQLite-only run checks that the SQLite side migrates and says that it compared nothing.

use std::collections::{BTreeMap, BTreeSet};

use herald::store::Db;

/// Per table: its columns and its indexes.
type Schema = BTreeMap<String, Table>;

#[derive(Debug, Default, PartialEq, Eq)]
struct Table {
    columns: BTreeSet<String>,
    /// `name` for an explicitly created index, `unique(a, b)` for every unique key (primary
    /// keys and unique constraints included).
    indexes: BTreeSet<String>,
}

async fn sqlite_schema(db: &Db) -> Schema {
    let Db::Sqlite { pool, .. } = db else {
        panic!("not a SQLite pool")
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name != '_sqlx_migrations' \
         AND name NOT LIKE 'contacts_search%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for table in tables {
        let columns = sqlx::query_scalar("SELECT name FROM pragma_table_info($1)")
            .bind(&table)
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
        let list: Vec<(String, bool, String)> =
            sqlx::query_as("SELECT name, \"unique\", origin FROM pragma_index_list($1)")
                .bind(&table)
                .fetch_all(pool)
                .await
                .unwrap();
        let mut indexes = BTreeSet::new();
        for (name, unique, origin) in list {
            if origin == "c" {
                indexes.insert(name.clone());
            }
            if unique {
                let cols: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                        .bind(&name)
                        .fetch_all(pool)
                        .await
                        .unwrap();
                indexes.insert(format!("unique({})", cols.join(", ")));
            }
        }
        // A single-column `INTEGER PRIMARY KEY` is the rowid and has no index of its own.
        let pk: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info($1) WHERE pk > 0 ORDER BY pk")
                .bind(&table)
                .fetch_all(pool)
                .await
                .unwrap();
        if !pk.is_empty() {
            indexes.insert(format!("unique({})", pk.join(", ")));
        }
        schema.insert(table, Table { columns, indexes });
    }
    schema
}

/// The index of addresses' trigrams (`GET /contacts?search=`) is a GIN index on PostgreSQL and
/// an FTS5 table (`contacts_search`, with its shadow tables) on SQLite: left out of both sides.
const TRIGRAM_INDEX: &str = "contacts_email_trgm";

async fn postgres_schema(db: &Db) -> Schema {
    let Db::Postgres(pool) = db else {
        panic!("not a PostgreSQL pool")
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name != '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for table in tables {
        let columns = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1",
        )
        .bind(&table)
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        let list: Vec<(String, bool, bool, Vec<String>)> = sqlx::query_as(
            "SELECT ic.relname::text, ix.indisunique, \
                    EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid), \
                    ARRAY(SELECT a.attname::text FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n) \
                          JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum \
                          ORDER BY k.n) \
             FROM pg_index ix \
             JOIN pg_class ic ON ic.oid = ix.indexrelid \
             JOIN pg_class tc ON tc.oid = ix.indrelid \
             WHERE tc.relnamespace = current_schema()::regnamespace AND tc.relname = $1",
        )
        .bind(&table)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut indexes = BTreeSet::new();
        for (name, unique, constraint, cols) in list {
            if name == TRIGRAM_INDEX {
                continue;
            }
            if !constraint {
                indexes.insert(name);
            }
            if unique {
                indexes.insert(format!("unique({})", cols.join(", ")));
            }
        }
        schema.insert(table, Table { columns, indexes });
    }
    schema
}

#[tokio::test]
async fn both_migration_sets_build_the_same_schema() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Db::connect(
        &format!("sqlite://{}", dir.path().join("schema.db").display()),
        1,
    )
    .await
    .unwrap();
    sqlite.migrate().await.unwrap();
    let lite = sqlite_schema(&sqlite).await;
    for table in ["contacts", "events", "jobs", "emails", "idempotency_keys"] {
        assert!(
            lite.get(table).is_some_and(|t| !t.columns.is_empty()),
            "SQLite migrations create `{table}`"
        );
    }

    if crate::support::harness::postgres_url().is_none() {
        println!(
            "schema comparison: HERALD_TEST_POSTGRES_URL is unset, so only the SQLite migrations \
             were checked; the comparison with PostgreSQL runs in the PostgreSQL pass"
        );
        return;
    }
    let pg = Db::connect(
        &crate::support::harness::fresh_database_url(dir.path()).await,
        1,
    )
    .await
    .unwrap();
    pg.migrate().await.unwrap();
    let postgres = postgres_schema(&pg).await;
    assert_eq!(
        lite.keys().collect::<Vec<_>>(),
        postgres.keys().collect::<Vec<_>>(),
        "the two migration sets create different tables"
    );
    for (name, table) in &lite {
        assert_eq!(
            table, &postgres[name],
            "table `{name}` differs between SQLite (left) and PostgreSQL (right)"
        );
    }
}

/// `database_statement_timeout_ms`: PostgreSQL cancels a statement of the server's pool that runs
/// past it, the store calls that [`StoreError::StatementTimeout`] and the API answers it 503 with
/// `Retry-After`; migrations run on the same pool without it, and leave it in place.
#[tokio::test]
async fn a_statement_past_the_timeout_is_cancelled_and_answered_503_but_migrations_run() {
    use herald::store::StoreError;
    let Some(_) = crate::support::harness::postgres_url() else {
        println!(
            "statement timeout: HERALD_TEST_POSTGRES_URL is unset; SQLite has no statement timeout"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let db = Db::connect_with_timeout(&url, 2, Some(std::time::Duration::from_millis(200)))
        .await
        .unwrap();
    db.migrate().await.unwrap();
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL pool")
    };
    let shown: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(
        shown, "200ms",
        "the migration left the pool's timeout in place"
    );
    sqlx::query("SELECT pg_sleep(0.05)")
        .execute(pool)
        .await
        .expect("a statement within the timeout runs");
    let err = StoreError::from(
        sqlx::query("SELECT pg_sleep(2)")
            .execute(pool)
            .await
            .expect_err("a statement past the timeout is cancelled"),
    );
    assert!(matches!(err, StoreError::StatementTimeout(_)), "{err:?}");
    let answer = herald::api::error::ApiError::from(err);
    assert_eq!(answer.status.as_u16(), 503, "{}", answer.message);
    assert!(
        answer.message.contains("database_statement_timeout_ms"),
        "{}",
        answer.message
    );
}
