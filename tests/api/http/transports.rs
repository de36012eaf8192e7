//! Transport routing through HTTP: named transports (`[transports.<name>]`) with a fallback
//! that takes a message at once when its transport fails transiently (the built-in `smtp`
//! transport against a relay answering 451, failing over to `outbox`), the transport chosen per
//! project and per sending domain (`PATCH /users/@me/projects/:id`, `PATCH /domains/:id`, 422
//! for a name that is not configured), the email's `transport`, and a transient error's
//! `(retry after N s)` honoured; a retried try recorded as a `deferred` entry in the email's
//! history and the activity feed (with the whole failover chain's story when every transport
//! of it failed transiently); a provider transport (`postmark` against its double) configured
//! wholly in its `[transports.<name>]` table, failing over on a 5xx.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use herald::config::Settings;
use reqwest::Method;
use serde_json::{Value, json};

use crate::http::send::{count, email_with_status};
use crate::http::suppressions::send;
use crate::support::harness::{Reply, TestApp, TestProject};
use crate::support::smtpd::SmtpServer;

/// A named transport's table.
fn transport(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Fast polling, unverified senders, and the `smtp` capability pointed at `smtp`.
fn relay(s: &mut Settings, smtp: &SmtpServer) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
    s.plugins.smtp_host = Some("127.0.0.1".into());
    s.plugins.smtp_port = smtp.addr.port();
    s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
}

/// The default transport `primary` (the `smtp` plugin), failing over to `spare` (the plugin
/// `spare_plugin`).
fn failover_chain(s: &mut Settings, spare_plugin: &str) {
    s.transports.insert(
        "primary".into(),
        transport(&[("plugin", "smtp"), ("fallback", "spare")]),
    );
    s.transports
        .insert("spare".into(), transport(&[("plugin", spare_plugin)]));
    s.plugins.transport = "primary".into();
}

/// `PATCH /users/@me/projects/:id` as the project's owner.
async fn patch_project(app: &TestApp, p: &TestProject, body: Value) -> Reply {
    let path = format!("/users/@me/projects/{}", p.id);
    app.call_with(&p.owner, Method::PATCH, &path, None, Some(body), &[])
        .await
}

/// `PATCH /domains/:id` with `{ "transport": transport }`.
async fn patch_domain(app: &TestApp, p: &TestProject, id: &str, transport: Value) -> Reply {
    app.patch(
        &format!("/domains/{id}"),
        &p.secret_key,
        json!({ "transport": transport }),
    )
    .await
}

#[tokio::test]
async fn a_transient_failure_hands_the_message_to_the_fallback_with_the_same_message_id() {
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        relay(s, &smtp);
        failover_chain(s, "outbox");
    })
    .await;
    let p = app.project().await;

    // The relay takes one; it answers the other 451: the fallback takes it at once.
    let ok = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    let later = send(&app, &p, "later@example.com", "hello@acme.test").await;
    let sent = email_with_status(&app, &p, &ok, "sent").await;
    assert_eq!(sent["transport"], "primary", "{sent}");
    let failed_over = email_with_status(&app, &p, &later, "sent").await;
    assert_eq!(failed_over["transport"], "spare", "{failed_over}");
    assert_eq!(failed_over["attempts"], 1, "{failed_over}");
    let entry = failed_over["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["type"] == "sent" || h["kind"] == "sent")
        .cloned()
        .unwrap_or_else(|| panic!("a sent entry: {failed_over}"));
    let detail = entry["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("failed over from `primary`") && detail.contains("to `spare`"),
        "{failed_over}"
    );
    assert!(detail.contains("451"), "{failed_over}");
    // The outbox has the message the relay refused, with its Message-ID.
    let message_id = failed_over["messageId"].as_str().unwrap().to_string();
    let written = app.outbox_messages();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(
        written[0].contains(message_id.trim_matches(|c| c == '<' || c == '>')),
        "{message_id} in {}",
        written[0]
    );
    let log = smtp.received(1).await;
    assert_eq!(log.data.len(), 1, "{log:?}");
    assert!(log.rcpt_to[0].contains("ann@"), "{log:?}");
}

#[tokio::test]
async fn projects_and_domains_choose_their_transport() {
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        relay(s, &smtp);
        s.transports
            .insert("relay".into(), transport(&[("plugin", "smtp")]));
        s.transports
            .insert("files".into(), transport(&[("plugin", "outbox")]));
        // The default: the `outbox` plugin by its name.
        s.plugins.transport = "outbox".into();
    })
    .await;
    let p = app.project().await;
    let other = app.project().await;

    // Unknown names are refused, naming the field.
    let r = patch_project(&app, &p, json!({ "transport": "nowhere" })).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.to_string().contains("transport"), "{}", r.body);
    assert!(r.body.to_string().contains("nowhere"), "{}", r.body);

    // The project's transport, shown on its record.
    let r = patch_project(&app, &p, json!({ "transport": "files" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["transport"], "files");
    let r = app
        .call_with(
            &p.owner,
            Method::GET,
            "/users/@me/projects",
            None,
            None,
            &[],
        )
        .await;
    let listed = r.body.as_array().unwrap();
    let mine = listed.iter().find(|x| x["id"] == p.id.as_str()).unwrap();
    assert_eq!(mine["transport"], "files", "{mine}");

    // A domain of the project sends through its own.
    let r = app
        .post("/domains", &p.secret_key, json!({ "domain": "acme.test" }))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["transport"], Value::Null, "{}", r.body);
    let domain = r.body["id"].as_str().unwrap().to_string();
    let r = patch_domain(&app, &p, &domain, json!("elsewhere")).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.to_string().contains("transport"), "{}", r.body);
    let r = patch_domain(&app, &p, &domain, json!("relay")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["transport"], "relay");
    let r = app.get(&format!("/domains/{domain}"), &p.secret_key).await;
    assert_eq!(r.body["transport"], "relay", "{}", r.body);

    let by_domain = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    let by_project = send(&app, &p, "bob@example.com", "hello@plain.test").await;
    let by_default = send(&app, &other, "cy@example.com", "hello@plain.test").await;
    let e = email_with_status(&app, &p, &by_domain, "sent").await;
    assert_eq!(e["transport"], "relay", "{e}");
    let e = email_with_status(&app, &p, &by_project, "sent").await;
    assert_eq!(e["transport"], "files", "{e}");
    let e = email_with_status(&app, &other, &by_default, "sent").await;
    assert_eq!(e["transport"], "outbox", "{e}");
    let log = smtp.received(1).await;
    assert_eq!(log.rcpt_to.len(), 1, "{log:?}");
    assert!(log.rcpt_to[0].contains("ann@"), "{log:?}");
    assert_eq!(app.outbox_messages().len(), 2);

    // Cleared: the domain goes back to the project's, the project to the default.
    let r = patch_domain(&app, &p, &domain, json!(null)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["transport"], Value::Null);
    let again = send(&app, &p, "dee@example.com", "hello@acme.test").await;
    let e = email_with_status(&app, &p, &again, "sent").await;
    assert_eq!(e["transport"], "files", "{e}");
    let r = patch_project(&app, &p, json!({ "transport": null })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["transport"], Value::Null);
    let last = send(&app, &p, "eve@example.com", "hello@acme.test").await;
    let e = email_with_status(&app, &p, &last, "sent").await;
    assert_eq!(e["transport"], "outbox", "{e}");
}

#[tokio::test]
async fn a_transient_error_asking_to_retry_after_n_seconds_is_not_retried_sooner() {
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        relay(s, &smtp);
        s.plugins.transport = "smtp".into();
    })
    .await;
    let p = app.project().await;
    let id = send(&app, &p, "ratelimited@example.com", "hello@acme.test").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let due = loop {
        let due = count(
            &app,
            &format!(
                "SELECT COALESCE(MAX(due_at), 0) FROM emails WHERE id = '{id}' AND attempts = 1 \
                 AND hand_off_token IS NULL"
            ),
        )
        .await;
        if due > 0 {
            break due;
        }
        assert!(Instant::now() < deadline, "never deferred");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Retried no sooner than the 120 s asked (the backoff alone would be about a second).
    assert!(due >= now + 110_000, "due in {} ms", due - now);
    let e = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(e.body["status"], "queued", "{}", e.body);
    // The deferral is in the email's history and the activity feed, with the relay's answer.
    let deferred = deferred_entries(&app, &p, &id).await;
    assert_eq!(deferred.len(), 1, "{deferred:?}");
    assert!(
        deferred[0].starts_with("`smtp`: ")
            && deferred[0].contains("(451): 4.7.0 rate limited (retry after 120 s)"),
        "{deferred:?}"
    );
    let r = app.get("/activity?type=deferred", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 1, "{}", r.body);
    let entry = &r.body["data"][0];
    assert_eq!(
        (entry["type"].as_str(), entry["emailId"].as_str()),
        (Some("deferred"), Some(id.as_str())),
        "{entry}"
    );
    assert_eq!(entry["email"], "ratelimited@example.com", "{entry}");
    assert!(entry["detail"].as_str().unwrap().contains("451"), "{entry}");
    let r = app.get("/activity/types", &p.secret_key).await;
    assert!(
        r.body["types"]
            .as_array()
            .unwrap()
            .contains(&json!("deferred")),
        "{}",
        r.body
    );
}

/// Waits (up to 20 s) until the email `id` has a `deferred` history entry; their details.
async fn deferred_entries(app: &TestApp, p: &TestProject, id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = app.get(&format!("/emails/{id}"), &p.secret_key).await;
        assert_eq!(e.status, 200, "{}", e.body);
        let deferred: Vec<String> = e.body["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["type"] == "deferred")
            .map(|h| h["detail"].as_str().unwrap_or_default().to_string())
            .collect();
        if !deferred.is_empty() {
            return deferred;
        }
        assert!(Instant::now() < deadline, "never deferred: {}", e.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn when_every_transport_of_a_chain_fails_transiently_the_deferral_tells_the_story() {
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        relay(s, &smtp);
        // Both through the relay, which answers `later@` 451 each time.
        failover_chain(s, "smtp");
    })
    .await;
    let p = app.project().await;
    let id = send(&app, &p, "later@example.com", "hello@acme.test").await;
    let deferred = deferred_entries(&app, &p, &id).await;
    let first = &deferred[0];
    assert!(
        first.starts_with(
            "failed over from `primary` (transient error (451): 4.3.0 try again later) to `spare`; \
             `spare`: "
        ) && first.ends_with("(451): 4.3.0 try again later"),
        "{deferred:?}"
    );
    let e = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(e.body["status"], "queued", "{}", e.body);
    let r = app.get("/activity?type=deferred", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["total"].as_i64().unwrap() >= 1, "{}", r.body);
    assert!(
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["type"] == "deferred" && a["emailId"] == id.as_str()),
        "{}",
        r.body
    );
    // Another project sees none of them.
    let other = app.project().await;
    let r = app.get("/activity?type=deferred", &other.secret_key).await;
    assert_eq!(r.body["total"], 0, "{}", r.body);
}

#[tokio::test]
async fn a_provider_transport_with_its_own_settings_fails_over_on_a_5xx() {
    use crate::support::postmark::{BATCH, FakePostmark, SERVER_TOKEN};
    let pm = FakePostmark::start().await;
    let app = TestApp::spawn_with(|s| {
        s.jobs_poll_interval_ms = 20;
        s.domains.allow_unverified = true;
        s.plugins.transport_http_allow_private = true;
        // The provider's settings are the transport's own: nothing in plugins.settings.
        s.transports.insert(
            "pm".into(),
            transport(&[
                ("plugin", "postmark"),
                ("server_token", SERVER_TOKEN),
                ("api_base", &pm.base()),
                ("message_stream", "outbound"),
                ("fallback", "files"),
            ]),
        );
        s.transports
            .insert("files".into(), transport(&[("plugin", "outbox")]));
        s.plugins.transport = "pm".into();
    })
    .await;
    let p = app.project().await;

    // Postmark answers 500 once: the message goes to the fallback at once.
    pm.calls.script(
        500,
        &[],
        json!({ "ErrorCode": 1, "Message": "Internal server error" }),
    );
    let first = send(&app, &p, "ann@example.com", "hello@acme.test").await;
    let e = email_with_status(&app, &p, &first, "sent").await;
    assert_eq!(e["transport"], "files", "{e}");
    assert_eq!(e["attempts"], 1, "{e}");
    assert!(e.to_string().contains("failed over from `pm`"), "{e}");
    assert_eq!(app.outbox_messages().len(), 1);

    // Then Postmark takes the next one, through the transport's own API base and token.
    let second = send(&app, &p, "bob@example.com", "hello@acme.test").await;
    let e = email_with_status(&app, &p, &second, "sent").await;
    assert_eq!(e["transport"], "pm", "{e}");
    assert_eq!(pm.calls.calls(BATCH).len(), 2);
    assert_eq!(app.outbox_messages().len(), 1);
}
