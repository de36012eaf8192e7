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
