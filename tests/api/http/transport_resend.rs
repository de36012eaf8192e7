//! The `resend` transport against a loopback double of Resend's API: a batch goes in one call
//! to `/emails/batch` with each email's fields (split from Herald's MIME message), an email
//! Resend refuses fails alone, batches past 100 are split, an email with attachments goes alone
//! to `/emails`, a failed call defers its emails and a `429` hands its `Retry-After` to the
//! queue; webhooks are verified as Svix signs them (good, wrong secret, stale, altered) and each
//! event kind applies (bounces and complaints suppress).

use std::time::Duration;

use base64::Engine;
use herald::config::Settings;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};

use crate::http::send::email_with_status;
use crate::support::harness::{TestApp, TestProject};
use crate::support::provider::assert_retried_alike;
use crate::support::provider::herald_side::{
    self, email, notify, queued_behind_a_held_call, retried_after, send, suppressed,
};
use crate::support::resend::{API_KEY, BATCH, FakeResend, MAX_BATCH, SINGLE};

/// The webhook's signing key (its secret is `whsec_` and this in base64).
const SIGNING_KEY: &[u8] = b"herald-resend-signing-key-0123456789";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Herald delivering through `resend` pointed at `rs`.
async fn start(rs: &FakeResend, adjust: impl FnOnce(&mut Settings)) -> (TestApp, TestProject) {
    let settings = [
        ("api_key", API_KEY.to_string()),
        ("api_base", rs.base()),
        ("webhook_secret", format!("whsec_{}", b64(SIGNING_KEY))),
    ];
    herald_side::start("resend", &settings, adjust).await
}

#[tokio::test]
async fn a_batch_goes_in_one_call_with_each_emails_fields_and_a_refused_one_fails_alone() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    let to = [
        "ann@example.com",
        "bob@example.com",
        "invalid@example.com",
        "cy@example.com",
    ];
    let ids = send(
        &app,
        &p,
        &to,
        json!({ "reply": "support@acme.test", "headers": { "X-Campaign": "welcome-1" } }),
    )
    .await;
    let failed = email_with_status(&app, &p, &ids["invalid@example.com"], "failed").await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("Invalid `to` field"),
        "{failed}"
    );
    for address in ["ann@example.com", "bob@example.com", "cy@example.com"] {
        let e = email_with_status(&app, &p, &ids[address], "sent").await;
        assert_eq!(e["attempts"], 1, "{e}");
        assert!(
            uuid::Uuid::parse_str(e["providerId"].as_str().unwrap()).is_ok(),
            "{e}"
        );
    }
    let calls = rs.calls.calls(BATCH);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(rs.calls.calls(SINGLE).is_empty());
    let emails = calls[0].body.as_array().unwrap();
    assert_eq!(emails.len(), 4);
    let ann = emails
        .iter()
        .find(|e| e["to"][0].as_str().unwrap().contains("ann@example.com"))
        .unwrap();
    let id = &ids["ann@example.com"];
    assert_eq!(ann["from"], "Acme <hello@acme.test>");
    assert_eq!(ann["subject"], "Your receipt");
    assert_eq!(ann["reply_to"], json!(["support@acme.test"]));
    assert!(ann["html"].as_str().unwrap().contains("Thanks"), "{ann}");
    assert!(ann["text"].is_string(), "{ann}");
    assert_eq!(ann["tags"], json!([{ "name": "herald_id", "value": id }]));
    let headers = ann["headers"].as_object().unwrap();
    assert!(
        headers["Message-ID"]
            .as_str()
            .unwrap()
            .starts_with(&format!("<{id}@")),
        "{headers:?}"
    );
    assert_eq!(headers["X-Campaign"], "welcome-1");
    for own in [
        "From",
        "To",
        "Subject",
        "Content-Type",
        "DKIM-Signature",
        "Date",
    ] {
        assert!(!headers.contains_key(own), "{own} in {headers:?}");
    }
    assert!(ann.get("attachments").is_none());
}

#[tokio::test]
async fn an_email_with_attachments_goes_alone_to_the_single_endpoint() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    let ids = send(
        &app,
        &p,
        &["ann@example.com", "bob@example.com"],
        json!({
            "attachments": [
                { "filename": "notes.txt", "content": b64(b"hello attachment"), "contentType": "text/plain" }
            ]
        }),
    )
    .await;
    for id in ids.values() {
        email_with_status(&app, &p, id, "sent").await;
    }
    assert!(rs.calls.calls(BATCH).is_empty());
    let singles = rs.calls.calls(SINGLE);
    assert_eq!(singles.len(), 2);
    let attachment = &singles[0].body["attachments"][0];
    assert_eq!(attachment["filename"], "notes.txt");
    assert_eq!(attachment["content"], b64(b"hello attachment"));
    assert_eq!(attachment["content_type"], "text/plain");
}

#[tokio::test]
async fn a_batch_of_more_than_100_goes_in_calls_of_at_most_100() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |s| {
        s.sending.batch_size = 200;
        // The held call waits while the others are queued.
        s.plugins.http_timeout_ms = 60_000;
    })
    .await;
    // A first email's call is held while 150 more are queued behind it.
    let sizes = queued_behind_a_held_call(&app, &p, &rs.calls, BATCH, 3).await;
    assert_eq!(sizes, [1, MAX_BATCH, 50]);
}

#[tokio::test]
async fn a_failed_call_defers_its_emails_and_a_validation_error_fails_them() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    rs.calls.script(
        500,
        &[],
        json!({ "statusCode": 500, "name": "application_error",
                "message": "An unexpected error occurred, please try again later." }),
    );
    let ids = send(&app, &p, &["ann@example.com", "bob@example.com"], json!({})).await;
    for id in ids.values() {
        let e = email_with_status(&app, &p, id, "sent").await;
        assert_eq!(e["attempts"], 2, "{e}");
    }
    // The retries carry the same messages.
    assert_retried_alike(&rs.calls.calls(BATCH));

    // A 422 for the whole call: its emails fail at once with Resend's answer.
    rs.calls.script(
        422,
        &[],
        json!({ "statusCode": 422, "name": "validation_error",
                "message": "The acme.test domain is not verified." }),
    );
    let ids = send(&app, &p, &["cy@example.com", "dee@example.com"], json!({})).await;
    for id in ids.values() {
        let e = email_with_status(&app, &p, id, "failed").await;
        assert_eq!(e["attempts"], 1, "{e}");
        let error = e["error"].as_str().unwrap();
        assert!(
            error.contains("validation_error") && error.contains("not verified"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_429_defers_with_resends_retry_after() {
    let rs = FakeResend::start().await;
    // Given up once older than a second: the last error shows what the plugin reported.
    let (app, p) = start(&rs, |s| s.sending.retry_lifetime_seconds = 1).await;
    for _ in 0..20 {
        rs.calls.script(
            429,
            &[("retry-after", "9")],
            json!({ "statusCode": 429, "name": "rate_limit_exceeded",
                    "message": "Too many requests. You can only make 2 requests per second." }),
        );
    }
    let ids = send(&app, &p, &["ann@example.com"], json!({})).await;
    let e = email_with_status(&app, &p, &ids["ann@example.com"], "failed").await;
    let error = e["error"].as_str().unwrap();
    assert!(
        error.contains("rate limited by Resend (retry after 9 s)"),
        "{e}"
    );
    assert!(error.starts_with("gave up after"), "{e}");
}

#[tokio::test]
async fn a_429_is_retried_no_sooner_than_its_retry_after() {
    // The queue reads the plugin's `(retry after N s)` (jobs/deliver.rs, issue #77 routing).
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    rs.calls.script(
        429,
        &[("retry-after", "3")],
        json!({ "statusCode": 429, "name": "rate_limit_exceeded", "message": "Too many requests." }),
    );
    let waited = retried_after(&app, &p, &rs.calls, BATCH).await;
    assert!(waited >= Duration::from_secs(3), "retried after {waited:?}");
}

/// The Svix signature of `body` as `v1,<base64>`.
fn sign(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", b64(&mac.finalize().into_bytes()))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn svix(id: &str, timestamp: i64, signature: String) -> Vec<(&'static str, String)> {
    vec![
        ("svix-id", id.to_string()),
        ("svix-timestamp", timestamp.to_string()),
        ("svix-signature", signature),
    ]
}

/// Posts `event` signed now with the webhook's key.
async fn post_signed(app: &TestApp, event: &Value) -> crate::support::harness::Reply {
    let body = event.to_string();
    let (id, t) = (format!("msg_{}", uuid::Uuid::new_v4().simple()), now());
    let headers = svix(&id, t, sign(SIGNING_KEY, &id, t, &body));
    notify(app, "", &headers, &body).await
}

fn event(kind: &str, herald_id: &str, to: &str, extra: Value) -> Value {
    let mut data = json!({
        "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
        "created_at": "2026-12-07T02:10:00.894719+00:00",
        "from": "Acme <hello@acme.test>", "to": [to], "subject": "Your receipt",
        "tags": { "herald_id": herald_id },
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        data[k] = v;
    }
    json!({ "type": kind, "created_at": "2026-12-07T02:10:01.126Z", "data": data })
}

#[tokio::test]
async fn webhooks_are_verified_as_svix_signs_them() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    let ids = send(&app, &p, &["ann@example.com"], json!({})).await;
    let ann = &ids["ann@example.com"];
    email_with_status(&app, &p, ann, "sent").await;
    let body = event("email.delivered", ann, "ann@example.com", json!({})).to_string();
    let id = "msg_2Lh9KRb0pzN4LePd3XiA4xhe";
    let t = now();

    let refused = [
        // Signed with another key.
        svix(id, t, sign(b"another-key", id, t, &body)),
        // Signed six minutes ago (and six minutes ahead).
        svix(id, t - 360, sign(SIGNING_KEY, id, t - 360, &body)),
        svix(id, t + 360, sign(SIGNING_KEY, id, t + 360, &body)),
        // Signed for another body, another id, another time.
        svix(
            id,
            t,
            sign(SIGNING_KEY, id, t, &body.replace("ann@", "bob@")),
        ),
        svix("msg_other", t, sign(SIGNING_KEY, id, t, &body)),
        svix(id, t + 1, sign(SIGNING_KEY, id, t, &body)),
        // A signature of another scheme.
        svix(id, t, sign(SIGNING_KEY, id, t, &body).replace("v1,", "v2,")),
        // No signature headers.
        vec![],
    ];
    for headers in refused {
        let r = notify(&app, "", &headers, &body).await;
        r.assert_error(401, "UNAUTHORIZED");
    }
    // An altered body under a good signature.
    let altered = body.replace("email.delivered", "email.bounced");
    let r = notify(
        &app,
        "",
        &svix(id, t, sign(SIGNING_KEY, id, t, &body)),
        &altered,
    )
    .await;
    r.assert_error(401, "UNAUTHORIZED");
    assert_eq!(email(&app, &p, ann).await["status"], "sent");
    assert!(suppressed(&app, &p).await.is_empty());

    // Good: one of several signatures (a rotated secret's beside it) matches.
    let signatures = format!(
        "{} {}",
        sign(b"old-key", id, t, &body),
        sign(SIGNING_KEY, id, t, &body)
    );
    let r = notify(&app, "", &svix(id, t, signatures), &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "received": 1, "applied": 1, "ignored": 0 }));
    email_with_status(&app, &p, ann, "delivered").await;

    // Signed but not JSON: 400; a type Herald does not track: nothing to apply.
    let r = notify(&app, "", &svix(id, t, sign(SIGNING_KEY, id, t, "{")), "{").await;
    r.assert_error(400, "BAD_REQUEST");
    let sent = event("email.sent", ann, "ann@example.com", json!({}));
    let r = post_signed(&app, &sent).await;
    assert_eq!(r.body, json!({ "received": 0, "applied": 0, "ignored": 0 }));
}

#[tokio::test]
async fn each_webhook_event_applies_and_bounces_and_complaints_suppress() {
    let rs = FakeResend::start().await;
    let (app, p) = start(&rs, |_| {}).await;
    let to = [
        "hard@example.com",
        "soft@example.com",
        "spam@example.com",
        "done@example.com",
        "open@example.com",
        "click@example.com",
    ];
    let ids = send(&app, &p, &to, json!({})).await;
    for id in ids.values() {
        email_with_status(&app, &p, id, "sent").await;
    }
    let bounce = |kind: &str| {
        json!({ "bounce": { "type": kind, "subType": "General",
                            "message": "The recipient's mail server permanently rejected the email." } })
    };
    let events = [
        event(
            "email.bounced",
            &ids["hard@example.com"],
            "Hard <Hard@Example.com>",
            bounce("Permanent"),
        ),
        event(
            "email.bounced",
            &ids["soft@example.com"],
            "soft@example.com",
            bounce("Transient"),
        ),
        // Tags as a list of {name, value}.
        event(
            "email.complained",
            "",
            "spam@example.com",
            json!({
                "tags": [{ "name": "category", "value": "receipt" },
                         { "name": "herald_id", "value": ids["spam@example.com"] }]
            }),
        ),
        // No tag: the Message-ID of the headers names the email.
        event(
            "email.delivered",
            "",
            "done@example.com",
            json!({
                "tags": null,
                "headers": [{ "name": "Message-ID", "value": format!("<{}@acme.test>", ids["done@example.com"]) }]
            }),
        ),
        event(
            "email.opened",
            &ids["open@example.com"],
            "open@example.com",
            json!({}),
        ),
        event(
            "email.clicked",
            &ids["click@example.com"],
            "click@example.com",
            json!({
                "click": { "ipAddress": "192.0.2.1", "link": "https://acme.test/orders/1",
                           "timestamp": "2026-12-07T02:12:00.000Z", "userAgent": "Mozilla/5.0" }
            }),
        ),
    ];
    for e in &events {
        let r = post_signed(&app, e).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["applied"], 1, "{e}: {}", r.body);
    }
    email_with_status(&app, &p, &ids["hard@example.com"], "bounced").await;
    email_with_status(&app, &p, &ids["spam@example.com"], "complained").await;
    email_with_status(&app, &p, &ids["done@example.com"], "delivered").await;
    let opened = email_with_status(&app, &p, &ids["open@example.com"], "opened").await;
    assert_eq!(opened["opens"], 1, "{opened}");
    let clicked = email_with_status(&app, &p, &ids["click@example.com"], "clicked").await;
    assert_eq!(clicked["clicks"], 1, "{clicked}");
    assert_eq!(
        email(&app, &p, &ids["soft@example.com"]).await["status"],
        "sent"
    );
    let mut listed = suppressed(&app, &p).await;
    listed.sort();
    assert_eq!(
        listed,
        [
            ("hard@example.com".to_string(), "HARD_BOUNCE".to_string()),
            ("spam@example.com".to_string(), "COMPLAINT".to_string()),
        ]
    );
}
