//! The HTTP surface: error shapes for malformed requests, the spec and its drift check, probes.

use reqwest::Method;
use serde_json::json;

use crate::support::harness::{TestApp, read};

#[tokio::test]
async fn malformed_requests_get_their_4xx_in_the_error_shape() {
    let app = TestApp::spawn_with(|s| s.max_body_bytes = 4096).await;
    let p = app.project().await;
    let key = &p.secret_key;
    let send = |body: &'static str, content_type: Option<&'static str>| {
        let mut req = app
            .client
            .post(app.url("/contacts"))
            .bearer_auth(key)
            .body(body);
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        req
    };

    let r = read(
        send("{\"email\": ", Some("application/json"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    let r = read(send("", Some("application/json")).send().await.unwrap()).await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    let r = read(
        send(
            "{\"email\":\"a@example.com\"} trailing",
            Some("application/json"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    let r = read(
        send(
            "email=a@example.com",
            Some("application/x-www-form-urlencoded"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    r.assert_error(415, "INVALID_REQUEST_BODY");
    let r = read(
        send("{\"email\":\"a@example.com\"}", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    assert_eq!(r.body["success"], false);

    // Oversized: declared by Content-Length, and streamed without one.
    let big = format!(
        "{{\"email\":\"a@example.com\",\"data\":{{\"x\":\"{}\"}}}}",
        "a".repeat(10_000)
    );
    let r = read(
        app.client
            .post(app.url("/contacts"))
            .bearer_auth(key)
            .header("Content-Type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_error(413, "PAYLOAD_TOO_LARGE");
    let stream = futures::stream::iter(
        big.into_bytes()
            .chunks(1000)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let r = read(
        app.client
            .post(app.url("/contacts"))
            .bearer_auth(key)
            .header("Content-Type", "application/json")
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_error(413, "PAYLOAD_TOO_LARGE");

    // Unknown route and wrong method.
    app.get("/no/such/route", key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.call(Method::PUT, "/contacts", Some(key), None)
        .await
        .assert_error(405, "BAD_REQUEST");
    app.call(Method::DELETE, "/contacts", Some(key), None)
        .await
        .assert_error(405, "BAD_REQUEST");
    // Nothing was stored by any of it.
    assert_eq!(app.get("/contacts", key).await.body["total"], 0);
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = TestApp::spawn().await;
    let a = app.call(Method::GET, "/health", None, None).await;
    let b = app.call(Method::GET, "/health", None, None).await;
    let (a, b) = (
        a.header("x-request-id").unwrap().to_string(),
        b.header("x-request-id").unwrap().to_string(),
    );
    assert!(a.starts_with("req_") && b.starts_with("req_"));
    assert_ne!(a, b);
}

#[tokio::test]
async fn probes_and_config() {
    let app = TestApp::spawn_with(|s| s.signup_enabled = false).await;
    let r = app.call(Method::GET, "/health", None, None).await;
    assert_eq!(
        (r.status.as_u16(), r.body["status"].as_str()),
        (200, Some("ok"))
    );
    let r = app.call(Method::GET, "/ready", None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"], "ready");
    let expected = if crate::support::harness::postgres_url().is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(r.body["database"], expected);
    let r = app.call(Method::GET, "/config", None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["signupEnabled"], false);
    assert_eq!(r.body["billingEnabled"], false);
    // The default transport writes files: sending works, nothing goes to a relay.
    assert_eq!(r.body["sendingEnabled"], true);
    assert_eq!(r.body["transport"], "outbox");
    assert_eq!(r.body["smtpEnabled"], false);
    assert_eq!(r.body["objectStorageEnabled"], false);
    assert_eq!(r.body["oauthProviders"], json!([]));
    assert_eq!(r.body["emailVerificationRequired"], false);
    assert_eq!(r.body["database"], expected);
    // Stopping waits for in-flight requests and closes the database cleanly.
    app.stop().await;

    // The flags follow the configuration: signup open, mail through an SMTP relay.
    let app = TestApp::spawn_with(|s| {
        s.plugins.transport = "smtp".into();
        s.plugins.smtp_host = Some("127.0.0.1".into());
        s.accounts.require_email_verification = true;
    })
    .await;
    let r = app.call(Method::GET, "/config", None, None).await;
    assert_eq!(r.body["signupEnabled"], true);
    assert_eq!(r.body["emailVerificationRequired"], true);
    assert_eq!(r.body["sendingEnabled"], true);
    assert_eq!(r.body["transport"], "smtp");
    assert_eq!(r.body["smtpEnabled"], true);
}

#[tokio::test]
async fn the_spec_is_served_and_matches_the_committed_file() {
    let app = TestApp::spawn().await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi.json");
    let generated = herald::api::openapi_json();
    // `HERALD_BLESS_OPENAPI=1 cargo test --test api the_spec_is_served` rewrites the file
    // (the same as `cargo run -q -- openapi > openapi/openapi.json`, without a second build).
    if std::env::var_os("HERALD_BLESS_OPENAPI").is_some() {
        std::fs::write(path, format!("{}\n", generated.trim_end())).unwrap();
    }
    let committed = std::fs::read_to_string(path).expect("openapi/openapi.json is committed");
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json is stale: run `cargo run -q -- openapi > openapi/openapi.json` \
         (or HERALD_BLESS_OPENAPI=1 cargo test --test api the_spec_is_served)"
    );
    let served: serde_json::Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let committed: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(served, committed);
    // Every path of the contract implemented so far is in the spec, with security declared.
    for path in [
        "/contacts",
        "/contacts/{id}",
        "/contacts/fields",
        "/auth/login",
        "/users/@me/projects/{id}/regenerate-keys",
        "/config",
    ] {
        assert!(
            committed["paths"].get(path).is_some(),
            "{path} missing from the spec"
        );
    }
    assert!(committed["paths"]["/contacts"]["get"]["security"].is_array());
    assert!(committed["components"]["securitySchemes"]["SecretKey"].is_object());

    let docs = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    let page = docs.text().await.unwrap();
    assert!(page.to_lowercase().contains("<html"));
    // The page shows the served document, with what the generator cannot express added.
    assert!(
        page.contains("X-Project-Id"),
        "the docs show the processed document"
    );
    assert!(page.contains("Idempotent-Replayed"));
}

/// PostgreSQL only. Once every connection of a running server is cut, as when PostgreSQL
/// restarts, each dead connection fails at most the one statement it is given: the pool checks
/// every connection it takes back and closes the dead ones, and checks one before handing it out
/// when it has been idle for a second (decisions.md, HTTP). So at most one request per cut
/// connection fails, with the error shape (503 `SERVICE_UNAVAILABLE` and `Retry-After`), and a
/// second later every request succeeds.
#[tokio::test]
async fn a_second_after_its_database_connections_are_cut_every_request_succeeds() {
    use sqlx::Connection;
    let Some(admin_url) = crate::support::harness::postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let name = format!("herald_{}", uuid::Uuid::new_v4().simple());
    let url = format!(
        "{}&application_name={name}",
        crate::support::harness::fresh_database_url(dir.path()).await
    );
    let app = TestApp::spawn_on(&url, |_| {}).await;
    let p = app.project().await;
    let key = &p.secret_key;
    // Several connections in use at once, then back in the pool.
    let reads: Vec<_> = (0..16).map(|_| app.get("/contacts?limit=1", key)).collect();
    for r in futures::future::join_all(reads).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let cut: i64 = sqlx::query_scalar(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&name)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(cut > 0, "the server had no connection to cut");
    let mut failed = 0i64;
    for _ in 0..40 {
        let r = app.get("/contacts?limit=1", key).await;
        if r.status != 200 {
            // The connection lost, not the request: 503 with when to retry, never a 500.
            r.assert_error(503, "SERVICE_UNAVAILABLE");
            assert_eq!(r.header("Retry-After"), Some("1"), "{}", r.body);
            failed += 1;
        }
    }
    assert!(
        failed <= cut,
        "{failed} requests failed on {cut} cut connections"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for i in 0..40 {
        let r = app
            .post(
                "/contacts",
                key,
                json!({ "email": format!("after-{i}@example.com") }),
            )
            .await;
        assert!(r.status.is_success(), "write {i}: {} {}", r.status, r.body);
        let r = app.get("/contacts?limit=1", key).await;
        assert_eq!(r.status, 200, "read {i}: {}", r.body);
    }
    let r = app.get("/contacts?limit=1", key).await;
    assert_eq!(r.body["total"], 40);
    app.stop().await;
}

/// SQLite only. Writes that wait for the database's write lock past the busy timeout (another
/// process holding it, as a tool writing to the file could) are answered 503
/// `SERVICE_UNAVAILABLE` with `Retry-After`, each of a group at once (not each in turn after
/// another wait), reads go on meanwhile, and once the lock is let go the same writes succeed.
#[tokio::test]
async fn writes_locked_out_of_sqlite_are_503_and_pass_once_the_lock_is_gone() {
    use sqlx::Connection;
    if crate::support::harness::postgres_url().is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("herald.db").display());
    let app = TestApp::spawn_on(&url, |_| {}).await;
    let p = app.project().await;
    let key = &p.secret_key;
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut other)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let shared = &app;
    let writes = (0..4).map(|i| async move {
        let r = shared
            .post(
                "/contacts",
                key,
                json!({ "email": format!("locked-{i}@example.com") }),
            )
            .await;
        (r, started.elapsed())
    });
    let (writes, read) =
        futures::future::join(futures::future::join_all(writes), app.get("/contacts", key)).await;
    assert_eq!(read.status, 200, "{}", read.body);
    for (r, _) in &writes {
        r.assert_error(503, "SERVICE_UNAVAILABLE");
        assert_eq!(r.header("Retry-After"), Some("1"), "{}", r.body);
    }
    // The writes arrive at once: the first group waits out the busy timeout (10 s) and the rest
    // queue behind it as a second group, whose members are answered together, not one busy
    // timeout after another.
    let mut times: Vec<_> = writes.iter().map(|(_, t)| *t).collect();
    times.sort();
    let gaps = times
        .windows(2)
        .filter(|w| w[1] - w[0] > std::time::Duration::from_secs(2))
        .count();
    assert!(gaps <= 1, "answered at {times:?}");
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    for i in 0..4 {
        let r = app
            .post(
                "/contacts",
                key,
                json!({ "email": format!("locked-{i}@example.com") }),
            )
            .await;
        assert!(r.status.is_success(), "{} {}", r.status, r.body);
    }
    assert_eq!(app.get("/contacts", key).await.body["total"], 4);
    app.stop().await;
}
