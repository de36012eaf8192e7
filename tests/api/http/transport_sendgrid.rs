//! The `sendgrid` transport against a loopback SendGrid (`support::sendgrid`): each message
//! parsed into `/v3/mail/send` fields (personalizations, from, reply-to, subject, text before
//! HTML, headers without reserved ones, attachments, `custom_args.herald_id`, Herald's own
//! tracking), one call per message; a refused recipient failing alone; 5xx and 429 deferring the
//! email; a wrong key failing it; and the Event Webhook verified with its ECDSA signature (good,
//! another key, stale, altered body) and each event kind applied.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use herald::config::Settings;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::http::send::email_with_status;
use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject};
use crate::support::providers::{
    email_ids, error_message, history_mentions, suppressions, unix_now as now,
};
use crate::support::sendgrid::{
    API_KEY, FakeSendGrid, other_key, public_key, signature, signing_key,
};

struct Setup {
    sendgrid: FakeSendGrid,
    app: TestApp,
    p: TestProject,
    _dns: DnsServer,
}

/// Herald with the `sendgrid` transport on a fresh fake, `overrides` overlaid on the settings.
async fn setup(overrides: &[(&str, &str)], adjust: fn(&mut Settings)) -> Setup {
    let dns = DnsServer::start().await;
    let sendgrid = FakeSendGrid::start().await;
    let mut table = BTreeMap::from([
        ("api_key".to_string(), API_KEY.to_string()),
        ("api_base".to_string(), sendgrid.base()),
        ("webhook_public_key".to_string(), public_key(signing_key())),
    ]);
    for (k, v) in overrides {
        table.insert(k.to_string(), v.to_string());
    }
    let app = TestApp::spawn_with(|s: &mut Settings| {
        with_dns(&dns)(s);
        s.jobs_poll_interval_ms = 20;
        s.plugins.transport = "sendgrid".into();
        s.plugins.transport_http_allow_private = true;
        s.plugins.settings.insert("sendgrid".into(), table);
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    Setup {
        sendgrid,
        app,
        p,
        _dns: dns,
    }
}

async fn send_to(app: &TestApp, p: &TestProject, to: &[&str]) -> Vec<String> {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "hello@acme.test", "subject": "Hello",
                    "body": "<p>Hello there</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    email_ids(&r, to)
}

/// Posts an Event Webhook call, with SendGrid's signature headers `signed` (signature,
/// timestamp).
async fn notify(app: &TestApp, body: &str, signed: Option<(String, i64)>) -> Reply {
    let mut headers = HeaderMap::new();
    if let Some((signature, timestamp)) = signed {
        headers.insert(
            "x-twilio-email-event-webhook-signature",
            HeaderValue::from_str(&signature).unwrap(),
        );
        headers.insert(
            "x-twilio-email-event-webhook-timestamp",
            HeaderValue::from_str(&timestamp.to_string()).unwrap(),
        );
    }
    crate::support::providers::notify(app, "sendgrid", headers, body).await
}

/// Signs `body` now with the test's key and posts it.
async fn notify_signed(app: &TestApp, body: &str) -> Reply {
    let t = now();
    notify(app, body, Some((signature(signing_key(), t, body), t))).await
}

#[tokio::test]
async fn sendgrid_gets_the_fields_of_each_message_and_a_refused_recipient_fails_alone() {
    let Setup {
        sendgrid, app, p, ..
    } = setup(&[], |_| {}).await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let to = ["ann@example.com", "reject@example.com", "bob@example.com"];
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": to,
                "from": { "name": "Acme Shop", "email": "hello@acme.test" },
                "reply": "support@acme.test",
                "subject": "Your receipt",
                "body": "<p>Thanks for your order</p><img src=\"cid:logo\">",
                "headers": { "X-Campaign": "receipts" },
                "attachments": [
                    { "filename": "receipt.txt", "content": b64(b"total: 12 EUR"),
                      "contentType": "text/plain" },
                    { "filename": "logo.png", "content": b64(b"\x89PNG\r\n\x1a\n123"),
                      "contentType": "image/png", "disposition": "inline", "contentId": "logo" }
                ]
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ids = email_ids(&r, &to);

    let refused = email_with_status(&app, &p, &ids[1], "failed").await;
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("SendGrid refused the message (400)")
            && error.contains("personalizations.0.to.0.email: Does not contain a valid address"),
        "{refused}"
    );
    for id in [&ids[0], &ids[2]] {
        let email = email_with_status(&app, &p, id, "sent").await;
        assert!(
            email["providerId"].as_str().unwrap().starts_with("sgmsg"),
            "X-Message-Id: {email}"
        );
    }

    // One call per message, each carrying its own Message-ID.
    let calls = sendgrid.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    let ann = &calls
        .iter()
        .find(|c| c.body["personalizations"][0]["to"][0]["email"] == "ann@example.com")
        .unwrap()
        .body;
    assert_eq!(
        ann["personalizations"][0]["to"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        ann["from"],
        json!({ "email": "hello@acme.test", "name": "Acme Shop" })
    );
    assert_eq!(ann["reply_to"]["email"], "support@acme.test");
    assert_eq!(ann["subject"], "Your receipt");
    assert_eq!(ann["content"][0]["type"], "text/plain");
    assert!(
        ann["content"][0]["value"]
            .as_str()
            .unwrap()
            .contains("Thanks for your order"),
        "{ann}"
    );
    assert_eq!(ann["content"][1]["type"], "text/html");
    assert!(
        ann["content"][1]["value"]
            .as_str()
            .unwrap()
            .contains("<p>Thanks for your order</p>"),
        "{ann}"
    );
    assert_eq!(ann["custom_args"], json!({ "herald_id": ids[0] }));
    assert_eq!(
        ann["headers"]["Message-ID"],
        format!("<{}@acme.test>", ids[0])
    );
    assert_eq!(ann["headers"]["X-Campaign"], "receipts");
    let headers: Vec<String> = ann["headers"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.to_ascii_lowercase())
        .collect();
    for reserved in [
        "dkim-signature",
        "from",
        "to",
        "subject",
        "content-type",
        "reply-to",
    ] {
        assert!(!headers.contains(&reserved.to_string()), "{headers:?}");
    }
    assert_eq!(ann["tracking_settings"]["click_tracking"]["enable"], false);
    assert_eq!(ann["tracking_settings"]["open_tracking"]["enable"], false);
    let attachments = ann["attachments"].as_array().unwrap();
    let receipt = attachments
        .iter()
        .find(|a| a["filename"] == "receipt.txt")
        .unwrap();
    assert_eq!(receipt["content"], b64(b"total: 12 EUR"));
    assert_eq!(receipt["disposition"], "attachment");
    assert_eq!(receipt["type"], "text/plain");
    let logo = attachments
        .iter()
        .find(|a| a["content_id"] == "logo")
        .unwrap();
    assert_eq!(
        logo["filename"], "logo",
        "its Content-ID, as it has no name: {logo}"
    );
    assert_eq!(logo["content"], b64(b"\x89PNG\r\n\x1a\n123"));
    assert_eq!(logo["disposition"], "inline");
    assert_eq!(logo["content_id"], "logo");
    assert_eq!(logo["type"], "image/png");
}

#[tokio::test]
async fn sendgrid_server_errors_and_rate_limits_defer_the_email() {
    let Setup {
        sendgrid, app, p, ..
    } = setup(&[], |_| {}).await;
    // A 502, then a 429 whose wait is only in X-RateLimit-Reset (2 s from now).
    sendgrid.fail_next(&[(502, None, None), (429, None, Some(now() + 2))]);
    let id = send_to(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(email["attempts"], 3, "{email}");
    let statuses: Vec<u16> = sendgrid.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, [502, 429, 202]);
}

#[tokio::test]
async fn a_sendgrid_429_defers_the_email_with_its_retry_after() {
    // Given up once older than a second: the last error shows what the plugin reported.
    let Setup {
        sendgrid, app, p, ..
    } = setup(&[], |s| s.sending.retry_lifetime_seconds = 1).await;
    sendgrid.fail_next(&[(429, Some(7), None); 20]);
    let id = send_to(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.starts_with("gave up after")
            && error.contains("rate limited by SendGrid (retry after 7 s)"),
        "{email}"
    );
}

#[tokio::test]
async fn sendgrid_rate_limits_are_waited_out_for_the_retry_after() {
    // The queue reads the plugin's `(retry after N s)` (jobs/deliver.rs, issue #77 routing).
    let Setup {
        sendgrid, app, p, ..
    } = setup(&[], |_| {}).await;
    sendgrid.fail_next(&[(429, Some(3), None)]);
    let id = send_to(&app, &p, &["ann@example.com"]).await.remove(0);
    email_with_status(&app, &p, &id, "sent").await;
    let calls = sendgrid.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let waited = calls[1].at - calls[0].at;
    assert!(
        waited >= Duration::from_secs(3),
        "retried after {waited:?}, before SendGrid's Retry-After of 3 s"
    );
}

#[tokio::test]
async fn sendgrid_refusing_the_key_fails_the_email_with_what_to_fix() {
    let Setup { app, p, .. } = setup(&[("api_key", "SG.wrong")], |_| {}).await;
    let id = send_to(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.contains("SendGrid refused the API key (401")
            && error.contains("plugins.settings.sendgrid.api_key"),
        "{email}"
    );
}

#[tokio::test]
async fn sendgrid_event_webhooks_are_verified_and_each_event_kind_applies() {
    let Setup { app, p, .. } = setup(&[], |_| {}).await;
    let to = [
        "ann@example.com",
        "bob@example.com",
        "cy@example.com",
        "dee@example.com",
        "eve@example.com",
    ];
    let ids = send_to(&app, &p, &to).await;
    for id in &ids {
        email_with_status(&app, &p, id, "sent").await;
    }
    let t = now();
    let ev = |kind: &str, i: usize, extra: Value| {
        let mut e = json!({
            "email": to[i], "timestamp": t, "event": kind,
            "sg_event_id": format!("sg-{kind}-{i}"), "sg_message_id": format!("sgmsg{i}.filter"),
            "smtp-id": format!("<{}@acme.test>", ids[i]), "herald_id": ids[i],
        });
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    };
    let delivered = json!([ev("delivered", 0, json!({ "response": "250 OK" }))]).to_string();

    // Refused (401), nothing applied: signed with another key, stale, an altered body, no
    // signature headers.
    let other = (signature(&other_key(), t, &delivered), t);
    let stale = (signature(signing_key(), t - 600, &delivered), t - 600);
    let good = (signature(signing_key(), t, &delivered), t);
    let altered = delivered.replace("250 OK", "250 Ok");
    for (what, body, signed) in [
        ("another key", delivered.as_str(), Some(other)),
        ("stale", delivered.as_str(), Some(stale)),
        ("altered body", altered.as_str(), Some(good.clone())),
        ("unsigned", delivered.as_str(), None),
    ] {
        let r = notify(&app, body, signed).await;
        assert_eq!(r.status, 401, "{what}: {}", r.body);
        assert!(
            error_message(&r).contains("not authenticated"),
            "{what}: {}",
            r.body
        );
    }
    // Signed but not SendGrid's JSON: 400.
    let r = notify_signed(&app, "{\"not\": \"a list\"}").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = app.get(&format!("/emails/{}", ids[0]), &p.secret_key).await;
    assert_eq!(r.body["status"], "sent", "nothing applied: {}", r.body);

    // One call with every kind: delivered, open and click (ann), a bounce (bob), a spam report
    // (cy), a block (dee: a soft bounce), a drop of an address SendGrid knows bounces (eve), and
    // kinds Herald does not follow (processed, deferred).
    let events = json!([
        ev("processed", 0, json!({})),
        ev("delivered", 0, json!({ "response": "250 OK" })),
        ev("open", 0, json!({ "useragent": "Mozilla/5.0" })),
        ev("click", 0, json!({ "url": "https://acme.test/orders/1" })),
        ev(
            "bounce",
            1,
            json!({ "type": "bounce", "status": "5.1.1",
                                "reason": "550 5.1.1 The email account does not exist" })
        ),
        ev("spamreport", 2, json!({})),
        ev(
            "deferred",
            3,
            json!({ "response": "421 try later", "attempt": "1" })
        ),
        ev(
            "bounce",
            3,
            json!({ "type": "blocked", "status": "4.0.0",
                                "reason": "421 blocked by policy" })
        ),
        ev("dropped", 4, json!({ "reason": "Bounced Address" })),
    ])
    .to_string();
    let r = notify_signed(&app, &events).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["received"], 7, "{}", r.body);
    assert_eq!(r.body["applied"], 7, "{}", r.body);

    let ann = email_with_status(&app, &p, &ids[0], "clicked").await;
    assert_eq!(ann["opens"], 1, "{ann}");
    let bob = email_with_status(&app, &p, &ids[1], "bounced").await;
    assert!(history_mentions(&bob, "5.1.1"), "{bob}");
    email_with_status(&app, &p, &ids[2], "complained").await;
    email_with_status(&app, &p, &ids[4], "bounced").await;
    assert_eq!(
        suppressions(&app, &p).await,
        [
            ("bob@example.com".to_string(), "HARD_BOUNCE".to_string()),
            ("cy@example.com".to_string(), "COMPLAINT".to_string()),
            ("eve@example.com".to_string(), "HARD_BOUNCE".to_string()),
        ]
    );
}
