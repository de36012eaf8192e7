//! The `mailgun` transport against a loopback Mailgun (`support::mailgun`): each message of a
//! batch posted to `/v3/<domain>/messages.mime` as Herald built and DKIM-signed it, with
//! `X-Mailgun-Variables` naming the email; a refused recipient failing alone; 5xx and 429
//! deferring the email; a wrong key or an unknown sending domain failing it with what to fix;
//! and webhooks authenticated with the signing key (good, wrong key, stale, altered) and each
//! event kind applied.

use std::collections::BTreeMap;
use std::time::Duration;

use herald::config::Settings;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::http::send::{dkim_passes, email_with_status};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject};
use crate::support::mailgun::{API_KEY, FakeMailgun, SIGNING_KEY, signed};
use crate::support::providers::{
    email_ids, error_message, history_mentions, suppressions, unix_now as now,
};

/// Herald configured with the `mailgun` transport on `mailgun`, `settings` overlaid on the
/// plugin's defaults of the tests.
fn configure<'a>(
    dns: &'a DnsServer,
    mailgun: &'a FakeMailgun,
    settings: &'a [(&'a str, &'a str)],
) -> impl FnOnce(&mut Settings) + 'a {
    move |s: &mut Settings| {
        with_dns(dns)(s);
        s.jobs_poll_interval_ms = 20;
        s.plugins.transport = "mailgun".into();
        s.plugins.transport_http_allow_private = true;
        let mut table = BTreeMap::from([
            ("api_key".to_string(), API_KEY.to_string()),
            ("api_base".to_string(), mailgun.base()),
            ("webhook_signing_key".to_string(), SIGNING_KEY.to_string()),
        ]);
        for (k, v) in settings {
            table.insert(k.to_string(), v.to_string());
        }
        s.plugins.settings.insert("mailgun".into(), table);
    }
}

struct Setup {
    dns: DnsServer,
    mailgun: FakeMailgun,
    app: TestApp,
    p: TestProject,
}

/// Herald with the `mailgun` transport (`settings` overlaid, then `adjust`) on a fake with the
/// sending domains `mailgun_domains`, and a project with the verified domain `acme.test`.
async fn setup(
    settings: &[(&str, &str)],
    mailgun_domains: &[&str],
    adjust: fn(&mut Settings),
) -> Setup {
    let dns = DnsServer::start().await;
    let mailgun = FakeMailgun::start(mailgun_domains).await;
    let configure = configure(&dns, &mailgun, settings);
    let app = TestApp::spawn_with(|s: &mut Settings| {
        configure(s);
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    Setup {
        dns,
        mailgun,
        app,
        p,
    }
}

/// Sends one email from `hello@acme.test` to each of `to`; answers their ids, in order.
async fn send(app: &TestApp, p: &TestProject, to: &[&str]) -> Vec<String> {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "Acme <hello@acme.test>", "subject": "Your receipt",
                    "body": "<p>Thanks for your order</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    email_ids(&r, to)
}

/// Posts a Mailgun webhook call.
async fn notify(app: &TestApp, body: &Value) -> Reply {
    crate::support::providers::notify(app, "mailgun", HeaderMap::new(), &body.to_string()).await
}

/// Mailgun's event data about `email_id` sent to `recipient`.
fn event(kind: &str, email_id: &str, recipient: &str, extra: Value) -> Value {
    let mut data = json!({
        "id": format!("evt-{kind}-{email_id}"),
        "event": kind,
        "timestamp": now() as f64 + 0.25,
        "recipient": recipient,
        "user-variables": { "herald_id": email_id },
        "message": { "headers": { "message-id": format!("{email_id}@acme.test") } },
    });
    for (k, v) in extra.as_object().unwrap() {
        data[k] = v.clone();
    }
    data
}

fn good(data: Value) -> Value {
    signed(
        SIGNING_KEY,
        now(),
        &format!("tok-{}", uuid::Uuid::new_v4()),
        data,
    )
}

#[tokio::test]
async fn mailgun_sends_each_message_signed_with_its_id_and_a_refused_recipient_fails_alone() {
    let Setup {
        dns,
        mailgun,
        app,
        p,
    } = setup(&[], &["acme.test"], |_| {}).await;
    let ids = send(
        &app,
        &p,
        &["ann@example.com", "reject@example.com", "bob@example.com"],
    )
    .await;
    let refused = email_with_status(&app, &p, &ids[1], "failed").await;
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("Mailgun refused the message (400)")
            && error.contains("not a valid address"),
        "{refused}"
    );
    for id in [&ids[0], &ids[2]] {
        let email = email_with_status(&app, &p, id, "sent").await;
        assert_eq!(email["attempts"], 1, "{email}");
        let provider_id = email["providerId"].as_str().unwrap();
        assert!(
            provider_id.starts_with("20261207.") && provider_id.ends_with("@acme.test"),
            "Mailgun's id, without angle brackets: {email}"
        );
    }
    // One call per message, to the sender's Mailgun domain (the `bounces.` return path's
    // domain less `bounces.`), each with its recipient and Herald's message, the variables
    // line prepended; Herald's DKIM signature still verifies.
    let calls = mailgun.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    for (call, (id, to)) in calls.iter().zip(ids.iter().zip([
        "ann@example.com",
        "reject@example.com",
        "bob@example.com",
    ])) {
        assert_eq!(call.domain, "acme.test");
        assert_eq!(call.to, [to]);
        let text = String::from_utf8_lossy(&call.message);
        let first = format!("X-Mailgun-Variables: {{\"herald_id\":\"{id}\"}}\r\n");
        assert!(text.starts_with(&first), "{text}");
        assert!(
            text.contains(&format!("Message-ID: <{id}@acme.test>")),
            "{text}"
        );
        assert!(text.contains("DKIM-Signature:"), "{text}");
        assert!(dkim_passes(&dns, &call.message).await, "{text}");
    }
}

#[tokio::test]
async fn mailgun_server_errors_defer_the_email_until_mailgun_takes_it() {
    let Setup {
        mailgun, app, p, ..
    } = setup(&[], &["acme.test"], |_| {}).await;
    mailgun.fail_next(&[(503, None), (500, None)]);
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(email["attempts"], 3, "{email}");
    let statuses: Vec<u16> = mailgun.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, [503, 500, 200]);
}

#[tokio::test]
async fn a_mailgun_429_defers_the_email_with_its_retry_after() {
    // Given up once older than a second: the last error shows what the plugin reported.
    let Setup {
        mailgun, app, p, ..
    } = setup(&[], &["acme.test"], |s| {
        s.sending.retry_lifetime_seconds = 1
    })
    .await;
    mailgun.fail_next(&[(429, Some(7)); 20]);
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.starts_with("gave up after")
            && error.contains("rate limited by Mailgun (retry after 7 s)"),
        "{email}"
    );
}

#[tokio::test]
async fn mailgun_rate_limits_are_waited_out_for_the_retry_after() {
    // The queue reads the plugin's `(retry after N s)` (jobs/deliver.rs, issue #77 routing).
    let Setup {
        mailgun, app, p, ..
    } = setup(&[], &["acme.test"], |_| {}).await;
    mailgun.fail_next(&[(429, Some(3))]);
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(email["attempts"], 2, "{email}");
    let calls = mailgun.calls();
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 200]);
    let waited = calls[1].at - calls[0].at;
    assert!(
        waited >= Duration::from_secs(3),
        "retried after {waited:?}, before Mailgun's Retry-After of 3 s"
    );
}

#[tokio::test]
async fn mailgun_refusing_the_key_or_the_domain_fails_the_email_with_what_to_fix() {
    // A wrong key: 401 from Mailgun.
    let Setup { app, p, .. } = setup(&[("api_key", "key-wrong")], &["acme.test"], |_| {}).await;
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.contains("refused the API key") && error.contains("plugins.settings.mailgun.api_key"),
        "{email}"
    );
    drop(app);

    // The account sends from `mg.acme.test`: without the `domain` setting, 404 names the domain
    // tried; with `domain = "mg.{domain}"` the message goes to Mailgun's `mg.acme.test`.
    let Setup { app, p, .. } = setup(&[], &["mg.acme.test"], |_| {}).await;
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    let email = email_with_status(&app, &p, &id, "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.contains("no sending domain `acme.test`")
            && error.contains("plugins.settings.mailgun.domain"),
        "{email}"
    );
    drop(app);
    let Setup {
        mailgun, app, p, ..
    } = setup(&[("domain", "mg.{domain}")], &["mg.acme.test"], |_| {}).await;
    let id = send(&app, &p, &["ann@example.com"]).await.remove(0);
    email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(mailgun.calls()[0].domain, "mg.acme.test");
}

#[tokio::test]
async fn mailgun_webhooks_are_authenticated_and_each_event_kind_applies() {
    let Setup { app, p, .. } = setup(&[], &["acme.test"], |_| {}).await;
    let to = [
        "ann@example.com",
        "bob@example.com",
        "cy@example.com",
        "dee@example.com",
    ];
    let ids = send(&app, &p, &to).await;
    for id in &ids {
        email_with_status(&app, &p, id, "sent").await;
    }
    let delivered = event("delivered", &ids[0], "ann@example.com", json!({}));

    // Refused, and nothing applied: another key, a stale timestamp, an altered token, a
    // missing signature (401); a body that is not JSON (400).
    let wrong = signed("another-key", now(), "tok-1", delivered.clone());
    let stale = signed(SIGNING_KEY, now() - 600, "tok-2", delivered.clone());
    let mut altered = good(delivered.clone());
    altered["signature"]["token"] = json!("tok-altered");
    let mut unsigned = good(delivered.clone());
    unsigned.as_object_mut().unwrap().remove("signature");
    for (what, body) in [
        ("wrong key", wrong),
        ("stale", stale),
        ("altered", altered),
        ("unsigned", unsigned),
    ] {
        let r = notify(&app, &body).await;
        assert_eq!(r.status, 401, "{what}: {}", r.body);
        assert!(
            error_message(&r).contains("not authenticated"),
            "{what}: {}",
            r.body
        );
    }
    let r =
        crate::support::providers::notify(&app, "mailgun", HeaderMap::new(), "signature=x").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = app.get(&format!("/emails/{}", ids[0]), &p.secret_key).await;
    assert_eq!(r.body["status"], "sent", "nothing applied: {}", r.body);

    // Delivered.
    let r = notify(&app, &good(delivered)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "received": 1, "applied": 1, "ignored": 0 }));
    email_with_status(&app, &p, &ids[0], "delivered").await;
    // Opened, then clicked.
    let r = notify(
        &app,
        &good(event("opened", &ids[0], "ann@example.com", json!({}))),
    )
    .await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let clicked = event(
        "clicked",
        &ids[0],
        "Ann@Example.com",
        json!({ "url": "https://acme.test/orders/1" }),
    );
    let r = notify(&app, &good(clicked)).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let email = email_with_status(&app, &p, &ids[0], "clicked").await;
    assert_eq!(email["opens"], 1, "{email}");

    // A permanent failure is a hard bounce: the address is suppressed.
    let failed = event(
        "failed",
        &ids[1],
        "bob@example.com",
        json!({ "severity": "permanent", "reason": "bounce",
                "delivery-status": { "code": 550, "message": "5.1.1 The email account does not exist",
                                     "description": "" } }),
    );
    let r = notify(&app, &good(failed)).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let email = email_with_status(&app, &p, &ids[1], "bounced").await;
    assert!(history_mentions(&email, "550 5.1.1"), "{email}");
    // A complaint suppresses too; named by the Message-ID when the variables are absent.
    let mut complained = event("complained", &ids[2], "cy@example.com", json!({}));
    complained.as_object_mut().unwrap().remove("user-variables");
    let r = notify(&app, &good(complained)).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    email_with_status(&app, &p, &ids[2], "complained").await;
    // A temporary failure is a soft bounce: not suppressed (one is under the limit).
    let soft = event(
        "failed",
        &ids[3],
        "dee@example.com",
        json!({ "severity": "temporary", "reason": "generic",
                "delivery-status": { "code": 452, "message": "mailbox full" } }),
    );
    let r = notify(&app, &good(soft)).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    // Events Herald does not follow are received and skipped.
    let r = notify(
        &app,
        &good(event("accepted", &ids[3], "dee@example.com", json!({}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["received"], 0, "{}", r.body);

    assert_eq!(
        suppressions(&app, &p).await,
        [
            ("bob@example.com".to_string(), "HARD_BOUNCE".to_string()),
            ("cy@example.com".to_string(), "COMPLAINT".to_string()),
        ]
    );
}
