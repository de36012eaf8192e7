//! The `outbox` and `smtp` transports, the latter against a real SMTP server on loopback.

use base64::Engine as _;
use herald::plugins::{DeliveryError, DeliveryEventKind, OutgoingMessage, SmtpTls};

use super::{settings, start};
use crate::support::smtpd::{SmtpServer, SmtpTlsMode, TestPki};

pub(super) fn message(id: &str, to: &str) -> OutgoingMessage {
    OutgoingMessage {
        id: id.into(),
        sender: "news@herald.test".into(),
        recipients: vec![to.into()],
        raw: format!(
            "From: news@herald.test\r\nTo: {to}\r\nSubject: Hello {id}\r\nMessage-ID: <{id}@herald.test>\r\n\r\nHi there.\r\n"
        )
        .into_bytes(),
    }
}

#[tokio::test]
async fn outbox_writes_each_message_as_an_eml_file_and_records_it() {
    let (plugins, dir) = start(|_| {});
    let receipt = plugins
        .deliver(None, &message("msg_1", "ada@example.com"))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(receipt.provider_id, "outbox-msg_1");
    let file = dir.path().join("outbox").join("msg_1.eml");
    assert_eq!(
        receipt.detail.as_deref(),
        Some(file.display().to_string().as_str())
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("Subject: Hello msg_1"));
    plugins
        .deliver(Some("outbox"), &message("msg_2", "bob@example.com"))
        .await
        .unwrap()
        .unwrap();
    let index = std::fs::read_to_string(dir.path().join("outbox").join("index.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = index
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["id"], "msg_1");
    assert_eq!(records[1]["recipients"][0], "bob@example.com");
    assert_eq!(records[1]["file"], "msg_2.eml");

    // An id that would escape the outbox is a permanent error; nothing is written.
    let err = plugins
        .deliver(None, &message("../evil", "a@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, DeliveryError::Permanent(_)), "{err:?}");
    assert!(!dir.path().join("evil.eml").exists());
}

#[tokio::test]
async fn outbox_notifications_are_authenticated_and_parsed() {
    let (plugins, _dir) = start(|s| s.notify_secret = Some("s3cret".into()));
    let body = br#"{"events":[{"type":"bounced-hard","messageId":"msg_1","email":"ada@example.com","detail":"550 no such user"},{"type":"clicked","email":"bob@example.com","at":1700000000000,"detail":"https://example.com/x"}]}"#.to_vec();
    let refused = plugins
        .parse_notification(None, vec![], body.clone())
        .await
        .unwrap();
    assert!(refused.unwrap_err().contains("not authenticated"));
    let events = plugins
        .parse_notification(
            None,
            vec![("X-Herald-Secret".into(), "s3cret".into())],
            body,
        )
        .await
        .unwrap()
        .expect("parsed");
    assert_eq!(events.len(), 2);
    assert!(matches!(events[0].kind, DeliveryEventKind::BouncedHard));
    assert_eq!(events[0].message_id.as_deref(), Some("msg_1"));
    assert!(matches!(events[1].kind, DeliveryEventKind::Clicked));
    assert_eq!(events[1].at, 1_700_000_000_000);
    let bad = plugins
        .parse_notification(
            None,
            vec![("x-herald-secret".into(), "s3cret".into())],
            b"{\"events\":[{\"type\":\"teleported\",\"email\":\"a@b.c\"}]}".to_vec(),
        )
        .await
        .unwrap();
    assert!(bad.unwrap_err().contains("events[0].type"));
}

#[tokio::test]
async fn smtp_delivers_through_a_real_server_with_auth() {
    let SmtpServer { addr, log } = SmtpServer::start().await;
    let (plugins, _dir) = start(|s| {
        s.transport = "smtp".into();
        s.smtp_host = Some("127.0.0.1".into());
        s.smtp_port = addr.port();
        s.smtp_tls = SmtpTls::None;
        s.smtp_username = Some("relay-user".into());
        s.smtp_password = Some("relay-pass".into());
    });
    let receipt = plugins
        .deliver(None, &message("msg_smtp", "ada@example.com"))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(receipt.provider_id, "msg_smtp");
    assert!(
        receipt.detail.as_deref().unwrap().starts_with("250"),
        "{receipt:?}"
    );
    assert!(receipt.detail.as_deref().unwrap().contains("TEST123"));
    plugins
        .deliver(None, &message("msg_smtp2", "bob@example.com"))
        .await
        .unwrap()
        .unwrap();
    {
        let log = log.lock().unwrap();
        assert_eq!(log.mail_from, ["<news@herald.test>", "<news@herald.test>"]);
        assert_eq!(log.rcpt_to, ["<ada@example.com>", "<bob@example.com>"]);
        assert!(log.data[0].contains("Subject: Hello msg_smtp"));
        assert!(!log.auth.is_empty());
        for auth in &log.auth {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .unwrap();
            assert_eq!(decoded, b"\0relay-user\0relay-pass");
        }
    }

    // A 550 is permanent, a 451 transient.
    let err = plugins
        .deliver(None, &message("m3", "reject@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, DeliveryError::Permanent(ref m) if m.contains("no such user")),
        "{err:?}"
    );
    let err = plugins
        .deliver(None, &message("m4", "later@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, DeliveryError::Transient(_)), "{err:?}");
}

/// A relay with a certificate from a private CA, trusted through `plugins.smtp_ca_file`.
fn tls_relay(
    s: &mut herald::plugins::PluginSettings,
    port: u16,
    tls: SmtpTls,
    ca: &std::path::Path,
) {
    s.transport = "smtp".into();
    s.smtp_host = Some("localhost".into());
    s.smtp_port = port;
    s.smtp_tls = tls;
    s.smtp_ca_file = Some(ca.to_path_buf());
    s.smtp_pool_size = 2;
}

#[tokio::test]
async fn smtp_upgrades_with_starttls_verifies_the_relay_and_reuses_pooled_connections() {
    let pki = TestPki::generate();
    let relay = SmtpServer::start_with(SmtpTlsMode::Starttls, Some(&pki)).await;
    let ca_dir = tempfile::tempdir().unwrap();
    let ca = ca_dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (plugins, _dir) = start(|s| tls_relay(s, relay.addr.port(), SmtpTls::Starttls, &ca));
    for i in 0..5 {
        let to = format!("ada{i}@example.com");
        plugins
            .deliver(None, &message(&format!("msg_tls{i}"), &to))
            .await
            .unwrap()
            .expect("delivered over STARTTLS");
    }
    let log = relay.log.lock().unwrap().clone();
    assert_eq!(log.data.len(), 5);
    assert_eq!(log.over_tls, [true; 5], "every message went over TLS");
    assert!(log.data[2].contains("Subject: Hello msg_tls2"));
    // Sends share pooled connections instead of connecting for each message (lettre returns a
    // connection to the pool in a background task, so a send right after another may open a
    // second one, never more than the pool's size of 2).
    assert!(log.connections <= 2, "{log:?}");
}

#[tokio::test]
async fn smtp_speaks_tls_from_the_first_byte() {
    let pki = TestPki::generate();
    let relay = SmtpServer::start_with(SmtpTlsMode::Implicit, Some(&pki)).await;
    let ca_dir = tempfile::tempdir().unwrap();
    let ca = ca_dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (plugins, _dir) = start(|s| tls_relay(s, relay.addr.port(), SmtpTls::Tls, &ca));
    plugins
        .deliver(None, &message("msg_wrapped", "ada@example.com"))
        .await
        .unwrap()
        .expect("delivered over TLS");
    let log = relay.log.lock().unwrap().clone();
    assert_eq!(log.over_tls, [true]);
    assert_eq!(log.rcpt_to, ["<ada@example.com>"]);
}

#[tokio::test]
async fn smtp_refuses_a_relay_whose_certificate_it_cannot_verify() {
    let pki = TestPki::generate();
    let relay = SmtpServer::start_with(SmtpTlsMode::Starttls, Some(&pki)).await;
    // Trust another CA: the relay's certificate does not chain to it.
    let other = TestPki::generate();
    let ca_dir = tempfile::tempdir().unwrap();
    let ca = ca_dir.path().join("other.pem");
    std::fs::write(&ca, &other.ca_pem).unwrap();
    let (plugins, _dir) = start(|s| tls_relay(s, relay.addr.port(), SmtpTls::Starttls, &ca));
    let err = plugins
        .deliver(None, &message("msg_untrusted", "ada@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    let text = format!("{err:?}").to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("tls"),
        "{err:?}"
    );
    let log = relay.log.lock().unwrap().clone();
    assert!(log.mail_from.is_empty() && log.data.is_empty(), "{log:?}");

    // A CA file that cannot be read or holds no certificate stops start-up with a clear message.
    let dir = tempfile::tempdir().unwrap();
    for (path, expect) in [
        (dir.path().join("missing.pem"), "cannot be read"),
        (
            {
                let p = dir.path().join("empty.pem");
                std::fs::write(&p, "not a certificate").unwrap();
                p
            },
            "holds no PEM certificate",
        ),
    ] {
        let mut s = settings();
        tls_relay(&mut s, relay.addr.port(), SmtpTls::Starttls, &path);
        let err = herald::plugins::Plugins::start(&s, dir.path())
            .err()
            .expect("start-up refuses the CA file")
            .to_string();
        assert!(
            err.contains("plugins.smtp_ca_file") && err.contains(expect),
            "{err}"
        );
    }
}

#[tokio::test]
async fn smtp_without_a_relay_and_with_a_dead_relay_fails_cleanly() {
    let (plugins, _dir) = start(|_| {});
    let err = plugins
        .deliver(Some("smtp"), &message("m", "ada@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, DeliveryError::Permanent(ref m) if m.contains("plugins.smtp_host")),
        "{err:?}"
    );

    // Nothing listens on this port any more: a transient error, not a crash.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (plugins, _dir) = start(|s| {
        s.smtp_host = Some("127.0.0.1".into());
        s.smtp_port = port;
        s.smtp_tls = SmtpTls::None;
    });
    let err = plugins
        .deliver(Some("smtp"), &message("m", "ada@example.com"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, DeliveryError::Transient(_)), "{err:?}");
}

#[tokio::test]
async fn smtp_bounce_reports_are_parsed() {
    let (plugins, _dir) = start(|s| s.transport = "smtp".into());
    let dsn = "From: MAILER-DAEMON@mx.example.com\r\nX-Herald-Message-Id: <msg_9>\r\nContent-Type: multipart/report; report-type=delivery-status\r\n\r\nReporting-MTA: dns; mx.example.com\r\n\r\nFinal-Recipient: rfc822; ada@example.com\r\nAction: failed\r\nStatus: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 user unknown\r\n\r\nFinal-Recipient: rfc822; bob@example.com\r\nAction: failed\r\nStatus: 4.2.2\r\n\r\n";
    let events = plugins
        .parse_notification(None, vec![], dsn.as_bytes().to_vec())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(events.len(), 2);
    assert!(matches!(events[0].kind, DeliveryEventKind::BouncedHard));
    assert_eq!(events[0].email, "ada@example.com");
    assert_eq!(events[0].message_id.as_deref(), Some("msg_9"));
    assert!(
        events[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("user unknown")
    );
    assert!(matches!(events[1].kind, DeliveryEventKind::BouncedSoft));
    let none = plugins
        .parse_notification(None, vec![], b"hello".to_vec())
        .await
        .unwrap();
    assert!(none.is_err());
}

#[tokio::test]
async fn billing_none_says_billing_is_off() {
    let (plugins, _dir) = start(|_| {});
    assert!(!plugins.billing_enabled().await.unwrap());
    let request = herald::plugins::CheckoutRequest {
        project_id: "prj_1".into(),
        plan: "pro".into(),
        email: "owner@example.com".into(),
        success_url: "https://app.example.com/ok".into(),
        cancel_url: "https://app.example.com/cancel".into(),
    };
    let err = plugins
        .billing_checkout(&request)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, herald::plugins::BillingError::Disabled(ref m) if m.contains("billing is off")),
        "{err:?}"
    );
}
