//! `POST /v1/send` end to end: through HTTP, the durable queue and the `smtp` transport plugin
//! into a real SMTP server on loopback; the MIME structure, headers, attachments and rendered
//! body as received; the DKIM signature checked by an independent verifier (mail-auth) against
//! the key published in the loopback DNS; validation, idempotency, retries, failures and a
//! server killed in the middle of its queue.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use herald::config::Settings;
use herald::plugins::SmtpTls;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{
    TestApp, TestProject, execute_sql, one_keyed_response, taken_and_refused,
};
use crate::support::smtpd::{SmtpLog, SmtpServer};

/// An app that resolves through `dns` and delivers through the `smtp` transport to `smtp`.
pub fn with_mail<'a>(dns: &'a DnsServer, smtp: SocketAddr) -> impl FnOnce(&mut Settings) + 'a {
    move |s: &mut Settings| {
        with_dns(dns)(s);
        s.plugins.transport = "smtp".into();
        s.plugins.smtp_host = Some("127.0.0.1".into());
        s.plugins.smtp_port = smtp.port();
        s.plugins.smtp_tls = SmtpTls::None;
        s.jobs_poll_interval_ms = 50;
    }
}

struct Setup {
    dns: DnsServer,
    smtp: SmtpServer,
    app: TestApp,
    p: TestProject,
}

async fn setup(adjust: impl FnOnce(&mut Settings)) -> Setup {
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_mail(&dns, smtp.addr)(s);
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    Setup { dns, smtp, app, p }
}

async fn send(app: &TestApp, p: &TestProject, body: Value) -> crate::support::harness::Reply {
    app.post("/v1/send", &p.secret_key, body).await
}

/// Sends a plain email from `hello@acme.test` to `to` (an address or a list), which must be
/// accepted.
async fn send_plain(
    app: &TestApp,
    p: &TestProject,
    to: impl serde::Serialize,
) -> crate::support::harness::Reply {
    let r = send(
        app,
        p,
        json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

/// Sends one plain email from `hello@acme.test` to `to` and answers its id.
async fn send_one(app: &TestApp, p: &TestProject, to: &str) -> String {
    let r = send_plain(app, p, to).await;
    r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until `n` messages arrived.
async fn received(smtp: &SmtpServer, n: usize) -> SmtpLog {
    smtp.received(n).await
}

/// Waits (up to 20 s) until email `id` has `status`, and answers it.
pub async fn email_with_status(app: &TestApp, p: &TestProject, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = app.get(&format!("/emails/{id}"), &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.body["status"] == status {
            return r.body;
        }
        assert!(Instant::now() < deadline, "never {status}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Checks the DKIM signatures of `raw` with mail-auth, resolving through `dns`: true when there
/// is one at least and every one passes.
pub async fn dkim_passes(dns: &DnsServer, raw: &[u8]) -> bool {
    let results = dkim_results(dns, raw).await;
    !results.is_empty() && results.iter().all(|r| r == &mail_auth::DkimResult::Pass)
}

/// The result of each DKIM signature of `raw`, checked by mail-auth resolving through `dns`.
async fn dkim_results(dns: &DnsServer, raw: &[u8]) -> Vec<mail_auth::DkimResult> {
    use hickory_resolver::config::{
        ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts,
    };
    let addr: SocketAddr = dns.nameserver().parse().unwrap();
    let mut udp = ConnectionConfig::udp();
    udp.port = addr.port();
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = addr.port();
    let config = ResolverConfig::from_name_servers(vec![NameServerConfig::new(
        addr.ip(),
        true,
        vec![udp, tcp],
    )]);
    let authenticator =
        mail_auth::MessageAuthenticator::new(config, ResolverOpts::default()).unwrap();
    let message = mail_auth::AuthenticatedMessage::parse(raw).expect("a parsable message");
    let results = authenticator.verify_dkim(&message).await;
    results.iter().map(|r| r.result().clone()).collect()
}

/// The `a=` and `s=` tags of each `DKIM-Signature` header of `raw`, in order.
fn dkim_signatures(raw: &str) -> Vec<(String, String)> {
    let message = MessageParser::default()
        .parse(raw.as_bytes())
        .expect("MIME parses");
    message
        .header_values("DKIM-Signature")
        .map(|v| {
            let text = v.as_text().unwrap_or_default().to_string();
            let tag = |name: &str| {
                text.split(';')
                    .map(|t| t.split_whitespace().collect::<String>())
                    .find_map(|t| t.strip_prefix(&format!("{name}=")).map(str::to_string))
                    .unwrap_or_default()
            };
            (tag("a"), tag("s"))
        })
        .collect()
}

#[tokio::test]
async fn a_domain_with_an_ed25519_key_dual_signs_once_its_record_is_found() {
    let Setup { dns, smtp, app, p } = setup(|_| {}).await;
    let listed = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    let domain = listed.body[0].clone();
    let id = domain["id"].as_str().unwrap().to_string();
    assert_eq!(domain["dkimEd25519"], false);
    assert!(domain["dkimEd25519Selector"].is_null());
    let rsa_selector = domain["dkimSelector"].as_str().unwrap().to_string();

    // Turned on: a key of its own selector and a recommended record; the domain stays verified.
    let on = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "dkimEd25519": true }),
        )
        .await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(on.body["status"], "verified");
    assert_eq!(on.body["dkimEd25519"], true);
    assert_eq!(on.body["allowSubdomains"], false, "left as it was");
    let selector = on.body["dkimEd25519Selector"].as_str().unwrap().to_string();
    assert!(selector.ends_with("-ed25519"), "{selector}");
    let name = format!("{selector}._domainkey.acme.test");
    let record = on.body["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no record at {name}: {}", on.body))
        .clone();
    assert_eq!(record["type"], "TXT");
    assert_eq!(record["required"], false);
    assert_eq!(record["status"], "pending");
    let value = record["value"].as_str().unwrap().to_string();
    let public = value.strip_prefix("v=DKIM1; k=ed25519; p=").expect(&value);
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(public)
            .unwrap()
            .len(),
        32,
        "RFC 8463: the raw 32-byte public key"
    );
    assert!(!on.body.to_string().contains("PRIVATE"));
    // On again: the same key.
    let again = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "dkimEd25519": true, "allowSubdomains": null }),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["dkimEd25519Selector"], selector.as_str());

    // Not published yet: signed with RSA only.
    send_plain(&app, &p, "ann@example.com").await;
    let log = received(&smtp, 1).await;
    assert_eq!(
        dkim_signatures(&log.data[0]),
        [("rsa-sha256".to_string(), rsa_selector.clone())]
    );
    assert!(dkim_passes(&dns, log.data[0].as_bytes()).await);

    // Published and found: signed with both, and both pass an independent verifier.
    dns.txt(&name, &value);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let checked = app
            .get(&format!("/domains/{id}/verify"), &p.secret_key)
            .await;
        assert_eq!(checked.status, 200, "{}", checked.body);
        assert_eq!(checked.body["status"], "verified");
        let found = checked.body["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == name.as_str() && r["status"] == "verified");
        if found {
            break;
        }
        assert!(Instant::now() < deadline, "{}", checked.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    send_plain(&app, &p, "bob@example.com").await;
    let log = received(&smtp, 2).await;
    let raw = &log.data[1];
    let mut signatures = dkim_signatures(raw);
    signatures.sort();
    assert_eq!(
        signatures,
        [
            ("ed25519-sha256".to_string(), selector.clone()),
            ("rsa-sha256".to_string(), rsa_selector.clone())
        ]
    );
    assert_eq!(
        dkim_results(&dns, raw.as_bytes()).await,
        [mail_auth::DkimResult::Pass, mail_auth::DkimResult::Pass]
    );
    // A changed body fails both.
    let tampered = raw.replacen("\r\n\r\n", "\r\n\r\nX", 1);
    let results = dkim_results(&dns, tampered.as_bytes()).await;
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r != &mail_auth::DkimResult::Pass),
        "{results:?}"
    );

    // Turned off: the key and its record are gone, and mail is signed with RSA only again.
    let off = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "dkimEd25519": false }),
        )
        .await;
    assert_eq!(off.status, 200, "{}", off.body);
    assert_eq!(off.body["dkimEd25519"], false);
    assert!(off.body["dkimEd25519Selector"].is_null());
    assert!(
        !off.body["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == name.as_str()),
        "{}",
        off.body
    );
    send_plain(&app, &p, "cy@example.com").await;
    let log = received(&smtp, 3).await;
    assert_eq!(
        dkim_signatures(&log.data[2]),
        [("rsa-sha256".to_string(), rsa_selector)]
    );

    // Asked for when the domain is added: five records, the Ed25519 one recommended.
    let added = app
        .post(
            "/domains",
            &p.secret_key,
            json!({ "domain": "beta.test", "dkimEd25519": true }),
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.body);
    let records = added.body["records"].as_array().unwrap();
    assert_eq!(records.len(), 5, "{}", added.body);
    let selector = added.body["dkimEd25519Selector"].as_str().unwrap();
    let ed = records
        .iter()
        .find(|r| r["name"] == format!("{selector}._domainkey.beta.test").as_str())
        .expect("the Ed25519 record");
    assert_eq!(ed["required"], false);
    // Another project's key cannot change it.
    let q = app.project().await;
    let r = app
        .patch(
            &format!("/domains/{}", added.body["id"].as_str().unwrap()),
            &q.secret_key,
            json!({ "dkimEd25519": false }),
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn a_send_arrives_over_smtp_rendered_with_attachments_and_a_valid_dkim_signature() {
    let Setup { dns, smtp, app, p } = setup(|_| {}).await;
    let png = [0x89u8, b'P', b'N', b'G', 13, 10, 26, 10, 1, 2, 3];
    let r = send(
        &app,
        &p,
        json!({
            "to": [{ "name": "Ann Example", "email": "Ann@Example.com" }],
            "from": { "name": "Acme", "email": "hello@acme.test" },
            "reply": "support@acme.test",
            "subject": "Welcome, {{firstName ?? \"friend\"}}",
            "body": "<html><body><p>Hello <b>{{firstName}}</b> on the {{plan}} plan, {{note ?? 'no note'}}.</p>\
                     <p><a href=\"https://acme.test/start?x=1&amp;y=2\">Start</a> \
                     <a href=\"{{unsubscribeUrl}}\">Unsubscribe</a></p>\
                     <img src=\"cid:logo\"></body></html>",
            "data": { "firstName": "Ann", "plan": { "value": "pro", "persistent": false } },
            "headers": { "X-Campaign": "welcome-1" },
            "attachments": [
                { "filename": "notes.txt", "content": b64(b"hello attachment"), "contentType": "text/plain" },
                { "filename": "logo.png", "content": b64(&png), "contentType": "image/png",
                  "disposition": "inline", "contentId": "logo" }
            ]
        }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["success"], true);
    let emails = r.body["data"]["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 1);
    assert_eq!(emails[0]["contact"]["email"], "ann@example.com");
    let email_id = emails[0]["email"].as_str().unwrap().to_string();
    assert!(email_id.starts_with("eml_"));
    assert!(r.body["data"]["timestamp"].is_string());

    let log = received(&smtp, 1).await;
    assert_eq!(log.rcpt_to, ["<ann@example.com>"]);
    assert_eq!(
        log.mail_from,
        [format!("<bounces+{email_id}@bounces.acme.test>")],
        "bounces go to the return-path domain"
    );
    let raw = log.data[0].as_bytes();
    let message = MessageParser::default().parse(raw).expect("MIME parses");
    assert_eq!(message.subject(), Some("Welcome, Ann"));
    let from = message.from().unwrap().first().unwrap();
    assert_eq!(from.name(), Some("Acme"));
    assert_eq!(from.address(), Some("hello@acme.test"));
    assert_eq!(
        message.to().unwrap().first().unwrap().address(),
        Some("ann@example.com")
    );
    assert_eq!(
        message.reply_to().unwrap().first().unwrap().address(),
        Some("support@acme.test")
    );
    assert_eq!(
        message.message_id(),
        Some(format!("{email_id}@acme.test").as_str())
    );
    assert_eq!(
        message.header_raw("X-Campaign").map(str::trim),
        Some("welcome-1")
    );
    assert!(
        message.header("List-Unsubscribe").is_none(),
        "transactional mail has no List-Unsubscribe"
    );
    // mixed( related( alternative(text, html), logo ), notes.txt )
    assert_eq!(
        message.content_type().map(|c| c.subtype()),
        Some(Some("mixed"))
    );
    let html = message.body_html(0).expect("an HTML part").into_owned();
    assert!(
        html.contains("Hello <b>Ann</b> on the pro plan, no note."),
        "{html}"
    );
    assert!(
        !html.contains("https://acme.test/start"),
        "links are tracked: {html}"
    );
    assert!(html.contains("/t/c/"), "{html}");
    assert!(html.contains("/t/o/"), "an open pixel: {html}");
    assert!(
        html.contains("/unsubscribe/"),
        "the unsubscribe link stays: {html}"
    );
    let text = message.body_text(0).expect("a text part").into_owned();
    assert!(text.contains("Hello Ann on the pro plan"), "{text}");
    let attachments: Vec<_> = message.attachments().collect();
    assert_eq!(attachments.len(), 2, "{attachments:?}");
    let notes = attachments
        .iter()
        .find(|a| a.attachment_name() == Some("notes.txt"))
        .expect("notes.txt");
    assert_eq!(notes.contents(), b"hello attachment");
    let logo = attachments
        .iter()
        .find(|a| a.content_id() == Some("logo"))
        .expect("the inline logo");
    assert_eq!(logo.contents(), png);

    // The DKIM signature verifies against the key published in DNS.
    assert!(message.header("DKIM-Signature").is_some());
    assert!(dkim_passes(&dns, raw).await, "DKIM must pass");
    // A changed body does not.
    let tampered = log.data[0].replace("Hello <b>Ann</b>", "Hello <b>Eve</b>");
    assert!(!dkim_passes(&dns, tampered.as_bytes()).await);

    // The email is recorded with its history; the contact exists, unsubscribed, with the
    // persistent data only.
    let email = email_with_status(&app, &p, &email_id, "sent").await;
    assert_eq!(email["type"], "transactional");
    let kinds: Vec<&str> = email["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["queued", "sent"]);
    assert_eq!(
        email["history"][0]["createdAt"], email["createdAt"],
        "queued when it was created: {email}"
    );
    // A `queued` entry an older release stored is not shown twice.
    execute_sql(
        &app.database_url,
        &format!(
            "INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) \
             SELECT 'act_legacy', project_id, id, contact_id, 'queued', NULL, created_at \
             FROM emails WHERE id = '{email_id}'"
        ),
    )
    .await;
    let again = email_with_status(&app, &p, &email_id, "sent").await;
    assert_eq!(again["history"], email["history"], "{again}");
    let contact_id = emails[0]["contact"]["id"].as_str().unwrap();
    let contact = app
        .get(&format!("/contacts/{contact_id}"), &p.secret_key)
        .await;
    assert_eq!(contact.body["subscribed"], false);
    assert_eq!(contact.body["data"]["firstName"], "Ann");
    assert!(contact.body["data"].get("plan").is_none());
}

#[tokio::test]
async fn every_recipient_gets_their_own_contact_rendering_and_email() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    // An existing, subscribed contact keeps its state; a new one is unsubscribed.
    p.contact(&app, "old@example.com", json!({ "firstName": "Olga" }))
        .await;
    let r = send(
        &app,
        &p,
        json!({
            "to": ["old@example.com", "New Person <new@example.com>"],
            "from": "hello@acme.test",
            "name": "Acme Support",
            "subject": "Hi {{firstName ?? \"there\"}}",
            "body": "<p>Dear {{firstName ?? email ?? reader}}</p>"
        }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let emails = r.body["data"]["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 2);
    assert_eq!(emails[0]["contact"]["email"], "old@example.com");
    assert_eq!(emails[1]["contact"]["email"], "new@example.com");
    let log = received(&smtp, 2).await;
    let mut subjects: Vec<String> = log
        .data
        .iter()
        .map(|d| {
            let m = MessageParser::default().parse(d.as_bytes()).unwrap();
            assert_eq!(
                m.from().unwrap().first().unwrap().name(),
                Some("Acme Support"),
                "the deprecated name fills in a bare from"
            );
            m.subject().unwrap().to_string()
        })
        .collect();
    subjects.sort();
    assert_eq!(subjects, ["Hi Olga", "Hi there"]);
    let old = app
        .get(
            &format!("/contacts/{}", emails[0]["contact"]["id"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(old.body["subscribed"], true);
    let new = app
        .get(
            &format!("/contacts/{}", emails[1]["contact"]["id"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(new.body["subscribed"], false);

    // `subscribed: true` subscribes and records the event with source `send`.
    let r = send(
        &app,
        &p,
        json!({ "to": "new@example.com", "from": "hello@acme.test", "subject": "s", "body": "b", "subscribed": true }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = app
        .get("/events?name=contact.subscribed", &p.secret_key)
        .await;
    let data = &events.body["data"].as_array().unwrap()[0]["data"];
    assert_eq!(data["source"], "send");
}

/// One recipient's small email is rendered where the request is handled, within small limits
/// (`services::cpu`); past them, it is rendered again on the CPU pool, whole, and a failure is
/// the same either way.
#[tokio::test]
async fn a_small_send_past_the_inline_limits_is_rendered_whole() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    let transient = |v: Value| json!({ "value": v, "persistent": false });
    let list: Vec<u32> = (0..50).collect();
    let cases = [
        // 50 paragraphs of 400 characters: 20 KB of output, more than rendered where handled.
        (
            "<div>{{#each l}}<p>{{../s}}{{../s}}</p>{{/each}}</div>",
            json!({ "l": transient(json!(list)), "s": transient(json!("y".repeat(200))) }),
            format!(
                "<div>{}</div>",
                format!("<p>{}</p>", "y".repeat(400)).repeat(50)
            ),
        ),
        // 50 × 50 iterations: more loop steps than rendered where handled.
        (
            "<div>{{#each l}}{{#each ../l}}.{{/each}}{{/each}}</div>",
            json!({ "l": transient(json!(list)) }),
            format!("<div>{}</div>", ".".repeat(2_500)),
        ),
        // Within the small limits.
        (
            "<div>{{#each l}}{{this}}{{/each}}</div>",
            json!({ "l": transient(json!([1, 2, 3])) }),
            "<div>123</div>".to_string(),
        ),
    ];
    for (i, (body, data, _)) in cases.iter().enumerate() {
        let r = send(
            &app,
            &p,
            json!({ "to": format!("r{i}@example.com"), "from": "hello@acme.test",
                    "subject": "s", "body": body, "data": data }),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let log = received(&smtp, cases.len()).await;
    for (i, (_, _, expected)) in cases.iter().enumerate() {
        let raw = log
            .data
            .iter()
            .find(|d| d.contains(&format!("r{i}@example.com")))
            .expect("delivered");
        let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
        let html = m.body_html(0).unwrap().into_owned();
        assert!(html.contains(expected.as_str()), "case {i}: {html}");
    }
    // A template that fails to render fails the same way wherever it is rendered.
    let r = send(
        &app,
        &p,
        json!({ "to": "r9@example.com", "from": "hello@acme.test", "subject": "s",
                "body": "a\n{{#each}}x{{/each}}" }),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "body", "{}", r.body);
    assert!(
        r.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 2, column 1:"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn invalid_requests_name_every_bad_field_in_the_send_error_body() {
    let Setup { app, p, .. } = setup(|_| {}).await;
    let r = send(
        &app,
        &p,
        json!({
            "to": ["ok@example.com", "not-an-address", { "name": "x" }],
            "from": "hello@acme.test",
            "subject": "Line\r\nBcc: victim@example.com",
            "body": "",
            "reply": "nope",
            "headers": { "X-Evil": "a\r\nBcc: x@y.z", "Subject": "again" },
            "attachments": [{ "filename": "a.txt", "content": "!!!", "contentType": "text/plain" }],
            "data": { "": 1 }
        }),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    // The /v1/send error body: { code, error, message, time, requestId, errors }.
    assert_eq!(r.body["code"], 422);
    assert_eq!(r.body["error"], "VALIDATION_ERROR");
    assert!(r.body["time"].is_i64());
    assert!(r.body["requestId"].as_str().unwrap().starts_with("req_"));
    let mut fields: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "attachments[0].content",
            "body",
            "data.",
            "headers.Subject",
            "headers.X-Evil",
            "reply",
            "subject",
            "to[1]",
            "to[2].email"
        ],
        "{}",
        r.body
    );

    // The content rule: a template, or both subject and body.
    let r = send(
        &app,
        &p,
        json!({ "to": "a@example.com", "from": "hello@acme.test", "subject": "only a subject" }),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["errors"][0]["field"], "body");
    // A template that does not parse names its position.
    let r = send(
        &app,
        &p,
        json!({ "to": "a@example.com", "from": "hello@acme.test", "subject": "s", "body": "<p>{{#if x}}open" }),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["errors"][0]["field"], "body");
    // Missing `to`, wrong JSON types, the public key, a body that is not JSON.
    let r = send(
        &app,
        &p,
        json!({ "from": "hello@acme.test", "subject": "s", "body": "b" }),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["errors"][0]["field"], "to");
    let r = send(&app, &p, json!({ "to": "a@example.com", "subject": 5 })).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"], "INVALID_REQUEST_BODY");
    let r = app
        .post(
            "/v1/send",
            &p.public_key,
            json!({ "to": "a@example.com", "from": "hello@acme.test", "subject": "s", "body": "b" }),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body["error"], "INVALID_API_KEY");
    // Nothing was written by any of these.
    let contacts = app.get("/contacts", &p.secret_key).await;
    assert_eq!(contacts.body["total"], 0, "{}", contacts.body);
}

#[tokio::test]
async fn from_addresses_must_be_on_a_verified_domain() {
    let Setup { dns, app, p, .. } = setup(|_| {}).await;
    let body =
        |from: &str| json!({ "to": "a@example.com", "from": from, "subject": "s", "body": "b" });
    for from in ["hello@other.test", "hello@mail.acme.test"] {
        let r = send(&app, &p, body(from)).await;
        assert_eq!(r.status, 422, "{from}: {}", r.body);
        assert_eq!(r.body["error"], "DOMAIN_NOT_VERIFIED");
        assert_eq!(r.body["errors"][0]["field"], "from");
    }
    // A subdomain may send once its verified parent allows subdomains.
    let domains = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    let id = domains.body[0]["id"].as_str().unwrap();
    app.patch(
        &format!("/domains/{id}"),
        &p.secret_key,
        json!({ "allowSubdomains": true }),
    )
    .await;
    let r = send(&app, &p, body("hello@mail.acme.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Another project's verified domain does not count.
    let q = app.project().await;
    let r = send(&app, &q, body("hello@acme.test")).await;
    assert_eq!(r.body["error"], "DOMAIN_NOT_VERIFIED");
    drop(dns);

    // The development setting lets an unverified domain send, unsigned.
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let dev = TestApp::spawn_with(|s| {
        with_mail(&dns, smtp.addr)(s);
        s.domains.allow_unverified = true;
    })
    .await;
    let d = dev.project().await;
    let r = send(&dev, &d, body("hello@unverified.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let log = received(&smtp, 1).await;
    assert!(!log.data[0].contains("DKIM-Signature"));
    assert_eq!(log.mail_from, ["<hello@unverified.test>"]);
}

#[tokio::test]
async fn an_idempotency_key_sends_once() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    let body = json!({ "to": ["a@example.com", "b@example.com"], "from": "hello@acme.test", "subject": "s", "body": "b" });
    let headers = [("Idempotency-Key", "order-42")];
    let keyed = |body: Value| {
        app.call_with(
            &app.client,
            reqwest::Method::POST,
            "/v1/send",
            Some(&p.secret_key),
            Some(body),
            &headers,
        )
    };
    let first = keyed(body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = keyed(body.clone()).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let other = keyed(
        json!({ "to": "c@example.com", "from": "hello@acme.test", "subject": "s", "body": "b" }),
    )
    .await;
    assert_eq!(other.status, 409);
    assert_eq!(other.body["error"], "IDEMPOTENCY_KEY_REUSED");
    received(&smtp, 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 2, "sent once");
}

#[tokio::test]
async fn transient_failures_are_retried_and_permanent_ones_fail_with_the_reason() {
    // Deliveries outlast the queue's attempt limit: they give up by the email's age.
    let Setup { smtp, app, p, .. } = setup(|s| {
        s.jobs_max_attempts = 2;
        s.sending.retry_lifetime_seconds = 3;
    })
    .await;
    let flaky_id = send_one(&app, &p, "flaky@example.com").await;
    let rejected_id = send_one(&app, &p, "reject@example.com").await;
    let later_id = send_one(&app, &p, "later@example.com").await;

    // Greylisted once (451), then accepted on the retry.
    let email = email_with_status(&app, &p, &flaky_id, "sent").await;
    assert_eq!(email["attempts"], 2, "{email}");
    assert_eq!(
        smtp.log.lock().unwrap().refused_once,
        ["<flaky@example.com>"]
    );
    // 550: failed at once with the server's reason.
    let email = email_with_status(&app, &p, &rejected_id, "failed").await;
    assert_eq!(email["attempts"], 1);
    assert!(
        email["error"].as_str().unwrap().contains("no such user"),
        "{email}"
    );
    // 451 every time: retried with a growing pause until the email is older than the retry
    // lifetime (3 s here), then failed with the last answer.
    let email = email_with_status(&app, &p, &later_id, "failed").await;
    let attempts = email["attempts"].as_i64().unwrap();
    assert!((3..=4).contains(&attempts), "{email}");
    let error = email["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("gave up after {attempts} attempts over")),
        "{email}"
    );
    assert!(error.contains("try again later"), "{email}");
}

#[tokio::test]
async fn a_batch_is_handed_off_in_one_call_and_a_refused_recipient_does_not_stop_the_others() {
    // One worker: the job it claims gathers the rest of the request's deliveries into its batch.
    let Setup { smtp, app, p, .. } = setup(|s| s.jobs_concurrency = 1).await;
    let mut to: Vec<String> = (0..8).map(|i| format!("b{i}@example.com")).collect();
    to.insert(3, "reject@example.com".into());
    to.insert(6, "flaky@example.com".into());
    let r = send_plain(&app, &p, &to).await;
    let id_of = |address: &str| {
        r.body["data"]["emails"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["contact"]["email"] == address)
            .unwrap()["email"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The refused one fails with the relay's answer; the greylisted one is retried alone and
    // sent; every other one is sent.
    let rejected = email_with_status(&app, &p, &id_of("reject@example.com"), "failed").await;
    assert!(
        rejected["error"].as_str().unwrap().contains("no such user"),
        "{rejected}"
    );
    let flaky = email_with_status(&app, &p, &id_of("flaky@example.com"), "sent").await;
    assert_eq!(flaky["attempts"], 2, "{flaky}");
    for i in 0..8 {
        let email = email_with_status(&app, &p, &id_of(&format!("b{i}@example.com")), "sent").await;
        assert_eq!(email["attempts"], 1, "{email}");
    }
    let log = received(&smtp, 9).await;
    assert_eq!(log.data.len(), 9, "each accepted message once: {log:?}");
    // The first batch's outcomes were committed together: the eight sent at the same instant,
    // the refusal with them.
    let project = &p.id;
    let instants = count(
        &app,
        &format!(
            "SELECT COUNT(DISTINCT COALESCE(sent_at, failed_at)) FROM emails WHERE project_id = '{project}' \
             AND to_address <> 'flaky@example.com'"
        ),
    )
    .await;
    assert_eq!(instants, 1, "one batch, one commit");
}

#[tokio::test]
async fn an_email_whose_domain_is_gone_at_hand_off_fails_with_the_reason() {
    // One hand-off at a time: the first email holds the relay (DATA answered after 3 s) while
    // the domain is deleted; the second is built after that and cannot be signed.
    let Setup { smtp, app, p, .. } = setup(|s| {
        s.jobs_concurrency = 1;
        s.sending.batch_size = 1;
    })
    .await;
    let slow = send_one(&app, &p, "slow@example.com").await;
    let after = send_one(&app, &p, "after@example.com").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while smtp.log.lock().unwrap().mail_from.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the first hand-off never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let domains = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    let id = domains.body[0]["id"].as_str().expect("the domain's id");
    let r = app.delete(&format!("/domains/{id}"), &p.secret_key).await;
    assert!(r.status.is_success(), "{} {}", r.status, r.body);
    email_with_status(&app, &p, &slow, "sent").await;
    let email = email_with_status(&app, &p, &after, "failed").await;
    assert!(
        email["error"]
            .as_str()
            .unwrap()
            .contains("no longer verified"),
        "{email}"
    );
    // Not left queued for the sweep: its job is complete and nothing more is sent.
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1);
}

#[tokio::test]
async fn a_relay_down_for_a_minute_still_gets_the_mail() {
    // A real outage: nothing listens on the relay's port for the first 60 seconds.
    let dns = DnsServer::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = port.local_addr().unwrap();
    drop(port);
    let app = TestApp::spawn_with(with_mail(&dns, relay)).await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    let id = send_one(&app, &p, "patient@example.com").await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let email = app.get(&format!("/emails/{id}"), &p.secret_key).await.body;
    assert_eq!(email["status"], "queued", "still waiting: {email}");
    assert!(email["attempts"].as_i64().unwrap() >= 4, "retried: {email}");

    // The relay comes back on its port; the next retry (backoff at most ~64 s) delivers.
    let smtp = SmtpServer::start_at(relay).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while smtp.log.lock().unwrap().data.is_empty() {
        assert!(
            Instant::now() < deadline,
            "never delivered after the outage"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1, "{email}");
}

#[tokio::test]
async fn the_project_throttle_spreads_sends_over_seconds() {
    let Setup { smtp, app, p, .. } = setup(|s| s.sending.per_project_per_second = 2).await;
    let to: Vec<String> = (0..6).map(|i| format!("t{i}@example.com")).collect();
    let started = Instant::now();
    send_plain(&app, &p, &to).await;
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "the request only queues"
    );
    received(&smtp, 6).await;
    // 6 emails at 2 per one-second window need three windows: two window boundaries pass.
    assert!(
        started.elapsed() > Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
}

/// One number from the test's database.
pub async fn count(app: &TestApp, sql: &str) -> i64 {
    use herald::store::Db;
    match app.state().store().db() {
        Db::Sqlite { pool, .. } => sqlx::query_scalar(sql).fetch_one(pool).await,
        Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Sends one email of `other` (from `hi@beta.test` to `solo@example.com`) and answers how
/// long it took until it was sent, for the fairness tests.
async fn solo_sent(app: &TestApp, other: &TestProject) -> Duration {
    let started = Instant::now();
    let r = send(
        app,
        other,
        json!({ "to": "solo@example.com", "from": "hi@beta.test", "subject": "s", "body": "b" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["data"]["emails"][0]["email"].as_str().unwrap();
    email_with_status(app, other, id, "sent").await;
    started.elapsed()
}

/// Waits (up to 10 s) until an email's hand-off has started.
async fn hand_off_started(app: &TestApp) {
    wait_for_count(
        app,
        "SELECT COUNT(*) FROM emails WHERE handed_off_at IS NOT NULL",
        |n| n > 0,
        10,
        "the hand-off starts",
    )
    .await;
}

/// Waits (up to `secs` seconds) until the number `sql` counts satisfies `done`.
async fn wait_for_count(
    app: &TestApp,
    sql: &str,
    done: impl Fn(i64) -> bool,
    secs: u64,
    what: &str,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !done(count(app, sql).await) {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_throttled_backlog_neither_delays_another_project_nor_is_touched_while_it_waits() {
    let Setup { dns, smtp, app, p } = setup(|s| s.sending.per_project_per_second = 5).await;
    let other = app.project().await;
    verified_domain(&app, &other, &dns, "beta.test").await;
    // The first project queues 150 emails: 30 seconds of its budget of 5 a second.
    for batch in 0..3 {
        let to: Vec<String> = (0..50)
            .map(|i| format!("a{batch}-{i}@example.com"))
            .collect();
        let r = send(
            &app,
            &p,
            json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" }),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    received(&smtp, 6).await;

    // Another project's single email is handed off within a second, ahead of the backlog.
    let waited = solo_sent(&app, &other).await;
    assert!(waited < Duration::from_secs(1), "{waited:?}");

    // Wait out a few more windows: the backlog drains at its budget, and its waiting emails are
    // never claimed and put back (which would count an attempt and move `updated_at`).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let project = &p.id;
    let queued = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'queued'"
        ),
    )
    .await;
    assert!(
        queued > 100,
        "the backlog is still waiting ({queued} queued)"
    );
    let touched = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'queued' \
             AND (updated_at <> created_at OR attempts > 0)"
        ),
    )
    .await;
    assert!(
        touched <= 4,
        "{touched} waiting emails were claimed and put back while their budget was spent"
    );
    // No email of a send is a job.
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM jobs WHERE kind = 'emails.deliver'"
        )
        .await,
        0
    );
    let log = smtp.log.lock().unwrap().clone();
    assert!(log.rcpt_to.iter().any(|r| r == "<solo@example.com>"));
}

#[tokio::test]
async fn another_projects_email_is_handed_off_within_a_second_past_a_backlog_of_100000() {
    // No send budget: one project's backlog keeps every delivery slot busy, and the claims are
    // what must be fair.
    let Setup { dns, smtp, app, p } = setup(|_| {}).await;
    let other = app.project().await;
    verified_domain(&app, &other, &dns, "beta.test").await;
    // 100,000 emails queued and due for the first project, written by SQL (as complete
    // messages, which a hand-off sends as they are).
    let message =
        "From: hello@acme.test\r\nTo: backlog@example.com\r\nSubject: backlog\r\n\r\nb\r\n";
    let hex: String = message.bytes().map(|b| format!("{b:02x}")).collect();
    let now = chrono::Utc::now().timestamp_millis();
    let project = &p.id;
    let columns = "id, project_id, kind, from_address, to_address, subject, status, message_id, \
                   envelope_from, raw, created_at, updated_at, due_at";
    let values = format!(
        "'eml_backlog' || g, '{project}', 'transactional', 'hello@acme.test', \
         'b' || g || '@example.com', 'backlog', 'queued', 'backlog' || g || '@acme.test', \
         'hello@acme.test', RAW, {now}, {now}, {now}"
    );
    let sql = if app.database_url.starts_with("postgres") {
        format!(
            "INSERT INTO emails ({columns}) SELECT {} FROM generate_series(1, 100000) AS s(g)",
            values.replace("RAW", &format!("'\\x{hex}'::bytea"))
        )
    } else {
        format!(
            "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 100000) \
             INSERT INTO emails ({columns}) SELECT {} FROM s",
            values.replace("RAW", &format!("X'{hex}'"))
        )
    };
    execute_sql(&app.database_url, &sql).await;
    app.state().jobs().wake_deliveries();
    received(&smtp, 200).await;

    // Another project's single email is handed off within a second, ahead of the backlog.
    let waited = solo_sent(&app, &other).await;
    let queued = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND status = 'queued'"
        ),
    )
    .await;
    assert!(
        waited < Duration::from_secs(1),
        "{waited:?}, {queued} queued"
    );
    // The backlog was still there: the email went ahead of it, not after it.
    assert!(queued > 50_000, "{queued} of the backlog still queued");
    assert!(
        smtp.log
            .lock()
            .unwrap()
            .rcpt_to
            .iter()
            .any(|r| r == "<solo@example.com>")
    );
}

/// Sending at one email per second with a one-second lease, for the crash tests.
fn slow_mail(dns: &DnsServer, smtp: SocketAddr) -> impl Fn(&mut Settings) + '_ {
    move |s: &mut Settings| {
        with_mail(dns, smtp)(s);
        s.sending.per_project_per_second = 1;
        s.jobs_lease_seconds = 1;
    }
}

/// A server that can be killed outright (its tasks stop wherever they are, nothing shuts down
/// cleanly), sending slowly, that has just accepted one send to `n` recipients `<prefix><i>@…`.
struct KilledMidSend {
    dns: DnsServer,
    smtp: SmtpServer,
    _dir: tempfile::TempDir,
    url: String,
    doomed: crate::support::harness::DoomedServer,
    p: TestProject,
    reply: crate::support::harness::Reply,
}

async fn killable_send(prefix: &str, n: usize) -> KilledMidSend {
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let mut settings = crate::support::harness::test_settings(dir.path(), &url);
    slow_mail(&dns, smtp.addr)(&mut settings);
    let doomed = crate::support::harness::DoomedServer::start(settings, &url);
    let p = doomed.app.project().await;
    verified_domain(&doomed.app, &p, &dns, "acme.test").await;
    let to: Vec<String> = (0..n).map(|i| format!("{prefix}{i}@example.com")).collect();
    let reply = send(
        &doomed.app,
        &p,
        json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    KilledMidSend {
        dns,
        smtp,
        _dir: dir,
        url,
        doomed,
        p,
        reply,
    }
}

#[tokio::test]
async fn a_server_killed_mid_queue_finishes_after_restart_without_doubles() {
    let KilledMidSend {
        dns,
        smtp,
        _dir,
        url,
        doomed,
        p,
        reply: r,
    } = killable_send("k", 5).await;
    let first = &doomed.app;
    let ids: Vec<String> = r.body["data"]["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["email"].as_str().unwrap().to_string())
        .collect();
    // Kill it once one email is recorded as sent (the throttle holds the others back; the queue
    // takes them in any order).
    let deadline = Instant::now() + Duration::from_secs(20);
    'watch: loop {
        for id in &ids {
            let sent = first.get(&format!("/emails/{id}"), &p.secret_key).await;
            if sent.body["status"] == "sent" {
                break 'watch;
            }
        }
        assert!(Instant::now() < deadline, "nothing was sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    doomed.kill();
    // A task of the dropped runtime may still finish the poll it was in.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = smtp.log.lock().unwrap().clone();
    assert!(
        before.data.len() < 5,
        "the kill came before the queue drained ({} sent)",
        before.data.len()
    );
    // The one window in which a crash may send twice (jobs/deliver.rs): the relay accepted the
    // message but the outcome was not committed. Which emails are in it depends on where the kill
    // landed, so it is read from the database: accepted by the relay, still `queued`.
    let store = herald::store::Store::new(herald::store::Db::connect(&url, 1).await.unwrap());
    let mut in_window = 0;
    for id in &ids {
        let email = store
            .deliverable(&herald::domain::ids::EmailId::parse(id).unwrap())
            .await
            .unwrap()
            .unwrap();
        let accepted = before.data.iter().any(|m| m.contains(&format!("<{id}@")));
        if accepted && email.status == "queued" {
            in_window += 1;
        }
    }
    store.db().close().await;
    assert!(
        in_window <= 1,
        "one hand-off at a time under a 1/s throttle"
    );

    // A new instance on the same database finishes the queue.
    let second = TestApp::spawn_on(&url, slow_mail(&dns, smtp.addr)).await;
    let log = received(&smtp, 5 + in_window).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log_after = smtp.log.lock().unwrap().clone();
    assert_eq!(
        log_after.data.len(),
        5 + in_window,
        "none doubled outside the documented window: {log:?}"
    );
    let mut rcpts = log_after.rcpt_to.clone();
    rcpts.sort();
    rcpts.dedup();
    assert_eq!(rcpts.len(), 5);
    for id in &ids {
        email_with_status(&second, &p, id, "sent").await;
    }
}

#[tokio::test]
async fn a_marketing_template_supplies_the_content_and_carries_one_click_unsubscribe() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    let t = app
        .post(
            "/templates",
            &p.secret_key,
            json!({
                "name": "Newsletter",
                "type": "MARKETING",
                "subject": "News for {{firstName ?? \"you\"}}",
                "body": "<p>Hi {{firstName ?? \"reader\"}}, this is {{topic}}.</p>",
                "from": "news@acme.test",
                "fromName": "Acme News",
                "replyTo": "editor@acme.test"
            }),
        )
        .await;
    assert_eq!(t.status, 201, "{}", t.body);
    let template = t.body["id"].as_str().unwrap();

    // Marketing mail goes to subscribed contacts only: new ones need `subscribed: true`.
    let r = send(
        &app,
        &p,
        json!({ "to": "ann@example.com", "template": template, "subscribed": true,
                "data": { "firstName": "Ann", "topic": { "value": "spring", "persistent": false } } }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // An explicit subject overrides the template's.
    let r = send(
        &app,
        &p,
        json!({ "to": "bob@example.com", "template": template, "subject": "Special edition",
                "subscribed": true }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // To an unsubscribed contact (here a new one), it is recorded as suppressed, never sent;
    // a subscribed recipient of the same request still gets it.
    p.contact(&app, "dave@example.com", json!({})).await;
    let r = send(
        &app,
        &p,
        json!({ "to": ["carl@example.com", "dave@example.com"], "template": template }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let carl_id = r.body["data"]["emails"][0]["email"].as_str().unwrap();
    let carl = app.get(&format!("/emails/{carl_id}"), &p.secret_key).await;
    assert_eq!(carl.body["status"], "suppressed", "{}", carl.body);
    assert!(
        carl.body["error"]
            .as_str()
            .unwrap()
            .contains("unsubscribed"),
        "{}",
        carl.body
    );
    assert_eq!(
        carl.body["history"].as_array().map(Vec::len),
        Some(1),
        "suppressed, never queued: {}",
        carl.body
    );
    assert_eq!(carl.body["history"][0]["type"], "suppressed");
    assert_eq!(carl.body["attempts"], 0);
    let feed = app.get("/activity?type=suppressed", &p.secret_key).await;
    assert_eq!(feed.body["data"][0]["emailId"], carl_id, "{}", feed.body);
    // A transactional send to the same unsubscribed contact goes.
    let r = send(
        &app,
        &p,
        json!({ "to": "carl@example.com", "from": "news@acme.test", "subject": "Receipt",
                "body": "<p>Your receipt</p>" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let log = received(&smtp, 4).await;
    assert_eq!(log.data.len(), 4, "ann, bob, dave and carl's receipt");
    assert!(
        !log.data
            .iter()
            .any(|d| d.contains("carl@example.com") && d.contains("List-Unsubscribe")),
        "the marketing mail to carl was never handed to the relay"
    );
    // Connections run concurrently: find each message by its To header.
    let to_of = |raw: &String| {
        let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
        m.to()
            .unwrap()
            .first()
            .unwrap()
            .address()
            .unwrap()
            .to_string()
    };
    let raw_for = |address: &str| {
        log.data
            .iter()
            .find(|d| to_of(d) == address)
            .unwrap_or_else(|| panic!("no message to {address}"))
            .clone()
    };
    let ann_raw = raw_for("ann@example.com");
    let bob_raw = raw_for("bob@example.com");
    let ann = MessageParser::default().parse(ann_raw.as_bytes()).unwrap();
    assert_eq!(ann.subject(), Some("News for Ann"));
    let from = ann.from().unwrap().first().unwrap();
    assert_eq!(from.name(), Some("Acme News"));
    assert_eq!(from.address(), Some("news@acme.test"));
    assert_eq!(
        ann.reply_to().unwrap().first().unwrap().address(),
        Some("editor@acme.test")
    );
    assert!(
        ann.body_html(0)
            .unwrap()
            .contains("Hi Ann, this is spring.")
    );
    // RFC 8058: a one-click unsubscribe link and the POST marker, both covered by DKIM.
    let list = ann
        .header_raw("List-Unsubscribe")
        .unwrap()
        .trim()
        .to_string();
    assert!(
        list.starts_with('<') && list.contains("/unsubscribe/"),
        "{list}"
    );
    assert_eq!(
        ann.header_raw("List-Unsubscribe-Post").map(str::trim),
        Some("List-Unsubscribe=One-Click")
    );
    let dkim = ann
        .header_raw("DKIM-Signature")
        .unwrap()
        .to_ascii_lowercase();
    assert!(dkim.contains("list-unsubscribe"), "{dkim}");
    let bob = MessageParser::default().parse(bob_raw.as_bytes()).unwrap();
    assert_eq!(bob.subject(), Some("Special edition"));
    assert!(bob.body_html(0).unwrap().contains("Hi reader, this is ."));

    // An unknown template, or one of another project, is a validation error on `template`.
    let q = app.project().await;
    for (key, id) in [(&p.secret_key, "tpl_nope"), (&q.secret_key, template)] {
        let r = app
            .post(
                "/v1/send",
                key,
                json!({ "to": "a@example.com", "template": id }),
            )
            .await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(
            r.body["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["field"] == "template"),
            "{}",
            r.body
        );
    }
}

#[tokio::test]
async fn a_project_default_sender_is_used_when_nothing_names_one() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    let settings = format!("/users/@me/projects/{}", p.id);
    let patch = |body: Value| {
        let (app, owner, settings) = (&app, &p.owner, settings.clone());
        async move {
            app.call_with(
                owner,
                reqwest::Method::PATCH,
                &settings,
                None,
                Some(body),
                &[],
            )
            .await
        }
    };
    // Without one, a send without `from` is refused, naming the field.
    let plain = json!({ "to": "ann@example.com", "subject": "Hi", "body": "<p>Hi</p>" });
    let r = send(&app, &p, plain.clone()).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains("defaultFrom"),
        "{}",
        r.body
    );
    // It must be on a verified domain of the project.
    let r = patch(json!({ "defaultFrom": { "email": "hello@elsewhere.test" } })).await;
    r.assert_error(422, "DOMAIN_NOT_VERIFIED");
    assert_eq!(r.error_fields(), ["defaultFrom.email"]);
    let r = patch(json!({ "defaultFrom": { "email": "nope" } })).await;
    r.assert_error(422, "VALIDATION_ERROR");
    let r =
        patch(json!({ "defaultFrom": { "email": "News@Acme.test", "name": "Acme News" } })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["defaultFrom"],
        json!({ "name": "Acme News", "email": "news@acme.test" })
    );
    // Now the same request goes, from the default sender, signed by the domain.
    let r = send(&app, &p, plain.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let raw = &received(&smtp, 1).await.data[0];
    let message = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let from = message.from().unwrap().first().unwrap();
    assert_eq!(from.address(), Some("news@acme.test"));
    assert_eq!(from.name(), Some("Acme News"));
    // A request's own `from` still wins; `null` removes the default.
    let r = patch(json!({ "defaultFrom": null })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["defaultFrom"], Value::Null);
    let r = send(&app, &p, plain).await;
    assert_eq!(r.status, 422, "{}", r.body);
}

#[tokio::test]
async fn a_failed_outcome_write_is_retried_in_place_and_the_message_goes_once() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    // Every write that records an email as sent fails for the next 1.5 s (the database "blips"
    // right after the relay accepted the message).
    let until = chrono::Utc::now().timestamp_millis() + 1500;
    if app.database_url.starts_with("postgres") {
        execute_sql(
            &app.database_url,
            &format!(
                "CREATE FUNCTION fail_outcome() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 IF NEW.status = 'sent' AND extract(epoch from clock_timestamp()) * 1000 < {until} THEN \
                 RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $f$; \
                 CREATE TRIGGER fail_outcome BEFORE UPDATE ON emails FOR EACH ROW EXECUTE FUNCTION fail_outcome();"
            ),
        )
        .await;
    } else {
        execute_sql(
            &app.database_url,
            &format!(
                "CREATE TRIGGER fail_outcome BEFORE UPDATE OF status ON emails \
                 WHEN NEW.status = 'sent' AND (julianday('now') - 2440587.5) * 86400000.0 < {until} \
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
            ),
        )
        .await;
    }
    let id = send_one(&app, &p, "once@example.com").await;
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(email["attempts"], 1, "handed off once: {email}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1, "delivered once");
}

#[tokio::test]
async fn a_database_outage_after_the_relay_accepted_is_waited_out_and_the_message_goes_once() {
    let pg = crate::support::harness::postgres_url().is_some();
    // The hold a batch keeps on its emails: on PostgreSQL short, so that a batch giving up on
    // its outcome would have its email handed off again within the test; on SQLite longer than
    // the outage below, which also blocks the heartbeat there.
    let lease = if pg { 6 } else { 20 };
    let Setup { smtp, app, p, .. } = setup(|s| s.jobs_lease_seconds = lease).await;
    // The relay holds a message to `slow` for 3 s.
    let id = send_one(&app, &p, "slow@example.com").await;
    hand_off_started(&app).await;
    if pg {
        // For 12 s, every write that records an email as sent fails as a database refusing
        // connections does (SQLSTATE 57P03), past the 6 tries (about 6 s) a batch once gave it;
        // the heartbeat's writes go through.
        let until = chrono::Utc::now().timestamp_millis() + 12_000;
        execute_sql(
            &app.database_url,
            &format!(
                "CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 IF NEW.status = 'sent' AND extract(epoch from clock_timestamp()) * 1000 < {until} THEN \
                 RAISE EXCEPTION 'injected outage' USING ERRCODE = '57P03'; END IF; RETURN NEW; END $f$; \
                 CREATE TRIGGER refuse_outcome BEFORE UPDATE ON emails FOR EACH ROW EXECUTE FUNCTION refuse_outcome();"
            ),
        )
        .await;
    }
    // SQLite: another connection holds the write lock for 15 s, past the 10 s busy timeout: the
    // outcome write, waiting from when the relay accepted, fails as the database being
    // unavailable (SQLITE_BUSY) and is tried again.
    let hold = async {
        if !pg {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&app.database_url)
                .await
                .unwrap();
            sqlx::raw_sql("BEGIN IMMEDIATE")
                .execute(&mut c)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(15)).await;
            sqlx::raw_sql("ROLLBACK").execute(&mut c).await.unwrap();
        }
    };
    let (email, ()) = tokio::join!(email_with_status(&app, &p, &id, "sent"), hold);
    assert_eq!(email["attempts"], 1, "handed off once: {email}");
    // Past when a batch that gave up would have handed it off again (its hold lapsed).
    tokio::time::sleep(Duration::from_secs(if pg { 8 } else { 2 })).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1, "delivered once");
}

#[tokio::test]
async fn emails_queued_by_an_older_release_or_held_by_a_dead_instance_are_delivered() {
    let KilledMidSend {
        dns,
        smtp,
        _dir,
        url,
        doomed,
        p,
        reply: r,
    } = killable_send("o", 4).await;
    doomed.kill();
    // The emails as an older release (which gave each a delivery job instead) would have left
    // them: no due time. The kill may also have left one held by an interrupted hand-off.
    execute_sql(
        &url,
        "UPDATE emails SET due_at = NULL WHERE status = 'queued' AND handed_off_at IS NULL",
    )
    .await;
    let store = herald::store::Store::new(herald::store::Db::connect(&url, 1).await.unwrap());
    // The throttle lets about one email a second go before the kill (more when the kill falls
    // just after a window starts).
    let adopted = store.adopt_undue_emails(100).await.unwrap();
    assert!(adopted >= 1, "{adopted} emails made due");
    assert_eq!(store.adopt_undue_emails(100).await.unwrap(), 0, "each once");
    store.db().close().await;
    let second = TestApp::spawn_on(&url, slow_mail(&dns, smtp.addr)).await;
    let log = received(&smtp, 4).await;
    let mut rcpts = log.rcpt_to.clone();
    rcpts.sort();
    rcpts.dedup();
    assert_eq!(rcpts.len(), 4, "{log:?}");
    let emails: Vec<String> = r.body["data"]["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["email"].as_str().unwrap().to_string())
        .collect();
    for id in &emails {
        email_with_status(&second, &p, id, "sent").await;
    }
}

#[tokio::test]
async fn attachments_are_stored_once_for_every_recipient_and_messages_are_built_at_hand_off() {
    let Setup { dns, smtp, app, p } = setup(|s| s.sending.per_project_per_second = 0).await;
    let attachment: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let to: Vec<String> = (0..50).map(|i| format!("r{i}@example.com")).collect();
    let r = send(
        &app,
        &p,
        json!({
            "to": to,
            "from": "hello@acme.test",
            "subject": "Report for {{email}}",
            "body": "<p>Your report, {{email}}.</p>",
            "attachments": [
                { "filename": "report.bin", "content": b64(&attachment), "contentType": "application/octet-stream" }
            ]
        }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // One copy of the attachment, and no built message in any email row.
    assert_eq!(count(&app, "SELECT COUNT(*) FROM email_contents").await, 1);
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM emails WHERE raw IS NOT NULL").await,
        0
    );
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM emails WHERE draft IS NOT NULL OR status <> 'queued'"
        )
        .await,
        50,
        "a queued email has its draft"
    );
    // Each recipient gets its own message, with the attachment whole and a valid signature.
    let log = received(&smtp, 50).await;
    for raw in log.data.iter().take(3) {
        let message = mail_parser::MessageParser::default().parse(raw).unwrap();
        let part = message.attachments().next().expect("the attachment");
        assert_eq!(part.contents(), attachment.as_slice());
        assert!(
            dkim_passes(&dns, raw.as_bytes()).await,
            "the DKIM signature verifies"
        );
    }
    let subjects: std::collections::BTreeSet<String> = log
        .data
        .iter()
        .map(|raw| {
            let m = mail_parser::MessageParser::default().parse(raw).unwrap();
            m.subject().unwrap().to_string()
        })
        .collect();
    assert_eq!(subjects.len(), 50, "personalized per recipient");
    // Once every email is handed off, the drafts are gone and maintenance drops the content.
    let id = r.body["data"]["emails"][49]["email"].as_str().unwrap();
    email_with_status(&app, &p, id, "sent").await;
    wait_for_count(
        &app,
        "SELECT COUNT(*) FROM emails WHERE status = 'queued'",
        |n| n == 0,
        20,
        "every email is handed off",
    )
    .await;
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM emails WHERE draft IS NOT NULL").await,
        0
    );
    assert_eq!(app.state().store().prune_email_contents().await.unwrap(), 1);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM email_contents").await, 0);
}

#[tokio::test]
async fn a_heartbeat_stalled_past_the_lease_mid_hand_off_still_delivers_once() {
    // A long lease (no heartbeat within the test), so the stall below is the only lapse.
    let Setup { smtp, app, p, .. } = setup(|s| s.jobs_lease_seconds = 30).await;
    let r = send(
        &app,
        &p,
        json!({ "to": "slow@example.com", "from": "hello@acme.test", "subject": "Once", "body": "<p>once</p>" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    // The relay holds the message for 3 s; meanwhile the email's hold lapses as if the
    // batch's heartbeat had stalled, and the workers look for due emails again and again.
    hand_off_started(&app).await;
    execute_sql(
        &app.database_url,
        "UPDATE emails SET due_at = 0 WHERE status = 'queued'",
    )
    .await;
    for _ in 0..5 {
        app.state().jobs().wake();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // No claim takes an email whose hand-off started less than a lease ago.
    assert_eq!(
        smtp.log.lock().unwrap().data.len(),
        0,
        "still inside the first hand-off"
    );
    // The first hand-off still records its outcome, keyed on its own claim.
    let email = email_with_status(&app, &p, &id, "sent").await;
    assert_eq!(email["attempts"], 1, "handed off once: {email}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        smtp.log.lock().unwrap().data.len(),
        1,
        "delivered exactly once"
    );
}

#[tokio::test]
async fn concurrent_sends_to_many_new_and_shared_recipients_all_succeed() {
    // Eight sends at once, each to 40 new addresses of its own and to 10 shared ones (half of
    // them listing the shared ones in reverse): every transaction adds contacts, counts them and
    // meters them, and on PostgreSQL none may deadlock another (it once did: a 500).
    let Setup { app, p, .. } = setup(|_| {}).await;
    let shared: Vec<String> = (0..10).map(|i| format!("shared-{i}@example.com")).collect();
    let sends = (0..8).map(|n| {
        let mut to: Vec<String> = (0..40)
            .map(|i| format!("own-{n}-{i}@example.com"))
            .collect();
        if n % 2 == 0 {
            to.extend(shared.iter().cloned());
        } else {
            to.extend(shared.iter().rev().cloned());
        }
        let body = json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" });
        let (app, p) = (&app, &p);
        async move { send(app, p, body).await }
    });
    for r in futures::future::join_all(sends).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let project = &p.id;
    let contacts = count(
        &app,
        &format!("SELECT COUNT(*) FROM contacts WHERE project_id = '{project}'"),
    )
    .await;
    assert_eq!(contacts, 8 * 40 + 10);
    let r = app.get("/contacts?limit=1", &p.secret_key).await;
    assert_eq!(r.body["total"], 8 * 40 + 10, "{}", r.body);
    let emails = count(
        &app,
        &format!("SELECT COUNT(*) FROM emails WHERE project_id = '{project}'"),
    )
    .await;
    assert_eq!(emails, 8 * 50);
}

/// A send planned to create its recipient's contact, whose address another writer takes after
/// the plan was made (a transaction of the test's own, committed while the send waits on it):
/// the send's one insert of contact, email and history writes nothing, and the send is planned
/// again from the contact that now exists, whose email it then is. On SQLite the test holds the
/// one writer connection; on PostgreSQL the send's insert waits on the uncommitted address.
/// Without data the send is written by that insert alone, outside a transaction on PostgreSQL;
/// with data (a field type seen for the first time) inside the group's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_new_contact_is_created_meanwhile_is_planned_again_onto_it() {
    let Setup { smtp, app, p, .. } = setup(|_| {}).await;
    send_onto_contact_created_meanwhile(&app, &p, "alone@example.com", None).await;
    send_onto_contact_created_meanwhile(
        &app,
        &p,
        "data@example.com",
        Some(json!({ "by": "send" })),
    )
    .await;
    received(&smtp, 2).await;
}

/// Sends to `to` while a transaction of the test's own creates its contact (see
/// [`a_send_whose_new_contact_is_created_meanwhile_is_planned_again_onto_it`]).
async fn send_onto_contact_created_meanwhile(
    app: &TestApp,
    p: &TestProject,
    to: &str,
    data: Option<Value>,
) {
    use herald::store::Db;
    let id = herald::domain::ids::ContactId::generate();
    let insert = format!(
        "INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, updated_at) \
         VALUES ('{id}', '{}', '{to}', TRUE, '{{\"by\":\"other\"}}', 1, 1, 1)",
        p.id,
        id = id.as_str()
    );
    let mut body = json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" });
    if let Some(data) = &data {
        body["data"] = data.clone();
    }
    let hold = Duration::from_millis(700);
    let started = Instant::now();
    let r = match app.state().store().db() {
        Db::Sqlite { writer, .. } => {
            let mut tx = writer.begin().await.unwrap();
            sqlx::query(&insert).execute(&mut *tx).await.unwrap();
            let sent = app.spawn_post("/v1/send", &p.secret_key, body, None);
            tokio::time::sleep(hold).await;
            tx.commit().await.unwrap();
            sent.await.unwrap()
        }
        Db::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(&insert).execute(&mut *tx).await.unwrap();
            let sent = app.spawn_post("/v1/send", &p.secret_key, body, None);
            tokio::time::sleep(hold).await;
            tx.commit().await.unwrap();
            sent.await.unwrap()
        }
    };
    assert_eq!(r.status, 200, "{}", r.body);
    // Its reads never wait on the test's transaction: only its write did.
    assert!(
        started.elapsed() >= hold,
        "the send waited for the other writer"
    );
    assert_eq!(
        r.body["data"]["emails"][0]["contact"]["id"],
        id.as_str(),
        "{}",
        r.body
    );
    let project = &p.id;
    let emails = count(
        app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND to_address = '{to}'"
        ),
    )
    .await;
    let on_contact = count(
        app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{project}' AND contact_id = '{}'",
            id.as_str()
        ),
    )
    .await;
    assert_eq!(
        (emails, on_contact),
        (1, 1),
        "one email, the existing contact's"
    );
    let contacts = count(
        app,
        &format!("SELECT COUNT(*) FROM contacts WHERE project_id = '{project}' AND email = '{to}'"),
    )
    .await;
    assert_eq!(contacts, 1, "no second contact");
    let email_id = r.body["data"]["emails"][0]["email"].as_str().unwrap();
    let email = app.get(&format!("/emails/{email_id}"), &p.secret_key).await;
    assert_eq!(email.status, 200, "{}", email.body);
    assert_eq!(
        email.body["history"][0]["type"], "queued",
        "the email's history starts queued: {}",
        email.body
    );
    let c = app
        .get(&format!("/contacts/{}", id.as_str()), &p.secret_key)
        .await;
    let by = if data.is_some() { "send" } else { "other" };
    assert_eq!(c.body["data"]["by"], by, "the contact's data: {}", c.body);
}

/// Concurrent sends to one recipient share write transactions with each other and with tracks
/// (group commit): each send is written once with its own email, sends and tracks for one
/// contact all leave their data on it, racing sends with one key send once, and another
/// project's refusals (its emails cap) fail only its own sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_single_recipient_sends_are_grouped_without_loss_and_refusals_stay_their_own() {
    let Setup { dns, smtp, app, p } = setup(|_| {}).await;
    let capped = app.project().await;
    verified_domain(&app, &capped, &dns, "capped.test").await;
    capped.cap(&app, json!({ "emails": 5 })).await;
    let post = |path, key: &str, body: Value, idem| app.spawn_post(path, key, body, idem);
    let (mut ours, mut tracks, mut theirs, mut keyed) = (vec![], vec![], vec![], vec![]);
    for round in 0..3 {
        for c in 0..20 {
            let to = format!("g{c}@example.com");
            ours.push(post(
                "/v1/send",
                &p.secret_key,
                json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b",
                        "data": { format!("sent{round}"): round } }),
                None,
            ));
            tracks.push(post(
                "/v1/track",
                &p.public_key,
                json!({ "email": to, "event": "seen", "data": { format!("seen{round}"): round } }),
                None,
            ));
        }
        for c in 0..4 {
            theirs.push(post(
                "/v1/send",
                &capped.secret_key,
                json!({ "to": format!("cap{c}@example.com"), "from": "hello@capped.test",
                        "subject": "s", "body": "b" }),
                None,
            ));
        }
        for _ in 0..2 {
            keyed.push(post(
                "/v1/send",
                &p.secret_key,
                json!({ "to": "keyed@example.com", "from": "hello@acme.test", "subject": "s",
                        "body": "b" }),
                Some("one-send"),
            ));
        }
    }
    let mut email_ids = std::collections::HashSet::new();
    for t in ours {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let id = r.body["data"]["emails"][0]["email"].as_str().unwrap();
        assert!(email_ids.insert(id.to_string()), "one email a send");
    }
    for t in tracks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        taken_and_refused(theirs, |r| {
            assert_eq!(r.body["error"], "BILLING_LIMIT_EXCEEDED", "{}", r.body);
        })
        .await,
        (5, 7),
        "the cap holds exactly"
    );
    let first = one_keyed_response(keyed).await;
    assert!(first.is_some(), "one keyed send went through");

    let project = &p.id;
    let emails = count(
        &app,
        &format!("SELECT COUNT(*) FROM emails WHERE project_id = '{project}'"),
    )
    .await;
    assert_eq!(emails, 60 + 1, "each send once");
    // A send planned to create its contact, which a track in another group created first, was
    // planned again: every email is its recipient's one contact's.
    let orphans = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM emails e WHERE e.project_id = '{project}' AND NOT EXISTS \
             (SELECT 1 FROM contacts c WHERE c.id = e.contact_id AND c.email = e.to_address)"
        ),
    )
    .await;
    assert_eq!(orphans, 0, "each email is its recipient's contact's");
    let contacts = app.get("/contacts?limit=100", &p.secret_key).await;
    assert_eq!(contacts.body["total"], 21, "{}", contacts.body);
    for c in contacts.body["data"].as_array().unwrap() {
        if c["email"] == "keyed@example.com" {
            continue;
        }
        for round in 0..3 {
            assert_eq!(c["data"][format!("sent{round}")], round, "{c}");
            assert_eq!(c["data"][format!("seen{round}")], round, "{c}");
        }
    }
    received(&smtp, 60 + 1 + 5).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 66, "each sent once");
}
