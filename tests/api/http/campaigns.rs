//! Campaigns and analytics through HTTP, with the `outbox` transport: each audience type sent
//! once to each subscribed contact, the status rules as 409s and 422s, schedule and cancel,
//! cancel while sending, duplicate, test sends not counted, stats that match the `.eml` files
//! and the tracking links, a server killed in the middle of a 5,000-recipient campaign, and
//! two instances on one database sending one campaign.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use herald::config::Settings;
use serde_json::{Value, json};

use crate::support::harness::{DoomedServer, Reply, TestApp, TestProject};

/// Fast polling and unverified senders (the `outbox` transport writes files).
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
}

/// Every delivery the `outbox` transport recorded (`index.jsonl`, one line per hand-off) in
/// `app`'s data directory.
fn deliveries(app: &TestApp) -> Vec<Value> {
    deliveries_in(&app.state().settings().data_dir)
}

fn deliveries_in(dir: &std::path::Path) -> Vec<Value> {
    let Ok(index) = std::fs::read_to_string(dir.join("outbox").join("index.jsonl")) else {
        return Vec::new();
    };
    // A line being appended while this reads it is not whole yet: it counts on the next read.
    index
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub async fn contact(app: &TestApp, p: &TestProject, email: &str, subscribed: bool, data: Value) {
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": email, "subscribed": subscribed, "data": data }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
}

pub fn campaign_body(name: &str, audience: Value) -> Value {
    let mut body = json!({
        "name": name,
        "subject": format!("{name} for {{{{email}}}}"),
        "body": "<p>Hello {{plan ?? \"friend\"}}</p><a href=\"https://shop.example/sale\">Sale</a> <a href=\"{{unsubscribeUrl}}\">Unsubscribe</a>",
        "from": "news@acme.test",
        "fromName": "Acme News",
    });
    for (k, v) in audience.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

pub async fn create(app: &TestApp, p: &TestProject, body: Value) -> String {
    let r = app.post("/campaigns", &p.secret_key, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["success"], true);
    assert_eq!(r.body["data"]["status"], "DRAFT");
    assert!(r.body["data"]["scheduledAt"].is_null());
    r.body["data"]["id"].as_str().unwrap().to_string()
}

pub async fn send(app: &TestApp, p: &TestProject, id: &str, body: Option<Value>) -> Reply {
    app.call(
        reqwest::Method::POST,
        &format!("/campaigns/{id}/send"),
        Some(&p.secret_key),
        body,
    )
    .await
}

/// Waits (up to `secs`) until the campaign has `status`; answers it.
pub async fn campaign_with_status(
    app: &TestApp,
    p: &TestProject,
    id: &str,
    status: &str,
    secs: u64,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = app.get(&format!("/campaigns/{id}"), &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.body["status"] == status {
            return r.body;
        }
        assert!(Instant::now() < deadline, "never {status}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn stats(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app
        .get(&format!("/campaigns/{id}/stats"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// A new static segment "Picked" of the contacts with `emails`; answers its id.
pub async fn static_segment(app: &TestApp, p: &TestProject, emails: &[&str]) -> String {
    let r = app
        .post(
            "/segments",
            &p.secret_key,
            json!({ "name": "Picked", "type": "STATIC" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let segment = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/segments/{segment}/members"),
            &p.secret_key,
            json!({ "emails": emails }),
        )
        .await;
    assert_eq!(r.body["added"], emails.len(), "{}", r.body);
    segment
}

/// Creates a campaign `name` to everyone and schedules it for `at`; answers its id.
pub async fn scheduled(
    app: &TestApp,
    p: &TestProject,
    name: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> String {
    let id = create(
        app,
        p,
        campaign_body(name, json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = send(
        app,
        p,
        &id,
        Some(json!({ "scheduledFor": at.to_rfc3339() })),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED", "{}", r.body);
    id
}

/// The recipients of the delivered messages whose subject starts with `name`.
pub fn recipients_of(app: &TestApp, name: &str) -> Vec<String> {
    let mut to: Vec<String> = app
        .outbox_messages()
        .iter()
        .filter(|m| m.contains(&format!("Subject: {name} for ")))
        .map(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("To: "))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    to.sort();
    to
}

#[tokio::test]
async fn each_audience_is_mailed_once_per_subscribed_contact() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    contact(&app, &p, "ann@example.com", true, json!({ "plan": "pro" })).await;
    contact(&app, &p, "bob@example.com", true, json!({ "plan": "free" })).await;
    contact(&app, &p, "cat@example.com", false, json!({ "plan": "pro" })).await;
    let segment = static_segment(&app, &p, &["ann@example.com", "cat@example.com"]).await;

    let all = create(
        &app,
        &p,
        campaign_body("All", json!({ "audienceType": "ALL" })),
    )
    .await;
    let seg = create(
        &app,
        &p,
        campaign_body(
            "Seg",
            json!({ "audienceType": "SEGMENT", "segmentId": segment }),
        ),
    )
    .await;
    let filtered = create(
        &app,
        &p,
        campaign_body(
            "Pro",
            json!({ "audienceType": "FILTERED", "audienceFilter": { "logic": "AND", "groups": [
                { "filters": [ { "field": "data.plan", "operator": "equals", "value": "pro" } ] } ] } }),
        ),
    )
    .await;
    // The usage of `data.plan` names the filtered campaign.
    let usage = app
        .get("/contacts/fields/data.plan/usage", &p.secret_key)
        .await;
    assert_eq!(
        usage.body["campaigns"][0]["id"],
        filtered.as_str(),
        "{}",
        usage.body
    );

    for id in [&all, &seg, &filtered] {
        let r = send(&app, &p, id, None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            ["SENDING", "SENT"].contains(&r.body["status"].as_str().unwrap()),
            "{}",
            r.body
        );
    }
    for id in [&all, &seg, &filtered] {
        let c = campaign_with_status(&app, &p, id, "SENT", 30).await;
        assert!(c["finishedAt"].is_string(), "{c}");
        assert!(c["startedAt"].is_string(), "{c}");
    }
    assert_eq!(
        recipients_of(&app, "All"),
        ["ann@example.com", "bob@example.com"]
    );
    assert_eq!(recipients_of(&app, "Seg"), ["ann@example.com"]);
    assert_eq!(recipients_of(&app, "Pro"), ["ann@example.com"]);
    // Rendered per recipient, marketing mail with one-click unsubscribe.
    let ann = app
        .outbox_messages()
        .into_iter()
        .find(|m| m.contains("Subject: Pro for ann@example.com"))
        .unwrap();
    assert!(ann.contains("Hello pro"), "{ann}");
    assert!(ann.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"));
    assert!(
        ann.contains("From: \"Acme News\" <news@acme.test>")
            || ann.contains("From: Acme News <news@acme.test>"),
        "{ann}"
    );

    let s = stats(&app, &p, &all).await;
    assert_eq!(s["recipients"], 2, "{s}");
    assert_eq!(s["sent"], 2, "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    assert_eq!(s["openRate"], 0.0, "{s}");
    let c = app.get(&format!("/campaigns/{all}"), &p.secret_key).await;
    assert_eq!(c.body["recipientCount"], 2);
    assert_eq!(c.body["audienceType"], "ALL");
    assert_eq!(c.body["type"], "ALL");

    // Listing, by status and paginated.
    let r = app
        .get("/campaigns?status=SENT&limit=2", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 3);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(r.body["hasMore"], true);
    let cursor = r.body["cursor"].as_str().unwrap();
    let r = app
        .get(
            &format!("/campaigns?status=SENT&limit=2&cursor={cursor}"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.body["data"][0]["id"], all.as_str(), "{}", r.body);
    assert!(r.body["cursor"].is_null());

    // Another project sees none of it.
    let other = app.project().await;
    app.get(&format!("/campaigns/{all}"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get(&format!("/campaigns/{all}/stats"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    send(&app, &other, &all, None)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn bodies_and_status_moves_are_checked() {
    let app = TestApp::spawn_with(|s| s.jobs_poll_interval_ms = 20).await;
    let p = app.project().await;
    // Every bad field at once, each named.
    let r = app
        .post(
            "/campaigns",
            &p.secret_key,
            json!({ "name": "", "subject": "a\nb", "body": "{{#if}}", "from": "nope",
                    "audienceType": "SEGMENT" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    let fields = r.error_fields();
    for f in ["name", "subject", "body", "from", "segmentId"] {
        assert!(fields.contains(&f.to_string()), "{f} in {fields:?}");
    }
    let r = app
        .post(
            "/campaigns",
            &p.secret_key,
            campaign_body(
                "F",
                json!({ "audienceType": "FILTERED", "audienceFilter": { "logic": "AND", "groups": [
                    { "filters": [ { "field": "email", "operator": "sounds" } ] } ] } }),
            ),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        r.error_fields(),
        ["audienceFilter.groups[0].filters[0].operator"]
    );
    let r = app
        .post(
            "/campaigns",
            &p.secret_key,
            campaign_body(
                "S",
                json!({ "audienceType": "SEGMENT", "segmentId": "seg_0192f000000000000000000000000000" }),
            ),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["segmentId"]);
    // The sender's domain must be verified.
    let r = app
        .post(
            "/campaigns",
            &p.secret_key,
            campaign_body("D", json!({ "audienceType": "ALL" })),
        )
        .await;
    r.assert_error(422, "DOMAIN_NOT_VERIFIED");

    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    contact(&app, &p, "ann@example.com", true, json!({})).await;
    let id = create(
        &app,
        &p,
        campaign_body("Rules", json!({ "audienceType": "ALL" })),
    )
    .await;
    // Nothing to cancel in DRAFT.
    app.post(&format!("/campaigns/{id}/cancel"), &p.secret_key, json!({}))
        .await
        .assert_error(409, "CONFLICT");
    // A past time is refused.
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": "2020-01-01T00:00:00Z" })),
    )
    .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["scheduledFor"]);
    send(&app, &p, &id, Some(json!({ "scheduledFor": "soon" })))
        .await
        .assert_error(400, "INVALID_REQUEST_BODY");
    // PUT replaces the draft, with the same checks.
    let mut replaced = campaign_body("Rules v2", json!({ "audienceType": "ALL" }));
    replaced["description"] = json!("second try");
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/campaigns/{id}"),
            Some(&p.secret_key),
            Some(replaced.clone()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "Rules v2");
    assert_eq!(r.body["description"], "second try");
    let r = send(&app, &p, &id, Some(json!({ "scheduledFor": null }))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    campaign_with_status(&app, &p, &id, "SENT", 30).await;
    // A sent campaign no longer changes, sends, cancels.
    app.call(
        reqwest::Method::PUT,
        &format!("/campaigns/{id}"),
        Some(&p.secret_key),
        Some(replaced),
    )
    .await
    .assert_error(409, "CONFLICT");
    send(&app, &p, &id, None)
        .await
        .assert_error(409, "CONFLICT");
    app.post(&format!("/campaigns/{id}/cancel"), &p.secret_key, json!({}))
        .await
        .assert_error(409, "CONFLICT");

    // Duplicate: a new draft with the same content and audience.
    let r = app
        .post(
            &format!("/campaigns/{id}/duplicate"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["status"], "DRAFT");
    assert_eq!(r.body["name"], "Rules v2 (copy)");
    assert_eq!(r.body["subject"], "Rules v2 for {{email}}");
    assert_eq!(r.body["recipientCount"], 0);
    let copy = r.body["id"].as_str().unwrap().to_string();
    assert_ne!(copy, id);

    // Deleting: a sent campaign and a draft go; the emails stay.
    assert_eq!(
        app.delete(&format!("/campaigns/{id}"), &p.secret_key)
            .await
            .status,
        204
    );
    assert_eq!(
        app.delete(&format!("/campaigns/{copy}"), &p.secret_key)
            .await
            .status,
        204
    );
    app.get(&format!("/campaigns/{id}"), &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(deliveries(&app).len(), 1);
}

#[tokio::test]
async fn a_scheduled_campaign_waits_is_listed_and_can_be_cancelled_or_moved() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    contact(&app, &p, "ann@example.com", true, json!({})).await;
    let r = app
        .post(
            "/segments",
            &p.secret_key,
            json!({ "name": "Everyone", "type": "DYNAMIC", "condition": { "logic": "AND", "groups": [
                { "filters": [ { "field": "subscribed", "operator": "equals", "value": true } ] } ] } }),
        )
        .await;
    let segment = r.body["id"].as_str().unwrap().to_string();
    let id = create(
        &app,
        &p,
        campaign_body(
            "Later",
            json!({ "audienceType": "SEGMENT", "segmentId": segment }),
        ),
    )
    .await;
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": later.to_rfc3339() })),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED");
    let upcoming = app.get("/activity/upcoming", &p.secret_key).await;
    assert_eq!(
        upcoming.body["scheduledCampaigns"][0]["id"],
        id.as_str(),
        "{}",
        upcoming.body
    );
    // The segment cannot go while a scheduled campaign uses it.
    app.delete(&format!("/segments/{segment}"), &p.secret_key)
        .await
        .assert_error(409, "CONFLICT");
    // Still editable while scheduled.
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/campaigns/{id}"),
            Some(&p.secret_key),
            Some(campaign_body(
                "Later",
                json!({ "audienceType": "SEGMENT", "segmentId": segment }),
            )),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED");
    let r = app
        .post(&format!("/campaigns/{id}/cancel"), &p.secret_key, json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "CANCELLED");
    assert_eq!(
        app.delete(&format!("/segments/{segment}"), &p.secret_key)
            .await
            .status,
        204
    );

    // A schedule moved closer starts then, once.
    let id = create(
        &app,
        &p,
        campaign_body("Soon", json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": later.to_rfc3339() })),
    )
    .await;
    assert_eq!(r.body["status"], "SCHEDULED");
    let soon = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": soon.to_rfc3339() })),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(deliveries(&app).is_empty(), "sent before its time");
    let c = campaign_with_status(&app, &p, &id, "SENT", 30).await;
    let started = chrono::DateTime::parse_from_rfc3339(c["startedAt"].as_str().unwrap()).unwrap();
    assert!(started >= soon - chrono::Duration::milliseconds(5), "{c}");
    // The first schedule's job finds the schedule moved and does nothing.
    assert_eq!(recipients_of(&app, "Soon"), ["ann@example.com"]);
    assert_eq!(recipients_of(&app, "Later"), Vec::<String>::new());
}

#[tokio::test]
async fn cancel_while_sending_stops_what_was_not_handed_off() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.sending.per_project_per_second = 2;
    })
    .await;
    let p = app.project().await;
    for i in 0..10 {
        contact(&app, &p, &format!("r{i}@example.com"), true, json!({})).await;
    }
    let id = create(
        &app,
        &p,
        campaign_body("Slow", json!({ "audienceType": "ALL" })),
    )
    .await;
    send(&app, &p, &id, None).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while deliveries(&app).is_empty() {
        assert!(Instant::now() < deadline, "nothing delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A sending campaign cannot be deleted.
    app.delete(&format!("/campaigns/{id}"), &p.secret_key)
        .await
        .assert_error(409, "CONFLICT");
    let r = app
        .post(&format!("/campaigns/{id}/cancel"), &p.secret_key, json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "CANCELLED");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let delivered = deliveries(&app).len();
    assert!(delivered < 10, "the cancel stopped nothing");
    let s = stats(&app, &p, &id).await;
    assert_eq!(s["recipients"], 10, "{s}");
    assert_eq!(s["sent"], delivered, "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    assert_eq!(
        s["suppressed"].as_i64().unwrap() + s["sent"].as_i64().unwrap(),
        10,
        "{s}"
    );
    // Nothing more goes out later.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(deliveries(&app).len(), delivered);
    assert_eq!(
        campaign_with_status(&app, &p, &id, "CANCELLED", 1).await["status"],
        "CANCELLED"
    );
}

#[tokio::test]
async fn test_sends_are_marked_and_never_counted_and_stats_follow_engagement() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.notify_secret = Some("notify-secret".into());
    })
    .await;
    let p = app.project().await;
    contact(&app, &p, "ann@example.com", true, json!({ "plan": "gold" })).await;
    contact(&app, &p, "bob@example.com", true, json!({})).await;
    contact(&app, &p, "cy@example.com", true, json!({})).await;
    let id = create(
        &app,
        &p,
        campaign_body("Stats", json!({ "audienceType": "ALL" })),
    )
    .await;

    let r = app
        .post(
            &format!("/campaigns/{id}/test"),
            &p.secret_key,
            json!({ "email": "ann@example.com" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let test_email = r.body["emailId"].as_str().unwrap().to_string();
    app.post(
        &format!("/campaigns/{id}/test"),
        &p.secret_key,
        json!({ "email": "not an address" }),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");
    let deadline = Instant::now() + Duration::from_secs(20);
    while deliveries(&app).is_empty() {
        assert!(Instant::now() < deadline, "the test never went");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let test = app.outbox_messages().pop().unwrap();
    assert!(
        test.contains("Subject: [Test] Stats for ann@example.com"),
        "{test}"
    );
    assert!(test.contains("Hello gold"), "{test}");
    let s = stats(&app, &p, &id).await;
    assert_eq!(
        (s["recipients"].clone(), s["sent"].clone()),
        (json!(0), json!(0))
    );
    let r = app
        .get(&format!("/emails/{test_email}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    send(&app, &p, &id, None).await;
    campaign_with_status(&app, &p, &id, "SENT", 30).await;
    let mails = app.outbox_messages();
    let html_of = |to: &str| -> String {
        let raw = mails
            .iter()
            .find(|m| m.contains(&format!("Subject: Stats for {to}")))
            .unwrap();
        let parsed = mail_parser::MessageParser::default()
            .parse(raw.as_bytes())
            .unwrap();
        parsed.body_html(0).unwrap().into_owned()
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Ann opens; Bob clicks (which also counts as an open) and unsubscribes.
    let ann = html_of("ann@example.com");
    let pixel = ann
        .split("<img src=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    assert_eq!(client.get(&pixel).send().await.unwrap().status(), 200);
    assert_eq!(client.get(&pixel).send().await.unwrap().status(), 200);
    let bob = html_of("bob@example.com");
    let links: Vec<String> = bob
        .split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .collect();
    let tracked = links.iter().find(|l| l.contains("/t/c/")).unwrap();
    assert_eq!(client.get(tracked).send().await.unwrap().status(), 302);
    let unsubscribe = links
        .iter()
        .find(|l| l.contains("/unsubscribe/"))
        .expect("an unsubscribe link");
    let r = client
        .post(unsubscribe)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success() || r.status().is_redirection(),
        "{}",
        r.status()
    );

    // The transport reports Ann's email delivered and Cy's bounced (a hard bounce also
    // unsubscribes Cy), in the `outbox` transport's notification format.
    let message_id = |to: &str| -> String {
        let raw = mails
            .iter()
            .find(|m| m.contains(&format!("Subject: Stats for {to}")))
            .unwrap();
        crate::support::harness::message_id_of(raw)
    };
    let r = app
        .client
        .post(app.url("/webhooks/notify"))
        .header("x-herald-secret", "notify-secret")
        .json(&json!({ "events": [
            { "type": "delivered", "messageId": message_id("ann@example.com"), "email": "ann@example.com" },
            { "type": "bounced-hard", "messageId": message_id("cy@example.com"), "email": "cy@example.com",
              "detail": "550 5.1.1 mailbox unknown" } ] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let s = stats(&app, &p, &id).await;
    assert_eq!(s["recipients"], 3, "{s}");
    assert_eq!(s["sent"], 3, "{s}");
    assert_eq!(s["delivered"], 1, "{s}");
    assert_eq!(s["opened"], 2, "{s}");
    assert_eq!(s["clicked"], 1, "{s}");
    assert_eq!(s["bounced"], 1, "{s}");
    // Bob by the link, Cy by the bounce.
    assert_eq!(s["unsubscribed"], 2, "{s}");
    for (rate, want) in [("openRate", 2.0), ("clickRate", 1.0), ("bounceRate", 1.0)] {
        assert!(
            (s[rate].as_f64().unwrap() - want / 3.0).abs() < 1e-9,
            "{rate}: {s}"
        );
    }

    // Analytics agree: the series counts the campaign, not the test.
    let r = app
        .get("/analytics/timeseries?interval=hour", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let points = r.body["data"].as_array().unwrap();
    assert!(points.len() >= 24, "{}", r.body);
    let sum = |k: &str| points.iter().map(|p| p[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!(sum("sent"), 3, "{}", r.body);
    assert_eq!(sum("opened"), 2);
    assert_eq!(sum("clicked"), 1);
    assert_eq!(sum("delivered"), 1);
    assert_eq!(sum("bounced"), 1);
    let r = app
        .get("/analytics/timeseries?timezone=Asia/Kolkata", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["timezone"], "Asia/Kolkata");
    assert!(r.body["data"].as_array().unwrap().len() >= 30);
    app.get("/analytics/timeseries?timezone=Mars/Olympus", &p.secret_key)
        .await
        .assert_error(422, "VALIDATION_ERROR");
    app.get(
        "/analytics/timeseries?interval=hour&from=2020-01-01T00:00:00Z",
        &p.secret_key,
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");

    let r = app
        .get("/analytics/top-campaigns?metric=opened", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"][0]["id"], id.as_str(), "{}", r.body);
    assert_eq!(r.body["data"][0]["value"], 2.0);
    let r = app
        .get("/analytics/campaign-stats?pageSize=10", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 1);
    assert_eq!(r.body["data"][0]["stats"]["clicked"], 1);
}

#[tokio::test]
async fn top_events_count_custom_names_over_a_range() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    for (name, n) in [("signup", 3), ("paid", 1), ("viewed", 2)] {
        for i in 0..n {
            let r = app
                .post(
                    "/v1/track",
                    &p.secret_key,
                    json!({ "event": name, "email": format!("u{i}@example.com") }),
                )
                .await;
            assert!(r.status.is_success(), "{}", r.body);
        }
    }
    let r = app
        .get(
            "/analytics/top-events?limit=2&from=2020-01-01T00:00:00Z&to=2100-01-01T00:00:00Z",
            &p.secret_key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The default range ends now.
    let recent = app.get("/analytics/top-events", &p.secret_key).await;
    assert_eq!(recent.status, 200, "{}", recent.body);
    assert_eq!(recent.body["data"][0]["name"], "signup", "{}", recent.body);
    let names: Vec<(String, i64)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("signup".to_string(), 3), ("viewed".to_string(), 2)],
        "{}",
        r.body
    );
    // An empty range counts nothing.
    let r = app
        .get(
            "/analytics/top-events?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z",
            &p.secret_key,
        )
        .await;
    assert_eq!(r.body["data"], json!([]), "{}", r.body);
    app.get(
        "/analytics/top-events?from=2020-01-02T00:00:00Z&to=2020-01-01T00:00:00Z",
        &p.secret_key,
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");
}

/// Imports `n` subscribed contacts `c{i}@example.com` through the CSV import job.
pub async fn import(app: &TestApp, p: &TestProject, n: usize) {
    let mut csv = String::from("email,subscribed\n");
    for i in 0..n {
        csv.push_str(&format!("c{i}@example.com,true\n"));
    }
    let r =
        crate::http::jobs::upload(app, &p.secret_key, "c.csv", "text/csv", csv.into_bytes()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job = r.body["jobId"].as_str().unwrap().to_string();
    let done = crate::http::jobs::wait_job(app, &p.secret_key, "import", &job).await;
    assert_eq!(done["result"]["succeeded"], n as i64, "{done}");
}

/// Counts deliveries per recipient.
fn per_recipient(deliveries: &[Value]) -> HashMap<String, usize> {
    let mut count = HashMap::new();
    for d in deliveries {
        let to = d["recipients"][0]
            .as_str()
            .or_else(|| d["to"].as_str())
            .unwrap_or_else(|| panic!("no recipient in {d}"))
            .to_string();
        *count.entry(to).or_insert(0) += 1;
    }
    count
}

#[tokio::test]
async fn a_server_killed_mid_campaign_finishes_it_after_restart_mailing_each_recipient_once() {
    const N: usize = 5000;
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let configure = move |s: &mut Settings| {
        fast(s);
        s.jobs_lease_seconds = 2;
        s.jobs_concurrency = 8;
        s.sending.batch_size = 10;
        s.data_dir = data_dir.clone();
    };
    let mut settings = crate::support::harness::test_settings(dir.path(), &url);
    configure(&mut settings);
    let doomed = DoomedServer::start(settings, &url);
    let first = &doomed.app;
    let p = first.project().await;
    import(first, &p, N).await;
    let id = create(
        first,
        &p,
        campaign_body("Big", json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = send(first, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Kill it once some, not all, recipients were mailed.
    let deadline = Instant::now() + Duration::from_secs(120);
    while deliveries_in(data.path()).len() < N / 10 {
        assert!(Instant::now() < deadline, "too slow to start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    doomed.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = deliveries_in(data.path()).len();
    assert!(before < N, "the kill came after the campaign finished");

    let second = TestApp::spawn_on(&url, configure).await;
    let c = campaign_with_status(&second, &p, &id, "SENT", 240).await;
    assert_eq!(c["recipientCount"], N as i64, "{c}");
    let counts = per_recipient(&deliveries_in(data.path()));
    assert_eq!(counts.len(), N, "every recipient mailed");
    // Only the hand-offs in flight at the kill (accepted, not yet committed) may repeat: at
    // most one batch (10 here) per job slot (8).
    let doubled = counts.values().filter(|n| **n > 1).count();
    assert!(doubled <= 8 * 10, "{doubled} recipients mailed twice");
    assert!(counts.values().all(|n| *n <= 2));
    let s = stats(&second, &p, &id).await;
    assert_eq!(s["recipients"], N as i64, "{s}");
    assert_eq!(s["sent"], N as i64, "{s}");
}

#[tokio::test]
async fn two_instances_send_one_campaign_without_mailing_anyone_twice() {
    const N: usize = 1000;
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let configure = move |s: &mut Settings| {
        fast(s);
        s.data_dir = data_dir.clone();
    };
    let a = TestApp::spawn_with(configure.clone()).await;
    let b = a.spawn_sharing(configure).await;
    let p = a.project().await;
    import(&a, &p, N).await;
    let id = create(
        &a,
        &p,
        campaign_body("Twice", json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = send(&b, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    campaign_with_status(&a, &p, &id, "SENT", 120).await;
    let counts = per_recipient(&deliveries_in(data.path()));
    assert_eq!(counts.len(), N);
    assert!(counts.values().all(|n| *n == 1), "someone was mailed twice");
}

#[tokio::test]
async fn a_campaign_over_the_render_budget_waits_for_room_and_mails_everyone() {
    const N: usize = 40;
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.sending.render_memory_mb = 1;
    })
    .await;
    let p = app.project().await;
    import(&app, &p, N).await;
    // About 80 KB rendered a recipient (with the text part): 40 of them take three times the
    // 1 MB budget, so a group of the batch holds only some and the rest wait for the next.
    let mut body = campaign_body("Large", json!({ "audienceType": "ALL" }));
    body["body"] = json!(format!(
        "<p>{}</p><a href=\"{{{{unsubscribeUrl}}}}\">Unsubscribe</a>",
        "Hello there. ".repeat(3_000)
    ));
    let id = create(&app, &p, body).await;
    let r = send(&app, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let c = campaign_with_status(&app, &p, &id, "SENT", 60).await;
    assert_eq!(c["recipientCount"], N as i64, "{c}");
    let counts = per_recipient(&deliveries(&app));
    assert_eq!(counts.len(), N, "every recipient mailed");
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    let s = stats(&app, &p, &id).await;
    assert_eq!(s["sent"], N as i64, "{s}");
    assert_eq!(app.state().sending().render_budget().free_kb(), 1024);
}
