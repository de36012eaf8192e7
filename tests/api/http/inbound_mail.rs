//! Inbound mail (#76 item 4): a domain that receives (`inbound`) lists an MX record at itself to
//! the mail host, verified against a real DNS server on loopback like the other records; the
//! domain receives (`receiving`, and the SMTP server's routing) only once it is verified and that
//! record is found. Replies sent in real SMTP sessions to the MX listener on loopback become
//! `email.received` events that start workflows and resume a `WAIT_FOR_EVENT`.

use std::time::{Duration, Instant};

use base64::Engine as _;
use herald::config::Settings;
use herald::domain::ids::ProjectId;
use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::{Value, json};

use super::domains::{publish, verified_domain, with_dns};
use super::executions::{Step, run, runs, settled, workflow};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{TestApp, TestProject, message_id_of, smtp_listeners};
use crate::support::smtp_client::SmtpClient;

const MAIL_HOST: &str = "mail.herald.test";

/// The inbound MX record of `body` (at the domain itself), if listed.
fn inbound_record(body: &Value) -> Option<&Value> {
    let name = body["domain"].as_str().unwrap();
    body["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "MX" && r["name"] == name)
}

/// Adds `name` to `p` as a domain that receives mail.
async fn add_inbound(app: &TestApp, p: &TestProject, name: &str) -> Value {
    let r = app
        .post(
            "/domains",
            &p.secret_key,
            json!({ "domain": name, "inbound": true }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

/// The project the SMTP server routes `rcpt` to.
async fn route(app: &TestApp, rcpt: &str) -> Option<String> {
    app.state()
        .inbound_mail()
        .route(rcpt)
        .await
        .expect("routing reads the store")
        .map(ProjectId::into_string)
}

/// Verifies `id` until `done` holds of the answer (the resolver may have cached "no record" for a
/// few seconds).
async fn verify_until(
    app: &TestApp,
    p: &TestProject,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = app
            .get(&format!("/domains/{id}/verify"), &p.secret_key)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        if done(&r.body) {
            return r.body;
        }
        assert!(Instant::now() < deadline, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn a_domain_receives_once_verified_with_its_inbound_mx_found() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    let domain = verified_domain(&app, &p, &dns, "in.acme.test").await;
    let id = domain["id"].as_str().unwrap().to_string();
    assert_eq!(domain["inbound"], false);
    assert_eq!(domain["receiving"], false);
    assert!(inbound_record(&domain).is_none(), "{domain}");
    assert_eq!(route(&app, "hello@in.acme.test").await, None);

    // Turned on: the record is listed, pending and not required, and the domain stays verified.
    let on = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "inbound": true }),
        )
        .await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(on.body["inbound"], true);
    assert_eq!(on.body["receiving"], false);
    assert_eq!(on.body["status"], "verified");
    let record = inbound_record(&on.body)
        .expect("the inbound MX record")
        .clone();
    assert_eq!(record["value"], format!("10 {MAIL_HOST}"));
    assert_eq!(record["status"], "pending");
    assert_eq!(record["required"], false);
    // Turning it on again changes nothing.
    let again = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "inbound": true }),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["records"], on.body["records"]);
    // A check that does not find it leaves the domain verified and not receiving.
    let checked = app
        .get(&format!("/domains/{id}/verify"), &p.secret_key)
        .await;
    assert_eq!(checked.body["status"], "verified", "{}", checked.body);
    assert_eq!(checked.body["receiving"], false);
    assert_eq!(route(&app, "hello@in.acme.test").await, None);

    // Published: the record verifies and the domain receives, whatever the address's case.
    dns.mx("in.acme.test", 10, MAIL_HOST);
    let found = verify_until(&app, &p, &id, |b| b["receiving"] == true).await;
    assert_eq!(inbound_record(&found).unwrap()["status"], "verified");
    assert_eq!(found["status"], "verified");
    let got = app.get(&format!("/domains/{id}"), &p.secret_key).await;
    assert_eq!(got.body["receiving"], true, "{}", got.body);
    assert_eq!(route(&app, "Hello@IN.Acme.test").await, Some(p.id.clone()));
    // Only the domain itself, not its parent or its subdomains.
    assert_eq!(route(&app, "hello@acme.test").await, None);
    assert_eq!(route(&app, "hello@x.in.acme.test").await, None);
    assert_eq!(route(&app, "not an address").await, None);

    // Another project adding the same name is not verified (its own DKIM key is not published):
    // the mail stays with the project that proved the domain.
    let q = app.project().await;
    let theirs = add_inbound(&app, &q, "in.acme.test").await;
    let theirs_id = theirs["id"].as_str().unwrap();
    let theirs = app
        .get(&format!("/domains/{theirs_id}/verify"), &q.secret_key)
        .await;
    assert_ne!(theirs.body["status"], "verified", "{}", theirs.body);
    assert_eq!(theirs.body["receiving"], false);
    assert_eq!(route(&app, "hello@in.acme.test").await, Some(p.id.clone()));

    // Turned off: the record goes and the domain no longer receives.
    let off = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "inbound": false }),
        )
        .await;
    assert_eq!(off.status, 200, "{}", off.body);
    assert_eq!(off.body["inbound"], false);
    assert_eq!(off.body["receiving"], false);
    assert!(inbound_record(&off.body).is_none(), "{}", off.body);
    assert_eq!(off.body["status"], "verified");
    assert_eq!(route(&app, "hello@in.acme.test").await, None);
    let rechecked = app
        .get(&format!("/domains/{id}/verify"), &p.secret_key)
        .await;
    assert!(
        inbound_record(&rechecked.body).is_none(),
        "{}",
        rechecked.body
    );
}

#[tokio::test]
async fn a_domain_added_inbound_lists_the_record_and_a_wrong_mx_fails_it_alone() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    let added = add_inbound(&app, &p, "replies.acme.test").await;
    assert_eq!(added["inbound"], true);
    assert_eq!(added["receiving"], false);
    assert_eq!(added["records"].as_array().unwrap().len(), 5, "{}", added);
    let record = inbound_record(&added).expect("the inbound MX record");
    assert_eq!(record["value"], format!("10 {MAIL_HOST}"));
    assert_eq!(record["required"], false);
    let id = added["id"].as_str().unwrap();

    // The required records verify the domain; an MX that sends the mail elsewhere first fails
    // the inbound record alone, with what was found.
    dns.apex("replies.acme.test");
    publish(&dns, &added);
    dns.mx("replies.acme.test", 5, "mx.elsewhere.test");
    dns.mx("replies.acme.test", 10, MAIL_HOST);
    let checked = verify_until(&app, &p, id, |b| b["status"] == "verified").await;
    let record = inbound_record(&checked).unwrap();
    assert_eq!(record["status"], "failed", "{checked}");
    let found: Vec<&str> = record["found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(found.contains(&"5 mx.elsewhere.test."), "{found:?}");
    assert_eq!(checked["receiving"], false);
    assert_eq!(checked["failureReason"], Value::Null);
    assert_eq!(route(&app, "a@replies.acme.test").await, None);

    // The list shows the flag too, and another project cannot change it.
    let listed = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    assert_eq!(listed.body[0]["inbound"], true, "{}", listed.body);
    let q = app.project().await;
    app.patch(
        &format!("/domains/{id}"),
        &q.secret_key,
        json!({ "inbound": false }),
    )
    .await
    .assert_error(404, "NOT_FOUND");
}

// Receipt over SMTP: real sessions to the server's MX listener on loopback.

/// Fast polling and unverified senders allowed (the `outbox` transport writes files), with `dns`
/// and the SMTP listeners on.
pub fn settings(dns: &DnsServer) -> impl FnOnce(&mut Settings) + '_ {
    move |s: &mut Settings| {
        with_dns(dns)(s);
        smtp_listeners(s);
        s.jobs_poll_interval_ms = 20;
        s.domains.allow_unverified = true;
    }
}

/// A verified domain of `p` that receives mail, its MX published.
pub async fn receiving_domain(app: &TestApp, p: &TestProject, dns: &DnsServer, name: &str) {
    let domain = verified_domain(app, p, dns, name).await;
    let id = domain["id"].as_str().unwrap();
    let on = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "inbound": true }),
        )
        .await;
    assert_eq!(on.status, 200, "{}", on.body);
    dns.mx(name, 10, MAIL_HOST);
    verify_until(app, p, id, |b| b["receiving"] == true).await;
}

/// A message as a mail client writes it: `from` to `to`, with `headers` (CRLF-ended lines) and
/// `body` (with its own `Content-Type` when it starts with one; a text part otherwise).
fn message(from: &str, to: &str, message_id: &str, headers: &str, body: &str) -> String {
    let body = if body.starts_with("Content-Type:") {
        body.to_string()
    } else {
        format!("Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n")
    };
    format!(
        "From: Ann Example <{from}>\r\n\
         To: {to}\r\n\
         Subject: Re: Your order\r\n\
         Date: Mon, 7 Dec 2026 00:00:00 +0000\r\n\
         Message-ID: <{message_id}>\r\n\
         {headers}\
         MIME-Version: 1.0\r\n\
         {body}"
    )
}

/// Sends `raw` from `from` to `rcpt` over SMTP with a real client (lettre) to the MX listener;
/// `Err` with the server's refusal.
async fn deliver(app: &TestApp, from: &str, rcpt: &str, raw: &str) -> Result<(), String> {
    let addr = app.smtp().inbound.expect("the MX listener is on");
    let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(addr.port())
        .build();
    let envelope = Envelope::new(Some(from.parse().unwrap()), vec![rcpt.parse().unwrap()]).unwrap();
    transport
        .send_raw(&envelope, raw.as_bytes())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Sends one email to `to`; answers its id and the `Message-ID` it left with.
async fn send(app: &TestApp, p: &TestProject, to: &str) -> (String, String) {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "hello@acme.test", "subject": "Your order", "body": "<p>Ship it?</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(raw) = app.outbox_messages().iter().find(|m| m.contains(&id)) {
            return (id, message_id_of(raw));
        }
        assert!(Instant::now() < deadline, "{id} never left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The project's `email.received` events, newest first.
pub async fn received(app: &TestApp, p: &TestProject) -> Vec<Value> {
    let r = app
        .get("/events?name=email.received&limit=100", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_reply_becomes_email_received_on_its_sender_and_starts_a_workflow() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(settings(&dns)).await;
    let p = app.project().await;
    receiving_domain(&app, &p, &dns, "in.acme.test").await;
    let (eml, sent_id) = send(&app, &p, "ann@example.net").await;
    let (wf, _) = workflow(
        &app,
        &p,
        "email.received",
        vec![Step("EXIT", json!({}))],
        &[],
        json!({}),
    )
    .await;

    // A reply with an attachment, as a mail client writes it.
    let pdf = b"%PDF-1.4 not much of a pdf".to_vec();
    let body = format!(
        "Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
         --b1\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n\
         Yes, please ship it.\r\n\
         --b1\r\n\
         Content-Type: application/pdf; name=\"order.pdf\"\r\n\
         Content-Disposition: attachment; filename=\"order.pdf\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n\
         {}\r\n\
         --b1--\r\n",
        base64::engine::general_purpose::STANDARD.encode(&pdf)
    );
    let reply = message(
        "ann@example.net",
        "support@in.acme.test",
        "CAF=1@mail.example.net",
        &format!(
            "In-Reply-To: <{sent_id}>\r\nReferences: <older@mail.example.net> <{sent_id}>\r\n"
        ),
        &body,
    );
    deliver(&app, "ann@example.net", "support@in.acme.test", &reply)
        .await
        .expect("accepted");

    let events = received(&app, &p).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["email"], "ann@example.net");
    let data = &event["data"];
    assert_eq!(data["subject"], "Re: Your order");
    assert_eq!(
        data["text"].as_str().unwrap().trim(),
        "Yes, please ship it."
    );
    assert_eq!(data["to"], "support@in.acme.test");
    assert_eq!(data["from"], "ann@example.net");
    assert_eq!(data["fromName"], "Ann Example");
    assert_eq!(data["inReplyTo"], eml.as_str());
    assert_eq!(data["messageId"], "CAF=1@mail.example.net");
    let attachment = &data["attachments"][0];
    assert_eq!(attachment["filename"], "order.pdf");
    assert_eq!(attachment["contentType"], "application/pdf");
    assert_eq!(attachment["size"], pdf.len());
    // The attachment downloads as it was sent, never as something a browser renders.
    let url = attachment["url"].as_str().unwrap();
    assert!(url.starts_with(app.base_url()), "{url}");
    let got = reqwest::get(url).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "application/octet-stream");
    assert_eq!(got.headers()["content-disposition"], "attachment");
    assert_eq!(got.bytes().await.unwrap().to_vec(), pdf);
    let missing = reqwest::get(format!(
        "{}/uploads/attachments/{}",
        app.base_url(),
        "0".repeat(32)
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);

    // The event started the workflow for the sender's contact.
    let started = settled(&app, &p, &wf, 1, &["EXITED"]).await;
    assert_eq!(started[0]["triggerEventId"], event["id"]);

    // The feed shows it as `inbound`: the sender, the email it answers, its own subject.
    let feed = app.get("/activity?type=inbound", &p.secret_key).await;
    assert_eq!(feed.status, 200, "{}", feed.body);
    let items = feed.body["data"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", feed.body);
    assert_eq!(items[0]["type"], "inbound");
    assert_eq!(items[0]["email"], "ann@example.net");
    assert_eq!(items[0]["emailId"], eml.as_str());
    assert_eq!(items[0]["subject"], "Your order");
    assert_eq!(items[0]["detail"], "Re: Your order");
    assert_eq!(items[0]["contactId"], event["contactId"]);

    // The same message again (a retry, or another of the project's addresses) adds nothing.
    deliver(&app, "ann@example.net", "sales@in.acme.test", &reply)
        .await
        .expect("accepted");
    assert_eq!(received(&app, &p).await.len(), 1);
    let feed = app.get("/activity?type=inbound", &p.secret_key).await;
    assert_eq!(
        feed.body["data"].as_array().unwrap().len(),
        1,
        "{}",
        feed.body
    );

    // A new sender becomes an unsubscribed contact; a message naming another project's email
    // replies to nothing.
    let q = app.project().await;
    let (_, theirs) = send(&app, &q, "bob@example.net").await;
    let stranger = message(
        "Bob@Example.net",
        "support@in.acme.test",
        "CAF=2@mail.example.net",
        &format!("In-Reply-To: <{theirs}>\r\n"),
        "Who are you?",
    );
    deliver(&app, "bob@example.net", "support@in.acme.test", &stranger)
        .await
        .expect("accepted");
    let events = received(&app, &p).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["email"], "bob@example.net");
    assert_eq!(events[0]["data"]["inReplyTo"], Value::Null);
    assert_eq!(events[0]["data"]["attachments"], json!([]));
    let bob = app
        .get(
            &format!("/contacts/{}", events[0]["contactId"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(bob.body["subscribed"], false, "{}", bob.body);
    assert!(received(&app, &q).await.is_empty());
    settled(&app, &p, &wf, 2, &["EXITED"]).await;
}

#[tokio::test]
async fn a_reply_satisfies_a_wait_for_event_and_stops_the_sequence() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(settings(&dns)).await;
    let p = app.project().await;
    receiving_domain(&app, &p, &dns, "in.acme.test").await;
    // "Follow up unless they reply": wait for a reply, exit on it.
    let (wf, _) = workflow(
        &app,
        &p,
        "signup",
        vec![
            Step(
                "WAIT_FOR_EVENT",
                json!({ "eventName": "email.received", "timeoutSeconds": 86400 }),
            ),
            Step("EXIT", json!({})),
        ],
        &[(0, 1, Some("event"))],
        json!({}),
    )
    .await;
    let r = app
        .post(
            "/v1/track",
            &p.secret_key,
            json!({ "email": "ann@example.net", "event": "signup", "subscribed": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    settled(&app, &p, &wf, 1, &["WAITING"]).await;

    let raw = message(
        "ann@example.net",
        "hello@in.acme.test",
        "m-1@example.net",
        "",
        "Stop, please.",
    );
    deliver(&app, "ann@example.net", "hello@in.acme.test", &raw)
        .await
        .expect("accepted");
    let done = settled(&app, &p, &wf, 1, &["EXITED"]).await;
    assert_eq!(
        runs(&done[0]),
        vec![
            run("WAIT_FOR_EVENT", "COMPLETED", Some("event")),
            run("EXIT", "COMPLETED", None)
        ]
    );
    // A reply never changes the contact's subscription.
    let ann = app
        .get(
            &format!("/contacts/{}", done[0]["contactId"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(ann.body["subscribed"], true, "{}", ann.body);
}

#[tokio::test]
async fn mail_to_a_domain_that_does_not_receive_yet_is_refused_at_rcpt() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(settings(&dns)).await;
    let p = app.project().await;
    let addr = app.smtp().inbound.expect("the MX listener is on");
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    assert_eq!(c.cmd("EHLO client.test").await.code, 250);
    assert!(c.cmd("MAIL FROM:<ann@example.net>").await.is(250, "2.1.0"));
    let rcpt = "RCPT TO:<support@in.acme.test>";

    // Added with `inbound` but neither verified nor its MX found: refused.
    let added = add_inbound(&app, &p, "in.acme.test").await;
    let r = c.cmd(rcpt).await;
    assert!(r.is(550, "5.1.1"), "{r:?}");
    // Verified for sending, its MX not found yet: still refused.
    dns.apex("in.acme.test");
    publish(&dns, &added);
    let id = added["id"].as_str().unwrap();
    verify_until(&app, &p, id, |b| b["status"] == "verified").await;
    let r = c.cmd(rcpt).await;
    assert!(r.is(550, "5.1.1"), "{r:?}");
    // Once the MX is found: accepted.
    dns.mx("in.acme.test", 10, MAIL_HOST);
    verify_until(&app, &p, id, |b| b["receiving"] == true).await;
    let r = c.cmd(rcpt).await;
    assert!(r.is(250, "2.1.5"), "{r:?}");
    assert!(c.cmd("QUIT").await.is(221, "2.0.0"));
    assert!(received(&app, &p).await.is_empty());
}

/// Turns receiving on or off for the domain `id` of `p`.
async fn set_inbound(app: &TestApp, p: &TestProject, id: &str, on: bool) {
    let r = app
        .patch(
            &format!("/domains/{id}"),
            &p.secret_key,
            json!({ "inbound": on }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The reply to `RCPT TO:<rcpt>` in a new session to the MX listener at `addr`.
async fn rcpt_reply(
    addr: std::net::SocketAddr,
    rcpt: &str,
) -> crate::support::smtp_client::SmtpReply {
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    assert_eq!(c.cmd("EHLO client.test").await.code, 250);
    assert!(c.cmd("MAIL FROM:<ann@example.net>").await.is(250, "2.1.0"));
    let reply = c.cmd(&format!("RCPT TO:<{rcpt}>")).await;
    c.cmd("QUIT").await;
    reply
}

#[tokio::test]
async fn a_domain_change_reaches_rcpt_at_once_here_and_within_the_ttl_elsewhere() {
    use herald::services::inbound_routes::TTL;
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(settings(&dns)).await;
    let other = app.spawn_sharing(settings(&dns)).await;
    let p = app.project().await;
    let addr = app.smtp().inbound.expect("the MX listener is on");
    let rcpt = "support@in.acme.test";
    // Refused while nobody receives there (and that answer is kept)…
    assert!(rcpt_reply(addr, rcpt).await.is(550, "5.1.1"));
    // …until a request of this instance makes the domain receive.
    receiving_domain(&app, &p, &dns, "in.acme.test").await;
    let domains = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    let id = domains.body[0]["id"].as_str().unwrap().to_string();
    let read_at = Instant::now();
    assert!(rcpt_reply(addr, rcpt).await.is(250, "2.1.5"));

    // Turned off through another instance: this one keeps its answer for at most the TTL.
    set_inbound(&other, &p, &id, false).await;
    let changed_at = Instant::now();
    let kept = rcpt_reply(addr, rcpt).await;
    if read_at.elapsed() < TTL - Duration::from_secs(1) {
        assert!(kept.is(250, "2.1.5"), "kept for the TTL: {kept:?}");
    }
    loop {
        let r = rcpt_reply(addr, rcpt).await;
        if r.is(550, "5.1.1") {
            break;
        }
        assert!(r.is(250, "2.1.5"), "{r:?}");
        assert!(
            changed_at.elapsed() < TTL + Duration::from_secs(2),
            "still accepted {:?} after the change",
            changed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Turned on again and checked through this instance: accepted at once, though "nobody"
    // was just read.
    set_inbound(&app, &p, &id, true).await;
    verify_until(&app, &p, &id, |b| b["receiving"] == true).await;
    assert!(rcpt_reply(addr, rcpt).await.is(250, "2.1.5"));
    // Turned off here: refused at once.
    set_inbound(&app, &p, &id, false).await;
    assert!(rcpt_reply(addr, rcpt).await.is(550, "5.1.1"));
    // On again, then deleted here: refused at once.
    set_inbound(&app, &p, &id, true).await;
    verify_until(&app, &p, &id, |b| b["receiving"] == true).await;
    assert!(rcpt_reply(addr, rcpt).await.is(250, "2.1.5"));
    let gone = app.delete(&format!("/domains/{id}"), &p.secret_key).await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    assert!(rcpt_reply(addr, rcpt).await.is(550, "5.1.1"));
}

/// The files in the uploads storage's attachments folder.
fn stored_attachments(app: &TestApp) -> Vec<String> {
    let dir = app.state().settings().data_dir.join("uploads/attachments");
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn attachments_of_a_refused_message_are_not_left_in_the_storage() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(settings(&dns)).await;
    let p = app.project().await;
    receiving_domain(&app, &p, &dns, "in.acme.test").await;
    p.contact(&app, "ann@example.net", json!({})).await;
    // The project may create no other contact this period.
    p.cap(&app, json!({ "contacts": 1 })).await;
    let with_attachment = |from: &str, id: &str| {
        let body = format!(
            "Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
             --b1\r\n\
             Content-Type: text/plain; charset=utf-8\r\n\r\n\
             See attached.\r\n\
             --b1\r\n\
             Content-Type: application/pdf; name=\"a.pdf\"\r\n\
             Content-Disposition: attachment; filename=\"a.pdf\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n\
             {}\r\n\
             --b1--\r\n",
            base64::engine::general_purpose::STANDARD.encode(b"%PDF-1.4 tiny")
        );
        message(from, "support@in.acme.test", id, "", &body)
    };
    // From a known contact: recorded, its attachment stored.
    deliver(
        &app,
        "ann@example.net",
        "support@in.acme.test",
        &with_attachment("ann@example.net", "CAF=a@mail.example.net"),
    )
    .await
    .expect("accepted");
    let kept = stored_attachments(&app);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let events = received(&app, &p).await;
    let url = events[0]["data"]["attachments"][0]["url"].as_str().unwrap();
    assert!(url.ends_with(&kept[0]), "{url} {kept:?}");

    // From a new sender: refused (no contact may be created), and the attachment stored on the
    // way is deleted again.
    let refused = deliver(
        &app,
        "cid@example.net",
        "support@in.acme.test",
        &with_attachment("cid@example.net", "CAF=c@mail.example.net"),
    )
    .await
    .expect_err("refused");
    assert!(refused.contains("550"), "{refused}");
    assert_eq!(received(&app, &p).await.len(), 1);
    assert_eq!(stored_attachments(&app), kept);
}
