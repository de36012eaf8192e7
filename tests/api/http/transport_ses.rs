//! The built-in `ses` transport against loopback doubles of Amazon SES API v2 and Amazon SNS
//! (`support/ses.rs`): each message one `SendEmail` call, SigV4-signed (the double computes the
//! signature again) with the raw message and its `herald_id` tag; a refused recipient fails
//! alone, a 5xx defers the email and a `429` defers it for its `Retry-After`; a wrong secret is
//! refused by the double. SNS notifications: the subscription confirmed on the SNS host only,
//! signatures (versions 1 and 2) checked against the certificate served by the SNS double, and
//! SES bounce, complaint and delivery events applied to the emails and the suppression list;
//! the signing certificate fetched once and then answered from the host's HTTP response cache.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use herald::config::Settings;
use serde_json::{Value, json};

use crate::http::send::email_with_status;
use crate::support::harness::{Reply, TestApp, TestProject, read};
use crate::support::ses::{
    ACCESS_KEY_ID, CertificateFetches, FakeSes, FakeSns, OTHER_KEY, REGION, SECRET_ACCESS_KEY,
    SIGNING_KEY, signed,
};

const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:herald-ses-events";

/// `ses` as the transport, against the doubles, with `secret` as the secret access key.
pub(crate) fn with_ses(
    ses: &FakeSes,
    sns: &FakeSns,
    secret: &str,
    extra: &[(&str, &str)],
) -> impl FnOnce(&mut Settings) + use<> {
    let mut table: BTreeMap<String, String> = [
        ("access_key_id", ACCESS_KEY_ID),
        ("secret_access_key", secret),
        ("region", REGION),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    table.insert("api_base".into(), ses.base());
    table.insert("sns_base".into(), sns.base());
    move |s: &mut Settings| {
        s.plugins.transport = "ses".into();
        s.plugins.settings.insert("ses".into(), table);
        s.plugins.transport_http_allow_private = true;
        s.domains.allow_unverified = true;
        s.jobs_poll_interval_ms = 20;
    }
}

/// Sends one email to each of `to`; their ids in order.
async fn send(app: &TestApp, p: &TestProject, to: &[&str]) -> Vec<String> {
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

/// Waits until the SES double has seen `calls` calls.
async fn calls(ses: &FakeSes, calls: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ses.calls() < calls {
        assert!(Instant::now() < deadline, "SES saw {} calls", ses.calls());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts an SNS message the way SNS does (JSON as `text/plain`, its type in a header) to the
/// `ses` transport's receiver; no `plugins.notify_secret` is set: the plugin authenticates each
/// message by its signature.
async fn notify(app: &TestApp, message: &Value) -> Reply {
    let r = app
        .client
        .post(app.url("/webhooks/notify/ses"))
        .header("content-type", "text/plain; charset=UTF-8")
        .header(
            "x-amz-sns-message-type",
            message["Type"].as_str().unwrap_or(""),
        )
        .header("x-amz-sns-topic-arn", TOPIC)
        .body(message.to_string())
        .send()
        .await
        .unwrap();
    read(r).await
}

/// Posts `event` in an SNS `Notification` signed with the certificate's key (`version` 1 or 2).
async fn notify_signed(app: &TestApp, sns: &FakeSns, event: &Value, version: u8) -> Reply {
    let message = notification(sns, event, Duration::from_secs(1));
    notify(app, &signed(message, version, SIGNING_KEY)).await
}

fn timestamp(ago: Duration) -> String {
    (Utc::now() - ago).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An SNS `Notification` (unsigned) carrying `event`.
fn notification(sns: &FakeSns, event: &Value, ago: Duration) -> Value {
    json!({
        "Type": "Notification",
        "MessageId": uuid::Uuid::new_v4().to_string(),
        "TopicArn": TOPIC,
        "Message": event.to_string(),
        "Timestamp": timestamp(ago),
        "SigningCertURL": sns.cert_url(),
        "UnsubscribeURL": format!("{}/?Action=Unsubscribe&SubscriptionArn={TOPIC}:1", sns.base()),
    })
}

/// An SES event of `kind` (`Bounce`, `Complaint`, `Delivery`) about `email_id` to `to`, as a
/// configuration set's event destination publishes it (with the `herald_id` tag).
fn ses_event(kind: &str, email_id: &str, to: &str, detail: Value) -> Value {
    let mut event = json!({
        "eventType": kind,
        "mail": {
            "timestamp": timestamp(Duration::from_secs(5)),
            "source": "hello@acme.test",
            "messageId": "0102018c-ses",
            "destination": [to],
            "headersTruncated": false,
            "commonHeaders": { "from": ["hello@acme.test"], "to": [to],
                               "messageId": "<0102018c-ses@eu-west-1.amazonses.com>" },
            "tags": { "herald_id": [email_id], "ses:configuration-set": ["herald"] },
        },
    });
    event[kind.to_ascii_lowercase()] = detail;
    event
}

fn bounce(kind: &str, to: &str) -> Value {
    json!({
        "bounceType": kind, "bounceSubType": "General",
        "bouncedRecipients": [{ "emailAddress": to, "action": "failed", "status": "5.1.1",
                                "diagnosticCode": "smtp; 550 5.1.1 user unknown" }],
        "timestamp": timestamp(Duration::from_secs(1)),
        "feedbackId": "0102018c-bounce", "reportingMTA": "dsn; a1-2.smtp-out.eu-west-1.amazonses.com",
    })
}

async fn suppressed(app: &TestApp, p: &TestProject) -> Vec<(String, String)> {
    let r = app.get("/suppressions?limit=100", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["email"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The email's `due_at` (when it is next handed off; 0 when unset), read from the database.
async fn due_at(app: &TestApp, id: &str) -> i64 {
    use sqlx::Connection;
    let sql = format!("SELECT due_at FROM emails WHERE id = '{id}'");
    let url = &app.database_url;
    let due: Option<i64> = if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(&sql).fetch_one(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(&sql).fetch_one(&mut conn).await.unwrap()
    };
    due.unwrap_or(0)
}

#[tokio::test]
async fn each_message_is_one_signed_send_email_call_and_a_refused_recipient_fails_alone() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let p = app.project().await;

    let ids = send(
        &app,
        &p,
        &["ann@example.com", "rejected@example.com", "bob@example.com"],
    )
    .await;
    let ann = email_with_status(&app, &p, &ids[0], "sent").await;
    let bob = email_with_status(&app, &p, &ids[2], "sent").await;
    let rejected = email_with_status(&app, &p, &ids[1], "failed").await;
    let error = rejected["error"].as_str().unwrap();
    assert!(
        error.contains("MessageRejected")
            && error.contains("Email address is not verified")
            && error.contains("rejected@example.com"),
        "{error}"
    );

    // One SendEmail per message, every one signed as SES checks it (the double refused none
    // for its signature), the raw message with its Message-ID and the herald_id tag.
    assert_eq!(ses.calls(), 3);
    assert_eq!(ses.refused(), [(400, "MessageRejected".to_string())]);
    let sent = ses.sent();
    let mut tagged: Vec<&str> = sent.iter().map(|s| s.herald_id.as_str()).collect();
    tagged.sort_unstable();
    let mut expected = [ids[0].as_str(), ids[2].as_str()];
    expected.sort_unstable();
    assert_eq!(tagged, expected);
    for (email, to) in [(&ann, "ann@example.com"), (&bob, "bob@example.com")] {
        let call = sent.iter().find(|s| s.herald_id == email["id"]).unwrap();
        assert_eq!(call.to, [to]);
        assert!(call.raw.contains("Subject: Receipt"), "{}", call.raw);
        assert_eq!(email["providerId"], call.message_id.as_str(), "{email}");
    }
}

#[tokio::test]
async fn a_wrong_secret_is_refused_by_ses_and_fails_the_email_with_its_reason() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, "not-the-secret", &[])).await;
    let p = app.project().await;
    let ids = send(&app, &p, &["ann@example.com"]).await;
    let email = email_with_status(&app, &p, &ids[0], "failed").await;
    let error = email["error"].as_str().unwrap();
    assert!(
        error.contains("403 InvalidSignatureException")
            && error.contains("signature we calculated does not match"),
        "{error}"
    );
    assert!(ses.sent().is_empty());
}

#[tokio::test]
async fn a_server_error_defers_the_email_and_the_next_attempt_delivers_it() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let p = app.project().await;
    ses.script(500, "InternalFailure", None);
    let ids = send(&app, &p, &["ann@example.com"]).await;
    calls(&ses, 1).await;
    let r = app.get(&format!("/emails/{}", ids[0]), &p.secret_key).await;
    assert_ne!(r.body["status"], "failed", "{}", r.body);
    // Retried after the queue's backoff, with the same message.
    let email = email_with_status(&app, &p, &ids[0], "sent").await;
    assert_eq!(ses.calls(), 2);
    assert_eq!(ses.sent()[0].herald_id, ids[0]);
    assert!(email["attempts"].as_i64().unwrap() >= 2, "{email}");
}

#[tokio::test]
async fn a_429_defers_the_email_for_its_retry_after() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let p = app.project().await;
    ses.script(429, "TooManyRequestsException", Some(120));
    let before = Utc::now().timestamp_millis();
    let ids = send(&app, &p, &["ann@example.com"]).await;
    calls(&ses, 1).await;
    // The outcome is written after the call; wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = app.get(&format!("/emails/{}", ids[0]), &p.secret_key).await;
        assert_eq!(
            r.body["status"], "queued",
            "handed off again before the Retry-After (the host schedules `(retry after N s)`, \
             jobs/deliver.rs): {}",
            r.body
        );
        if r.body["attempts"].as_i64() >= Some(1) && due_at(&app, &ids[0]).await > before + 5_000 {
            break;
        }
        assert!(Instant::now() < deadline, "never deferred: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let due = due_at(&app, &ids[0]).await;
    assert!(
        due >= before + 120_000,
        "due {} s after the send, not after Retry-After's 120 s",
        (due - before) / 1000
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ses.calls(), 1, "not called again before the Retry-After");
}

#[tokio::test]
async fn an_sns_subscription_is_confirmed_on_the_sns_host_only() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let confirmation = |token: &str, subscribe_url: String| {
        json!({
            "Type": "SubscriptionConfirmation",
            "MessageId": uuid::Uuid::new_v4().to_string(),
            "Token": token,
            "TopicArn": TOPIC,
            "Message": format!("You have chosen to subscribe to the topic {TOPIC}.\nTo confirm the subscription, visit the SubscribeURL included in this message."),
            "SubscribeURL": subscribe_url,
            "Timestamp": timestamp(Duration::from_secs(1)),
            "SigningCertURL": sns.cert_url(),
        })
    };

    // Signed (version 1, as SNS signs by default): confirmed by fetching the SubscribeURL.
    let message = signed(
        confirmation("tok-1", sns.subscribe_url(TOPIC, "tok-1")),
        1,
        SIGNING_KEY,
    );
    let r = notify(&app, &message).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["received"], 0, "{}", r.body);
    assert_eq!(sns.confirmed(), ["tok-1"]);

    // A SubscribeURL elsewhere than the SNS host is not fetched, even when signed.
    let elsewhere = format!("{}/?Action=ConfirmSubscription&Token=tok-2", ses.base());
    let message = signed(confirmation("tok-2", elsewhere), 2, SIGNING_KEY);
    let r = notify(&app, &message).await;
    r.assert_error(401, "UNAUTHORIZED");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SubscribeURL"),
        "{}",
        r.body
    );

    // Signed by another key, or altered after signing: refused, nothing fetched.
    let forged = signed(
        confirmation("tok-3", sns.subscribe_url(TOPIC, "tok-3")),
        1,
        OTHER_KEY,
    );
    notify(&app, &forged)
        .await
        .assert_error(401, "UNAUTHORIZED");
    let mut altered = signed(
        confirmation("tok-4", sns.subscribe_url(TOPIC, "tok-4")),
        1,
        SIGNING_KEY,
    );
    altered["SubscribeURL"] = json!(sns.subscribe_url(TOPIC, "tok-5"));
    notify(&app, &altered)
        .await
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(sns.confirmed(), ["tok-1"]);
}

#[tokio::test]
async fn sns_signatures_are_checked_before_anything_applies() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let p = app.project().await;
    let ids = send(&app, &p, &["ann@example.com"]).await;
    email_with_status(&app, &p, &ids[0], "sent").await;
    let event = ses_event(
        "Bounce",
        &ids[0],
        "ann@example.com",
        bounce("Permanent", "ann@example.com"),
    );
    let fresh = Duration::from_secs(2);

    let refused = |r: &Reply, why: &str| {
        r.assert_error(401, "UNAUTHORIZED");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("not authenticated") && message.contains(why),
            "{message}"
        );
    };
    // Unsigned, signed by another key, altered, stale, an unknown signature version, a
    // certificate off the SNS host: each refused, and nothing applied.
    refused(
        &notify(&app, &notification(&sns, &event, fresh)).await,
        "Signature",
    );
    let forged = signed(notification(&sns, &event, fresh), 2, OTHER_KEY);
    refused(&notify(&app, &forged).await, "does not match");
    let mut altered = signed(notification(&sns, &event, fresh), 2, SIGNING_KEY);
    altered["Message"] = json!(
        ses_event(
            "Bounce",
            &ids[0],
            "ann@example.com",
            bounce("Permanent", "bob@example.com")
        )
        .to_string()
    );
    refused(&notify(&app, &altered).await, "does not match");
    let stale = signed(
        notification(&sns, &event, Duration::from_secs(2 * 86_400)),
        2,
        SIGNING_KEY,
    );
    refused(&notify(&app, &stale).await, "stale");
    let mut version = signed(notification(&sns, &event, fresh), 2, SIGNING_KEY);
    version["SignatureVersion"] = json!("3");
    refused(&notify(&app, &version).await, "SignatureVersion");
    let mut off_host = notification(&sns, &event, fresh);
    off_host["SigningCertURL"] = json!(format!(
        "{}/SimpleNotificationService-herald-test.pem",
        ses.base()
    ));
    refused(
        &notify(&app, &signed(off_host, 2, SIGNING_KEY)).await,
        "SigningCertURL",
    );
    assert!(suppressed(&app, &p).await.is_empty());
    let email = app.get(&format!("/emails/{}", ids[0]), &p.secret_key).await;
    assert_eq!(email.body["status"], "sent", "{}", email.body);

    // Not JSON: a bad request.
    let r = app
        .client
        .post(app.url("/webhooks/notify/ses"))
        .body("hello")
        .send()
        .await
        .unwrap();
    read(r).await.assert_error(400, "BAD_REQUEST");

    // A topic outside `topic_arn` is refused even when signed by SNS.
    let app = TestApp::spawn_with(with_ses(
        &ses,
        &sns,
        SECRET_ACCESS_KEY,
        &[("topic_arn", "arn:aws:sns:eu-west-1:123456789012:other")],
    ))
    .await;
    refused(&notify_signed(&app, &sns, &event, 2).await, "topic");
}

#[tokio::test]
async fn ses_bounces_complaints_and_deliveries_apply_through_sns() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(
        &ses,
        &sns,
        SECRET_ACCESS_KEY,
        &[("topic_arn", TOPIC)],
    ))
    .await;
    let p = app.project().await;
    let ids = send(
        &app,
        &p,
        &[
            "ann@example.com",
            "bob@example.com",
            "cy@example.com",
            "dee@example.com",
        ],
    )
    .await;
    for id in &ids {
        email_with_status(&app, &p, id, "sent").await;
    }
    let fresh = Duration::from_secs(1);

    // Delivery (signature version 2): the email is delivered.
    let delivery = ses_event(
        "Delivery",
        &ids[0],
        "ann@example.com",
        json!({ "timestamp": timestamp(fresh), "processingTimeMillis": 546,
                "recipients": ["ann@example.com"], "smtpResponse": "250 2.6.0 Message received",
                "reportingMTA": "a8-70.smtp-out.amazonses.com" }),
    );
    let r = notify_signed(&app, &sns, &delivery, 2).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.body["received"].as_i64(), r.body["applied"].as_i64()),
        (Some(1), Some(1))
    );
    email_with_status(&app, &p, &ids[0], "delivered").await;

    // A permanent bounce (signature version 1): bounced, the address suppressed.
    let hard = ses_event(
        "Bounce",
        &ids[1],
        "bob@example.com",
        bounce("Permanent", "Bob@Example.com"),
    );
    let r = notify_signed(&app, &sns, &hard, 1).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let bounced = email_with_status(&app, &p, &ids[1], "bounced").await;
    assert!(
        bounced["history"].to_string().contains("550 5.1.1"),
        "{bounced}"
    );

    // A complaint (as an identity notification: `notificationType`, Message-ID from the
    // original headers): complained, suppressed.
    let complaint = json!({
        "notificationType": "Complaint",
        "mail": { "messageId": "0102018c-ses", "destination": ["cy@example.com"],
                  "headers": [{ "name": "Message-ID", "value": format!("<{}@acme.test>", ids[2]) }] },
        "complaint": { "complainedRecipients": [{ "emailAddress": "cy@example.com" }],
                       "timestamp": timestamp(fresh), "complaintFeedbackType": "abuse",
                       "feedbackId": "0102018c-complaint" },
    });
    let r = notify_signed(&app, &sns, &complaint, 2).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    email_with_status(&app, &p, &ids[2], "complained").await;

    // A transient bounce: a soft bounce, not suppressed (below the limit).
    let soft = ses_event(
        "Bounce",
        &ids[3],
        "dee@example.com",
        bounce("Transient", "dee@example.com"),
    );
    let r = notify_signed(&app, &sns, &soft, 2).await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);

    // An event Herald does not track (Send) is received as nothing.
    let send_event = ses_event("Send", &ids[0], "ann@example.com", json!({}));
    let r = notify_signed(&app, &sns, &send_event, 2).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["received"], 0, "{}", r.body);

    let mut listed = suppressed(&app, &p).await;
    listed.sort();
    assert_eq!(
        listed,
        [
            ("bob@example.com".to_string(), "HARD_BOUNCE".to_string()),
            ("cy@example.com".to_string(), "COMPLAINT".to_string()),
        ]
    );
    // A later send to a suppressed address never reaches SES.
    let calls_before = ses.calls();
    let later = send(&app, &p, &["bob@example.com"]).await;
    email_with_status(&app, &p, &later[0], "suppressed").await;
    assert_eq!(ses.calls(), calls_before);
}

#[tokio::test]
async fn the_signing_certificate_is_fetched_once_and_then_kept_by_the_host() {
    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let app = TestApp::spawn_with(with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[])).await;
    let delivery = |to: &str| {
        ses_event(
            "Delivery",
            "eml_0000000000000000000000000",
            to,
            json!({ "timestamp": timestamp(Duration::from_secs(1)), "recipients": [to] }),
        )
    };
    // Two notifications (both signature versions, same SigningCertURL): one fetch, and the
    // plugin's `x-herald-cache` header never reaches the SNS host.
    for (version, to) in [(2, "ann@example.com"), (1, "bob@example.com")] {
        let r = notify_signed(&app, &sns, &delivery(to), version).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        sns.certificate_fetches(),
        CertificateFetches {
            count: 1,
            with_cache_header: 0
        }
    );
    // A forged message is still checked against the cached certificate, and refused.
    let forged = signed(
        notification(&sns, &delivery("cy@example.com"), Duration::from_secs(1)),
        2,
        OTHER_KEY,
    );
    assert_eq!(notify(&app, &forged).await.status, 401);
    assert_eq!(sns.certificate_fetches().count, 1);

    // With `plugins.http_cache_bytes = 0` nothing is kept: each notification fetches.
    let uncached = FakeSns::start().await;
    let with = with_ses(&ses, &uncached, SECRET_ACCESS_KEY, &[]);
    let app = TestApp::spawn_with(move |s| {
        with(s);
        s.plugins.http_cache_bytes = 0;
    })
    .await;
    for to in ["ann@example.com", "bob@example.com"] {
        let r = notify_signed(&app, &uncached, &delivery(to), 2).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(uncached.certificate_fetches().count, 2);
}
