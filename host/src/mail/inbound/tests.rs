//! `classify` on bounces, complaints, auto-replies and replies written the way the servers that
//! send them document (fixtures/), on variants of them, and on garbage.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::*;
use crate::domain::ids::EmailId;

const POSTFIX_DSN: &[u8] = include_bytes!("fixtures/postfix-dsn.eml");
const EXIM_DSN: &[u8] = include_bytes!("fixtures/exim-dsn.eml");
const EXIM_PLAIN: &[u8] = include_bytes!("fixtures/exim-plain.eml");
const EXCHANGE_NDR: &[u8] = include_bytes!("fixtures/exchange-ndr.eml");
const GMAIL_FAILURE: &[u8] = include_bytes!("fixtures/gmail-failure.eml");
const GMAIL_DELAY: &[u8] = include_bytes!("fixtures/gmail-delay.eml");
const YAHOO_PLAIN: &[u8] = include_bytes!("fixtures/yahoo-plain.eml");
const ARF_ABUSE: &[u8] = include_bytes!("fixtures/arf-abuse.eml");
const OUT_OF_OFFICE: &[u8] = include_bytes!("fixtures/out-of-office.eml");
const VACATION: &[u8] = include_bytes!("fixtures/vacation.eml");
const REPLY: &[u8] = include_bytes!("fixtures/reply.eml");

const FIXTURES: [&[u8]; 11] = [
    POSTFIX_DSN,
    EXIM_DSN,
    EXIM_PLAIN,
    EXCHANGE_NDR,
    GMAIL_FAILURE,
    GMAIL_DELAY,
    YAHOO_PLAIN,
    ARF_ABUSE,
    OUT_OF_OFFICE,
    VACATION,
    REPLY,
];

/// `raw` with CRLF line ends, as it arrives over SMTP.
fn crlf(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 40);
    for &b in raw {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// Classifies `raw` as written (LF) and with CRLF line ends, which must agree.
fn classify_both(raw: &[u8]) -> Inbound {
    let lf = classify(raw);
    assert_eq!(lf, classify(&crlf(raw)), "LF and CRLF disagree");
    lf
}

fn bounce(raw: &[u8]) -> Bounce {
    match classify_both(raw) {
        Inbound::Bounce(bounce) => bounce,
        other => panic!("not a bounce: {other:?}"),
    }
}

fn text(raw: &[u8]) -> String {
    String::from_utf8(raw.to_vec()).unwrap()
}

fn id(n: &str) -> Option<String> {
    Some(format!("eml_01937a5e8c2b7f3a9d4e6b1c2d3e4f{n}@example.com"))
}

/// Asserts that `raw` bounces exactly `address` with `status` (hard when 5.x.x) and names the
/// email `eml_…f<n>`; returns the diagnostic.
fn one_recipient(raw: &[u8], address: &str, status: &str, n: &str) -> String {
    let b = bounce(raw);
    assert_eq!(b.recipients.len(), 1, "{b:?}");
    let r = &b.recipients[0];
    assert_eq!((r.address.as_str(), r.status.as_str()), (address, status));
    assert_eq!(r.hard, status.starts_with('5'));
    assert_eq!(b.original_message_id, id(n));
    // What `services::delivery_events::email_id` reads: an email id before the `@`.
    let original = b.original_message_id.as_deref().unwrap();
    assert!(EmailId::parse(original.split('@').next().unwrap()).is_some());
    r.diagnostic.clone().unwrap_or_default()
}

/// Each server's bounce of one recipient: its address, status, email and diagnostic.
#[test]
fn each_servers_bounce_names_the_recipient_the_status_and_the_email() {
    for (name, raw, address, status, n, diagnostic) in [
        (
            "Postfix DSN",
            POSTFIX_DSN,
            "ann.lee@example.net",
            "5.1.1",
            "50",
            "550 5.1.1 <ann.lee@example.net>: Recipient address rejected: User unknown in local \
             recipient table",
        ),
        // Exim's Status is 5.0.0: the server's own code in the diagnostic says more. Its
        // second recipient was delivered, which is no bounce.
        (
            "Exim DSN",
            EXIM_DSN,
            "bob@example.org",
            "5.2.1",
            "51",
            "550 5.2.1 The email account that you tried to reach is disabled",
        ),
        // The relay rewrote Message-ID; X-Herald-Message-Id names the email.
        (
            "Office 365 NDR",
            EXCHANGE_NDR,
            "carol@contoso.com",
            "5.1.10",
            "53",
            "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
        ),
        (
            "Gmail failure",
            GMAIL_FAILURE,
            "dan@example.org",
            "5.1.1",
            "54",
            "The email account that you tried to reach does not exist.",
        ),
        // A delay is soft; the returned part holds only the headers (text/rfc822-headers).
        (
            "Gmail delay",
            GMAIL_DELAY,
            "erin@example.org",
            "4.4.1",
            "55",
            "[mx.example.org. 198.51.100.9: timed out]",
        ),
        // Plain text: the address line, a basic SMTP reply, the original quoted below.
        (
            "Yahoo failure notice",
            YAHOO_PLAIN,
            "frank@yahoo.com",
            "5.0.0",
            "56",
            "554: delivery error: dd This user doesn't have a yahoo.com account",
        ),
    ] {
        let got = one_recipient(raw, address, status, n);
        assert!(got.contains(diagnostic), "{name}: {got}");
    }
}

#[test]
fn an_exim_plain_text_bounce_names_each_failed_address_with_its_reason() {
    let b = bounce(EXIM_PLAIN);
    assert_eq!(b.recipients.len(), 2, "{b:?}");
    let (gina, hank) = (&b.recipients[0], &b.recipients[1]);
    assert_eq!(
        (gina.address.as_str(), gina.status.as_str(), gina.hard),
        ("gina@example.org", "5.1.1", true)
    );
    let diag = gina.diagnostic.as_deref().unwrap();
    assert!(
        diag.contains("550 5.1.1 <gina@example.org>: Recipient address rejected"),
        "{diag}"
    );
    // No code of its own: "This is a permanent error" in the text makes it hard.
    assert_eq!(
        (hank.address.as_str(), hank.status.as_str(), hank.hard),
        ("hank@nowhere.example", "5.0.0", true)
    );
    assert_eq!(hank.diagnostic.as_deref(), Some("Unrouteable address"));
    // The quoted original's folded Message-ID (X-Herald-Message-Id first).
    assert_eq!(b.original_message_id, id("52"));
}

#[test]
fn a_gmail_report_without_the_returned_message_names_it_by_x_original_message_id() {
    let raw = text(GMAIL_FAILURE);
    let cut = raw
        .find("--000000000000a1b2c3d4e5f60708\nContent-Type: message/rfc822")
        .unwrap();
    let raw = format!("{}--000000000000a1b2c3d4e5f60708--\n", &raw[..cut]);
    one_recipient(raw.as_bytes(), "dan@example.org", "5.1.1", "54");
}

#[test]
fn an_arf_report_is_a_complaint_about_the_returned_message_and_its_recipient() {
    assert_eq!(
        classify_both(ARF_ABUSE),
        Inbound::Complaint(Complaint {
            feedback_type: "abuse".into(),
            original_message_id: id("57"),
            original_recipient: Some("ivy@example.net".into()),
        })
    );
}

#[test]
fn an_arf_report_without_original_rcpt_to_names_the_returned_messages_single_to() {
    let raw = text(ARF_ABUSE).replace("Original-Rcpt-To: <Ivy@Example.net>\n", "");
    let Inbound::Complaint(c) = classify_both(raw.as_bytes()) else {
        panic!("not a complaint");
    };
    assert_eq!(
        c.original_recipient.as_deref(),
        Some("redacted@example.net")
    );
    let raw = raw.replace("Feedback-Type: abuse\n", "");
    assert!(
        !matches!(classify_both(raw.as_bytes()), Inbound::Complaint(_)),
        "no Feedback-Type, no complaint"
    );
}

#[test]
fn an_out_of_office_reply_and_a_vacation_notice_are_auto_replies() {
    assert_eq!(classify_both(OUT_OF_OFFICE), Inbound::AutoReply);
    assert_eq!(classify_both(VACATION), Inbound::AutoReply);
    // Without their headers they are a person's messages.
    let person = text(OUT_OF_OFFICE).replace("Auto-Submitted: auto-replied\n", "");
    assert!(matches!(
        classify_both(person.as_bytes()),
        Inbound::Message(_)
    ));
    let person = text(VACATION).replace("X-Autoreply: yes\n", "");
    assert!(matches!(
        classify_both(person.as_bytes()),
        Inbound::Message(_)
    ));
    // `Auto-Submitted: no` is a person's message too.
    let person = text(OUT_OF_OFFICE).replace("auto-replied", "no");
    assert!(matches!(
        classify_both(person.as_bytes()),
        Inbound::Message(_)
    ));
}

#[test]
fn auto_reply_headers_and_subjects_are_recognised() {
    let base = "From: Max <max@example.org>\nTo: replies@in.example.com\n";
    for (headers, subject) in [
        ("Precedence: auto_reply\n", "Re: Your receipt"),
        ("X-Autorespond: yes\n", "Re: Your receipt"),
        ("Auto-Submitted: auto-generated\n", "Re: Your receipt"),
        ("", "Automatic reply: Your receipt"),
        ("", "Out of Office: Your receipt"),
        ("", "Abwesenheitsnotiz: Ihre Rechnung"),
    ] {
        let raw = format!("{base}{headers}Subject: {subject}\n\nAway.\n");
        assert_eq!(
            classify_both(raw.as_bytes()),
            Inbound::AutoReply,
            "{headers}{subject}"
        );
    }
}

#[test]
fn a_persons_reply_keeps_its_sender_bodies_threading_and_attachment() {
    let Inbound::Message(m) = classify_both(REPLY) else {
        panic!("not a message");
    };
    assert_eq!(m.from, "lena.mueller@example.org");
    assert_eq!(m.from_name.as_deref(), Some("Lena Müller"));
    assert_eq!(m.to, ["replies@in.example.com", "team@in.example.com"]);
    assert_eq!(m.subject, "Re: Your receipt — order 1042");
    let text = m.text.as_deref().unwrap();
    assert!(
        text.starts_with("Hi, the invoice says 2 items but I ordered 3. Grüße, Lena"),
        "{text}"
    );
    assert_eq!(
        m.html.as_deref().map(str::trim),
        Some("<p>Hi, the invoice says 2 items but I ordered 3. Grüße, Lena</p>")
    );
    assert_eq!(
        m.message_id.as_deref(),
        Some("CAB7x9Qd2=reply.1042@mail.example.org")
    );
    assert_eq!(m.in_reply_to, [id("5a").unwrap()]);
    assert_eq!(m.references, [id("40").unwrap(), id("5a").unwrap()]);
    assert_eq!(m.attachments.len(), 1);
    let a = &m.attachments[0];
    assert_eq!(a.filename.as_deref(), Some("invoice-1042.pdf"));
    assert_eq!(a.content_type, "application/pdf");
    assert!(a.content.starts_with(b"%PDF-1.4\n"));
    assert!(a.content.ends_with(b"%%EOF\n"));
    assert_eq!(a.content.len(), 79);
}

#[test]
fn an_html_only_message_has_its_text_converted_and_a_text_only_one_no_html() {
    let raw = "From: a@example.org\nTo: b@in.example.com\nSubject: Hi\nContent-Type: text/html\n\n\
               <p>Hello <b>there</b></p>\n";
    let Inbound::Message(m) = classify_both(raw.as_bytes()) else {
        panic!("not a message");
    };
    assert!(m.html.unwrap().contains("<b>there</b>"));
    assert!(m.text.unwrap().contains("Hello there"));
    let raw = "From: a@example.org\nTo: b@in.example.com\nSubject: Hi\n\nHello\n";
    let Inbound::Message(m) = classify_both(raw.as_bytes()) else {
        panic!("not a message");
    };
    assert_eq!(
        (m.text.as_deref().map(str::trim), m.html),
        (Some("Hello"), None)
    );
    assert!(m.attachments.is_empty() && m.in_reply_to.is_empty() && m.references.is_empty());
}

#[test]
fn a_report_of_deliveries_only_bounces_no_one() {
    let raw = text(POSTFIX_DSN)
        .replace(
            "Action: failed\nStatus: 5.1.1",
            "Action: delivered\nStatus: 2.0.0",
        )
        .replace(
            "Subject: Undelivered Mail Returned to Sender",
            "Subject: Successful Mail Delivery Report",
        );
    assert_eq!(
        bounce(raw.as_bytes()),
        Bounce {
            recipients: vec![],
            original_message_id: id("50"),
        }
    );
    let relayed = text(POSTFIX_DSN).replace(
        "Action: failed\nStatus: 5.1.1",
        "Action: relayed\nStatus: 2.0.0",
    );
    assert!(bounce(relayed.as_bytes()).recipients.is_empty());
}

#[test]
fn the_recipient_is_the_original_one_before_forwarding() {
    let first = |raw: &str| {
        let b = bounce(raw.as_bytes());
        b.recipients.first().map(|r| r.address.clone())
    };
    let final_recipient = "Final-Recipient: rfc822; Ann.Lee@Example.net";
    let original = "Original-Recipient: rfc822;Ann.Lee@Example.net";
    let forwarded =
        text(POSTFIX_DSN).replace(original, "Original-Recipient: rfc822;ann@old.example.net");
    assert_eq!(first(&forwarded).as_deref(), Some("ann@old.example.net"));
    // Without one, the final recipient; without a type, the bare address; an X.400 one is none.
    let raw = text(POSTFIX_DSN).replace(&format!("{original}\n"), "");
    assert_eq!(first(&raw).as_deref(), Some("ann.lee@example.net"));
    let bare = raw.replace(final_recipient, "Final-Recipient: <Ann.Lee@Example.net>");
    assert_eq!(first(&bare).as_deref(), Some("ann.lee@example.net"));
    let commented = raw.replace(
        final_recipient,
        "Final-Recipient: RFC822; <Ann.Lee@Example.net> (Ann Lee)",
    );
    assert_eq!(first(&commented).as_deref(), Some("ann.lee@example.net"));
    let x400 = raw.replace(final_recipient, "Final-Recipient: x400; /G=Ann/");
    assert_eq!(first(&x400), None);
}

#[test]
fn an_internationalised_report_is_read_like_a_plain_one() {
    // RFC 6533: message/global-delivery-status, `utf-8` address types, message/global.
    let raw = text(POSTFIX_DSN)
        .replace("message/delivery-status", "message/global-delivery-status")
        .replace("rfc822; Ann.Lee", "utf-8; Ann.Lee")
        .replace("rfc822;Ann.Lee", "utf-8;Ann.Lee")
        .replace(
            "Content-Type: message/rfc822",
            "Content-Type: message/global",
        );
    one_recipient(raw.as_bytes(), "ann.lee@example.net", "5.1.1", "50");
}

#[test]
fn a_status_is_read_from_the_action_or_the_diagnostic_when_missing() {
    let no_status = text(POSTFIX_DSN).replace("Status: 5.1.1\n", "");
    let r = &bounce(no_status.as_bytes()).recipients[0];
    assert_eq!(
        (r.status.as_str(), r.hard),
        ("5.1.1", true),
        "from the diagnostic"
    );
    let bare = no_status.replace("550 5.1.1 <ann", "550 <ann");
    let r = &bounce(bare.as_bytes()).recipients[0];
    assert_eq!(
        (r.status.as_str(), r.hard),
        ("5.0.0", true),
        "from Action: failed"
    );
    let delayed = bare
        .replace("Action: failed", "Action: delayed")
        .replace("550 <ann", "450 <ann");
    let r = &bounce(delayed.as_bytes()).recipients[0];
    assert_eq!(
        (r.status.as_str(), r.hard),
        ("4.0.0", false),
        "from Action: delayed"
    );
}

#[test]
fn a_base64_delivery_status_part_is_read() {
    let raw = text(POSTFIX_DSN);
    let header = "Content-Type: message/delivery-status\n\n";
    let start = raw.find(header).unwrap() + header.len();
    let end = raw
        .find("\n--3F1A2B3C4D.1796551201/mx.example.net\nContent-Description: Undelivered")
        .unwrap();
    let mut encoded = String::new();
    for chunk in raw.as_bytes()[start..end].chunks(57) {
        encoded.push_str(&base64_encode(chunk));
        encoded.push('\n');
    }
    let raw = format!(
        "{}Content-Transfer-Encoding: base64\n\n{encoded}{}",
        &raw[..start - 1],
        &raw[end..]
    );
    let b = bounce(raw.as_bytes());
    assert_eq!(b.recipients.len(), 1, "{b:?}");
    assert_eq!(b.recipients[0].status, "5.1.1");
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn a_persons_message_that_quotes_a_bounce_is_not_one() {
    let raw = "From: Ole <ole@example.org>\nTo: replies@in.example.com\n\
               Subject: Re: Undelivered Mail Returned to Sender\n\n\
               Why did I get this?\n\n<ole@example.org>: host said: 550 5.1.1 User unknown\n";
    let Inbound::Message(m) = classify_both(raw.as_bytes()) else {
        panic!("a person's message");
    };
    assert_eq!(m.from, "ole@example.org");
}

#[test]
fn a_mailer_daemon_notice_without_a_failure_is_automatic() {
    let raw = "From: MAILER-DAEMON@mx.example.net\nTo: bounces@bounces.example.com\n\
               Subject: Delivery report\n\nYour message was delivered.\n";
    assert_eq!(classify_both(raw.as_bytes()), Inbound::AutoReply);
    let raw = "Return-Path: <>\nFrom: someone@example.net\nSubject: Hello\n\nhi\n";
    assert_eq!(classify_both(raw.as_bytes()), Inbound::AutoReply);
}

#[test]
fn a_bounce_subject_from_a_relay_address_is_a_bounce_when_it_names_a_code() {
    let raw = "From: Mail System <noreply@relay.example.net>\nTo: bounces@bounces.example.com\n\
               Subject: Delivery Status Notification (Failure)\n\n\
               Delivery to the following recipients failed.\n\n\
               \x20     pat@example.org\n\
               \x20     Remote server said: 552 5.2.2 Mailbox full\n\n\
               ----- Original message -----\n\n\
               Message-ID: <eml_01937a5e8c2b7f3a9d4e6b1c2d3e4f60@example.com>\nSubject: x\n";
    let b = bounce(raw.as_bytes());
    assert_eq!(b.recipients[0].address, "pat@example.org");
    assert_eq!(b.recipients[0].status, "5.2.2");
    assert_eq!(b.original_message_id, id("60"));
}

#[test]
fn a_qmail_failure_notice_reads_the_remote_hosts_reply() {
    let raw = "Return-Path: <>\nFrom: MAILER-DAEMON@mail.example.net\n\
               To: bounces+eml_01937a5e8c2b7f3a9d4e6b1c2d3e4f61@bounces.example.com\n\
               Subject: failure notice\n\n\
               Hi. This is the qmail-send program at mail.example.net.\n\
               I'm afraid I wasn't able to deliver your message to the following addresses.\n\
               This is a permanent error; I've given up. Sorry it didn't work out.\n\n\
               <quinn@example.org>:\n198.51.100.1 does not like recipient.\n\
               Remote host said: 550 5.1.1 <quinn@example.org>... User unknown\n\
               Giving up on 198.51.100.1.\n\n\
               --- Below this line is a copy of the message.\n\n\
               Return-Path: <bounces+eml_01937a5e8c2b7f3a9d4e6b1c2d3e4f61@bounces.example.com>\n\
               From: orders@example.com\nTo: quinn@example.org\n\
               Message-ID: <eml_01937a5e8c2b7f3a9d4e6b1c2d3e4f61@example.com>\n\nHello\n";
    let b = bounce(raw.as_bytes());
    assert_eq!(b.recipients.len(), 1, "{b:?}");
    assert_eq!(b.recipients[0].address, "quinn@example.org");
    assert_eq!(b.recipients[0].status, "5.1.1");
    assert_eq!(b.original_message_id, id("61"));
}

#[test]
fn a_message_without_a_sender_address_is_nothing_to_record() {
    for raw in [
        &b""[..],
        b"\r\n\r\n",
        b"Subject: hi\n\nno sender\n",
        b"From: undisclosed-recipients:;\nSubject: hi\n\nx\n",
        b"From: not an address\nSubject: hi\n\nx\n",
    ] {
        assert_eq!(
            classify(raw),
            Inbound::AutoReply,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn status_and_reply_codes_are_found_standing_alone() {
    assert_eq!(
        find_status("said: 550 5.7.1 blocked").as_deref(),
        Some("5.7.1")
    );
    assert_eq!(
        find_status("Status: 4.4.1 (delayed)").as_deref(),
        Some("4.4.1")
    );
    assert_eq!(find_status("code 5.1.10;").as_deref(), Some("5.1.10"));
    for none in [
        "host 198.51.100.5 [5.1.1.1]",
        "Exim 4.97 version 5.1.1a",
        "v15.20.8207.18",
        "2.0.0 ok",
        "x5.1.1",
        "5.1.1234",
        "",
    ] {
        assert_eq!(find_status(none), None, "{none}");
    }
    assert_eq!(find_reply_code("554: delivery error"), Some(554));
    assert_eq!(find_reply_code("said: 450-4.2.0 try later"), Some(450));
    assert_eq!(find_reply_code("550"), Some(550));
    for none in [
        "mta1034 2026 250 ok",
        "5500 x",
        "1.550 x",
        "599 x",
        "55",
        "",
    ] {
        assert_eq!(find_reply_code(none), None, "{none}");
    }
}

#[test]
fn report_fields_are_grouped_and_unfolded() {
    let groups = field_groups(
        "Reporting-MTA: dns; a\r\n\r\nFinal-Recipient: rfc822; x@example.org\r\nDiagnostic-Code: \
         smtp; 550\r\n  folded\r\nno colon line\r\n\r\n\r\nAction: failed\r\n",
    );
    assert_eq!(groups.len(), 3);
    assert_eq!(
        field(&groups[1], "diagnostic-code"),
        Some("smtp; 550 folded")
    );
    assert_eq!(field(&groups[2], "action"), Some("failed"));
}

#[test]
fn every_fixture_is_read_whole_without_the_cap_mattering() {
    // The fixtures are far under the caps, and what they are does not depend on the line ends.
    for raw in FIXTURES {
        assert!(raw.len() < MAX_REPORT_BYTES);
        classify_both(raw);
    }
}

#[test]
fn a_huge_report_keeps_at_most_100_recipients_and_stays_fast() {
    let mut groups = String::new();
    for i in 0..20_000 {
        groups.push_str(&format!(
            "Final-Recipient: rfc822; user{i}@example.org\nAction: failed\nStatus: 5.1.1\n\n"
        ));
    }
    let raw = text(POSTFIX_DSN).replace(
        "Final-Recipient: rfc822; Ann.Lee@Example.net\n",
        &format!("{groups}Final-Recipient: rfc822; Ann.Lee@Example.net\n"),
    );
    let b = within(10, || bounce(raw.as_bytes()));
    assert_eq!(b.recipients.len(), MAX_RECIPIENTS);
    assert_eq!(b.recipients[0].address, "user0@example.org");
    assert_eq!(b.original_message_id, id("50"));
}

#[test]
fn a_huge_plain_bounce_stays_fast() {
    let mut body = String::new();
    for i in 0..200_000 {
        body.push_str(&format!(
            "<user{i}@example.org>: 550 5.1.1 unknown 1.2.3.4.5.6.7\n"
        ));
    }
    let raw = format!(
        "From: MAILER-DAEMON@mx.example.net\nSubject: failure notice\n\n{body}\n\
         --- Below this line is a copy of the message.\n\nMessage-ID: <x@y>\n"
    );
    let b = within(10, || bounce(raw.as_bytes()));
    assert!(!b.recipients.is_empty() && b.recipients.len() <= MAX_RECIPIENTS);
    // Only the first 64 KiB of the text are read: the original is past them.
    assert_eq!(b.original_message_id, None);
}

#[test]
fn input_past_the_cap_is_not_looked_at() {
    let mut raw = b"From: a@example.org\nSubject: big\nContent-Type: text/plain\n\n".to_vec();
    raw.resize(MAX_INPUT_BYTES + 1024, b'a');
    let Inbound::Message(m) = classify(&raw) else {
        panic!("a message");
    };
    assert!(m.text.unwrap().len() <= 1 << 20);
}

/// Runs `f`, asserting that it took under `seconds` (generous: the machine is shared).
fn within<T>(seconds: u64, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = f();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(seconds), "took {took:?}");
    result
}

#[test]
fn messages_that_trip_the_parsers_debug_checks_are_nothing_to_record() {
    // Found by fuzzing: a quoted-printable part whose boundary follows a soft line break, and a
    // message/rfc822 part cut by the next boundary inside its headers.
    let qp = "Content-Type: multipart/alternative; boundary=\"c\"\n\n--c\n\
              Content-Transfer-Encoding: quoted-printable\né\0\u{feff}From: MAILER-DAEMON@x.example\n\n=\n--c\n";
    let nested = "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n--b\n\
                  Content-Type: message/rfc822\n\nContent-Type: message/rfc822\n--b\n\
                  From: MAILER-DAEMON@x.example\n\n\n--b--\n";
    for raw in [qp, nested] {
        let _ = classify(raw.as_bytes());
    }
}

fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 100,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

#[test]
fn garbage_never_panics() {
    let bytes = prop::collection::vec(any::<u8>(), 0..4096);
    let run = |raw: Vec<u8>| {
        let _ = classify(&raw);
        Ok(())
    };
    within(60, || runner(300).run(&bytes, run).unwrap());
    // Mail-like garbage: header-ish lines, boundaries and report fields in any order.
    let pieces = prop::collection::vec(
        prop::sample::select(vec![
            "From: MAILER-DAEMON@x.example\n",
            "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n",
            "Content-Type: multipart/mixed; boundary=\"b\"\n",
            "Content-Type: message/delivery-status\n",
            "Content-Type: message/feedback-report\n",
            "Content-Type: message/rfc822\n",
            "Content-Type: text/rfc822-headers\n",
            "Content-Transfer-Encoding: base64\n",
            "Content-Transfer-Encoding: quoted-printable\n",
            "--b\n",
            "--b--\n",
            "\n",
            "\r\n",
            " folded\n",
            "Final-Recipient: rfc822; a@b.example\n",
            "Original-Recipient: rfc822;<\n",
            "Action: failed\n",
            "Status: 5.1.\n",
            "Status: 4.4.1\n",
            "Feedback-Type: abuse\n",
            "Original-Rcpt-To: \n",
            "<x@y.example>: 550\n",
            "Message-ID: <\n",
            "Subject: =?utf-8?B?w6k=?= failure notice\n",
            "=?utf-8?q?=E2=80?=\n",
            "é\u{0}\u{feff}",
        ]),
        0..60,
    );
    let run = |pieces: Vec<&str>| {
        let _ = classify(pieces.concat().as_bytes());
        Ok(())
    };
    within(60, || runner(400).run(&pieces, run).unwrap());
}

#[test]
fn damaged_fixtures_never_panic() {
    let case = (
        0..FIXTURES.len(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..16),
        any::<prop::sample::Index>(),
    );
    let run =
        |(which, edits, cut): (usize, Vec<(prop::sample::Index, u8)>, prop::sample::Index)| {
            let mut raw = FIXTURES[which].to_vec();
            for (at, byte) in edits {
                let at = at.index(raw.len());
                raw[at] = byte;
            }
            raw.truncate(cut.index(raw.len() + 1));
            let _ = classify(&raw);
            let _ = classify(&crlf(&raw));
            Ok(())
        };
    within(60, || runner(400).run(&case, run).unwrap());
}
