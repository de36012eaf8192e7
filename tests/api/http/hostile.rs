//! Hostile input through HTTP: each request that used to take unbounded CPU answers (200, 413
//! or 422) quickly, with the CPU-heavy work off the async workers, while a concurrent
//! `GET /health` loop keeps answering. The bounds are generous for the debug build; the
//! release figures are in `docs/decisions.md` ("Templates").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::harness::{Reply, TestApp};

/// Longest a hostile request may take on the debug build.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// Longest a `/health` may take while they run, on the debug build.
const HEALTH_WITHIN: Duration = Duration::from_millis(500);

fn send_body(subject: &str, body: &str, data: Value) -> Value {
    json!({
        "to": "ann@example.com",
        "from": "hello@unverified.test",
        "subject": subject,
        "body": body,
        "data": data,
    })
}

#[tokio::test]
async fn hostile_templates_answer_quickly_and_health_stays_responsive() {
    let app = Arc::new(TestApp::spawn_with(|s| s.domains.allow_unverified = true).await);
    let p = app.project().await;
    let list: Vec<u32> = (0..1000).collect();
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "150,000 unclosed `<a`",
            send_body("s", &"<a".repeat(150_000), json!({})),
            200,
            "",
        ),
        (
            "`{{a ?? b}}` × 60,000",
            send_body("s", &"{{a ?? b}}".repeat(60_000), json!({})),
            422,
            "at most 524288",
        ),
        (
            "`{{a ?? b}}` × 5,000",
            send_body("s", &"{{a ?? b}}".repeat(5_000), json!({})),
            422,
            "more than 2000 expressions",
        ),
        (
            "three nested `#each` over 1,000 items",
            send_body(
                "s",
                "{{#each l}}{{#each ../l}}{{#each ../../l}}x{{/each}}{{/each}}{{/each}}",
                json!({ "l": { "value": list, "persistent": false } }),
            ),
            422,
            "loops would take more than",
        ),
        (
            "50,000 nested `{{#if}}`",
            send_body(
                "s",
                &format!(
                    "{}x{}",
                    "{{#if a}}".repeat(50_000),
                    "{{/if}}".repeat(50_000)
                ),
                json!({}),
            ),
            422,
            "at most 524288",
        ),
        (
            "1,000 nested `{{#if}}`",
            send_body(
                "s",
                &format!("{}x{}", "{{#if a}}".repeat(1_000), "{{/if}}".repeat(1_000)),
                json!({}),
            ),
            422,
            "nest more than 100 deep",
        ),
        (
            "a 41 MB rendering",
            send_body(
                "s",
                &"{{{big}}}".repeat(41),
                json!({ "big": { "value": "x".repeat(1024 * 1024), "persistent": false } }),
            ),
            422,
            "larger than 40 MB",
        ),
    ];

    // `/health`, measured all the while.
    let done = Arc::new(AtomicBool::new(false));
    let health = {
        let (app, done) = (app.clone(), done.clone());
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            let mut count = 0;
            while !done.load(Ordering::SeqCst) {
                let started = Instant::now();
                let r = app.call(reqwest::Method::GET, "/health", None, None).await;
                assert_eq!(r.status, 200, "{}", r.body);
                slowest = slowest.max(started.elapsed());
                count += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (slowest, count)
        })
    };

    // Every case at once, as a tenant trying to take the service down would.
    let requests = cases.into_iter().map(|(name, body, status, says)| {
        let (app, key) = (app.clone(), p.secret_key.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let r: Reply = app.post("/v1/send", &key, body).await;
            (name, status, says, r, started.elapsed())
        })
    });
    let mut answers = Vec::new();
    for request in requests.collect::<Vec<_>>() {
        answers.push(request.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let (slowest, count) = health.await.unwrap();

    for (name, status, says, r, took) in answers {
        eprintln!("{name}: {} in {took:?}", r.status);
        assert_eq!(r.status, status, "{name}: {}", r.body);
        if status == 422 {
            assert_eq!(r.body["error"], "VALIDATION_ERROR", "{name}: {}", r.body);
            let first = &r.body["errors"][0];
            assert_eq!(first["field"], "body", "{name}: {}", r.body);
            let message = first["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{name}: {message}");
        }
        assert!(took < ANSWER_WITHIN, "{name} took {took:?}");
    }
    eprintln!("/health: {count} requests, slowest {slowest:?}");
    assert!(count > 0);
    assert!(
        slowest < HEALTH_WITHIN,
        "/health took {slowest:?} during the hostile requests"
    );
}

#[tokio::test]
async fn templates_are_checked_with_the_same_limits() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let create = |body: String| json!({ "name": "t", "subject": "s", "body": body, "type": "TRANSACTIONAL" });
    let started = Instant::now();
    let deep = format!("{}x{}", "{{#if a}}".repeat(500), "{{/if}}".repeat(500));
    for (body, says) in [
        (deep, "nest more than 100"),
        ("{{a ?? b}}".repeat(2_500), "more than 2000"),
    ] {
        let r = app.post("/templates", &p.secret_key, create(body)).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), ["body"]);
        let message = r.body["error"]["errors"][0]["message"].as_str();
        assert!(message.unwrap_or_default().contains(says), "{}", r.body);
    }
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            create("{{a ?? b}}".repeat(1_000)),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(started.elapsed() < ANSWER_WITHIN, "{:?}", started.elapsed());
}

/// A NUL character (which PostgreSQL stores neither in `TEXT` nor, escaped, in `JSONB`) in a
/// JSON body's string or key, or `%00` in a query parameter: refused at the edge, naming the
/// field, on both databases, and nothing is written. Found by schemathesis on PostgreSQL, where
/// each of these requests was a 500.
#[tokio::test]
async fn nul_characters_are_refused_at_their_field_and_nothing_is_written() {
    let app = TestApp::spawn_with(|s| s.domains.allow_unverified = true).await;
    let p = app.project().await;
    let nul = "a\u{0}b";
    let filter = |value: &str| {
        json!({ "logic": "AND", "groups": [ { "filters": [
            { "field": "data.plan", "operator": "equals", "value": value } ] } ] })
    };
    let cases = [
        (
            "/contacts",
            json!({ "email": "ann@example.com", "data": { "plan": nul } }),
            "data.plan",
        ),
        (
            "/contacts",
            json!({ "email": "ann@example.com", "data": { nul: 1 } }),
            "data.ab",
        ),
        (
            "/v1/track",
            json!({ "email": "bob@example.com", "event": "signup", "data": { "k": nul } }),
            "data.k",
        ),
        (
            "/templates",
            json!({ "name": nul, "subject": "s", "body": "b", "type": "TRANSACTIONAL" }),
            "name",
        ),
        (
            "/segments",
            json!({ "name": "n", "type": "DYNAMIC", "condition": filter(nul) }),
            "condition.groups[0].filters[0].value",
        ),
        (
            "/contacts/bulk-delete",
            json!({ "contactIds": ["cnt_1", nul] }),
            "contactIds[1]",
        ),
    ];
    for (path, body, field) in cases {
        let r = app.post(path, &p.secret_key, body.clone()).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), [field], "{path} {body}: {}", r.body);
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains("NUL"),
            "{}",
            r.body
        );
    }
    // `/v1/send` answers in its own error shape.
    let r = app
        .post("/v1/send", &p.secret_key, send_body(nul, "b", json!({})))
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["error"], "VALIDATION_ERROR", "{}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "subject", "{}", r.body);
    for (path, param) in [
        ("/contacts?search=a%00", "search"),
        ("/events?name=%00x", "name"),
    ] {
        let r = app.get(path, &p.secret_key).await;
        r.assert_error(400, "BAD_REQUEST");
        assert_eq!(r.error_fields(), [param], "{path}: {}", r.body);
    }
    // An escaped backslash before `u0000` is text, not a NUL.
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "eve@example.com", "data": { "k": "\\u0000" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["data"]["k"], "\\u0000");
    let contacts = app.get("/contacts", &p.secret_key).await;
    assert_eq!(contacts.body["total"], 1, "only eve: {}", contacts.body);
    let templates = app.get("/templates", &p.secret_key).await;
    assert_eq!(templates.body["data"], json!([]), "{}", templates.body);
    let segments = app.get("/segments", &p.secret_key).await;
    assert_eq!(segments.body, json!([]), "{}", segments.body);
}
