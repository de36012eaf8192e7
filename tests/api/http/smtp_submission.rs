//! SMTP submission (issue 76, item 6): a message submitted with the project's secret key (to the
//! service, and over real SMTP sessions with `lettre`: AUTH PLAIN and LOGIN) goes the way of
//! `POST /v1/send`, through the durable queue and the `smtp` transport into a real SMTP
//! server on loopback, DKIM-signed (checked by mail-auth against the loopback DNS); one email
//! per envelope recipient; refusals with the reply the API's error would give; the Message-ID
//! as the idempotency key.

use std::time::Duration;

use herald::config::Settings;
use herald::domain::ids::ProjectId;
use herald::services::submission::SubmissionError;
use lettre::address::Envelope;
use lettre::message::header::ContentType;
use lettre::message::{Attachment, MultiPart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use mail_parser::{MessageParser, MimeHeaders};

use crate::http::domains::verified_domain;
use crate::http::send::{count, dkim_passes, email_with_status, with_mail};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{TestApp, TestProject, smtp_listeners};
use crate::support::smtpd::SmtpServer;

struct Setup {
    dns: DnsServer,
    smtp: SmtpServer,
    app: TestApp,
    p: TestProject,
    project: ProjectId,
}

/// An app delivering to a loopback SMTP sink, with a project whose domain `acme.test` is
/// verified.
async fn setup() -> Setup {
    setup_with(|_| {}).await
}

/// [`setup`] with the settings `adjust` changes.
async fn setup_with(adjust: impl FnOnce(&mut Settings)) -> Setup {
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_mail(&dns, smtp.addr)(s);
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    let project = ProjectId::parse(&p.id).unwrap();
    Setup {
        dns,
        smtp,
        app,
        p,
        project,
    }
}

fn rcpts(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A message from `from` with `headers` (CRLF-terminated lines) and a text body.
fn message(from: &str, headers: &str, body: &str) -> String {
    format!("From: {from}\r\n{headers}MIME-Version: 1.0\r\n\r\n{body}\r\n")
}

const WITH_ATTACHMENT: &str = "From: Acme Billing <billing@acme.test>\r\n\
    To: Ann <ann@example.com>\r\n\
    Cc: \"Bob B.\" <bob@example.com>\r\n\
    Bcc: carol@example.com\r\n\
    Subject: =?UTF-8?Q?Your_receipt_=E2=84=967?=\r\n\
    Message-ID: <receipt-7@app.acme.test>\r\n\
    Reply-To: support@acme.test\r\n\
    X-Order: 7\r\n\
    MIME-Version: 1.0\r\n\
    Content-Type: multipart/mixed; boundary=\"outer\"\r\n\
    \r\n\
    --outer\r\n\
    Content-Type: multipart/alternative; boundary=\"alt\"\r\n\
    \r\n\
    --alt\r\n\
    Content-Type: text/plain; charset=utf-8\r\n\
    \r\n\
    Thanks for your order.\r\n\
    --alt\r\n\
    Content-Type: text/html; charset=utf-8\r\n\
    \r\n\
    <p>Thanks for your <b>order</b>, {{firstName}}.</p>\r\n\
    --alt--\r\n\
    --outer\r\n\
    Content-Type: application/pdf\r\n\
    Content-Disposition: attachment; filename=\"receipt.pdf\"\r\n\
    Content-Transfer-Encoding: base64\r\n\
    \r\n\
    JVBERi0xLjQKJcOkw7zDtsOfCg==\r\n\
    --outer--\r\n";

#[tokio::test]
async fn a_submitted_message_is_sent_to_each_envelope_recipient_signed_with_its_attachment() {
    let Setup {
        dns,
        smtp,
        app,
        p,
        project,
    } = setup().await;
    let submission = app.state().submission();
    assert_eq!(
        submission.authenticate(&p.secret_key).await.unwrap(),
        project
    );
    let to = rcpts(&["ann@example.com", "bob@example.com", "carol@example.com"]);
    let ids = submission
        .submit(&project, "bounce@app.test", &to, WITH_ATTACHMENT.as_bytes())
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    // Queued durably before the answer: the emails are there, each to its recipient, whose
    // contact was upserted (new contacts unsubscribed, as with /v1/send).
    for (id, address) in ids.iter().zip(&to) {
        let email = email_with_status(&app, &p, id.as_str(), "sent").await;
        assert_eq!(email["to"], address.as_str(), "{email}");
        let contact = email["contactId"].as_str().unwrap();
        let r = app
            .get(&format!("/contacts/{contact}"), &p.secret_key)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["email"], address.as_str(), "{}", r.body);
        assert_eq!(r.body["subscribed"], false, "{}", r.body);
    }
    let log = smtp.received(3).await;
    let mut seen = Vec::new();
    for raw in &log.data {
        assert!(dkim_passes(&dns, raw.as_bytes()).await, "DKIM must pass");
        let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
        let from = m.from().unwrap().first().unwrap();
        assert_eq!(
            (from.name(), from.address()),
            (Some("Acme Billing"), Some("billing@acme.test"))
        );
        assert_eq!(m.subject(), Some("Your receipt №7"));
        assert_eq!(
            m.reply_to().unwrap().first().unwrap().address(),
            Some("support@acme.test")
        );
        assert_eq!(m.header_raw("X-Order").map(str::trim), Some("7"));
        // Each recipient sees only themself; nobody sees the Bcc.
        assert!(m.cc().is_none() && m.bcc().is_none(), "{raw}");
        let to = m.to().unwrap().first().unwrap();
        seen.push((
            to.name().map(str::to_string),
            to.address().unwrap().to_string(),
        ));
        // The HTML as written (never a template), the text derived from it.
        let html = m.body_html(0).unwrap();
        assert!(
            html.contains("<p>Thanks for your <b>order</b>, {{firstName}}.</p>"),
            "{html}"
        );
        assert!(
            m.body_text(0)
                .unwrap()
                .contains("Thanks for your order, {{firstName}}.")
        );
        let pdf = m.attachments().next().expect("the attachment");
        assert_eq!(pdf.attachment_name(), Some("receipt.pdf"));
        assert_eq!(
            pdf.contents(),
            b"%PDF-1.4\n%\xc3\xa4\xc3\xbc\xc3\xb6\xc3\x9f\n"
        );
    }
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        [
            (Some("Ann".to_string()), "ann@example.com".to_string()),
            (Some("Bob B.".to_string()), "bob@example.com".to_string()),
            (None, "carol@example.com".to_string()),
        ]
    );
}

#[tokio::test]
async fn only_the_projects_secret_key_authenticates() {
    let Setup { app, p, .. } = setup().await;
    let submission = app.state().submission();
    let refused = SubmissionError {
        code: 535,
        enhanced: "5.7.8".into(),
        message: "authentication failed: use the project's secret key as the password".into(),
    };
    for password in [
        p.public_key.as_str(),
        "sk_notakey",
        "",
        "hunter2",
        &p.secret_key[..p.secret_key.len() - 1],
    ] {
        assert_eq!(
            submission.authenticate(password).await.unwrap_err(),
            refused,
            "{password}"
        );
    }
    assert_eq!(
        submission
            .authenticate(&p.secret_key)
            .await
            .unwrap()
            .as_str(),
        p.id
    );
}

#[tokio::test]
async fn refusals_give_the_reason_the_api_would_and_send_nothing() {
    let Setup {
        smtp,
        app,
        p,
        project,
        ..
    } = setup().await;
    let submission = app.state().submission();
    let to = rcpts(&["ann@example.com"]);
    let refused = |raw: String| {
        let to = to.clone();
        let project = project.clone();
        async move {
            submission
                .submit(&project, "", &to, raw.as_bytes())
                .await
                .unwrap_err()
        }
    };

    let unverified = refused(message("x@other.test", "Subject: hi\r\n", "hello")).await;
    assert_eq!(
        (unverified.code, unverified.enhanced.as_str()),
        (550, "5.7.1")
    );
    assert!(
        unverified
            .message
            .starts_with("the domain other.test is not verified for this project"),
        "{unverified}"
    );

    let no_from = refused("Subject: hi\r\nTo: ann@example.com\r\n\r\nhello\r\n".into()).await;
    assert_eq!((no_from.code, no_from.enhanced.as_str()), (554, "5.6.0"));

    let bad_rcpt = submission
        .submit(
            &project,
            "",
            &rcpts(&["not-an-address"]),
            message("a@acme.test", "Subject: hi\r\n", "hello").as_bytes(),
        )
        .await
        .unwrap_err();
    assert_eq!((bad_rcpt.code, bad_rcpt.enhanced.as_str()), (550, "5.1.3"));

    // More than the 10 MB of attachments /v1/send takes.
    let big = "QUFBQUFB\r\n".repeat(11 * 1024 * 1024 / 6);
    let large = refused(format!(
        "From: a@acme.test\r\nSubject: big\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n\
         Content-Type: text/plain\r\n\r\nsee attached\r\n--b\r\n\
         Content-Type: application/octet-stream\r\n\
         Content-Disposition: attachment; filename=\"big.bin\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{big}--b--\r\n"
    ))
    .await;
    assert_eq!(
        (large.code, large.enhanced.as_str()),
        (552, "5.3.4"),
        "{large}"
    );

    // Nothing of any of them was written or sent.
    let emails = count(
        &app,
        &format!("SELECT COUNT(*) FROM emails WHERE project_id = '{}'", p.id),
    )
    .await;
    assert_eq!(emails, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(smtp.log.lock().unwrap().data.is_empty());
}

#[tokio::test]
async fn the_same_message_id_submitted_twice_creates_one_email() {
    let Setup {
        smtp,
        app,
        p,
        project,
        ..
    } = setup().await;
    let submission = app.state().submission();
    let raw = message(
        "a@acme.test",
        "To: ann@example.com\r\nSubject: once\r\nMessage-ID: <once-1@acme.test>\r\n",
        "only once",
    );
    let to = rcpts(&["ann@example.com"]);
    let first = submission
        .submit(&project, "", &to, raw.as_bytes())
        .await
        .unwrap();
    // The client did not see the 250 and sends the same message again.
    let again = submission
        .submit(&project, "", &to, raw.as_bytes())
        .await
        .unwrap();
    assert_eq!(first, again);
    // Another message under the same Message-ID is refused, not dropped in silence.
    let other = submission
        .submit(
            &project,
            "",
            &to,
            raw.replace("only once", "something else").as_bytes(),
        )
        .await
        .unwrap_err();
    assert_eq!((other.code, other.enhanced.as_str()), (554, "5.6.0"));
    // The same message to another recipient (the rest of a delivery) is its own send.
    let rest = submission
        .submit(&project, "", &rcpts(&["bob@example.com"]), raw.as_bytes())
        .await
        .unwrap();
    assert_ne!(rest, first);
    smtp.received(2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 2);
    let emails = count(
        &app,
        &format!("SELECT COUNT(*) FROM emails WHERE project_id = '{}'", p.id),
    )
    .await;
    assert_eq!(emails, 2);
}

#[tokio::test]
async fn a_message_to_more_recipients_than_a_send_takes_goes_in_parts_once() {
    let Setup {
        smtp, app, project, ..
    } = setup().await;
    let submission = app.state().submission();
    let to: Vec<String> = (0..120).map(|i| format!("r{i}@example.com")).collect();
    let raw = message(
        "a@acme.test",
        "Subject: many\r\nMessage-ID: <many-1@acme.test>\r\n",
        "to many",
    );
    let ids = submission
        .submit(&project, "", &to, raw.as_bytes())
        .await
        .unwrap();
    assert_eq!(ids.len(), 120);
    let again = submission
        .submit(&project, "", &to, raw.as_bytes())
        .await
        .unwrap();
    assert_eq!(again, ids);
    let log = smtp.received(120).await;
    let mut delivered = log.rcpt_to.clone();
    delivered.sort();
    delivered.dedup();
    assert_eq!(delivered.len(), 120);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 120);
}

/// A lettre client of the submission listener at `addr` (plain on loopback, where `AUTH` is
/// allowed), authenticating with `mechanism` as any user with `password`.
fn client(
    addr: std::net::SocketAddr,
    password: &str,
    mechanism: Mechanism,
) -> AsyncSmtpTransport<Tokio1Executor> {
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(addr.ip().to_string())
        .port(addr.port())
        .credentials(Credentials::new("any-user".into(), password.into()))
        .authentication(vec![mechanism])
        .build()
}

/// [`setup`] with the SMTP listeners on: the app and the submission listener's address.
async fn setup_listening() -> (Setup, std::net::SocketAddr) {
    let setup = setup_with(smtp_listeners).await;
    let addr = setup
        .app
        .smtp()
        .submission
        .expect("the submission listener");
    (setup, addr)
}

fn envelope(from: &str, to: &[&str]) -> Envelope {
    Envelope::new(
        Some(from.parse().unwrap()),
        to.iter().map(|a| a.parse().unwrap()).collect(),
    )
    .unwrap()
}

#[tokio::test]
async fn over_smtp_a_message_with_an_attachment_arrives_signed() {
    let (
        Setup {
            dns, smtp, app, p, ..
        },
        addr,
    ) = setup_listening().await;
    let message = Message::builder()
        .from("Acme <hello@acme.test>".parse().unwrap())
        .to("Ann <ann@example.com>".parse().unwrap())
        .subject("Your invoice")
        .message_id(Some("<invoice-1@acme.test>".into()))
        .multipart(
            MultiPart::mixed()
                .multipart(MultiPart::alternative_plain_html(
                    "See the invoice.".to_string(),
                    "<p>See the <b>invoice</b>.</p>".to_string(),
                ))
                .singlepart(Attachment::new("invoice.pdf".into()).body(
                    b"%PDF-1.4\n".to_vec(),
                    ContentType::parse("application/pdf").unwrap(),
                )),
        )
        .unwrap();
    for mechanism in [Mechanism::Plain, Mechanism::Login] {
        let reply = client(addr, &p.secret_key, mechanism)
            .send(message.clone())
            .await
            .unwrap();
        assert_eq!(reply.code().to_string(), "250");
        let text: String = reply.message().collect::<Vec<_>>().join(" ");
        assert!(text.contains("eml_"), "{text}");
    }
    // The same Message-ID twice (AUTH PLAIN, then LOGIN): one email.
    let log = smtp.received(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1);
    let raw = &log.data[0];
    assert!(dkim_passes(&dns, raw.as_bytes()).await, "DKIM must pass");
    let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
    assert_eq!(m.subject(), Some("Your invoice"));
    assert!(
        m.body_html(0)
            .unwrap()
            .contains("<p>See the <b>invoice</b>.</p>")
    );
    let pdf = m.attachments().next().expect("the attachment");
    assert_eq!(pdf.attachment_name(), Some("invoice.pdf"));
    assert_eq!(pdf.contents(), b"%PDF-1.4\n");
    let emails = count(
        &app,
        &format!("SELECT COUNT(*) FROM emails WHERE project_id = '{}'", p.id),
    )
    .await;
    assert_eq!(emails, 1);
}

#[tokio::test]
async fn over_smtp_refusals_are_the_apis_reasons() {
    // (The app is bound: dropped, it would stop serving.)
    let (
        Setup {
            smtp, app: _app, p, ..
        },
        addr,
    ) = setup_listening().await;
    let raw = |from: &str| {
        format!("From: {from}\r\nTo: ann@example.com\r\nSubject: hi\r\n\r\nhello\r\n").into_bytes()
    };
    // The public key is no password.
    let err = client(addr, &p.public_key, Mechanism::Plain)
        .send_raw(
            &envelope("hello@acme.test", &["ann@example.com"]),
            &raw("hello@acme.test"),
        )
        .await
        .unwrap_err();
    assert!(err.is_permanent(), "{err}");
    assert_eq!(err.status().unwrap().to_string(), "535");
    assert!(err.to_string().contains("5.7.8"), "{err}");
    // A domain the project has not verified.
    let err = client(addr, &p.secret_key, Mechanism::Plain)
        .send_raw(
            &envelope("x@other.test", &["ann@example.com"]),
            &raw("x@other.test"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status().unwrap().to_string(), "550");
    assert!(
        err.to_string()
            .contains("5.7.1 the domain other.test is not verified for this project"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(smtp.log.lock().unwrap().data.is_empty());
}

#[tokio::test]
async fn over_smtp_a_suppressed_recipient_is_recorded_suppressed_and_never_sent() {
    let (Setup { smtp, app, p, .. }, addr) = setup_listening().await;
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            serde_json::json!({ "emails": ["gone@example.com"] }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let reply = client(addr, &p.secret_key, Mechanism::Plain)
        .send_raw(
            &envelope("hello@acme.test", &["gone@example.com", "ann@example.com"]),
            b"From: hello@acme.test\r\nTo: gone@example.com, ann@example.com\r\nSubject: hi\r\n\r\nhello\r\n",
        )
        .await
        .unwrap();
    assert_eq!(reply.code().to_string(), "250");
    let log = smtp.received(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(smtp.log.lock().unwrap().data.len(), 1);
    assert!(
        log.rcpt_to.iter().all(|r| !r.contains("gone@")),
        "{:?}",
        log.rcpt_to
    );
    let suppressed = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{}' AND to_address = 'gone@example.com' \
             AND status = 'suppressed'",
            p.id
        ),
    )
    .await;
    assert_eq!(suppressed, 1);
}
