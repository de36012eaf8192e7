//! Herald's own SMTP server (`host/src/smtp/`), over real SMTP sessions on loopback: `lettre`
//! for a real client's sessions, a raw client for the protocol's edges. The MX listener refuses
//! every recipient but a real email's return path and the abuse address; a DSN at a return path
//! bounces its email, a forged one (for another recipient) changes nothing; an oversize message
//! is refused while it arrives and the session goes on (50 MB to a real `herald serve`, whose
//! peak memory grows by at most the limit); garbage is answered and too much of it
//! closes the session; a slow client is timed out; STARTTLS upgrades with the configured
//! certificate; connections are capped per address; a message whose data the listener's memory
//! budget has no room for is answered `452 4.3.1` without being buffered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::config::Settings;
use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::json;

use crate::http::domains::verified_domain;
use crate::http::send::{email_with_status, with_mail};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{
    DoomedServer, TestApp, TestProject, fresh_database_url, smtp_listeners, test_settings,
};
use crate::support::smtp_client::SmtpClient;
use crate::support::smtpd::SmtpServer;

const ABUSE: &str = "abuse@mx.herald.test";

/// An app with its MX listener on (and an abuse address, so that a message can be accepted
/// without an email), adjusted by `adjust`.
async fn mx(adjust: impl FnOnce(&mut Settings)) -> (TestApp, SocketAddr) {
    let app = TestApp::spawn_with(|s| {
        smtp_listeners(s);
        s.inbound.abuse_address = Some(ABUSE.into());
        adjust(s);
    })
    .await;
    let addr = app.smtp().inbound.expect("the MX listener is on");
    (app, addr)
}

/// A session past its greeting and `EHLO`.
async fn session(addr: SocketAddr) -> SmtpClient<tokio::net::TcpStream> {
    let mut c = SmtpClient::connect(addr).await;
    let greeting = c.reply().await;
    assert_eq!(greeting.code, 220, "{greeting:?}");
    let ehlo = c.cmd("EHLO client.test").await;
    assert_eq!(ehlo.code, 250, "{ehlo:?}");
    c
}

/// A delivery status notification (RFC 3464) as Postfix writes it, sent to `return_path`,
/// reporting that `recipient` does not exist.
fn dsn(return_path: &str, recipient: &str, email_id: &str) -> String {
    format!(
        "From: MAILER-DAEMON@mx.example.com (Mail Delivery System)\r\n\
         To: {return_path}\r\n\
         Subject: Undelivered Mail Returned to Sender\r\n\
         Auto-Submitted: auto-replied\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status;\r\n\
         \tboundary=\"B0UND\"\r\n\
         \r\n\
         --B0UND\r\n\
         Content-Description: Notification\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\
         \r\n\
         This is the mail system at host mx.example.com.\r\n\
         \r\n\
         I'm sorry to have to inform you that your message could not\r\n\
         be delivered to one or more recipients.\r\n\
         \r\n\
         <{recipient}>: host mx.example.com[192.0.2.1] said: 550 5.1.1\r\n\
         \x20   <{recipient}>: Recipient address rejected: User unknown\r\n\
         \r\n\
         --B0UND\r\n\
         Content-Description: Delivery report\r\n\
         Content-Type: message/delivery-status\r\n\
         \r\n\
         Reporting-MTA: dns; mx.example.com\r\n\
         X-Postfix-Queue-ID: 3F2A41C0062\r\n\
         Arrival-Date: Sun,  6 Dec 2026 23:00:00 +0000 (UTC)\r\n\
         \r\n\
         Final-Recipient: rfc822; {recipient}\r\n\
         Original-Recipient: rfc822;{recipient}\r\n\
         Action: failed\r\n\
         Status: 5.1.1\r\n\
         Remote-MTA: dns; mx.example.com\r\n\
         Diagnostic-Code: smtp; 550 5.1.1 <{recipient}>: Recipient address rejected:\r\n\
         \x20   User unknown\r\n\
         \r\n\
         --B0UND\r\n\
         Content-Description: Undelivered Message Headers\r\n\
         Content-Type: text/rfc822-headers\r\n\
         \r\n\
         Message-ID: <{email_id}@acme.test>\r\n\
         From: hello@acme.test\r\n\
         To: {recipient}\r\n\
         Subject: s\r\n\
         \r\n\
         --B0UND--\r\n"
    )
}

/// Sends `raw` with the null sender to `rcpt` through `lettre`, as a receiving server returns a
/// bounce; the server's refusal is an error.
async fn send_bounce(addr: SocketAddr, rcpt: &str, raw: &str) -> Result<(), String> {
    let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(addr.port())
        .build();
    let envelope = Envelope::new(None, vec![rcpt.parse().unwrap()]).unwrap();
    transport
        .send_raw(&envelope, raw.as_bytes())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// An app delivering through the `smtp` transport to a loopback sink, with its SMTP listeners
/// on and `adjust`ed, and a project whose domain `acme.test` is verified.
async fn mail_app(
    adjust: impl FnOnce(&mut Settings),
) -> (DnsServer, SmtpServer, TestApp, TestProject) {
    let dns = DnsServer::start().await;
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_mail(&dns, sink.addr)(s);
        smtp_listeners(s);
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    (dns, sink, app, p)
}

/// Sends one email from `hello@acme.test` to `to` and waits until it is `sent`; answers its id.
async fn sent_email(app: &TestApp, p: &TestProject, to: &str) -> String {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "hello@acme.test", "subject": "s", "body": "b" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    email_with_status(app, p, &id, "sent").await;
    id
}

#[tokio::test]
async fn a_recipient_that_names_no_email_is_refused() {
    let (_app, addr) = mx(|_| {}).await;
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    let ehlo = c.cmd("EHLO client.test").await;
    assert_eq!(ehlo.code, 250);
    for capability in [
        "PIPELINING",
        "8BITMIME",
        "ENHANCEDSTATUSCODES",
        "SIZE 26214400",
    ] {
        assert!(ehlo.text.lines().any(|l| l == capability), "{ehlo:?}");
    }
    assert!(!ehlo.text.contains("STARTTLS"), "no certificate: {ehlo:?}");
    assert!(!ehlo.text.contains("AUTH"), "no AUTH on the MX: {ehlo:?}");
    let r = c.cmd("RCPT TO:<ann@example.com>").await;
    assert!(r.is(503, "5.5.1"), "RCPT before MAIL: {r:?}");
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    for rcpt in [
        "ann@example.com",
        "postmaster@bounces.acme.test",
        // The shape of a return path, but no such email.
        "bounces+eml_0123456789abcdef0123456789abcdef@bounces.acme.test",
        "bounces+eml_nothex@bounces.acme.test",
    ] {
        let r = c.cmd(&format!("RCPT TO:<{rcpt}>")).await;
        assert!(r.is(550, "5.1.1"), "{rcpt}: {r:?}");
    }
    let r = c.cmd("DATA").await;
    assert!(r.is(503, "5.5.1"), "no recipient: {r:?}");
    let r = c.cmd(&format!("RCPT TO:<{}>", ABUSE.to_uppercase())).await;
    assert!(r.is(250, "2.1.5"), "the abuse address, in any case: {r:?}");
    assert!(c.cmd("AUTH PLAIN AGEAYg==").await.is(502, "5.5.1"));
    assert!(c.cmd("VRFY ann").await.is(252, "2.5.2"));
    assert!(c.cmd("RSET").await.is(250, "2.0.0"));
    assert!(c.cmd("NOOP").await.is(250, "2.0.0"));
    assert!(c.cmd("QUIT").await.is(221, "2.0.0"));
}

#[tokio::test]
async fn a_dsn_at_an_emails_return_path_bounces_it_and_a_forged_one_changes_nothing() {
    let (_dns, _sink, app, p) = mail_app(|_| {}).await;
    let mut ids = Vec::new();
    for to in ["ann@example.com", "bob@example.com"] {
        ids.push(sent_email(&app, &p, to).await);
    }
    let mx = app.smtp().inbound.unwrap();
    let (ann, bob) = (&ids[0], &ids[1]);
    let ann_path = format!("bounces+{ann}@bounces.acme.test");

    // Ann's return path, reporting Bob (who was not sent that email): nothing changes.
    send_bounce(mx, &ann_path, &dsn(&ann_path, "bob@example.com", ann))
        .await
        .expect("accepted");
    // Another email's return path with a different case in its domain is still that path.
    let bob_path = format!("bounces+{bob}@BOUNCES.acme.test");
    send_bounce(mx, &bob_path, &dsn(&bob_path, "ann@example.com", bob))
        .await
        .expect("accepted");
    for id in &ids {
        let email = app.get(&format!("/emails/{id}"), &p.secret_key).await;
        assert_eq!(email.body["status"], "sent", "{}", email.body);
    }

    // The real bounce: applied before the 250, so it is there at once.
    send_bounce(mx, &ann_path, &dsn(&ann_path, "ann@example.com", ann))
        .await
        .expect("accepted");
    let email = app.get(&format!("/emails/{ann}"), &p.secret_key).await;
    assert_eq!(email.body["status"], "bounced", "{}", email.body);
    let bounced = email.body["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["type"] == "bounced")
        .expect("a bounce in the history");
    assert!(
        bounced["detail"].as_str().unwrap().starts_with("5.1.1"),
        "{bounced}"
    );
    let other = app.get(&format!("/emails/{bob}"), &p.secret_key).await;
    assert_eq!(other.body["status"], "sent", "{}", other.body);

    // A return path of another domain than the email's is no return path.
    let wrong = format!("bounces+{ann}@bounces.other.test");
    let refused = send_bounce(mx, &wrong, &dsn(&wrong, "ann@example.com", ann)).await;
    assert!(refused.is_err(), "refused at RCPT: {refused:?}");
}

/// Bounces arriving together share the writer's transactions (`store::delivery_events`): each
/// still applies to its own email alone, and a forged one among them changes nothing.
#[tokio::test]
async fn bounces_arriving_together_each_apply_to_their_own_email() {
    let (_dns, _sink, app, p) = mail_app(|_| {}).await;
    let mut ids = Vec::new();
    for n in 0..12 {
        ids.push(sent_email(&app, &p, &format!("r{n}@example.com")).await);
    }
    let mx = app.smtp().inbound.unwrap();
    let mut bounces = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let path = format!("bounces+{id}@bounces.acme.test");
        // Every third email also gets a forged report naming someone it was not sent to.
        if n % 3 == 0 {
            let forged = dsn(&path, "someone-else@example.com", id);
            bounces.push(tokio::spawn(async move {
                send_bounce(mx, &path, &forged).await
            }));
            continue;
        }
        let real = dsn(&path, &format!("r{n}@example.com"), id);
        bounces.push(tokio::spawn(
            async move { send_bounce(mx, &path, &real).await },
        ));
    }
    for bounce in bounces {
        bounce.await.unwrap().expect("accepted");
    }
    for (n, id) in ids.iter().enumerate() {
        let email = app.get(&format!("/emails/{id}"), &p.secret_key).await;
        let want = if n % 3 == 0 { "sent" } else { "bounced" };
        assert_eq!(email.body["status"], want, "{}", email.body);
    }
    let listed = app.get("/suppressions?limit=100", &p.secret_key).await;
    assert_eq!(listed.body["total"], 8, "{}", listed.body);
    let mut listed: Vec<&str> = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["email"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut bounced: Vec<String> = (0..12)
        .filter(|n| n % 3 != 0)
        .map(|n| format!("r{n}@example.com"))
        .collect();
    bounced.sort_unstable();
    assert_eq!(listed, bounced);
}

#[tokio::test]
async fn a_bounce_answered_250_survives_a_kill_right_after() {
    let dns = DnsServer::start().await;
    let sink = SmtpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let mut settings = test_settings(dir.path(), &url);
    with_mail(&dns, sink.addr)(&mut settings);
    smtp_listeners(&mut settings);
    let doomed = DoomedServer::start(settings, &url);
    let app = &doomed.app;
    let p = app.project().await;
    verified_domain(app, &p, &dns, "acme.test").await;
    let id = sent_email(app, &p, "ann@example.com").await;
    let path = format!("bounces+{id}@bounces.acme.test");
    let mut c = session(doomed.smtp.inbound.unwrap()).await;
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{path}>")).await.is(250, "2.1.5"));
    let r = c.data(dsn(&path, "ann@example.com", &id).as_bytes()).await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    // Killed the moment it answered: every task stops where it stands.
    doomed.kill();
    let again = TestApp::spawn_on(&url, |s| with_mail(&dns, sink.addr)(s)).await;
    let email = again.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(email.body["status"], "bounced", "{}", email.body);
}

#[tokio::test]
async fn an_oversize_message_is_refused_as_it_arrives_and_the_session_goes_on() {
    let (_app, addr) = mx(|s| s.inbound.max_message_bytes = 64 * 1024).await;
    let mut c = session(addr).await;
    let r = c.cmd("MAIL FROM:<> SIZE=100000000").await;
    assert!(r.is(552, "5.3.4"), "the declared size: {r:?}");
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let line = "x".repeat(998);
    let big: String = (0..400).map(|_| format!("{line}\r\n")).collect();
    let r = c
        .data(format!("Subject: big\r\n\r\n{big}").as_bytes())
        .await;
    assert!(r.is(552, "5.3.4"), "{r:?}");
    // The session goes on: a small message is accepted.
    assert!(c.cmd("NOOP").await.is(250, "2.0.0"));
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = c
        .data(b"Subject: small\r\n\r\n.leading dot\r\nhello\r\n")
        .await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
}

/// A message of `n` lines of 1,000 bytes each, its final dot not sent.
fn lines_of(n: usize) -> Vec<u8> {
    let line = format!("{}\r\n", "y".repeat(998));
    format!("Subject: large\r\n\r\n{}", line.repeat(n)).into_bytes()
}

#[tokio::test]
async fn messages_past_the_memory_budget_are_answered_452_and_the_server_goes_on() {
    // 1 MiB for every session's data at once; a message may be 700 KiB, so one of 600 KB
    // fits (its buffer takes 708 KiB), two do not.
    let (_app, addr) = mx(|s| {
        s.inbound.memory_mb = 1;
        s.inbound.max_message_bytes = 700 * 1024;
    })
    .await;
    // A holds 600 KB of data, its final dot not sent yet.
    let mut a = session(addr).await;
    assert!(a.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(a.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    assert_eq!(a.cmd("DATA").await.code, 354);
    a.write(&lines_of(600)).await;
    // Once the server holds all of it (less than 400,000 bytes left), a declared size above
    // what is left is answered at once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut probe = session(addr).await;
    loop {
        let r = probe.cmd("MAIL FROM:<> SIZE=400000").await;
        if r.is(452, "4.3.1") {
            break;
        }
        assert!(r.is(250, "2.1.0"), "{r:?}");
        assert!(probe.cmd("RSET").await.is(250, "2.0.0"));
        assert!(Instant::now() < deadline, "A's data never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // B's 600 KB find no room: read to their end, not buffered, answered 452.
    let mut b = session(addr).await;
    assert!(b.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(b.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = b.data(&lines_of(600)).await;
    assert!(r.is(452, "4.3.1"), "{r:?}");
    // A finishes: accepted, and its room is given back.
    a.write(b".\r\n").await;
    let r = a.reply().await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    // The server goes on: B, in the same session, now gets its message through.
    assert!(b.cmd("MAIL FROM:<> SIZE=600000").await.is(250, "2.1.0"));
    assert!(b.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = b.data(&lines_of(600)).await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    assert!(b.cmd("QUIT").await.is(221, "2.0.0"));
    assert!(probe.cmd("QUIT").await.is(221, "2.0.0"));
}

#[tokio::test]
async fn garbage_is_answered_and_too_much_of_it_closes_the_session() {
    let (_app, addr) = mx(|_| {}).await;
    let mut c = session(addr).await;
    let r = c.cmd("HELLO WORLD").await;
    assert!(r.is(500, "5.5.2"), "{r:?}");
    c.write(b"\x00\xff\xfe garbage\r\n").await;
    assert!(c.reply().await.is(500, "5.5.2"));
    let long = "A".repeat(5000);
    let r = c.cmd(&long).await;
    assert!(r.is(500, "5.5.2"), "a line too long: {r:?}");
    let r = c.cmd("MAIL FROM:not-an-address").await;
    assert_eq!(r.code, 501, "{r:?}");
    // Still answering.
    assert!(c.cmd("NOOP").await.is(250, "2.0.0"));
    // Pipelined garbage up to the cap: each answered, then 421 and the end.
    c.write("BOGUS\r\n".repeat(10).as_bytes()).await;
    let mut replies = Vec::new();
    loop {
        let r = c.reply().await;
        if r.code == 0 {
            break;
        }
        replies.push(r);
    }
    let last = replies.last().expect("replies");
    assert!(last.is(421, "4.7.0"), "{replies:?}");
    assert!(
        replies[..replies.len() - 1]
            .iter()
            .all(|r| r.is(500, "5.5.2"))
    );
}

#[tokio::test]
async fn a_slow_client_is_timed_out() {
    let (_app, addr) = mx(|s| {
        s.inbound.command_timeout_seconds = 1;
        s.inbound.data_block_timeout_seconds = 1;
    })
    .await;
    // Silent after the greeting.
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    let started = Instant::now();
    let r = c.reply().await;
    assert!(r.is(421, "4.4.2"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(c.reply().await.code, 0, "closed");
    // Silent in the middle of a message.
    let mut c = session(addr).await;
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    assert_eq!(c.cmd("DATA").await.code, 354);
    c.write(b"Subject: half\r\n\r\nand then nothing").await;
    let r = c.reply().await;
    assert!(r.is(421, "4.4.2"), "{r:?}");
    assert_eq!(c.reply().await.code, 0, "closed");
}

#[tokio::test]
async fn connections_are_capped_per_address() {
    let (_app, addr) = mx(|s| s.inbound.max_connections_per_ip = 2).await;
    let mut first = session(addr).await;
    let _second = session(addr).await;
    let mut third = SmtpClient::connect(addr).await;
    let r = third.reply().await;
    assert!(r.is(421, "4.7.0"), "{r:?}");
    assert!(first.cmd("QUIT").await.is(221, "2.0.0"));
    // Freed once the first one ended.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = SmtpClient::connect(addr).await;
        let r = again.reply().await;
        if r.code == 220 {
            break;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A self-signed certificate for `localhost`, written as PEM files in `dir`; answers the
/// certificate (to trust) and the two paths.
fn certificate(
    dir: &std::path::Path,
) -> (
    tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    (cert.cert.der().clone(), cert_file, key_file)
}

#[tokio::test]
async fn starttls_upgrades_with_the_configured_certificate() {
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let dir = tempfile::tempdir().unwrap();
    let (der, cert_file, key_file) = certificate(dir.path());
    let (_app, addr) = mx(|s| {
        s.inbound.tls_cert_file = Some(cert_file);
        s.inbound.tls_key_file = Some(key_file);
    })
    .await;
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.text.lines().any(|l| l == "STARTTLS"), "{ehlo:?}");
    let r = c.cmd("STARTTLS").await;
    assert!(r.is(220, "2.0.0"), "{r:?}");
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), c.into_inner())
        .await
        .expect("the handshake with the configured certificate");
    let mut c = SmtpClient::over(tls);
    // No greeting again; the client starts over with EHLO (RFC 3207).
    let ehlo = c.cmd("EHLO client.test").await;
    assert_eq!(ehlo.code, 250, "{ehlo:?}");
    assert!(!ehlo.text.contains("STARTTLS"), "{ehlo:?}");
    assert!(c.cmd("STARTTLS").await.is(503, "5.5.1"));
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = c.data(b"Subject: over TLS\r\n\r\nhello\r\n").await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    assert!(c.cmd("QUIT").await.is(221, "2.0.0"));
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn submission_authenticates_with_the_secret_key_and_sends_as_v1_send_does() {
    let (_dns, sink, app, p) = mail_app(|_| {}).await;
    let addr = app
        .smtp()
        .submission
        .expect("the submission listener is on");
    let mut c = SmtpClient::connect(addr).await;
    assert_eq!(c.reply().await.code, 220);
    let ehlo = c.cmd("EHLO app.test").await;
    assert!(
        ehlo.text.lines().any(|l| l == "AUTH PLAIN LOGIN"),
        "plain AUTH on loopback: {ehlo:?}"
    );
    let r = c.cmd("MAIL FROM:<hello@acme.test>").await;
    assert!(r.is(530, "5.7.0"), "before AUTH: {r:?}");
    let r = c
        .cmd(&format!("AUTH PLAIN {}", b64(b"\0wordpress\0sk_wrong")))
        .await;
    assert!(r.is(535, "5.7.8"), "a bad key: {r:?}");
    let r = c.cmd("AUTH PLAIN").await;
    assert_eq!(r.code, 334, "{r:?}");
    assert!(c.cmd("*").await.is(501, "5.7.0"), "cancelled");
    assert_eq!(c.cmd("AUTH LOGIN").await.code, 334);
    assert_eq!(c.cmd(&b64(b"wordpress")).await.code, 334);
    let r = c.cmd(&b64(p.secret_key.as_bytes())).await;
    assert!(r.is(235, "2.7.0"), "{r:?}");
    assert!(c.cmd("MAIL FROM:<hello@acme.test>").await.is(250, "2.1.0"));
    assert!(c.cmd("RCPT TO:<ann@example.com>").await.is(250, "2.1.5"));
    let r = c
        .data(
            b"From: Acme <hello@acme.test>\r\nTo: ann@example.com\r\nSubject: Over SMTP\r\n\
              Message-ID: <submitted-1@app.test>\r\n\r\nHello Ann.\r\n",
        )
        .await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    let log = sink.received(1).await;
    assert!(
        log.data[0].contains("Subject: Over SMTP"),
        "{}",
        log.data[0]
    );
    // Refused as the API would refuse it.
    assert!(c.cmd("MAIL FROM:<hello@other.test>").await.is(250, "2.1.0"));
    assert!(c.cmd("RCPT TO:<ann@example.com>").await.is(250, "2.1.5"));
    let r = c
        .data(b"From: hello@other.test\r\nTo: ann@example.com\r\nSubject: no\r\n\r\nx\r\n")
        .await;
    assert_eq!(r.code, 550, "an unverified domain: {r:?}");
    assert!(c.cmd("QUIT").await.is(221, "2.0.0"));
}

/// A feedback-loop report (ARF, RFC 5965) about email `email_id` sent to `recipient`.
fn arf(to: &str, recipient: &str, email_id: &str) -> String {
    format!(
        "From: <feedback@fbl.isp.example>\r\n\
         To: <{to}>\r\n\
         Subject: FW: s\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=feedback-report;\r\n\
         \tboundary=\"part1_13d.2e68ed54_report\"\r\n\
         \r\n\
         --part1_13d.2e68ed54_report\r\n\
         Content-Type: text/plain; charset=\"US-ASCII\"\r\n\
         \r\n\
         This is an email abuse report for an email message received from IP\r\n\
         192.0.2.1 on Sun, 6 Dec 2026 23:00:00 +0000.\r\n\
         \r\n\
         --part1_13d.2e68ed54_report\r\n\
         Content-Type: message/feedback-report\r\n\
         \r\n\
         Feedback-Type: abuse\r\n\
         User-Agent: SomeGenerator/1.0\r\n\
         Version: 1\r\n\
         Original-Mail-From: <bounces+{email_id}@bounces.acme.test>\r\n\
         Original-Rcpt-To: <{recipient}>\r\n\
         Arrival-Date: Sun, 6 Dec 2026 23:00:00 +0000\r\n\
         Reported-Domain: acme.test\r\n\
         Source-IP: 192.0.2.1\r\n\
         \r\n\
         --part1_13d.2e68ed54_report\r\n\
         Content-Type: text/rfc822-headers\r\n\
         \r\n\
         From: <hello@acme.test>\r\n\
         To: <{recipient}>\r\n\
         Subject: s\r\n\
         Message-ID: <{email_id}@acme.test>\r\n\
         \r\n\
         --part1_13d.2e68ed54_report--\r\n"
    )
}

#[tokio::test]
async fn a_feedback_report_at_the_abuse_address_is_a_complaint_about_the_email_it_names() {
    let (_dns, _sink, app, p) = mail_app(|s| s.inbound.abuse_address = Some(ABUSE.into())).await;
    let id = sent_email(&app, &p, "ann@example.com").await;
    let mx = app.smtp().inbound.unwrap();
    let mut c = session(mx).await;
    // A report naming someone the email was not sent to changes nothing.
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = c.data(arf(ABUSE, "bob@example.com", &id).as_bytes()).await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    let email = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(email.body["status"], "sent", "{}", email.body);
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = c.data(arf(ABUSE, "ann@example.com", &id).as_bytes()).await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    let email = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    assert_eq!(email.body["status"], "complained", "{}", email.body);
}

#[tokio::test]
async fn a_reply_at_an_inbound_domain_is_received_and_an_auto_reply_dropped() {
    use crate::http::inbound_mail::{received, receiving_domain, settings};
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(|s| {
        settings(&dns)(s);
        smtp_listeners(s);
    })
    .await;
    let p = app.project().await;
    receiving_domain(&app, &p, &dns, "in.acme.test").await;
    let mut c = session(app.smtp().inbound.unwrap()).await;
    assert!(c.cmd("MAIL FROM:<ann@example.com>").await.is(250, "2.1.0"));
    assert!(
        c.cmd("RCPT TO:<Support@IN.acme.test>")
            .await
            .is(250, "2.1.5")
    );
    let r = c.cmd("RCPT TO:<support@acme.test>").await;
    assert!(r.is(550, "5.1.1"), "a domain that does not receive: {r:?}");
    let r = c
        .data(
            b"From: Ann Example <ann@example.com>\r\nTo: support@in.acme.test\r\n\
              Subject: Re: Your order\r\nMessage-ID: <reply-1@example.com>\r\n\r\n\
              Yes, please ship it.\r\n",
        )
        .await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    let events = received(&app, &p).await;
    assert_eq!(events.len(), 1, "{events:?}");
    // An out-of-office answer is neither a bounce nor a reply.
    assert!(c.cmd("MAIL FROM:<ann@example.com>").await.is(250, "2.1.0"));
    assert!(
        c.cmd("RCPT TO:<support@in.acme.test>")
            .await
            .is(250, "2.1.5")
    );
    let r = c
        .data(
            b"From: ann@example.com\r\nTo: support@in.acme.test\r\nSubject: Out of office\r\n\
              Auto-Submitted: auto-replied\r\nMessage-ID: <ooo-1@example.com>\r\n\r\n\
              I am away until Monday.\r\n",
        )
        .await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    assert_eq!(received(&app, &p).await.len(), 1);
}

#[tokio::test]
async fn submission_speaks_tls_from_the_first_byte_on_its_implicit_tls_listener() {
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let dir = tempfile::tempdir().unwrap();
    let (der, cert_file, key_file) = certificate(dir.path());
    let app = TestApp::spawn_with(|s| {
        s.submission.implicit_tls_listen = Some("127.0.0.1:0".into());
        s.submission.tls_cert_file = Some(cert_file);
        s.submission.tls_key_file = Some(key_file);
    })
    .await;
    let addr = app
        .smtp()
        .submission_tls
        .expect("the implicit TLS listener is on");
    assert_eq!(
        app.smtp().submission,
        None,
        "only what is configured listens"
    );
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS from the first byte");
    let mut c = SmtpClient::over(tls);
    assert_eq!(c.reply().await.code, 220);
    let ehlo = c.cmd("EHLO app.test").await;
    assert!(
        ehlo.text.lines().any(|l| l == "AUTH PLAIN LOGIN"),
        "{ehlo:?}"
    );
    assert!(!ehlo.text.contains("STARTTLS"), "{ehlo:?}");
    let r = c
        .cmd(&format!("AUTH PLAIN {}", b64(b"\0app\0sk_wrong")))
        .await;
    assert!(r.is(535, "5.7.8"), "{r:?}");
    assert!(c.cmd("QUIT").await.is(221, "2.0.0"));
}

/// The peak resident memory of process `pid` so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn a_50_mb_message_is_refused_without_the_servers_memory_growing_past_the_limit() {
    // A real `herald serve` process, so that its memory is its own (the MX listener at its
    // default limit of 25 MB).
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["serve", "--database-url", &url, "--data-dir"])
        .arg(dir.path())
        .env("HERALD_INBOUND__LISTEN", &listen)
        .env("HERALD_INBOUND__ABUSE_ADDRESS", ABUSE);
    let served = crate::support::serve::Served::start(cmd, "warn", false).await;
    let pid = served.child.id();
    let addr: SocketAddr = listen.parse().unwrap();

    let mut c = session(addr).await;
    // Warm the session's path with a small message first, so the peak below is the big one's.
    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let r = c.data(b"Subject: small\r\n\r\nhello\r\n").await;
    assert!(r.is(250, "2.0.0"), "{r:?}");
    let before = peak_rss(pid);

    assert!(c.cmd("MAIL FROM:<>").await.is(250, "2.1.0"));
    assert!(c.cmd(&format!("RCPT TO:<{ABUSE}>")).await.is(250, "2.1.5"));
    let go = c.cmd("DATA").await;
    assert_eq!(go.code, 354, "{go:?}");
    // 50 MB in lines of 1,000 bytes, written a megabyte at a time (never held whole here either).
    c.write(b"Subject: big\r\n\r\n").await;
    let line = format!("{}\r\n", "x".repeat(998));
    let chunk = line.repeat(1_000);
    for _ in 0..50 {
        c.write(chunk.as_bytes()).await;
    }
    c.write(b".\r\n").await;
    let r = c.reply().await;
    assert!(r.is(552, "5.3.4"), "{r:?}");
    // It holds a message up to the limit (to read it once whole), never more: the peak grows
    // by at most the limit and a few reads' worth, not by the 50 MB sent.
    let limit = herald::config::Settings::default()
        .inbound
        .max_message_bytes as u64;
    let grown = peak_rss(pid).saturating_sub(before);
    assert!(
        grown < limit + 4 * 1024 * 1024,
        "the server's peak memory grew by {grown} bytes for a 50 MB message over a limit of {limit}"
    );
    // The session goes on.
    assert!(c.cmd("NOOP").await.is(250, "2.0.0"));
    drop(served);
}
