//! The render budget (`sending.render_memory_mb`) over HTTP: a `/v1/send` whose rendered
//! messages take more than the whole budget fails alone with a 413 naming the setting and
//! writes nothing; sends within it go through, concurrent ones waiting for each other's room;
//! a send that finds no room in time answers 503 with `Retry-After`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::harness::{Reply, TestApp, TestProject};

/// A server whose render budget is 1 MB, sending from unverified domains.
async fn tiny_budget() -> (TestApp, TestProject) {
    let app = TestApp::spawn_with(|s| {
        s.domains.allow_unverified = true;
        s.sending.render_memory_mb = 1;
    })
    .await;
    let p = app.project().await;
    (app, p)
}

/// A send of a 40 KB body (about 80 KB rendered, with its text part) to `n` recipients
/// `{prefix}{i}@example.com`.
async fn send_large(app: &TestApp, p: &TestProject, prefix: &str, n: usize) -> Reply {
    let to: Vec<String> = (0..n).map(|i| format!("{prefix}{i}@example.com")).collect();
    let body = format!("<p>{}</p>", "Hello there. ".repeat(3_000));
    app.post(
        "/v1/send",
        &p.secret_key,
        json!({ "to": to, "from": "hello@unverified.test", "subject": "Big", "body": body }),
    )
    .await
}

async fn total(app: &TestApp, p: &TestProject, path: &str) -> Value {
    let r = app.get(path, &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn a_send_over_the_render_budget_fails_alone_and_writes_nothing() {
    let (app, p) = tiny_budget().await;
    // 30 recipients of about 80 KB each: over the 1 MB budget.
    let r = send_large(&app, &p, "big", 30).await;
    assert_eq!(r.status, 413, "{}", r.body);
    // `/v1/send`'s own error shape, naming the setting.
    assert_eq!(r.body["error"], "PAYLOAD_TOO_LARGE", "{}", r.body);
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.contains("sending.render_memory_mb"),
        "the error names the setting: {message}"
    );
    // Nothing was written: no contact, no event, no email.
    assert_eq!(total(&app, &p, "/contacts").await["total"], 0);
    let events = total(&app, &p, "/events").await;
    assert_eq!(events["data"].as_array().unwrap().len(), 0, "{events}");
    let upcoming = total(&app, &p, "/activity/upcoming").await;
    assert_eq!(upcoming["queuedEmails"], 0, "{upcoming}");
    // Its room was given back: the whole budget is free again.
    assert_eq!(app.state().sending().render_budget().free_kb(), 1024);

    // A send within the budget goes through.
    let r = send_large(&app, &p, "small", 5).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["emails"].as_array().unwrap().len(), 5);
    assert_eq!(total(&app, &p, "/contacts").await["total"], 5);
}

#[tokio::test]
async fn concurrent_sends_within_the_render_budget_all_go_through() {
    let (app, p) = tiny_budget().await;
    // Six sends of about 400 KB each, at once: more than the 1 MB budget together, so some
    // wait for the others' room.
    let sends = (0..6).map(|i| {
        let (app, p) = (&app, &p);
        async move { send_large(app, p, &format!("s{i}x"), 5).await }
    });
    for r in futures::future::join_all(sends).await {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["emails"].as_array().unwrap().len(), 5);
    }
    assert_eq!(total(&app, &p, "/contacts").await["total"], 30);
    assert_eq!(app.state().sending().render_budget().free_kb(), 1024);
}

#[tokio::test]
async fn a_send_waits_for_room_and_answers_503_when_none_comes_in_time() {
    let (app, p) = tiny_budget().await;
    let budget = app.state().sending().render_budget().clone();
    let far = tokio::time::Instant::now() + Duration::from_secs(60);
    // Most of the budget is held elsewhere: the send waits until it is given back.
    let held = budget.reserve(900, far).await.unwrap();
    let waiting = async {
        let r = send_large(&app, &p, "w", 5).await;
        assert_eq!(r.status, 200, "{}", r.body);
    };
    let release = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            total(&app, &p, "/activity/upcoming").await["queuedEmails"],
            0,
            "the send waits for room"
        );
        drop(held);
    };
    tokio::join!(waiting, release);
    assert_eq!(total(&app, &p, "/contacts").await["total"], 5);

    // The whole budget held for longer than a send waits: 503 with `Retry-After`, nothing
    // written.
    let held = budget.reserve(1024, far).await.unwrap();
    let r = send_large(&app, &p, "late", 5).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["error"], "SERVICE_UNAVAILABLE", "{}", r.body);
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("sending.render_memory_mb"),
        "{}",
        r.body
    );
    drop(held);
    assert_eq!(total(&app, &p, "/contacts").await["total"], 5);
}
