//! `POST /webhooks/notify/:transport`: each transport's own notification URL. The built-in
//! `outbox` and `smtp` each parse their format at their path; an unknown name is 404 naming
//! it; the transports authenticated by `plugins.notify_secret` (the built-ins `smtp` and
//! `outbox`, external plugins) are refused (403) while it is unset; a plugin's authentication
//! refusal is 401 and any other refusal 400, changing nothing. The SDK's example transport
//! (`sdk/examples/hello-transport`, installed from `plugins.dir` as `hellomail`) delivers a
//! batch in one call to a loopback double of its API, with one message refused, maps the API's
//! errors, and reads signed notifications at `/webhooks/notify/hellomail`, with the signature
//! in a header or in the URL (the pseudo-header `:query`).

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::http::send::email_with_status;
use crate::support::harness::{Reply, TestApp, TestProject, read};
use crate::support::hellomail::HelloMail;
use herald::config::Settings;
use herald::plugins::{DeliveryError, OutgoingMessage};

const SECRET: &str = "notify-secret-t";
/// The key Hello Mail signs its notifications with (`plugins.settings.hellomail.secret`).
const HELLO_KEY: &str = "hello-signing-key";

/// The example transport, built by `host/build.rs`, and its manifest.
const HELLO_TRANSPORT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hello_transport.wasm"));
const HELLO_MANIFEST: &str = include_str!("../../../sdk/examples/hello-transport/hellomail.toml");

/// Fast polling, unverified senders allowed.
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
}

/// Posts `body` to `path` with the given extra headers.
async fn post(app: &TestApp, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    let mut req = app.client.post(app.url(path)).body(body);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    read(req.send().await.unwrap()).await
}

/// `events` in the `outbox` transport's format.
fn outbox_events(events: Value) -> Vec<u8> {
    json!({ "events": events }).to_string().into_bytes()
}

async fn send(app: &TestApp, p: &TestProject, to: Value) -> Vec<String> {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "hello@acme.test", "subject": "Receipt", "body": "<p>Thanks</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["email"].as_str().unwrap().to_string())
        .collect()
}

/// A delivery status notification (RFC 3464), as the `smtp` transport reads them.
fn dsn(email_id: &str, to: &str) -> Vec<u8> {
    format!(
        "From: MAILER-DAEMON@mx.example.com\r\nContent-Type: multipart/report; report-type=delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.example.com\r\n\r\nFinal-Recipient: rfc822; {to}\r\nAction: failed\r\n\
         Status: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 mailbox unknown\r\n\r\n\
         Message-ID: <{email_id}@acme.test>\r\nX-Herald-Message-Id: <{email_id}@acme.test>\r\n\r\n"
    )
    .into_bytes()
}

#[tokio::test]
async fn each_built_in_transport_reads_its_notifications_at_its_own_path() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.notify_secret = Some(SECRET.into());
    })
    .await;
    let p = app.project().await;
    let ids = send(&app, &p, json!(["ann@example.com", "bob@example.com"])).await;
    for id in &ids {
        email_with_status(&app, &p, id, "sent").await;
    }
    let secret = [("x-herald-secret", SECRET)];

    // `outbox` reads its JSON at /webhooks/notify/outbox.
    let delivered = outbox_events(json!([
        { "type": "delivered", "messageId": ids[0], "email": "ann@example.com" }
    ]));
    let r = post(&app, "/webhooks/notify/outbox", &secret, delivered.clone()).await;
    assert_eq!(
        (r.status.as_u16(), &r.body),
        (200, &json!({ "received": 1, "applied": 1, "ignored": 0 }))
    );
    email_with_status(&app, &p, &ids[0], "delivered").await;

    // `smtp` reads delivery status reports at /webhooks/notify/smtp (the outbox's JSON is no
    // report to it: 400, with its own message), whichever transport sent the email.
    let r = post(&app, "/webhooks/notify/smtp", &secret, delivered).await;
    r.assert_error(400, "BAD_REQUEST");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no delivery status"),
        "{}",
        r.body
    );
    let report = dsn(&ids[1], "bob@example.com");
    // Without the secret or with a wrong one: 401 from the plugin, nothing applied.
    for headers in [vec![], vec![("x-herald-secret", "wrong")]] {
        let r = post(&app, "/webhooks/notify/smtp", &headers, report.clone()).await;
        r.assert_error(401, "UNAUTHORIZED");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("authenticated"),
            "{}",
            r.body
        );
    }
    email_with_status(&app, &p, &ids[1], "sent").await;
    let r = post(&app, "/webhooks/notify/smtp", &secret, report).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    email_with_status(&app, &p, &ids[1], "bounced").await;

    // The default transport's path is still there and is `outbox` here; a body it cannot read
    // is 400 and changes nothing.
    let r = post(
        &app,
        "/webhooks/notify",
        &secret,
        b"{\"events\": 3}".to_vec(),
    )
    .await;
    r.assert_error(400, "BAD_REQUEST");
    let r = post(
        &app,
        "/webhooks/notify/outbox",
        &[],
        outbox_events(json!([])),
    )
    .await;
    r.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn a_transport_that_is_not_there_is_404_naming_it() {
    let app = TestApp::spawn_with(|s| s.plugins.notify_secret = Some(SECRET.into())).await;
    // No such plugin, and a plugin that is no transport (the `delay` step).
    for name in ["nonexistent", "delay"] {
        let r = post(
            &app,
            &format!("/webhooks/notify/{name}"),
            &[("x-herald-secret", SECRET)],
            outbox_events(json!([])),
        )
        .await;
        r.assert_error(404, "NOT_FOUND");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{name}`")), "{message}");
    }
}

#[tokio::test]
async fn shared_secret_transports_are_refused_until_the_secret_is_set() {
    let dir = hello_dir();
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.dir = Some(dir.path().to_path_buf());
    })
    .await;
    let body = outbox_events(json!([]));
    // `outbox` (the default), `smtp` and an external plugin: 403, whatever the call carries.
    for path in [
        "/webhooks/notify",
        "/webhooks/notify/outbox",
        "/webhooks/notify/smtp",
        "/webhooks/notify/hellomail",
    ] {
        let r = post(&app, path, &[("x-herald-secret", "guess")], body.clone()).await;
        r.assert_error(403, "FORBIDDEN");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("plugins.notify_secret"),
            "{path}: {}",
            r.body
        );
    }
    // An unknown name is still 404 (the name is checked first).
    post(&app, "/webhooks/notify/nonexistent", &[], body)
        .await
        .assert_error(404, "NOT_FOUND");
}

/// `plugins.dir` with the example transport, its manifest allowing the loopback double.
fn hello_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let manifest = HELLO_MANIFEST.replace(
        r#"http = { allow = ["api.hellomail.example"] }"#,
        r#"http = { allow = ["127.0.0.1"], allow_private = true }"#,
    );
    assert_ne!(manifest, HELLO_MANIFEST, "the manifest's http grant moved");
    std::fs::write(dir.path().join("hello_transport.wasm"), HELLO_TRANSPORT).unwrap();
    std::fs::write(dir.path().join("hellomail.toml"), manifest).unwrap();
    dir
}

/// A server delivering through the example transport into `api`.
async fn hello_app(api: &HelloMail, dir: &tempfile::TempDir) -> TestApp {
    let url = api.url();
    TestApp::spawn_with(move |s| {
        fast(s);
        s.plugins.notify_secret = Some(SECRET.into());
        s.plugins.dir = Some(dir.path().to_path_buf());
        s.plugins.transport = "hellomail".into();
        s.plugins.settings.insert(
            "hellomail".into(),
            [
                ("url".to_string(), url),
                ("secret".to_string(), HELLO_KEY.into()),
            ]
            .into(),
        );
    })
    .await
}

/// The hex HMAC-SHA256 of `body` under `key`, as Hello Mail signs.
fn sign(key: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn the_example_transport_delivers_a_batch_and_reads_signed_notifications() {
    let api = HelloMail::start().await;
    let dir = hello_dir();
    let app = hello_app(&api, &dir).await;
    let p = app.project().await;

    // Three emails of one send: one call to the API, each message whole, one refused alone.
    let ids = send(
        &app,
        &p,
        json!(["ann@example.com", "refused@example.com", "Cy@Example.com"]),
    )
    .await;
    email_with_status(&app, &p, &ids[0], "sent").await;
    email_with_status(&app, &p, &ids[2], "sent").await;
    let failed = email_with_status(&app, &p, &ids[1], "failed").await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("Hello Mail refused the message: mailbox on the provider's block list"),
        "{failed}"
    );
    let calls = api.calls();
    assert_eq!(calls.len(), 1, "one call for the batch: {calls:?}");
    let sent = &calls[0];
    let carried: Vec<&str> = sent.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(carried, [&ids[0], &ids[1], &ids[2]]);
    for (message, id) in sent.iter().zip(&ids) {
        assert!(message.sender.contains('@'), "{}", message.sender);
        assert_eq!(message.recipients.len(), 1);
        assert!(message.raw.contains("Subject: Receipt"), "{}", message.raw);
        assert!(
            crate::support::harness::message_id_of(&message.raw).starts_with(id.as_str()),
            "{}",
            message.raw
        );
    }

    // A signed notification at the transport's own path: applied.
    let notify = |events: Value| events.to_string().into_bytes();
    let delivered = notify(json!([
        { "type": "delivered", "messageId": ids[0], "email": "ann@example.com" },
        { "type": "what-is-this", "messageId": ids[0], "email": "ann@example.com" }
    ]));
    let signature = sign(HELLO_KEY, &delivered);
    let headers = [
        ("x-herald-secret", SECRET),
        ("x-hello-signature", signature.as_str()),
    ];
    let r = post(
        &app,
        "/webhooks/notify/hellomail",
        &headers,
        delivered.clone(),
    )
    .await;
    // The type it does not know is left out, not refused.
    assert_eq!(
        (r.status.as_u16(), &r.body),
        (200, &json!({ "received": 1, "applied": 1, "ignored": 0 }))
    );
    email_with_status(&app, &p, &ids[0], "delivered").await;

    // Refused (401, nothing applied): no signature, another key's, a body altered after signing.
    let bounce = notify(json!([
        { "type": "bounced", "messageId": ids[2], "email": "cy@example.com", "detail": "550 no such user" }
    ]));
    let altered = String::from_utf8(bounce.clone())
        .unwrap()
        .replace("550", "551")
        .into_bytes();
    let wrong_key = sign("another-key", &bounce);
    let good = sign(HELLO_KEY, &bounce);
    for (signature, body) in [
        (None, bounce.clone()),
        (Some(wrong_key.as_str()), bounce.clone()),
        (Some(good.as_str()), altered),
        (Some("not hex"), bounce.clone()),
    ] {
        let mut headers = vec![("x-herald-secret", SECRET)];
        headers.extend(signature.map(|s| ("x-hello-signature", s)));
        let r = post(&app, "/webhooks/notify/hellomail", &headers, body).await;
        r.assert_error(401, "UNAUTHORIZED");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not authenticated"),
            "{}",
            r.body
        );
    }
    email_with_status(&app, &p, &ids[2], "sent").await;
    // Signed but not a list of events: 400.
    let junk = b"{\"type\": \"delivered\"}".to_vec();
    let signed_junk = sign(HELLO_KEY, &junk);
    let r = post(
        &app,
        "/webhooks/notify/hellomail",
        &[
            ("x-herald-secret", SECRET),
            ("x-hello-signature", &signed_junk),
        ],
        junk,
    )
    .await;
    r.assert_error(400, "BAD_REQUEST");

    // The signature in the URL instead: the plugin reads it from the pseudo-header `:query`.
    let path = format!("/webhooks/notify/hellomail?source=hello&signature={good}");
    let r = post(&app, &path, &[("x-herald-secret", SECRET)], bounce.clone()).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    email_with_status(&app, &p, &ids[2], "bounced").await;
    let listed = app.get("/suppressions", &p.secret_key).await;
    assert_eq!(listed.body["data"][0]["email"], "cy@example.com");
    assert_eq!(listed.body["data"][0]["reason"], "HARD_BOUNCE");
    // A wrong one there is refused like a wrong header.
    let path = format!("/webhooks/notify/hellomail?signature={wrong_key}");
    post(&app, &path, &[("x-herald-secret", SECRET)], bounce)
        .await
        .assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn the_example_transport_maps_the_apis_errors() {
    let api = HelloMail::start().await;
    let dir = hello_dir();
    let app = hello_app(&api, &dir).await;
    let plugins = app.state().plugins();
    let message = |id: &str, to: &str| OutgoingMessage {
        id: id.into(),
        sender: "news@acme.test".into(),
        recipients: vec![to.into()],
        raw: format!(
            "From: news@acme.test\r\nTo: {to}\r\nMessage-ID: <{id}@acme.test>\r\n\r\nHi\r\n"
        )
        .into_bytes(),
    };
    let outcome = |to: &'static str| {
        let plugins = plugins.clone();
        let message = message("eml_1", to);
        async move {
            plugins
                .deliver(Some("hellomail"), &message)
                .await
                .expect("the plugin answers")
        }
    };
    // 429: transient, with the wait in the form the host reads (Retry-After, else 60 s).
    let transient = |reason: &str| Err(DeliveryError::Transient(reason.into()));
    assert_eq!(
        outcome("limited@example.com").await,
        transient("rate limited by Hello Mail (retry after 7 s)")
    );
    assert_eq!(
        outcome("limitless@example.com").await,
        transient("rate limited by Hello Mail (retry after 60 s)")
    );
    // 5xx: transient; another 4xx: permanent; both say what the API answered.
    assert_eq!(
        outcome("down@example.com").await,
        transient(r#"Hello Mail answered 503: {"error":"maintenance"}"#)
    );
    assert_eq!(
        outcome("invalid@example.com").await,
        Err(DeliveryError::Permanent(
            r#"Hello Mail refused the message (400): {"error":"sender not allowed"}"#.into()
        ))
    );
    // Accepted: the API's id is the receipt's.
    let receipt = outcome("ann@example.com").await.unwrap();
    assert_eq!(receipt.provider_id, "hm-eml_1");
    // A whole-call answer applies to every message of the batch, in order.
    let outcomes = plugins
        .deliver_batch(
            Some("hellomail"),
            vec![
                message("eml_2", "ann@example.com"),
                message("eml_3", "down@example.com"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 2);
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Err(DeliveryError::Transient(_)))),
        "{outcomes:?}"
    );
    assert_eq!(api.calls().len(), 6);
}

#[tokio::test]
async fn the_example_transport_names_a_missing_setting() {
    let dir = hello_dir();
    let app = TestApp::spawn_with(|s| s.plugins.dir = Some(dir.path().to_path_buf())).await;
    let message = OutgoingMessage {
        id: "eml_1".into(),
        sender: "news@acme.test".into(),
        recipients: vec!["ann@example.com".into()],
        raw: b"Subject: hi\r\n\r\nHi\r\n".to_vec(),
    };
    match app
        .state()
        .plugins()
        .deliver(Some("hellomail"), &message)
        .await
        .unwrap()
    {
        Err(DeliveryError::Permanent(reason)) => {
            assert_eq!(reason, "plugins.settings.hellomail.url is not set")
        }
        other => panic!("{other:?}"),
    }
}
