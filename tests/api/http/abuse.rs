//! Abuse and partial writes, tried as a stranger with a fresh account would: login and signup
//! floods, a multi-recipient send that fails half-way, forged headers, deleting the record of
//! consent, data that a database cannot bind or address, the readiness probe's error text and a
//! rotated session secret.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::harness::{Reply, TestApp, TestProject};

async fn login(app: &TestApp, email: &str, password: &str) -> Reply {
    app.call(
        Method::POST,
        "/auth/login",
        None,
        Some(json!({ "email": email, "password": password })),
    )
    .await
}

#[tokio::test]
async fn logins_and_signups_are_limited_per_account_and_per_address() {
    // The deployment defaults: 10 logins a minute per account, 30 attempts per address.
    let app = TestApp::spawn_with(|s| {
        s.auth_attempts_per_ip_per_minute = 30;
        s.login_attempts_per_account_per_minute = 10;
    })
    .await;
    // The address's count below must stay in one fixed minute.
    crate::support::harness::fresh_minute(Duration::from_secs(40)).await;
    let mut refused = 0;
    for i in 0..40 {
        let r = login(&app, "victim@example.com", "wrong password").await;
        if i == 0 {
            // The headers show the limit closest to refusing: the account's.
            assert_eq!(r.header("ratelimit-limit"), Some("10"), "{:?}", r.headers);
            assert_eq!(
                r.header("ratelimit-remaining"),
                Some("9"),
                "{:?}",
                r.headers
            );
        }
        match r.status.as_u16() {
            401 => {}
            429 => {
                r.assert_error(429, "RATE_LIMIT_EXCEEDED");
                let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!((1..=60).contains(&wait), "{wait}");
                refused += 1;
            }
            other => panic!("{other}: {}", r.body),
        }
    }
    // At most ten in each one-minute window get through (the run may straddle two windows).
    assert!(
        refused >= 20,
        "only {refused} of 40 bad logins were refused"
    );
    // The address has used its 30 attempts: any other account, and signup, wait too.
    let r = login(&app, "someone-else@example.com", "wrong password").await;
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
    let r = app
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "new@example.com", "password": "correct horse battery" })),
        )
        .await;
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn concurrent_logins_hash_a_few_at_a_time() {
    let app = TestApp::spawn_with(|s| {
        s.auth_attempts_per_ip_per_minute = 100_000;
        s.login_attempts_per_account_per_minute = 100_000;
        // 600 connections from this one address at once.
        s.http_max_connections_per_ip = 0;
    })
    .await;
    app.user("ann@example.com").await;
    let before = rss();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (peak, watching) = (peak.clone(), watching.clone());
        tokio::spawn(async move {
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    // 600 logins at once, each an argon2 run of 19 MiB: unbounded, that is 11 GiB. On the fixed
    // hashing threads the growth does not depend on how many arrive (about 240 MiB here, most of
    // it the allocator keeping freed runs).
    let started = Instant::now();
    let logins = (0..600).map(|i| {
        let app = &app;
        async move {
            let password = if i % 2 == 0 {
                "correct horse battery"
            } else {
                "wrong password"
            };
            login(app, "ann@example.com", password)
                .await
                .status
                .as_u16()
        }
    });
    let statuses = futures::future::join_all(logins).await;
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    watcher.await.unwrap();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 300);
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 300);
    let grew = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before);
    eprintln!(
        "600 concurrent logins: {:?}, resident memory grew {} MiB",
        started.elapsed(),
        grew >> 20
    );
    assert!(
        grew < 512 * 1024 * 1024,
        "memory grew by {} MiB during 600 concurrent logins ({:?})",
        grew >> 20,
        started.elapsed()
    );
}

/// A server that sends unsigned mail from any domain (the body reaches rendering).
async fn unverified() -> (TestApp, TestProject) {
    let app = TestApp::spawn_with(|s| s.domains.allow_unverified = true).await;
    let p = app.project().await;
    (app, p)
}

async fn contacts_total(app: &TestApp, p: &TestProject) -> i64 {
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["total"].as_i64().unwrap()
}

#[tokio::test]
async fn a_send_that_fails_for_one_recipient_writes_nothing() {
    let (app, p) = unverified().await;
    // Carl's stored list makes the body render 200³ loop steps: over the budget, for him only.
    let items: Vec<u32> = (0..200).collect();
    let carl = p
        .contact(&app, "carl@example.com", json!({ "l": items }))
        .await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": ["ann@example.com", "bob@example.com", "carl@example.com"],
                "from": "hello@unverified.test",
                "subject": "Hi",
                "body": "{{#each l}}{{#each ../l}}{{#each ../../l}}x{{/each}}{{/each}}{{/each}}",
                "subscribed": true,
                "data": { "plan": "pro" },
            }),
        )
        .await;
    // `/v1/send` answers in its own error shape.
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["errors"][0]["code"], "template_render", "{}", r.body);
    // Nobody was created or changed, and nothing was queued.
    assert_eq!(contacts_total(&app, &p).await, 1);
    let c = app.get(&format!("/contacts/{carl}"), &p.secret_key).await;
    assert_eq!(c.body["data"].get("plan"), None, "{}", c.body);
    let events = app.get("/events", &p.secret_key).await;
    assert_eq!(
        events.body["data"].as_array().unwrap().len(),
        0,
        "{}",
        events.body
    );
    let upcoming = app.get("/activity/upcoming", &p.secret_key).await;
    assert_eq!(upcoming.body["queuedEmails"], 0, "{}", upcoming.body);

    // The same request without Carl goes through whole.
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": ["ann@example.com", "bob@example.com", "ann@example.com"],
                "from": "hello@unverified.test",
                "subject": "Hi {{plan}}",
                "body": "<p>Hi</p>",
                "subscribed": true,
                "data": { "plan": "pro" },
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let emails = r.body["data"]["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 3, "one email per recipient, repeats included");
    assert_eq!(emails[0]["contact"]["id"], emails[2]["contact"]["id"]);
    assert_eq!(contacts_total(&app, &p).await, 3);
    let subscribed = app
        .get("/events?name=contact.subscribed", &p.secret_key)
        .await;
    assert_eq!(
        subscribed.body["data"].as_array().unwrap().len(),
        0,
        "new contacts are created subscribed, which is no change: {}",
        subscribed.body
    );
}

#[tokio::test]
async fn the_message_id_header_cannot_be_forged() {
    let (app, p) = unverified().await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": "ann@example.com",
                "from": "hello@unverified.test",
                "subject": "Hi",
                "body": "<p>Hi</p>",
                "headers": { "X-Herald-Message-Id": "<eml_00000000000000000000000000000000@x>" },
            }),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let problem = &r.body["errors"][0];
    assert_eq!(
        problem["field"], "headers.X-Herald-Message-Id",
        "{}",
        r.body
    );
    assert_eq!(problem["code"], "reserved", "{}", r.body);
}

#[tokio::test]
async fn the_record_of_consent_cannot_be_deleted() {
    let (app, p) = unverified().await;
    let id = p.contact(&app, "ann@example.com", json!({})).await;
    let r = app
        .patch(
            &format!("/contacts/{id}"),
            &p.secret_key,
            json!({ "subscribed": false }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for name in [
        "contact.unsubscribed",
        "contact.subscribed",
        "email.sent",
        "segment.entered",
    ] {
        let r = app.delete(&format!("/events/{name}"), &p.secret_key).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("record of consent"),
            "{}",
            r.body
        );
    }
    let kept = app
        .get("/events?name=contact.unsubscribed", &p.secret_key)
        .await;
    assert_eq!(kept.body["data"].as_array().unwrap().len(), 1);

    // A tracked event is deleted once the workflow engine has taken it; until then it is kept.
    for _ in 0..3 {
        let r = app
            .post(
                "/v1/track",
                &p.public_key,
                json!({ "email": "ann@example.com", "event": "clicked-banner" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let deleted =
        crate::http::events::delete_events_once_dispatched(&app, &p, "clicked-banner").await;
    assert_eq!(deleted, 3);
}

#[tokio::test]
async fn data_keys_are_capped_and_any_key_can_be_read_back() {
    let (app, p) = unverified().await;
    let many: serde_json::Map<String, Value> =
        (0..1001).map(|i| (format!("k{i}"), json!(i))).collect();
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "ann@example.com", "data": many }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["data"], "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000"),
        "{}",
        r.body
    );
    // 1,000 keys are fine, on both databases (each new key is bound in one statement).
    let thousand: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "ann@example.com", "data": thousand }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);

    // Keys with quotes and backslashes are stored, listed and deleted like any other (a field
    // names a `\` in a key `\\`, as `GET /contacts/fields` lists it).
    for (key, escaped) in [
        ("say \"hi\"", "say \"hi\""),
        ("back\\slash", "back\\\\slash"),
        ("it's", "it's"),
    ] {
        let r = app
            .post(
                "/contacts",
                &p.secret_key,
                json!({ "email": "bob@example.com", "data": { key: "yes" } }),
            )
            .await;
        assert!(r.status.is_success(), "{key}: {}", r.body);
        let field = format!("data.{escaped}");
        let r = app.get("/contacts/fields", &p.secret_key).await;
        assert!(
            r.body["fields"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["field"] == field.as_str()),
            "{field}: {}",
            r.body
        );
        let path = format!("/contacts/fields/{}/values", urlencoding(&field));
        let r = app.get(&path, &p.secret_key).await;
        assert_eq!(r.status, 200, "{key}: {}", r.body);
        assert_eq!(r.body["values"][0]["value"], "yes", "{key}: {}", r.body);
        let r = app
            .delete(
                &format!("/contacts/fields/{}", urlencoding(&field)),
                &p.secret_key,
            )
            .await;
        assert!(r.status.is_success(), "{key}: {}", r.body);
        let r = app.get(&path, &p.secret_key).await;
        assert_eq!(r.body["values"], json!([]), "{key}: {}", r.body);
    }
}

/// Percent-encodes a path segment.
fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn readiness_does_not_show_the_database_error() {
    let app = TestApp::spawn().await;
    let r = app.call(Method::GET, "/ready", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    app.state().store().db().close().await;
    let r = app.call(Method::GET, "/ready", None, None).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["status"], "unavailable");
    let error = r.body["error"].as_str().unwrap();
    assert_eq!(
        error,
        "the database is unreachable; the server log has the cause"
    );
}

#[tokio::test]
async fn rotating_the_session_secret_keeps_links_in_sent_mail_working() {
    let first = TestApp::spawn_with(|s| {
        s.domains.allow_unverified = true;
        s.jwt_secret = Some("the first session secret".into());
    })
    .await;
    let p = first.project().await;
    let r = first
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": "ann@example.com",
                "from": "hello@unverified.test",
                "subject": "Hi",
                "body": "<a href=\"{{unsubscribeUrl}}\">unsubscribe</a>",
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let contact = r.body["data"]["emails"][0]["contact"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The link as the email carries it.
    let unsubscribe = first.state().links().contact_urls(&contact).unsubscribe;
    let path = &unsubscribe[unsubscribe.find("/unsubscribe/").unwrap()..];
    let rotated = first
        .spawn_sharing(|s| s.jwt_secret = Some("a new session secret".into()))
        .await;
    let r = rotated.client.get(rotated.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "the link still opens its page");
}

/// Connections opened and left half-written (slowloris) from one client address: beyond
/// `http_max_connections_per_ip` they are closed as they are accepted, the rest once they have
/// been idle for `http_idle_timeout_seconds`, and meanwhile another client is answered at once.
/// Once they are gone, the address may connect again.
#[tokio::test]
async fn slow_clients_cannot_hold_every_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(|s| {
        s.http_max_connections_per_ip = 20;
        s.http_idle_timeout_seconds = 2;
    })
    .await;
    let server: std::net::SocketAddr = app
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    // The slow client's address: another one of the loopback network.
    let slow: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..30 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((slow, 0).into()).unwrap();
        let mut stream = socket.connect(server).await.unwrap();
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: herald\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    let started = Instant::now();
    let r = app.get("/health", "").await;
    assert_eq!(r.status, 200);
    assert!(started.elapsed() < Duration::from_secs(1));
    // How many of them the server closed: reads, all at once, that end (EOF or reset) within
    // `within`.
    async fn closed(streams: &mut [tokio::net::TcpStream], within: Duration) -> usize {
        let reads = streams.iter_mut().map(|s| async move {
            let mut byte = [0u8; 1];
            matches!(
                tokio::time::timeout(within, s.read(&mut byte)).await,
                Ok(Ok(0) | Err(_))
            )
        });
        futures::future::join_all(reads)
            .await
            .into_iter()
            .filter(|c| *c)
            .count()
    }
    let beyond_cap = closed(&mut held, Duration::from_millis(200)).await;
    assert_eq!(beyond_cap, 10, "the ten connections beyond the cap of 20");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        closed(&mut held, Duration::from_millis(200)).await,
        30,
        "every idle connection is closed after the idle timeout"
    );
    // The address's slots are free again.
    let client = reqwest::Client::builder()
        .local_address(slow)
        .build()
        .unwrap();
    let r = client.get(app.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    app.stop().await;
}
