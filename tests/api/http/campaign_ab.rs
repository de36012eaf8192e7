//! A/B tests of campaigns and sends at each contact's local time, through HTTP, delivering
//! through the `smtp` transport into a loopback SMTP sink (the harness of `campaign_pause.rs`):
//! the checks of the A/B fields as 422s naming each field; a 1,000-contact test whose server is
//! killed between the test group's send and the winner's, chosen on another instance from the
//! opens recorded through the pixels, each contact mailed once; a pause across the end of the
//! test (a tie: the first variant wins); a send at local time, each contact at its zone's time.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use herald::config::Settings;
use mail_parser::MessageParser;
use serde_json::{Value, json};

use crate::http::campaign_pause::{act, at_least, each_once, settled, through, total};
use crate::http::campaigns::{
    campaign_body, campaign_with_status, contact, create, import, send, stats,
};
use crate::support::harness::{DoomedServer, TestApp, TestProject};
use crate::support::smtpd::SmtpServer;

/// A campaign to everyone with an A/B test of two variants ("Variant A", "Variant B") on
/// `fraction` of the audience for `seconds`, decided by opens.
fn ab_body(name: &str, fraction: f64, seconds: i64) -> Value {
    let mut body = campaign_body(name, json!({ "audienceType": "ALL" }));
    let variant = |label: &str| {
        json!({
            "subject": format!("Variant {label} for {{{{email}}}}"),
            "body": format!("<p>Offer {label}</p><a href=\"https://shop.example/{label}\">Shop</a> <a href=\"{{{{unsubscribeUrl}}}}\">Unsubscribe</a>"),
        })
    };
    body["variants"] = json!([variant("A"), variant("B")]);
    body["testFraction"] = json!(fraction);
    body["winnerMetric"] = json!("OPEN_RATE");
    body["testDuration"] = json!(seconds);
    body
}

/// What the sink received: per message, its recipient, subject, HTML and email id (from its
/// `Message-ID`).
fn messages(sink: &SmtpServer) -> Vec<(String, String, String, String)> {
    let log = sink.log.lock().unwrap().clone();
    log.data
        .iter()
        .map(|raw| {
            let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
            let to = m
                .to()
                .and_then(|a| a.first())
                .and_then(|a| a.address())
                .unwrap_or_default()
                .to_ascii_lowercase();
            let subject = m.subject().unwrap_or_default().to_string();
            let html = m.body_html(0).map(|h| h.into_owned()).unwrap_or_default();
            let id = m.message_id().unwrap_or_default();
            let id = id.split('@').next().unwrap_or_default().to_string();
            (to, subject, html, id)
        })
        .collect()
}

/// The open pixel's URL in an email's HTML.
fn pixel(html: &str) -> String {
    html.split("<img src=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("an open pixel")
        .replace("&amp;", "&")
}

/// Messages per subject prefix (`Variant A`, `Variant B`).
fn by_variant(sink: &SmtpServer) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for (_, subject, _, _) in messages(sink) {
        let label = subject
            .split(" for ")
            .next()
            .unwrap_or_default()
            .to_string();
        *counts.entry(label).or_insert(0) += 1;
    }
    counts
}

async fn campaign(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app.get(&format!("/campaigns/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn the_ab_fields_are_checked_each_against_its_field_and_shown_on_the_campaign() {
    let app = TestApp::spawn_with(|s| {
        s.jobs_poll_interval_ms = 20;
        s.domains.allow_unverified = true;
    })
    .await;
    let p = app.project().await;
    let post = |body: Value| {
        let app = &app;
        let key = p.secret_key.clone();
        async move { app.post("/campaigns", &key, body).await }
    };
    // One variant, then five.
    for n in [1, 5] {
        let mut body = ab_body("Few", 0.2, 60);
        body["variants"] = json!(vec![body["variants"][0].clone(); n]);
        let r = post(body).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), ["variants"], "{}", r.body);
    }
    // Every bad field at once, each named by its path.
    let mut body = ab_body("Bad", 1.5, 0);
    body["variants"][0]["subject"] = json!("Two\nlines");
    body["variants"][1]["body"] = json!("  ");
    body["variants"][1]["fromName"] = json!("Bell\u{7}");
    body["winnerMetric"] = json!("REPLY_RATE");
    let r = post(body).await;
    r.assert_error(422, "VALIDATION_ERROR");
    let mut fields = r.error_fields();
    fields.sort();
    fields.dedup();
    assert_eq!(
        fields,
        [
            "testDuration",
            "testFraction",
            "variants[0].subject",
            "variants[1].body",
            "variants[1].fromName",
            "winnerMetric"
        ],
        "{}",
        r.body
    );
    // A template that does not parse; a fraction of 0; the test's settings without variants.
    let mut body = ab_body("Syntax", 0.0, 60);
    body["variants"][1]["body"] = json!("<p>Hi {{firstName</p>");
    let r = post(body).await;
    r.assert_error(422, "VALIDATION_ERROR");
    let mut fields = r.error_fields();
    fields.sort();
    assert_eq!(fields, ["testFraction", "variants[1].body"], "{}", r.body);
    let mut body = campaign_body("Loose", json!({ "audienceType": "ALL" }));
    body["testFraction"] = json!(0.2);
    let r = post(body).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["variants"], "{}", r.body);

    // A good test is shown on the campaign, kept by a duplicate and removed by a replace.
    let id = create(&app, &p, ab_body("Good", 0.2, 3600)).await;
    let c = campaign(&app, &p, &id).await;
    let ab = &c["abTest"];
    assert_eq!(ab["status"], "PENDING", "{c}");
    assert_eq!(ab["variants"].as_array().unwrap().len(), 2, "{c}");
    assert_eq!(
        ab["variants"][1]["subject"], "Variant B for {{email}}",
        "{c}"
    );
    assert_eq!(ab["testFraction"], 0.2, "{c}");
    assert_eq!(ab["winnerMetric"], "OPEN_RATE", "{c}");
    assert_eq!(ab["testDuration"], 3600, "{c}");
    assert!(ab["winner"].is_null() && ab["decideAt"].is_null(), "{c}");
    let r = app
        .post(
            &format!("/campaigns/{id}/duplicate"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["abTest"]["testDuration"], 3600, "{}", r.body);
    // An A/B test is not sent at each contact's local time; local time needs a time.
    let soon = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": soon, "inContactTimeZone": true })),
    )
    .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["inContactTimeZone"], "{}", r.body);
    let r = app
        .call(
            reqwest::Method::PUT,
            &format!("/campaigns/{id}"),
            Some(&p.secret_key),
            Some(campaign_body("Plain", json!({ "audienceType": "ALL" }))),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["abTest"].is_null(), "{}", r.body);
    let r = send(&app, &p, &id, Some(json!({ "inContactTimeZone": true }))).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["scheduledFor"], "{}", r.body);
    // A campaign without a test has no variant stats.
    assert_eq!(stats(&app, &p, &id).await["variants"], json!([]));
}

#[tokio::test]
async fn an_ab_test_killed_before_its_winner_is_decided_on_another_instance_from_the_opens_and_mails_each_contact_once()
 {
    const N: usize = 1000;
    // 200 in the test group, 100 a variant; the winner is chosen 15 s after they are taken.
    const SECONDS: i64 = 15;
    let sink = SmtpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let port = sink.addr.port();
    let configure = move |s: &mut Settings| {
        through(s, port, 0);
        s.jobs_lease_seconds = 2;
    };
    let mut settings = crate::support::harness::test_settings(dir.path(), &url);
    configure(&mut settings);
    let doomed = DoomedServer::start(settings, &url);
    let first = &doomed.app;
    let p = first.project().await;
    import(first, &p, N).await;
    let id = create(first, &p, ab_body("Duel", 0.2, SECONDS)).await;
    let r = send(first, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let started = Instant::now();

    // The test group arrives, split evenly; the rest waits for the winner.
    at_least(&sink, 200, 60).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(total(&sink), 200, "only the test group is mailed first");
    let split = by_variant(&sink);
    assert_eq!(split.get("Variant A"), Some(&100), "{split:?}");
    assert_eq!(split.get("Variant B"), Some(&100), "{split:?}");
    let c = campaign(first, &p, &id).await;
    assert_eq!(c["status"], "SENDING", "{c}");
    assert_eq!(c["abTest"]["status"], "TESTING", "{c}");
    assert!(c["abTest"]["decideAt"].is_string(), "{c}");

    // Opens: 10 of variant A's emails, 40 of variant B's (each pixel recorded at once).
    let client = reqwest::Client::new();
    let mut opened = HashMap::new();
    for (_, subject, html, _) in messages(&sink) {
        let label = subject.split(" for ").next().unwrap().to_string();
        let n = opened.entry(label.clone()).or_insert(0);
        if (label == "Variant A" && *n < 10) || (label == "Variant B" && *n < 40) {
            let r = client.get(pixel(&html)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            *n += 1;
        }
    }
    let s = stats(first, &p, &id).await;
    let v = &s["variants"];
    assert_eq!(v[0]["recipients"], 100, "{s}");
    assert_eq!(v[1]["recipients"], 100, "{s}");
    assert_eq!(v[0]["sent"], 100, "{s}");
    assert_eq!(v[0]["opened"], 10, "{s}");
    assert_eq!(v[1]["opened"], 40, "{s}");
    assert_eq!(v[1]["openRate"], 0.4, "{s}");
    assert_eq!(v[1]["winner"], false, "{s}");
    let c = campaign(first, &p, &id).await;
    assert!(
        c["abTest"]["winner"].is_null() && started.elapsed() < Duration::from_secs(SECONDS as u64),
        "the test ended before the kill (too slow a machine for a {SECONDS} s test): {c}"
    );
    doomed.kill();

    // Another instance on the same database chooses the winner when the test ends.
    let second = TestApp::spawn_on(&url, configure).await;
    let c = campaign_with_status(&second, &p, &id, "SENT", 180).await;
    assert_eq!(c["recipientCount"], N as i64, "{c}");
    assert_eq!(c["abTest"]["status"], "WINNER_CHOSEN", "{c}");
    assert_eq!(c["abTest"]["winner"], 1, "{c}");
    assert!(c["abTest"]["decidedAt"].is_string(), "{c}");
    assert_eq!(settled(&sink).await, N);
    each_once(&sink, N);
    let split = by_variant(&sink);
    assert_eq!(split.get("Variant A"), Some(&100), "{split:?}");
    assert_eq!(split.get("Variant B"), Some(&900), "{split:?}");
    let s = stats(&second, &p, &id).await;
    assert_eq!(s["sent"], N as i64, "{s}");
    assert_eq!(s["opened"], 50, "{s}");
    assert_eq!(s["variants"][1]["winner"], true, "{s}");
    assert_eq!(s["variants"][0]["winner"], false, "{s}");
    assert_eq!(s["variants"][1]["recipients"], 100, "{s}");
    // Each email records its campaign and variant: the first arrivals (the test group's) and
    // the last (the rest's, the winner's).
    let all = messages(&sink);
    for (_, subject, _, email) in all.iter().take(5).chain(all.iter().rev().take(5)) {
        let e = second.get(&format!("/emails/{email}"), &p.secret_key).await;
        assert_eq!(e.status, 200, "{}", e.body);
        assert_eq!(e.body["campaignId"], id.as_str(), "{}", e.body);
        let variant = if subject.starts_with("Variant A") {
            0
        } else {
            1
        };
        assert_eq!(e.body["variant"], variant, "{subject}: {}", e.body);
    }
}

#[tokio::test]
async fn a_test_paused_past_its_end_decides_on_resume_and_a_tie_goes_to_the_first_variant() {
    const N: usize = 100;
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 0)).await;
    let p = app.project().await;
    import(&app, &p, N).await;
    // The test ends 6 s after the test group is taken; the pause comes before.
    let id = create(&app, &p, ab_body("Tie", 0.5, 6)).await;
    assert_eq!(send(&app, &p, &id, None).await.status, 200);
    at_least(&sink, 50, 60).await;
    let r = act(&app, &p, &id, "pause").await;
    assert_eq!(r.body["status"], "PAUSED", "{}", r.body);
    // The test's end passes while paused: no winner, nothing more sent.
    tokio::time::sleep(Duration::from_millis(7000)).await;
    assert_eq!(total(&sink), 50);
    let c = campaign(&app, &p, &id).await;
    assert!(c["abTest"]["winner"].is_null(), "{c}");
    let r = act(&app, &p, &id, "resume").await;
    assert_eq!(r.body["status"], "SENDING", "{}", r.body);
    let c = campaign_with_status(&app, &p, &id, "SENT", 120).await;
    // No opens at all: a tie, which the first variant wins.
    assert_eq!(c["abTest"]["winner"], 0, "{c}");
    assert_eq!(settled(&sink).await, N);
    each_once(&sink, N);
    let split = by_variant(&sink);
    assert_eq!(split.get("Variant A"), Some(&75), "{split:?}");
    assert_eq!(split.get("Variant B"), Some(&25), "{split:?}");
}

#[tokio::test]
async fn a_send_at_local_time_mails_each_contact_at_its_time_zone_s_time() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port(), 0)).await;
    let p = app.project().await;
    // In December: Tokyo UTC+9 and Paris UTC+1 are past the time already, New York (UTC−5) is
    // hours away, and UTC, an unknown zone and none are at it.
    let zones = [
        ("tokyo@example.com", json!({ "timezone": "Asia/Tokyo" })),
        ("paris@example.com", json!({ "timezone": "Europe/Paris" })),
        ("ny@example.com", json!({ "timezone": "America/New_York" })),
        ("utc@example.com", json!({ "timezone": "UTC" })),
        ("mars@example.com", json!({ "timezone": "Mars/Olympus" })),
        ("none@example.com", json!({})),
    ];
    for (email, data) in &zones {
        contact(&app, &p, email, true, data.clone()).await;
    }
    let id = create(
        &app,
        &p,
        campaign_body("Local", json!({ "audienceType": "ALL" })),
    )
    .await;
    // Ten seconds from now, as the wall-clock time in each zone (a whole second).
    let now = chrono::Utc::now();
    let wall = now + chrono::Duration::seconds(10);
    let wall = wall - chrono::Duration::nanoseconds(i64::from(wall.timestamp_subsec_nanos()));
    let r = send(
        &app,
        &p,
        &id,
        Some(json!({ "scheduledFor": wall.to_rfc3339(), "inContactTimeZone": true })),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "SCHEDULED", "{}", r.body);
    let local = chrono::DateTime::parse_from_rfc3339(r.body["localScheduledFor"].as_str().unwrap())
        .unwrap();
    assert_eq!(local, wall, "{}", r.body);
    // It starts at once: UTC+14 reached that time long ago.
    let start =
        chrono::DateTime::parse_from_rfc3339(r.body["scheduledAt"].as_str().unwrap()).unwrap();
    assert!(start <= chrono::Utc::now() && start >= now - chrono::Duration::seconds(1));

    // When each message arrives.
    let mut arrived: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while arrived.len() < 5 && Instant::now() < deadline {
        for (to, _, _, _) in messages(&sink) {
            arrived.entry(to).or_insert_with(chrono::Utc::now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got: HashSet<&str> = arrived.keys().map(String::as_str).collect();
    let expected: HashSet<&str> = [
        "tokyo@example.com",
        "paris@example.com",
        "utc@example.com",
        "mars@example.com",
        "none@example.com",
    ]
    .into();
    assert_eq!(got, expected);
    for early in ["tokyo@example.com", "paris@example.com"] {
        assert!(arrived[early] < wall, "{early} came at {}", arrived[early]);
    }
    for at_time in ["utc@example.com", "mars@example.com", "none@example.com"] {
        assert!(
            arrived[at_time] >= wall,
            "{at_time} came at {}",
            arrived[at_time]
        );
    }
    // New York's is due in five hours: still queued.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(total(&sink), 5);
    let c = campaign(&app, &p, &id).await;
    assert_eq!(c["status"], "SENDING", "{c}");
    let s = stats(&app, &p, &id).await;
    assert_eq!(
        (s["sent"].as_i64(), s["queued"].as_i64()),
        (Some(5), Some(1)),
        "{s}"
    );
    let (_, _, _, email) = &messages(&sink)[0];
    let e = app.get(&format!("/emails/{email}"), &p.secret_key).await;
    assert_eq!(e.body["campaignId"], id.as_str(), "{}", e.body);
    assert!(e.body["variant"].is_null(), "{}", e.body);
    // A pause holds it and a resume gives it back its time; cancelling drops it.
    assert_eq!(act(&app, &p, &id, "pause").await.body["status"], "PAUSED");
    assert_eq!(act(&app, &p, &id, "resume").await.body["status"], "SENDING");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(total(&sink), 5, "the resume sent New York's email early");
    assert_eq!(
        act(&app, &p, &id, "cancel").await.body["status"],
        "CANCELLED"
    );
}
