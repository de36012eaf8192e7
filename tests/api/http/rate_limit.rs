//! 1000 requests a minute per project by default: past the limit, 429 with `Retry-After`; every
//! authenticated response carries the `RateLimit-*` headers. On PostgreSQL the limit holds across
//! instances sharing the database.

use std::time::Duration;

use crate::support::harness::{TestApp, fresh_minute, postgres_url};

/// Waits out the end of a minute so that a test's requests fall in one window.
async fn fresh_window() {
    fresh_minute(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn the_limit_answers_429_with_retry_after() {
    let app = TestApp::spawn_with(|s| s.rate_limit_per_minute = 5).await;
    let a = app.project().await;
    let b = app.project().await;
    fresh_window().await;
    for i in 0..5u32 {
        let r = app.get("/contacts", &a.secret_key).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("ratelimit-limit"), Some("5"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some((4 - i).to_string().as_str())
        );
        let reset: u64 = r.header("ratelimit-reset").unwrap().parse().unwrap();
        assert!((1..=60).contains(&reset));
    }
    let r = app.get("/contacts", &a.secret_key).await;
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(r.header("ratelimit-remaining"), Some("0"));
    // Another project has its own budget.
    assert_eq!(app.get("/contacts", &b.secret_key).await.status, 200);
    // Unauthenticated endpoints are not counted against a project.
    assert!(
        app.call(reqwest::Method::GET, "/health", None, None)
            .await
            .header("ratelimit-limit")
            .is_none()
    );
}

/// On PostgreSQL two instances share one budget. On SQLite, where one process serves a
/// database, the counters live in that process: a second process has its own (documented).
#[tokio::test]
async fn the_limit_is_shared_by_instances_on_postgres() {
    let shared = postgres_url().is_some();
    let one = TestApp::spawn_with(|s| s.rate_limit_per_minute = 6).await;
    let two = one.spawn_sharing(|s| s.rate_limit_per_minute = 6).await;
    let p = one.project().await;
    fresh_window().await;
    for i in 0..6 {
        let app = if i % 2 == 0 { &one } else { &two };
        assert_eq!(
            app.get("/contacts", &p.secret_key).await.status,
            200,
            "request {i}"
        );
    }
    let r = one.get("/contacts", &p.secret_key).await;
    if shared {
        r.assert_error(429, "RATE_LIMIT_EXCEEDED");
        two.get("/contacts", &p.secret_key)
            .await
            .assert_error(429, "RATE_LIMIT_EXCEEDED");
    } else {
        // Instance one saw 3 of the 6 requests, so it has budget left.
        assert_eq!(r.status, 200);
        assert_eq!(r.header("ratelimit-remaining"), Some("2"));
    }
}

/// Concurrent requests of one project are counted exactly (on PostgreSQL, the hits that wait
/// while the counter is written are added in one statement): with a limit of 20, of 60 requests
/// at once on two instances exactly 20 pass, each with its own `RateLimit-Remaining`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_counted_exactly() {
    let one = TestApp::spawn_with(|s| s.rate_limit_per_minute = 20).await;
    let two = one.spawn_sharing(|s| s.rate_limit_per_minute = 20).await;
    let p = one.project().await;
    fresh_window().await;
    let shared = postgres_url().is_some();
    // On SQLite each process counts its own requests: give all of them to one instance.
    let apps = if shared { [&one, &two] } else { [&one, &one] };
    let mut tasks = Vec::new();
    for i in 0..60 {
        let (client, url, key) = (
            apps[i % 2].client.clone(),
            apps[i % 2].url("/contacts?limit=1"),
            p.secret_key.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = client.get(url).bearer_auth(key).send().await.unwrap();
            let remaining = r.headers()["ratelimit-remaining"]
                .to_str()
                .unwrap()
                .to_string();
            (r.status().as_u16(), remaining)
        }));
    }
    let mut passed = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            (200, remaining) => passed.push(remaining.parse::<u32>().unwrap()),
            (429, remaining) => {
                assert_eq!(remaining, "0");
                refused += 1;
            }
            (other, _) => panic!("status {other}"),
        }
    }
    passed.sort_unstable();
    assert_eq!(
        passed,
        (0..20).collect::<Vec<u32>>(),
        "each hit has its own count"
    );
    assert_eq!(refused, 40);
}

/// Sets a project's `disabled` flag in the test's database (an operator's switch; no endpoint
/// sets it).
async fn set_disabled(app: &TestApp, project: &str, disabled: bool) {
    use herald::store::Db;
    let sql = "UPDATE projects SET disabled = $1 WHERE id = $2";
    let done = match app.state().store().db() {
        Db::Sqlite { writer, .. } => sqlx::query(sql)
            .bind(disabled)
            .bind(project)
            .execute(writer)
            .await
            .map(|r| r.rows_affected()),
        Db::Postgres(pool) => sqlx::query(sql)
            .bind(disabled)
            .bind(project)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()),
    };
    assert_eq!(done.unwrap(), 1);
}

/// Only requests that may proceed past the key are counted: a public key refused on a secret
/// endpoint and the requests of a disabled project (403, seen by the next request after the
/// switch) leave the budget as it was. On PostgreSQL the key's lookup and the count are one
/// statement, which counts nothing for a disabled project.
#[tokio::test]
async fn refused_keys_and_disabled_projects_are_not_counted() {
    let app = TestApp::spawn_with(|s| s.rate_limit_per_minute = 3).await;
    let p = app.project().await;
    fresh_window().await;
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit-remaining"), Some("2"));
    for _ in 0..3 {
        app.get("/contacts", &p.public_key)
            .await
            .assert_error(401, "INVALID_API_KEY");
    }
    set_disabled(&app, &p.id, true).await;
    for key in [&p.secret_key, &p.public_key] {
        for _ in 0..2 {
            let r = app
                .post(
                    "/v1/track",
                    key,
                    serde_json::json!({"event": "signed-up", "email": "ann@example.com"}),
                )
                .await;
            r.assert_error(403, "PROJECT_DISABLED");
            assert!(r.header("ratelimit-remaining").is_none());
        }
    }
    set_disabled(&app, &p.id, false).await;
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit-remaining"), Some("1"));
}

/// The store's lookup of a project by key with its requests counted (one statement on
/// PostgreSQL, a read and a count on SQLite): the hits add up across calls, the public key's in
/// a bucket of their own, an unknown key or a key of the other kind finds nothing and counts
/// nothing, and a disabled project is found uncounted.
#[tokio::test]
async fn the_counted_key_lookup_counts_only_enabled_projects_found() {
    use herald::domain::keys::{KeyKind, hash_key};
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let store = app.state().store();
    // A window far from now, which the pruning of ended windows leaves alone.
    let window = 4_102_444_800_000;
    let counted = |kind, key: &str, n| {
        let hash = hash_key(key);
        async move {
            store
                .project_by_key_counted(kind, &hash, window, n)
                .await
                .unwrap()
                .map(|(project, hits)| (project.id.as_str().to_string(), hits))
        }
    };
    assert_eq!(
        counted(KeyKind::Secret, &p.secret_key, 3).await,
        Some((p.id.clone(), Some(3)))
    );
    assert_eq!(
        counted(KeyKind::Public, &p.public_key, 2).await,
        Some((p.id.clone(), Some(2)))
    );
    assert_eq!(counted(KeyKind::Public, &p.secret_key, 1).await, None);
    assert_eq!(counted(KeyKind::Secret, "sk_unknown", 1).await, None);
    set_disabled(&app, &p.id, true).await;
    assert_eq!(
        counted(KeyKind::Secret, &p.secret_key, 4).await,
        Some((p.id.clone(), None))
    );
    set_disabled(&app, &p.id, false).await;
    assert_eq!(
        counted(KeyKind::Secret, &p.secret_key, 1).await,
        Some((p.id.clone(), Some(4)))
    );
    assert_eq!(
        counted(KeyKind::Public, &p.public_key, 1).await,
        Some((p.id.clone(), Some(3)))
    );
}
