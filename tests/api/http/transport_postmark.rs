//! The `postmark` transport against a loopback double of Postmark's batch API: a batch goes in
//! one call with each message's fields (split from Herald's MIME message), a refused recipient
//! fails alone, batches past 500 are split, a failed call defers its emails and a `429` hands
//! its `Retry-After` to the queue; webhooks are authenticated by the webhook secret (Basic auth
//! or `?secret=`) and each record kind applies (bounces and complaints suppress).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use herald::config::Settings;
use serde_json::{Value, json};

use crate::http::send::email_with_status;
use crate::support::harness::{TestApp, TestProject};
use crate::support::postmark::{BATCH, FakePostmark, MAX_BATCH, SERVER_TOKEN};
use crate::support::provider::assert_retried_alike;
use crate::support::provider::herald_side::{
    self, email, notify, queued_behind_a_held_call, retried_after, send, suppressed,
};

const WEBHOOK_SECRET: &str = "pm-webhook-secret";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Herald delivering through `postmark` pointed at `pm`.
async fn start(pm: &FakePostmark, adjust: impl FnOnce(&mut Settings)) -> (TestApp, TestProject) {
    let settings = [
        ("server_token", SERVER_TOKEN.to_string()),
        ("api_base", pm.base()),
        ("message_stream", "receipts".to_string()),
        ("webhook_secret", WEBHOOK_SECRET.to_string()),
    ];
    herald_side::start("postmark", &settings, adjust).await
}

fn basic(user: &str, password: &str) -> (&'static str, String) {
    (
        "authorization",
        format!("Basic {}", b64(format!("{user}:{password}").as_bytes())),
    )
}

#[tokio::test]
async fn a_batch_goes_in_one_call_with_each_messages_fields_and_an_inactive_recipient_fails_alone()
{
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
    let png = [0x89u8, b'P', b'N', b'G', 13, 10, 26, 10, 1, 2, 3];
    let to = [
        "ann@example.com",
        "bob@example.com",
        "inactive@example.com",
        "cy@example.com",
    ];
    let ids = send(
        &app,
        &p,
        &to,
        json!({
            "reply": "support@acme.test",
            "body": "<p>Hello <img src=\"cid:logo\"></p>",
            "headers": { "X-Campaign": "welcome-1" },
            "attachments": [
                { "filename": "notes.txt", "content": b64(b"hello attachment"), "contentType": "text/plain" },
                { "filename": "logo.png", "content": b64(&png), "contentType": "image/png",
                  "disposition": "inline", "contentId": "logo" }
            ]
        }),
    )
    .await;

    // Accepted ones are sent with Postmark's MessageID; the inactive one fails with its answer.
    let failed = email_with_status(&app, &p, &ids["inactive@example.com"], "failed").await;
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("inactive") && error.contains("406"),
        "{failed}"
    );
    let mut provider_ids = Vec::new();
    for address in ["ann@example.com", "bob@example.com", "cy@example.com"] {
        let e = email_with_status(&app, &p, &ids[address], "sent").await;
        assert_eq!(e["attempts"], 1, "{e}");
        let id = e["providerId"].as_str().unwrap().to_string();
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{e}");
        provider_ids.push(id);
    }
    provider_ids.dedup();
    assert_eq!(provider_ids.len(), 3);

    // One call for the four, each message in Postmark's fields.
    let calls = pm.calls.calls(BATCH);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let messages = calls[0].body.as_array().unwrap();
    assert_eq!(messages.len(), 4);
    let ann = messages
        .iter()
        .find(|m| m["To"].as_str().unwrap().contains("ann@example.com"))
        .unwrap();
    let id = &ids["ann@example.com"];
    assert_eq!(ann["From"], "Acme <hello@acme.test>");
    assert_eq!(ann["Subject"], "Your receipt");
    assert_eq!(ann["ReplyTo"], "support@acme.test");
    assert!(ann["HtmlBody"].as_str().unwrap().contains("Hello"), "{ann}");
    assert!(ann["TextBody"].is_string(), "{ann}");
    assert_eq!(ann["MessageStream"], "receipts");
    assert_eq!(ann["Metadata"], json!({ "herald_id": id }));
    assert_eq!(ann["TrackOpens"], false);
    assert_eq!(ann["TrackLinks"], "None");
    assert!(ann.get("Bcc").is_none(), "{ann}");
    let headers: BTreeMap<String, String> = ann["Headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["Name"].as_str().unwrap().to_ascii_lowercase(),
                h["Value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        headers["message-id"].starts_with(&format!("<{id}@")),
        "{headers:?}"
    );
    assert_eq!(headers["x-campaign"], "welcome-1");
    for own in [
        "from",
        "to",
        "subject",
        "content-type",
        "dkim-signature",
        "date",
    ] {
        assert!(!headers.contains_key(own), "{own} in {headers:?}");
    }
    let attachments = ann["Attachments"].as_array().unwrap();
    let notes = attachments
        .iter()
        .find(|a| a["Name"] == "notes.txt")
        .unwrap();
    assert_eq!(notes["Content"], b64(b"hello attachment"));
    assert_eq!(notes["ContentType"], "text/plain");
    let logo = attachments
        .iter()
        .find(|a| a["ContentID"].is_string())
        .unwrap();
    assert_eq!(logo["ContentID"], "cid:logo");
    assert_eq!(logo["Content"], b64(&png));
}

#[tokio::test]
async fn a_batch_of_more_than_500_goes_in_calls_of_at_most_500() {
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |s| {
        s.sending.batch_size = 600;
        // The held call waits while the others are queued.
        s.plugins.http_timeout_ms = 60_000;
    })
    .await;
    // A first email's call is held while 550 more are queued behind it.
    let sizes = queued_behind_a_held_call(&app, &p, &pm.calls, BATCH, 11).await;
    assert_eq!(sizes, [1, MAX_BATCH, 50]);
}

#[tokio::test]
async fn a_failed_call_defers_its_emails_and_they_go_on_the_retry() {
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
    pm.calls.script(
        500,
        &[],
        json!({ "ErrorCode": 1, "Message": "Internal server error" }),
    );
    let ids = send(&app, &p, &["ann@example.com", "bob@example.com"], json!({})).await;
    for id in ids.values() {
        let e = email_with_status(&app, &p, id, "sent").await;
        assert_eq!(e["attempts"], 2, "{e}");
    }
    // The retries carry the same messages.
    assert_retried_alike(&pm.calls.calls(BATCH));
}

#[tokio::test]
async fn a_429_defers_with_postmarks_retry_after_and_a_refused_call_fails_its_emails() {
    let pm = FakePostmark::start().await;
    // Given up once older than a second: the last error shows what the plugin reported.
    let (app, p) = start(&pm, |s| s.sending.retry_lifetime_seconds = 1).await;
    for _ in 0..20 {
        pm.calls.script(
            429,
            &[("Retry-After", "7")],
            json!({ "ErrorCode": 429, "Message": "Rate limit exceeded" }),
        );
    }
    let ids = send(&app, &p, &["ann@example.com"], json!({})).await;
    let e = email_with_status(&app, &p, &ids["ann@example.com"], "failed").await;
    let error = e["error"].as_str().unwrap();
    assert!(
        error.contains("rate limited by Postmark (retry after 7 s)"),
        "{e}"
    );
    assert!(error.starts_with("gave up after"), "{e}");

    // A call Postmark refuses whole (422) fails its emails at once with its answer.
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
    pm.calls.script(
        422,
        &[],
        json!({ "ErrorCode": 300, "Message": "Invalid email request" }),
    );
    let ids = send(&app, &p, &["ann@example.com"], json!({})).await;
    let e = email_with_status(&app, &p, &ids["ann@example.com"], "failed").await;
    assert_eq!(e["attempts"], 1, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("ErrorCode 300"),
        "{e}"
    );
}

#[tokio::test]
async fn a_429_is_retried_no_sooner_than_its_retry_after() {
    // The queue reads the plugin's `(retry after N s)` (jobs/deliver.rs, issue #77 routing).
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
    pm.calls.script(
        429,
        &[("Retry-After", "3")],
        json!({ "ErrorCode": 429, "Message": "Rate limit exceeded" }),
    );
    let waited = retried_after(&app, &p, &pm.calls, BATCH).await;
    assert!(waited >= Duration::from_secs(3), "retried after {waited:?}");
}

fn delivery(id: &str, to: &str) -> String {
    json!({
        "RecordType": "Delivery", "ServerID": 23, "MessageStream": "receipts",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483", "Recipient": to,
        "Tag": "", "DeliveredAt": "2026-12-07T02:10:00.0000000Z",
        "Details": "Test delivery webhook details", "Metadata": { "herald_id": id }
    })
    .to_string()
}

#[tokio::test]
async fn webhooks_need_the_secret_as_basic_auth_password_or_query_parameter() {
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
    let ids = send(&app, &p, &["ann@example.com", "bob@example.com"], json!({})).await;
    let (ann, bob) = (&ids["ann@example.com"], &ids["bob@example.com"]);
    email_with_status(&app, &p, ann, "sent").await;
    email_with_status(&app, &p, bob, "sent").await;
    let body = delivery(ann, "ann@example.com");

    // Refused: no secret, a wrong password, a wrong query secret; nothing applied.
    for (query, headers) in [
        ("", vec![]),
        ("", vec![basic("postmark", "wrong")]),
        ("?secret=wrong", vec![]),
        ("?other=pm-webhook-secret", vec![]),
    ] {
        let r = notify(&app, query, &headers, &body).await;
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
    assert_eq!(email(&app, &p, ann).await["status"], "sent");

    // Accepted as Basic-auth password (any user)…
    let r = notify(&app, "", &[basic("anyone", WEBHOOK_SECRET)], &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "received": 1, "applied": 1, "ignored": 0 }));
    email_with_status(&app, &p, ann, "delivered").await;
    // …and as the `secret` query parameter (URL-encoded like any).
    let query = format!("?a=1&secret={WEBHOOK_SECRET}").replace('-', "%2D");
    let r = notify(&app, &query, &[], &delivery(bob, "bob@example.com")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    email_with_status(&app, &p, bob, "delivered").await;

    // Authenticated but not Postmark's JSON: 400.
    let r = notify(&app, "", &[basic("u", WEBHOOK_SECRET)], "not json").await;
    r.assert_error(400, "BAD_REQUEST");
    // A record type Herald does not track: received, nothing to apply.
    let r = notify(
        &app,
        "",
        &[basic("u", WEBHOOK_SECRET)],
        &json!({ "RecordType": "SubscriptionChange", "Recipient": "ann@example.com",
                 "Metadata": { "herald_id": ann } })
        .to_string(),
    )
    .await;
    assert_eq!(r.body, json!({ "received": 0, "applied": 0, "ignored": 0 }));
}

fn bounce(kind: &str, code: i64, id: &str, to: &str, inactive: bool) -> Value {
    json!({
        "RecordType": "Bounce", "MessageStream": "receipts", "ID": 4_323_372_036_854_775_807i64,
        "Type": kind, "TypeCode": code, "Name": kind, "Tag": "",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483", "Metadata": { "herald_id": id },
        "ServerID": 23, "Description": "The server was unable to deliver your message",
        "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist",
        "Email": to, "From": "hello@acme.test", "BouncedAt": "2026-12-07T02:10:00.0000000Z",
        "DumpAvailable": false, "Inactive": inactive, "CanActivate": true, "Subject": "Your receipt"
    })
}

#[tokio::test]
async fn each_webhook_record_applies_and_bounces_and_complaints_suppress() {
    let pm = FakePostmark::start().await;
    let (app, p) = start(&pm, |_| {}).await;
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
    let auth = [basic("postmark", WEBHOOK_SECRET)];
    let records = [
        bounce(
            "HardBounce",
            1,
            &ids["hard@example.com"],
            "Hard@Example.com",
            true,
        ),
        bounce(
            "Transient",
            2,
            &ids["soft@example.com"],
            "soft@example.com",
            false,
        ),
        json!({
            "RecordType": "SpamComplaint", "MessageStream": "receipts", "ID": 42,
            "Type": "SpamComplaint", "TypeCode": 100_001, "Name": "Spam complaint",
            "MessageID": "00000000-0000-0000-0000-000000000000",
            "Metadata": { "herald_id": ids["spam@example.com"] }, "ServerID": 1234,
            "Details": "Test spam complaint details", "Email": "spam@example.com",
            "From": "hello@acme.test", "BouncedAt": "2026-12-07T02:10:00Z", "Inactive": true
        }),
        serde_json::from_str(&delivery(&ids["done@example.com"], "done@example.com")).unwrap(),
        json!({
            "RecordType": "Open", "MessageStream": "receipts", "FirstOpen": true,
            "Platform": "WebMail", "UserAgent": "Mozilla/5.0", "ReadSeconds": 5,
            "MessageID": "00000000-0000-0000-0000-000000000000",
            "Metadata": { "herald_id": ids["open@example.com"] },
            "ReceivedAt": "2026-12-07T02:11:00Z", "Tag": "", "Recipient": "open@example.com"
        }),
        json!({
            "RecordType": "Click", "MessageStream": "receipts", "ClickLocation": "HTML",
            "Platform": "Desktop", "UserAgent": "Mozilla/5.0",
            "OriginalLink": "https://acme.test/orders/1",
            "MessageID": "00000000-0000-0000-0000-000000000000",
            "Metadata": { "herald_id": ids["click@example.com"] },
            "ReceivedAt": "2026-12-07T02:12:00Z", "Tag": "", "Recipient": "click@example.com"
        }),
    ];
    for record in &records {
        let r = notify(&app, "", &auth, &record.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["applied"], 1, "{record}: {}", r.body);
    }
    // A bounce record that is no bounce (an auto-reply): nothing to apply.
    let auto = bounce(
        "AutoResponder",
        64,
        &ids["done@example.com"],
        "done@example.com",
        false,
    );
    let r = notify(&app, "", &auth, &auto.to_string()).await;
    assert_eq!(r.body, json!({ "received": 0, "applied": 0, "ignored": 0 }));
    email_with_status(&app, &p, &ids["hard@example.com"], "bounced").await;
    email_with_status(&app, &p, &ids["spam@example.com"], "complained").await;
    email_with_status(&app, &p, &ids["done@example.com"], "delivered").await;
    let opened = email_with_status(&app, &p, &ids["open@example.com"], "opened").await;
    assert_eq!(opened["opens"], 1, "{opened}");
    let clicked = email_with_status(&app, &p, &ids["click@example.com"], "clicked").await;
    assert_eq!(clicked["clicks"], 1, "{clicked}");
    // A soft bounce is recorded but neither ends the email nor suppresses the address.
    let soft = email(&app, &p, &ids["soft@example.com"]).await;
    assert_eq!(soft["status"], "sent", "{soft}");
    let mut listed = suppressed(&app, &p).await;
    listed.sort();
    assert_eq!(
        listed,
        [
            ("hard@example.com".to_string(), "HARD_BOUNCE".to_string()),
            ("spam@example.com".to_string(), "COMPLAINT".to_string()),
        ]
    );
    // The suppressed address is not sent to again.
    let again = send(&app, &p, &["hard@example.com"], json!({})).await;
    email_with_status(&app, &p, &again["hard@example.com"], "suppressed").await;
}
