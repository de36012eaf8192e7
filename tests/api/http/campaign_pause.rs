//! Pausing and resuming campaigns, and the audience preview, through HTTP, delivering through
//! the `smtp` transport into a loopback SMTP sink that counts each recipient's messages: a
//! campaign paused mid-delivery sends nothing until it is resumed and then mails each contact
//! once; one paused in the middle of its batch (most recipients still pending), on a server
//! then killed and resumed on another instance, mails each contact once; the status rules as 409s and 404s; cancel of a paused campaign; a
//! scheduled campaign paused and resumed; preview counts equal to what a send mails.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use herald::config::Settings;
use serde_json::{Value, json};

use crate::http::campaigns::{
    campaign_body, campaign_with_status, contact, create, import, scheduled, send, static_segment,
    stats,
};
use crate::support::harness::{DoomedServer, Reply, TestApp, TestProject};
use crate::support::smtpd::SmtpServer;

/// Fast polling, unverified senders, the `smtp` transport pointed at the sink on loopback
/// `port`, and at most `per_second` emails a second handed off (0: no limit).
pub fn through(s: &mut Settings, port: u16, per_second: u32) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
    s.plugins.smtp_host = Some("127.0.0.1".into());
    s.plugins.smtp_port = port;
    s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
    s.plugins.transport = "smtp".into();
    s.sending.per_project_per_second = per_second;
}

/// Messages the sink accepted, by recipient address.
pub fn received(sink: &SmtpServer) -> HashMap<String, usize> {
    let log = sink.log.lock().unwrap().clone();
    let mut counts = HashMap::new();
    for rcpt in &log.rcpt_to {
        let to = rcpt
            .trim()
            .trim_start_matches('<')
            .split('>')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        *counts.entry(to).or_insert(0) += 1;
    }
    counts
}

pub fn total(sink: &SmtpServer) -> usize {
    received(sink).values().sum()
}

/// Waits (up to `secs`) until the sink has accepted at least `n` messages.
pub async fn at_least(sink: &SmtpServer, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while total(sink) < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} arrived",
            total(sink)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until nothing more arrives for a second (the hand-offs in flight at a pause finish);
/// answers how many arrived in all.
pub async fn settled(sink: &SmtpServer) -> usize {
    let mut last = total(sink);
    loop {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let now = total(sink);
        if now == last {
            return now;
        }
        last = now;
    }
}

pub async fn act(app: &TestApp, p: &TestProject, id: &str, action: &str) -> Reply {
    app.post(
        &format!("/campaigns/{id}/{action}"),
        &p.secret_key,
        json!({}),
    )
    .await
}

/// Asserts that every one of the `n` contacts `c{i}@example.com` got exactly one message.
pub fn each_once(sink: &SmtpServer, n: usize) {
    let counts = received(sink);
    assert_eq!(counts.len(), n, "every contact mailed");
    let twice: Vec<_> = counts.iter().filter(|(_, k)| **k != 1).collect();
    assert!(twice.is_empty(), "mailed more than once: {twice:?}");
    for i in 0..n {
        assert!(counts.contains_key(&format!("c{i}@example.com")), "c{i}");
    }
}

#[tokio::test]
async fn a_campaign_paused_mid_delivery_sends_nothing_until_resumed_then_mails_each_contact_once() {
    const N: usize = 300;
    let sink = SmtpServer::start().await;
    // 60 a second: the whole campaign takes five seconds to hand off.
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 60)).await;
    let p = app.project().await;
    import(&app, &p, N).await;
    let id = create(
        &app,
        &p,
        campaign_body("Paused", json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = send(&app, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    at_least(&sink, 30, 60).await;

    let r = act(&app, &p, &id, "pause").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "PAUSED", "{}", r.body);
    let before = settled(&sink).await;
    assert!(before < N, "the pause stopped nothing ({before} sent)");
    // Nothing goes while it is paused; it is listed and shown as paused.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(total(&sink), before, "mail went out while paused");
    let c = app.get(&format!("/campaigns/{id}"), &p.secret_key).await;
    assert_eq!(c.body["status"], "PAUSED", "{}", c.body);
    let listed = app.get("/campaigns?status=PAUSED", &p.secret_key).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["data"][0]["id"], id.as_str(), "{}", listed.body);
    let s = stats(&app, &p, &id).await;
    assert_eq!(s["sent"], before as i64, "{s}");
    // A paused campaign is neither changed, sent again, deleted nor paused again.
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/campaigns/{id}"),
            Some(&p.secret_key),
            Some(campaign_body("Changed", json!({ "audienceType": "ALL" }))),
        )
        .await;
    r.assert_error(409, "CONFLICT");
    send(&app, &p, &id, None)
        .await
        .assert_error(409, "CONFLICT");
    let r = app.delete(&format!("/campaigns/{id}"), &p.secret_key).await;
    r.assert_error(409, "CONFLICT");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PAUSED"),
        "{}",
        r.body
    );
    let r = act(&app, &p, &id, "pause").await;
    r.assert_error(409, "CONFLICT");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PAUSED"),
        "{}",
        r.body
    );

    let r = act(&app, &p, &id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SENDING", "{}", r.body);
    let c = campaign_with_status(&app, &p, &id, "SENT", 120).await;
    assert_eq!(c["recipientCount"], N as i64, "{c}");
    each_once(&sink, N);
    let s = stats(&app, &p, &id).await;
    assert_eq!(s["sent"], N as i64, "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    // Sent: nothing to pause or resume.
    for action in ["pause", "resume"] {
        let r = act(&app, &p, &id, action).await;
        r.assert_error(409, "CONFLICT");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("SENT"),
            "{}",
            r.body
        );
    }
}

#[tokio::test]
async fn a_campaign_paused_mid_batch_on_a_server_then_killed_is_resumed_on_another_and_mails_each_contact_once()
 {
    const N: usize = 400;
    let sink = SmtpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let port = sink.addr.port();
    // A 1 MB render budget and messages of about 80 KB: a group of the batch holds about a
    // dozen recipients, so the batch takes a few dozen commits and the pause finds most of its
    // recipients still pending.
    let configure = move |s: &mut Settings| {
        through(s, port, 150);
        s.jobs_lease_seconds = 2;
        s.sending.render_memory_mb = 1;
    };
    let mut settings = crate::support::harness::test_settings(dir.path(), &url);
    configure(&mut settings);
    let doomed = DoomedServer::start(settings, &url);
    let first = &doomed.app;
    let p = first.project().await;
    import(first, &p, N).await;
    let mut body = campaign_body("Killed", json!({ "audienceType": "ALL" }));
    body["body"] = json!(format!(
        "<p>{}</p><a href=\"{{{{unsubscribeUrl}}}}\">Unsubscribe</a>",
        "Hello there. ".repeat(3_000)
    ));
    let id = create(first, &p, body).await;
    let r = send(first, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Once the first emails arrive: the batch is still going, most recipients still pending.
    at_least(&sink, 1, 60).await;
    let r = act(first, &p, &id, "pause").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "PAUSED", "{}", r.body);
    let before = settled(&sink).await;
    assert!(before < N, "the pause stopped nothing");
    let s = stats(first, &p, &id).await;
    assert_eq!(s["recipients"], N as i64, "{s}");
    doomed.kill();

    let second = TestApp::spawn_on(&url, configure).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(total(&sink), before, "mail went out while paused");
    let r = act(&second, &p, &id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SENDING", "{}", r.body);
    let c = campaign_with_status(&second, &p, &id, "SENT", 180).await;
    assert_eq!(c["recipientCount"], N as i64, "{c}");
    each_once(&sink, N);
    let s = stats(&second, &p, &id).await;
    assert_eq!(s["recipients"], N as i64, "{s}");
    assert_eq!(s["sent"], N as i64, "{s}");
}

#[tokio::test]
async fn pause_and_resume_refuse_what_does_not_apply_and_a_paused_campaign_can_be_cancelled() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 5)).await;
    let p = app.project().await;
    for i in 0..20 {
        contact(&app, &p, &format!("c{i}@example.com"), true, json!({})).await;
    }
    let id = create(
        &app,
        &p,
        campaign_body("Rules", json!({ "audienceType": "ALL" })),
    )
    .await;
    // A draft has nothing to pause or resume; the message names the status.
    for action in ["pause", "resume"] {
        let r = act(&app, &p, &id, action).await;
        r.assert_error(409, "CONFLICT");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("DRAFT"), "{message}");
    }
    // Another project's campaign, an unknown id and a malformed one are 404.
    let other = app.project().await;
    for action in ["pause", "resume", "audience"] {
        act(&app, &other, &id, action)
            .await
            .assert_error(404, "NOT_FOUND");
        act(&app, &p, "cmp_0192f000000000000000000000000000", action)
            .await
            .assert_error(404, "NOT_FOUND");
        act(&app, &p, "nope", action)
            .await
            .assert_error(404, "NOT_FOUND");
    }

    // Sending, 5 a second: paused after the first, then cancelled.
    send(&app, &p, &id, None).await;
    at_least(&sink, 1, 30).await;
    let r = act(&app, &p, &id, "pause").await;
    assert_eq!(r.body["status"], "PAUSED", "{}", r.body);
    let r = act(&app, &p, &id, "cancel").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "CANCELLED", "{}", r.body);
    let sent = settled(&sink).await;
    assert!(sent < 20, "the pause and cancel stopped nothing");
    // A cancelled campaign is not resumed, and nothing of it goes any more.
    act(&app, &p, &id, "resume")
        .await
        .assert_error(409, "CONFLICT");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(total(&sink), sent);
    let s = stats(&app, &p, &id).await;
    assert_eq!(s["sent"], sent as i64, "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    assert_eq!(
        s["suppressed"].as_i64().unwrap() + s["sent"].as_i64().unwrap(),
        s["recipients"].as_i64().unwrap(),
        "{s}"
    );

    // Scheduled in an hour: paused, resumed back to SCHEDULED, then cancelled.
    let later = scheduled(
        &app,
        &p,
        "Later",
        chrono::Utc::now() + chrono::Duration::hours(1),
    )
    .await;
    assert_eq!(
        act(&app, &p, &later, "pause").await.body["status"],
        "PAUSED"
    );
    let r = act(&app, &p, &later, "resume").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED", "{}", r.body);
    assert!(r.body["scheduledAt"].is_string(), "{}", r.body);
    assert!(r.body["startedAt"].is_null(), "{}", r.body);
    assert_eq!(
        act(&app, &p, &later, "pause").await.body["status"],
        "PAUSED"
    );
    let r = act(&app, &p, &later, "cancel").await;
    assert_eq!(r.body["status"], "CANCELLED", "{}", r.body);
    // A cancelled campaign cannot be paused.
    act(&app, &p, &later, "pause")
        .await
        .assert_error(409, "CONFLICT");
}

#[tokio::test]
async fn a_scheduled_campaign_whose_time_passed_while_paused_starts_when_resumed() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 0)).await;
    let p = app.project().await;
    for i in 0..5 {
        contact(&app, &p, &format!("c{i}@example.com"), true, json!({})).await;
    }
    let soon = chrono::Utc::now() + chrono::Duration::milliseconds(1000);
    let id = scheduled(&app, &p, "Soon", soon).await;
    assert_eq!(act(&app, &p, &id, "pause").await.body["status"], "PAUSED");
    // Its time comes and goes: it stays paused and nothing is sent.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let c = app.get(&format!("/campaigns/{id}"), &p.secret_key).await;
    assert_eq!(c.body["status"], "PAUSED", "{}", c.body);
    assert_eq!(total(&sink), 0);
    let r = act(&app, &p, &id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SENDING", "{}", r.body);
    assert!(r.body["startedAt"].is_string(), "{}", r.body);
    campaign_with_status(&app, &p, &id, "SENT", 60).await;
    each_once(&sink, 5);
}

/// `POST /campaigns/:id/audience` for campaign `id`.
async fn preview(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = act(app, p, id, "audience").await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn the_audience_preview_counts_what_a_send_mails_and_why_the_others_are_left_out() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 0)).await;
    let p = app.project().await;
    // 12 subscribed (half on plan pro), 3 unsubscribed; two subscribed and one unsubscribed
    // address on the suppression list.
    for i in 0..12 {
        let plan = if i % 2 == 0 { "pro" } else { "free" };
        contact(
            &app,
            &p,
            &format!("c{i}@example.com"),
            true,
            json!({ "plan": plan }),
        )
        .await;
    }
    for i in 0..3 {
        contact(
            &app,
            &p,
            &format!("u{i}@example.com"),
            false,
            json!({ "plan": "pro" }),
        )
        .await;
    }
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["c0@example.com", "c1@example.com", "u0@example.com"] }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);

    let all = create(
        &app,
        &p,
        campaign_body("Everyone", json!({ "audienceType": "ALL" })),
    )
    .await;
    let pro = create(
        &app,
        &p,
        campaign_body(
            "Pro",
            json!({ "audienceType": "FILTERED", "audienceFilter": { "logic": "AND", "groups": [
                { "filters": [ { "field": "data.plan", "operator": "equals", "value": "pro" } ] } ] } }),
        ),
    )
    .await;
    let members = ["c1@example.com", "c2@example.com", "u1@example.com"];
    let segment = static_segment(&app, &p, &members).await;
    let picked = create(
        &app,
        &p,
        campaign_body(
            "Picked",
            json!({ "audienceType": "SEGMENT", "segmentId": segment }),
        ),
    )
    .await;

    assert_eq!(
        preview(&app, &p, &all).await,
        json!({ "recipients": 10, "excluded": { "unsubscribed": 3, "pending": 0, "notInTopic": 0, "suppressed": 2 } })
    );
    // Plan pro: c0 (suppressed), c2 to c10 (5 mailed), u0 to u2 (unsubscribed).
    assert_eq!(
        preview(&app, &p, &pro).await,
        json!({ "recipients": 5, "excluded": { "unsubscribed": 3, "pending": 0, "notInTopic": 0, "suppressed": 1 } })
    );
    assert_eq!(
        preview(&app, &p, &picked).await,
        json!({ "recipients": 1, "excluded": { "unsubscribed": 1, "pending": 0, "notInTopic": 0, "suppressed": 1 } })
    );

    // What the sends mail is what the previews said.
    let mut expected = 0;
    for (id, n) in [(&all, 10), (&pro, 5), (&picked, 1)] {
        let r = send(&app, &p, id, None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        campaign_with_status(&app, &p, id, "SENT", 60).await;
        expected += n;
        at_least(&sink, expected, 30).await;
        let s = stats(&app, &p, id).await;
        assert_eq!(s["sent"], n, "{s}");
    }
    assert_eq!(settled(&sink).await, expected);
    let counts = received(&sink);
    for suppressed in ["c0@example.com", "c1@example.com", "u0@example.com"] {
        assert!(!counts.contains_key(suppressed), "{suppressed} was mailed");
    }

    // A campaign whose segment was deleted cannot be previewed.
    let gone = create(
        &app,
        &p,
        campaign_body(
            "Gone",
            json!({ "audienceType": "SEGMENT", "segmentId": segment }),
        ),
    )
    .await;
    assert_eq!(
        app.delete(&format!("/segments/{segment}"), &p.secret_key)
            .await
            .status,
        204
    );
    let r = act(&app, &p, &gone, "audience").await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["segmentId"]);
}
