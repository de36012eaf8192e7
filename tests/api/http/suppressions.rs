//! The suppression list through HTTP: addresses added, listed, paged and removed with their
//! validation errors and another project's isolation; a hard bounce reported to
//! `/webhooks/notify` lists the address, after which `/v1/send` records the email `suppressed`
//! and nothing reaches the SMTP relay until the address is removed; campaigns, test sends and
//! workflows skip a listed address, a workflow's `SEND_EMAIL` step run saying so in its output
//! with the list's reason; soft bounces list an address once the limit is reached without a
//! delivery between them.

use std::time::{Duration, Instant};

use herald::config::Settings;
use serde_json::{Value, json};

use crate::http::campaigns::recipients_of;
use crate::http::domains::{verified_domain, with_dns};
use crate::http::executions::{Step, settled, workflow};
use crate::http::send::email_with_status;
use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject, read};
use crate::support::smtpd::SmtpServer;

const SECRET: &str = "notify-secret-s";

/// Fast polling, unverified senders (the `outbox` transport writes files) and the notification
/// secret.
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
    s.plugins.notify_secret = Some(SECRET.into());
}

async fn listed(app: &TestApp, p: &TestProject) -> Vec<Value> {
    let r = app.get("/suppressions?limit=100", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

/// Sends one email from `from` to `to` and answers its id.
pub(crate) async fn send(app: &TestApp, p: &TestProject, to: &str, from: &str) -> String {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": from, "subject": "Receipt", "body": "<p>Thanks</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Posts `events` in the `outbox` transport's notification format.
async fn notify_json(app: &TestApp, events: Value) -> Reply {
    let r = app
        .client
        .post(app.url("/webhooks/notify"))
        .header("x-herald-secret", SECRET)
        .json(&json!({ "events": events }))
        .send()
        .await
        .unwrap();
    read(r).await
}

#[tokio::test]
async fn addresses_are_added_listed_paged_and_removed_per_project() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let other = app.project().await;

    // Invalid addresses: each reported at its index, nothing added.
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["ann@example.com", "not an address", "bob@", "cy@example.com"] }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["emails[1]", "emails[2]"]);
    let message = r.body["error"]["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("not an address"), "{message}");
    assert!(listed(&app, &p).await.is_empty());
    // Too many, none, and a reason that is not one.
    let many: Vec<String> = (0..1001).map(|i| format!("u{i}@example.com")).collect();
    let r = app
        .post("/suppressions", &p.secret_key, json!({ "emails": many }))
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["emails"]);
    app.post("/suppressions", &p.secret_key, json!({ "emails": [] }))
        .await
        .assert_error(422, "VALIDATION_ERROR");
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["ann@example.com"], "reason": "BORED" }),
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    assert!(listed(&app, &p).await.is_empty());

    // Added (any case, repeats once), MANUAL by default; again: kept as they were.
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["Ann@Example.com", "ann@example.com", "bob@example.com"] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "added": 2, "alreadyListed": 0 }));
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["bob@example.com", "cy@example.com"], "reason": "COMPLAINT" }),
        )
        .await;
    assert_eq!(r.body, json!({ "added": 1, "alreadyListed": 1 }));
    let all = listed(&app, &p).await;
    let entries: Vec<(&str, &str)> = all
        .iter()
        .map(|e| (e["email"].as_str().unwrap(), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        entries,
        [
            ("cy@example.com", "COMPLAINT"),
            ("bob@example.com", "MANUAL"),
            ("ann@example.com", "MANUAL")
        ]
    );
    assert!(all[0]["detail"].is_null() && all[0]["emailId"].is_null());
    assert!(all[0]["createdAt"].as_str().unwrap().ends_with('Z'));

    // Pages of one, by the cursor.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/suppressions?limit=1&cursor={c}"),
            None => "/suppressions?limit=1".to_string(),
        };
        let r = app.get(&path, &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if cursor.is_none() {
            assert_eq!(r.body["total"], 3);
        }
        seen.push(r.body["data"][0]["email"].as_str().unwrap().to_string());
        match r.body["cursor"].as_str() {
            Some(c) => {
                assert_eq!(r.body["hasMore"], true);
                cursor = Some(c.to_string());
            }
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["cy@example.com", "bob@example.com", "ann@example.com"]
    );
    app.get("/suppressions?cursor=bm9wZQ", &p.secret_key)
        .await
        .assert_error(400, "BAD_REQUEST");

    // Another project sees nothing and removes nothing; its own list is its own.
    let r = app.get("/suppressions", &other.secret_key).await;
    assert_eq!(
        (r.body["total"].clone(), r.body["data"].clone()),
        (json!(0), json!([]))
    );
    app.delete("/suppressions/ann@example.com", &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    // The public key cannot read it.
    let r = app.get("/suppressions", &p.public_key).await;
    assert!(r.status == 401 || r.status == 403, "{}", r.body);

    // Removed (any case); a second time, or an address never listed: 404.
    let r = app
        .delete("/suppressions/ANN@example.com", &p.secret_key)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    app.delete("/suppressions/ann@example.com", &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete("/suppressions/nobody@example.com", &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(listed(&app, &p).await.len(), 2);
}

/// A delivery status notification (RFC 3464) about `email_id`, as a relay returns it.
fn dsn(email_id: &str, to: &str, action: &str, status: &str) -> String {
    format!(
        "From: MAILER-DAEMON@mx.example.com\r\nContent-Type: multipart/report; report-type=delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.example.com\r\n\r\nFinal-Recipient: rfc822; {to}\r\nAction: {action}\r\n\
         Status: {status}\r\nDiagnostic-Code: smtp; 550 5.1.1 mailbox unknown\r\n\r\n\
         Message-ID: <{email_id}@acme.test>\r\nX-Herald-Message-Id: <{email_id}@acme.test>\r\n\r\n"
    )
}

#[tokio::test]
async fn a_hard_bounce_suppresses_every_later_send_until_the_address_is_removed() {
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_dns(&dns)(s);
        s.plugins.transport = "smtp".into();
        s.plugins.smtp_host = Some("127.0.0.1".into());
        s.plugins.smtp_port = smtp.addr.port();
        s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
        s.plugins.notify_secret = Some(SECRET.into());
        s.jobs_poll_interval_ms = 20;
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;

    let first = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    smtp.received(1).await;
    email_with_status(&app, &p, &first, "sent").await;

    // The relay's bounce comes back through the notification receiver.
    let r = app
        .client
        .post(app.url("/webhooks/notify"))
        .header("content-type", "message/rfc822")
        .header("x-herald-secret", SECRET)
        .body(dsn(&first, "ann@example.com", "failed", "5.1.1"))
        .send()
        .await
        .unwrap();
    let r = read(r).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let entries = listed(&app, &p).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["email"], "ann@example.com");
    assert_eq!(entries[0]["reason"], "HARD_BOUNCE");
    assert_eq!(entries[0]["emailId"], first.as_str());
    assert!(
        entries[0]["detail"].as_str().unwrap().contains("5.1.1"),
        "{entries:?}"
    );

    // A transactional receipt to the address: accepted, recorded suppressed, never sent. A send
    // to another address after it goes out, so the relay has seen the queue past it.
    let receipt = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    let email = email_with_status(&app, &p, &receipt, "suppressed").await;
    assert_eq!(
        email["error"],
        "the address is on the project's suppression list (HARD_BOUNCE)"
    );
    let bob = send(&app, &p, "bob@example.com", "hello@acme.test").await;
    email_with_status(&app, &p, &bob, "sent").await;
    let log = smtp.received(2).await;
    assert_eq!(log.data.len(), 2, "{:?}", log.rcpt_to);
    assert!(
        log.rcpt_to.iter().filter(|r| r.contains("ann@")).count() == 1,
        "{:?}",
        log.rcpt_to
    );
    let history = app.get(&format!("/emails/{receipt}"), &p.secret_key).await;
    assert_eq!(history.body["status"], "suppressed", "{}", history.body);
    // The activity feed says why.
    let r = app.get("/activity?limit=100", &p.secret_key).await;
    assert!(
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["type"] == "suppressed"
                && a["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("suppression list (HARD_BOUNCE)"))),
        "{}",
        r.body
    );

    // Another project's sends to the address are its own business.
    let other = app.project().await;
    verified_domain(&app, &other, &dns, "other.test").await;
    let theirs = send(&app, &other, "ann@example.com", "hi@other.test").await;
    email_with_status(&app, &other, &theirs, "sent").await;
    smtp.received(3).await;

    // Removed from the list, the address is mailed again.
    let r = app
        .delete("/suppressions/ann@example.com", &p.secret_key)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let again = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    email_with_status(&app, &p, &again, "sent").await;
    let log = smtp.received(4).await;
    assert_eq!(log.data.len(), 4);
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn campaigns_test_sends_and_workflows_skip_a_listed_address() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    for email in ["ann@example.com", "bob@example.com"] {
        let r = app
            .post(
                "/contacts",
                &p.secret_key,
                json!({ "email": email, "subscribed": true }),
            )
            .await;
        assert!(r.status.is_success(), "{}", r.body);
    }
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["bob@example.com"] }),
        )
        .await;
    assert_eq!(r.body["added"], 1, "{}", r.body);

    // A campaign to everyone: Ann gets it, Bob's email is suppressed.
    let r = app
        .post(
            "/campaigns",
            &p.secret_key,
            json!({ "name": "News", "subject": "News for {{email}}", "body": "<p>Hi</p>",
                    "from": "news@acme.test", "audienceType": "ALL" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let campaign = r.body["data"]["id"].as_str().unwrap().to_string();
    let r = app
        .call(
            reqwest::Method::POST,
            &format!("/campaigns/{campaign}/send"),
            Some(&p.secret_key),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let stats = loop {
        let r = app
            .get(&format!("/campaigns/{campaign}"), &p.secret_key)
            .await;
        if r.body["status"] == "SENT" {
            let r = app
                .get(&format!("/campaigns/{campaign}/stats"), &p.secret_key)
                .await;
            break r.body;
        }
        assert!(Instant::now() < deadline, "never sent: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats["suppressed"], 1, "{stats}");
    wait_until("Ann's campaign email", || {
        recipients_of(&app, "News").len() == 1
    })
    .await;
    assert_eq!(recipients_of(&app, "News"), ["ann@example.com"]);

    // A test send to Bob: recorded, suppressed.
    let r = app
        .post(
            &format!("/campaigns/{campaign}/test"),
            &p.secret_key,
            json!({ "email": "bob@example.com" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let test = r.body["emailId"].as_str().unwrap().to_string();
    let email = email_with_status(&app, &p, &test, "suppressed").await;
    assert!(
        email["error"].as_str().unwrap().contains("(MANUAL)"),
        "{email}"
    );

    // A workflow's transactional send: Ann's goes, Bob's is suppressed.
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "welcome", "type": "TRANSACTIONAL", "subject": "Welcome for {{email}}",
                    "body": "<p>Welcome</p>", "from": "hello@acme.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let template = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            "/workflows",
            &p.secret_key,
            json!({ "name": "welcome", "triggerConfig": { "eventName": "signup" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let wf = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{wf}/steps"),
            &p.secret_key,
            json!({ "type": "SEND_EMAIL", "config": { "templateId": template } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = app
        .patch(
            &format!("/workflows/{wf}"),
            &p.secret_key,
            json!({ "enabled": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for email in ["ann@example.com", "bob@example.com"] {
        let r = app
            .post(
                "/v1/track",
                &p.secret_key,
                json!({ "email": email, "event": "signup" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    wait_until("Ann's welcome", || {
        recipients_of(&app, "Welcome").len() == 1
    })
    .await;
    // Bob's execution completed too, its email recorded suppressed.
    let deadline = Instant::now() + Duration::from_secs(20);
    let bobs = loop {
        let r = app.get("/activity?limit=100", &p.secret_key).await;
        let found = r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["type"] == "suppressed" && a["subject"] == "Welcome for bob@example.com")
            .cloned();
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no suppressed welcome: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        bobs["detail"].as_str().unwrap().contains("(MANUAL)"),
        "{bobs}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recipients_of(&app, "Welcome"), ["ann@example.com"]);
}

#[tokio::test]
async fn soft_bounces_reaching_the_limit_without_a_delivery_suppress_the_address() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.sending.soft_bounce_limit = 3;
        s.sending.soft_bounce_days = 7;
    })
    .await;
    let p = app.project().await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(send(&app, &p, "ann@example.com", "hello@acme.test").await);
    }
    let event = |kind: &str, id: &str| json!({ "type": kind, "messageId": id, "email": "ann@example.com", "detail": "452 4.2.2 mailbox full" });
    // Two soft bounces, a delivery, two more (one of them reported twice): not yet.
    let r = notify_json(
        &app,
        json!([
            event("bounced-soft", &ids[0]),
            event("bounced-soft", &ids[1]),
            event("delivered", &ids[2]),
            event("bounced-soft", &ids[3]),
            event("bounced-soft", &ids[4]),
            event("bounced-soft", &ids[4])
        ]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["applied"], 6, "{}", r.body);
    assert!(listed(&app, &p).await.is_empty());
    // A third since the delivery: listed as a hard bounce, saying why.
    let r = notify_json(&app, json!([event("bounced-soft", &ids[5])])).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let entries = listed(&app, &p).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["reason"], "HARD_BOUNCE");
    assert_eq!(entries[0]["emailId"], ids[5].as_str());
    let detail = entries[0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("3 soft bounces within 7 days") && detail.contains("4.2.2"),
        "{detail}"
    );
    let next = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    email_with_status(&app, &p, &next, "suppressed").await;
}

#[tokio::test]
async fn an_email_deferred_before_its_address_was_listed_is_suppressed_at_its_next_attempt() {
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.transport = "smtp".into();
        s.plugins.smtp_host = Some("127.0.0.1".into());
        s.plugins.smtp_port = smtp.addr.port();
        s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
    })
    .await;
    let p = app.project().await;
    // `later…` is always answered 451: the email stays queued, retried after a backoff.
    let id = send(&app, &p, "later@example.com", "hello@acme.test").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let attempts = format!(
        "SELECT COUNT(*) FROM emails WHERE id = '{id}' AND attempts >= 1 AND hand_off_token IS NULL"
    );
    while crate::http::send::count(&app, &attempts).await == 0 {
        assert!(Instant::now() < deadline, "never deferred");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["later@example.com"] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The next attempt finds the address listed: recorded suppressed, never handed over.
    let email = email_with_status(&app, &p, &id, "suppressed").await;
    assert_eq!(
        email["error"],
        "the address is on the project's suppression list (MANUAL)"
    );
    let history = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(history.body["status"], "suppressed", "{}", history.body);
    let r = app.get("/activity?limit=100", &p.secret_key).await;
    assert!(
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["type"] == "suppressed" && a["emailId"] == id.as_str()),
        "{}",
        r.body
    );
    assert!(smtp.log.lock().unwrap().data.is_empty());
}

#[tokio::test]
async fn a_workflow_send_to_a_listed_address_says_suppressed_and_why_in_its_step_run() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    for (emails, reason) in [
        (json!(["bob@example.com"]), json!(null)),
        (json!(["cid@example.com"]), json!("HARD_BOUNCE")),
        (json!(["dee@example.com"]), json!("COMPLAINT")),
    ] {
        let r = app
            .post(
                "/suppressions",
                &p.secret_key,
                json!({ "emails": emails, "reason": reason }),
            )
            .await;
        assert_eq!(r.body["added"], 1, "{}", r.body);
    }
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "receipt", "type": "TRANSACTIONAL", "subject": "Receipt",
                    "body": "<p>Thanks</p>", "from": "hello@acme.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let template = r.body["id"].as_str().unwrap().to_string();
    let (wf, _) = workflow(
        &app,
        &p,
        "order",
        vec![Step("SEND_EMAIL", json!({ "templateId": template }))],
        &[],
        json!({}),
    )
    .await;
    let people = [
        "ann@example.com",
        "bob@example.com",
        "cid@example.com",
        "dee@example.com",
    ];
    for email in people {
        let r = app
            .post(
                "/v1/track",
                &p.secret_key,
                json!({ "email": email, "event": "order" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let executions = settled(&app, &p, &wf, people.len(), &["COMPLETED"]).await;
    let mut seen = Vec::new();
    for e in &executions {
        let run = &e["stepRuns"][0];
        assert_eq!(run["stepType"], "SEND_EMAIL", "{e}");
        assert_eq!(run["status"], "COMPLETED", "{e}");
        let effect = &run["output"]["effects"][0];
        let to = effect["to"].as_str().unwrap().to_string();
        let email = effect["emailId"].as_str().unwrap();
        let (status, reason) = match to.as_str() {
            "ann@example.com" => ("queued", None),
            "bob@example.com" => ("suppressed", Some("MANUAL")),
            "cid@example.com" => ("suppressed", Some("HARD_BOUNCE")),
            _ => ("suppressed", Some("COMPLAINT")),
        };
        assert_eq!(effect["suppressed"], reason.is_some(), "{to}: {effect}");
        assert_eq!(effect["reason"].as_str(), reason, "{to}: {effect}");
        // The email itself agrees.
        let r = app.get(&format!("/emails/{email}"), &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if status == "suppressed" {
            assert_eq!(r.body["status"], "suppressed", "{}", r.body);
            let error = r.body["error"].as_str().unwrap();
            assert!(error.contains(reason.unwrap()), "{error}");
        } else {
            assert_ne!(r.body["status"], "suppressed", "{}", r.body);
        }
        seen.push(to);
    }
    seen.sort();
    assert_eq!(seen, people);
}
