//! Upgrades: `herald migrate --check`, migrations that only add, and an instance of this release
//! serving a schema that a newer release has already migrated (a rolling upgrade).

use serde_json::json;

use crate::support::harness::{execute_sql, fresh_database_url};

/// `herald migrate <args>`: its exit status and what it printed.
fn migrate(args: &[&str], dir: &std::path::Path, url: &str) -> (i32, String) {
    let mut all = vec!["migrate"];
    all.extend_from_slice(args);
    let out = super::cli::herald(&all, dir, url);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn migrate_check_says_what_would_run_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let (code, out) = migrate(&["--check"], dir.path(), &url);
    assert_eq!(code, 1, "migrations to run: {out}");
    assert!(out.contains(": 0 migrations applied"), "{out}");
    assert!(out.contains("would run:"), "{out}");
    assert!(out.contains("0001 "), "{out}");
    // Nothing was applied by the check.
    let (code, again) = migrate(&["--check"], dir.path(), &url);
    assert_eq!((code, again.clone()), (1, out), "{again}");

    let (code, out) = migrate(&[], dir.path(), &url);
    assert_eq!(code, 0, "{out}");
    let (code, out) = migrate(&["--check"], dir.path(), &url);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("up to date: nothing would run"), "{out}");
    assert!(!out.contains(": 0 migrations applied"), "{out}");
}

#[tokio::test]
async fn this_release_serves_a_schema_a_newer_release_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    assert_eq!(migrate(&[], dir.path(), &url).0, 0);
    // Release N+1 migrates first during a rolling upgrade: an additive change (a new column, a
    // new table) recorded under a version this binary does not know.
    let recorded = if url.starts_with("sqlite:") {
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101, 'a newer release', 1, x'00', 0)"
    } else {
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101, 'a newer release', true, '\\x00'::bytea, 0)"
    };
    execute_sql(
        &url,
        &format!(
            "ALTER TABLE contacts ADD COLUMN nickname TEXT; \
             CREATE TABLE future_things (id TEXT PRIMARY KEY); {recorded}"
        ),
    )
    .await;
    let (code, out) = migrate(&["--check"], dir.path(), &url);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("applied by a newer release: 99990101"),
        "{out}"
    );

    // This release (N) starts beside it on the same database and serves: reads and writes.
    let settings = herald::config::Settings {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_path_buf(),
        database_url: Some(url.clone()),
        database_max_connections: 2,
        ..Default::default()
    };
    let server = herald::app::spawn(settings)
        .await
        .expect("release N starts");
    let store = herald::store::Store::new(herald::store::Db::connect(&url, 1).await.unwrap());
    let out = herald::init::run(&store, "ops@example.com", "Upgrade")
        .await
        .unwrap();
    store.db().close().await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/contacts", server.url()))
        .bearer_auth(&out.secret_key)
        .json(&json!({ "email": "during@upgrade.test", "data": { "plan": "pro" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let r = client
        .get(format!("{}/contacts?search=during", server.url()))
        .bearer_auth(&out.secret_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["data"][0]["data"]["plan"], "pro", "{body}");
}

#[test]
fn migrations_only_add() {
    // Release N must keep serving on release N+1's schema: no migration drops or renames a
    // table or column, changes a column's type, or adds a NOT NULL column without a default.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut checked = 0;
    for backend in ["sqlite", "postgres"] {
        for entry in std::fs::read_dir(root.join(backend)).unwrap() {
            let path = entry.unwrap().path();
            let sql = std::fs::read_to_string(&path).unwrap().to_ascii_uppercase();
            // Comments may say anything.
            let sql: String = sql
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
            for destructive in ["DROP TABLE", "DROP COLUMN", " RENAME ", "ALTER COLUMN"] {
                assert!(
                    !sql.contains(destructive),
                    "{}: `{destructive}` is not additive; ship it a release after the code stops \
                     using the old shape",
                    path.display()
                );
            }
            for added in sql.split("ADD COLUMN").skip(1) {
                let column = added.split([',', ';']).next().unwrap_or("");
                assert!(
                    !column.contains("NOT NULL") || column.contains("DEFAULT"),
                    "{}: ADD COLUMN{column} is NOT NULL without a DEFAULT",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 44, "{checked} migration files checked");
}
