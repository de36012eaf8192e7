//! A submitted message read into the fields of a `/v1/send` request, with `mail-parser`: the
//! sender, the envelope's recipients with the names the headers give them, the subject, the
//! HTML body, the reply-to address, the extra headers and the attachments. Pure: no rule of
//! `/v1/send` is applied here (the planner applies them all), no I/O.

use std::collections::BTreeMap;

use mail_parser::{Address, Message, MessageParser, MimeHeaders, PartType};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::SubmissionError;
use crate::domain::send::{MAX_HEADERS, Problem, parse_headers};
use crate::domain::template::fields::check_from_name;

/// Headers of a submitted message that are not passed on: the transport's trace and
/// authentication headers (and all `Content-*` and `Resent-*` ones). The ones the service
/// writes itself are refused by the rules of `/v1/send` ([`parse_headers`]) and left out too.
const DROPPED_HEADERS: [&str; 12] = [
    "received",
    "delivered-to",
    "x-original-to",
    "authentication-results",
    "received-spf",
    "domainkey-signature",
    "x-google-dkim-signature",
    "arc-seal",
    "arc-message-signature",
    "arc-authentication-results",
    "x-received",
    "x-herald-message-id",
];

/// A name and an address, as read from the message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Party {
    /// The display name (encoded words decoded), if any.
    pub name: Option<String>,
    /// The address as written.
    pub email: String,
}

/// An attachment of a submitted message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmittedAttachment {
    /// The file name: the part's own, or `attachment-<n>` with an extension from its type.
    pub filename: String,
    /// The MIME type, e.g. `application/pdf`.
    pub content_type: String,
    /// The decoded content.
    pub content: Vec<u8>,
    /// The `Content-ID` (without `<>`) of an inline part the HTML shows as `cid:…`.
    pub content_id: Option<String>,
}

/// A submitted message read into the fields of a send request (no rule applied yet: that is
/// the planner's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// The `From` header's first mailbox.
    pub from: Party,
    /// One per envelope recipient, in order, without repeats; the name from the headers.
    pub recipients: Vec<Party>,
    /// The subject, decoded (empty when the message has none).
    pub subject: String,
    /// The HTML body (a text-only message's text, preformatted).
    pub html: String,
    /// The `Reply-To` header's first address.
    pub reply_to: Option<String>,
    /// The extra headers `/v1/send` accepts, unfolded.
    pub headers: BTreeMap<String, String>,
    /// The attachments, in order.
    pub attachments: Vec<SubmittedAttachment>,
    /// The `Message-ID`, without `<>`.
    pub message_id: Option<String>,
}

impl Submitted {
    /// A digest of everything the send is made of, to tell a retry of the same message from
    /// another one with the same `Message-ID`.
    pub fn request_hash(&self) -> String {
        let attachments: Vec<Value> = self
            .attachments
            .iter()
            .map(|a| {
                json!([
                    a.filename,
                    a.content_type,
                    a.content_id,
                    hex::encode(Sha256::digest(&a.content))
                ])
            })
            .collect();
        let view = json!({
            "from": self.from,
            "to": self.recipients,
            "subject": self.subject,
            "html": self.html,
            "reply": self.reply_to,
            "headers": self.headers,
            "attachments": attachments,
        });
        hex::encode(Sha256::digest(view.to_string().as_bytes()))
    }

    /// The idempotency key: the `Message-ID` and the envelope's recipients, so that a client
    /// that delivers the rest of its recipients later (after a `452` at `RCPT`) sends to them
    /// too, while a retry of the same delivery sends nothing again. `None` without a
    /// `Message-ID`.
    pub fn idempotency_key(&self) -> Option<String> {
        let id = self.message_id.as_deref()?;
        let mut rcpts: Vec<String> = self
            .recipients
            .iter()
            .map(|r| r.email.to_ascii_lowercase())
            .collect();
        rcpts.sort();
        let digest = Sha256::digest(format!("{id}\n{}", rcpts.join("\n")).as_bytes());
        Some(format!("smtp:{}", hex::encode(digest)))
    }
}

/// Reads `raw` (RFC 5322) for the envelope recipients `rcpts`; `554 5.6.0` for a message
/// without a `From` address (or not a message at all).
pub fn read_message(raw: &[u8], rcpts: &[String]) -> Result<Submitted, SubmissionError> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or_else(|| SubmissionError::unparseable("the message could not be parsed"))?;
    submitted(&message, rcpts)
}

/// The send request's fields of a parsed `message` for the envelope recipients `rcpts`.
pub fn submitted(message: &Message<'_>, rcpts: &[String]) -> Result<Submitted, SubmissionError> {
    let from = message
        .from()
        .and_then(|a| a.iter().find(|a| a.address().is_some()))
        .map(|a| Party {
            name: a
                .name()
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            email: a.address().unwrap_or_default().trim().to_string(),
        })
        .ok_or_else(|| {
            SubmissionError::unparseable(
                "the message has no From address; write the sender (an address on a verified \
                 domain) in its From header",
            )
        })?;
    let listed: Vec<&mail_parser::Addr<'_>> = [message.to(), message.cc(), message.bcc()]
        .into_iter()
        .flatten()
        .flat_map(Address::iter)
        .collect();
    let mut recipients: Vec<Party> = Vec::with_capacity(rcpts.len());
    for rcpt in rcpts {
        let email = rcpt
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        if email.is_empty()
            || recipients
                .iter()
                .any(|r| r.email.eq_ignore_ascii_case(email))
        {
            continue;
        }
        let name = listed
            .iter()
            .find(|a| {
                a.address()
                    .is_some_and(|addr| addr.trim().eq_ignore_ascii_case(email))
            })
            .and_then(|a| a.name())
            .filter(|n| !n.trim().is_empty())
            .and_then(|n| check_from_name(n).ok());
        recipients.push(Party {
            name,
            email: email.to_string(),
        });
    }
    Ok(Submitted {
        from,
        recipients,
        subject: message
            .subject()
            .map(str::trim)
            .unwrap_or_default()
            .to_string(),
        html: body_html(message),
        reply_to: message
            .reply_to()
            .and_then(|a| a.iter().find_map(|a| a.address()))
            .map(|a| a.trim().to_string()),
        headers: extra_headers(message),
        attachments: attachments(message),
        message_id: message
            .message_id()
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_string),
    })
}

/// The message's HTML body: its HTML parts in order, a text part where there is no HTML
/// alternative preformatted (so that the text alternative derived from it is the text itself).
fn body_html(message: &Message<'_>) -> String {
    let mut html = String::new();
    for id in &message.html_body {
        match message.parts.get(*id as usize).map(|p| &p.body) {
            Some(PartType::Html(h)) => html.push_str(h),
            Some(PartType::Text(t)) => html.push_str(&text_to_html(t)),
            _ => {}
        }
    }
    html
}

/// Plain text as HTML that shows it as written: escaped, preformatted, wrapping long lines, in
/// the reader's font.
fn text_to_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 96);
    out.push_str(
        "<pre style=\"white-space:pre-wrap;word-wrap:break-word;font-family:inherit;margin:0\">",
    );
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push_str("</pre>");
    out
}

/// The message's own headers that `/v1/send` would accept from a caller, unfolded, each name
/// once (its first occurrence); the transport's and the MIME structure's are left out.
fn extra_headers(message: &Message<'_>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, raw) in message.headers_raw() {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("content-")
            || lower.starts_with("resent-")
            || DROPPED_HEADERS.contains(&lower.as_str())
            || out.keys().any(|k: &String| k.eq_ignore_ascii_case(name))
        {
            continue;
        }
        let value = unfold(raw);
        let (name, value) = (name.to_string(), value);
        let mut problems: Vec<Problem> = Vec::new();
        let accepted = parse_headers(std::iter::once((&name, &value)), &mut problems);
        if problems.is_empty() && !accepted.is_empty() && out.len() < MAX_HEADERS {
            out.insert(name, value);
        }
    }
    out
}

/// A raw header value on one line: folding line breaks removed (RFC 5322 3.2.2), trimmed.
fn unfold(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {}
            '\n' => {
                if !chars.peek().is_some_and(|n| *n == ' ' || *n == '\t') {
                    // A line break not followed by white space ends the value.
                    break;
                }
            }
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

/// The message's attachments: each part the parser did not take as the body, decoded; inline
/// ones (with a `Content-ID`, not marked `attachment`) keep it for the HTML's `cid:` links.
fn attachments(message: &Message<'_>) -> Vec<SubmittedAttachment> {
    message
        .attachments()
        .enumerate()
        .map(|(i, part)| {
            let content_type = match part.content_type() {
                Some(ct) => match ct.subtype() {
                    Some(sub) => format!("{}/{sub}", ct.ctype()),
                    None => ct.ctype().to_string(),
                }
                .to_ascii_lowercase(),
                None => match &part.body {
                    PartType::Text(_) => "text/plain".to_string(),
                    PartType::Html(_) => "text/html".to_string(),
                    PartType::Message(_) => "message/rfc822".to_string(),
                    _ => "application/octet-stream".to_string(),
                },
            };
            let marked_attachment = part
                .content_disposition()
                .is_some_and(|d| d.is_attachment());
            let content_id = part
                .content_id()
                .map(|id| id.trim().trim_start_matches('<').trim_end_matches('>'))
                .filter(|id| !id.is_empty() && !marked_attachment)
                .map(str::to_string);
            let filename = part
                .attachment_name()
                .map(clean_filename)
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| default_filename(i, &content_type));
            SubmittedAttachment {
                filename,
                content_type,
                content: part.contents().to_vec(),
                content_id,
            }
        })
        .collect()
}

/// A file name as `/v1/send` accepts it: no line breaks, quotes or slashes (each becomes `_`),
/// at most 255 characters.
fn clean_filename(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '"' | '/' | '\\') {
                '_'
            } else {
                c
            }
        })
        .take(255)
        .collect::<String>()
        .trim()
        .to_string()
}

/// `attachment-<n>` with the subtype of `content_type` as its extension when it is a plain word.
fn default_filename(index: usize, content_type: &str) -> String {
    let ext = content_type
        .split_once('/')
        .map(|(_, sub)| sub)
        .filter(|sub| {
            !sub.is_empty() && sub.len() <= 8 && sub.bytes().all(|b| b.is_ascii_alphanumeric())
        });
    match ext {
        Some(ext) => format!("attachment-{}.{ext}", index + 1),
        None => format!("attachment-{}", index + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rcpts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn read(raw: &str, to: &[&str]) -> Submitted {
        read_message(raw.as_bytes(), &rcpts(to)).expect("the message is read")
    }

    const ALTERNATIVE: &str = "From: \"Ann Example\" <ann@example.com>\r\n\
        To: Bob <bob@example.org>\r\n\
        Subject: Your receipt\r\n\
        Message-ID: <abc.123@app.example.com>\r\n\
        Date: Sun, 6 Dec 2026 12:00:00 +0000\r\n\
        MIME-Version: 1.0\r\n\
        X-Mailer: WordPress 6.7\r\n\
        Content-Type: multipart/alternative; boundary=\"b1\"\r\n\
        \r\n\
        --b1\r\n\
        Content-Type: text/plain; charset=utf-8\r\n\
        \r\n\
        Thanks for your order.\r\n\
        --b1\r\n\
        Content-Type: text/html; charset=utf-8\r\n\
        \r\n\
        <p>Thanks for your <b>order</b>. {{not a variable}}</p>\r\n\
        --b1--\r\n";

    #[test]
    fn a_multipart_alternative_message_is_its_html_with_the_headers_fields() {
        let s = read(ALTERNATIVE, &["bob@example.org"]);
        assert_eq!(
            s.from,
            Party {
                name: Some("Ann Example".into()),
                email: "ann@example.com".into()
            }
        );
        assert_eq!(
            s.recipients,
            [Party {
                name: Some("Bob".into()),
                email: "bob@example.org".into()
            }]
        );
        assert_eq!(s.subject, "Your receipt");
        assert!(
            s.html
                .starts_with("<p>Thanks for your <b>order</b>. {{not a variable}}</p>"),
            "{}",
            s.html
        );
        assert!(!s.html.contains("Thanks for your order."), "{}", s.html);
        assert_eq!(s.message_id.as_deref(), Some("abc.123@app.example.com"));
        assert!(s.attachments.is_empty());
        // Only the extra headers /v1/send accepts: not Date, MIME-Version, Content-Type…
        assert_eq!(
            s.headers,
            BTreeMap::from([("X-Mailer".to_string(), "WordPress 6.7".to_string())])
        );
    }

    #[test]
    fn a_text_only_message_is_sent_as_its_text_preformatted_and_escaped() {
        let s = read(
            "From: cron@example.com\r\nTo: ops@example.org\r\nSubject: backup\r\n\r\n\
             disk  <sda> 93% & rising\r\nline two\r\n",
            &["ops@example.org"],
        );
        assert!(s.html.starts_with("<pre "), "{}", s.html);
        assert!(
            s.html
                .contains("disk  &lt;sda&gt; 93% &amp; rising\nline two"),
            "{}",
            s.html
        );
        assert_eq!(
            crate::domain::template::html_to_text(&s.html).trim(),
            "disk  <sda> 93% & rising\nline two"
        );
        assert_eq!(s.from.name, None);
        assert_eq!(s.message_id, None);
    }

    #[test]
    fn the_envelope_decides_who_receives_and_the_headers_name_them() {
        let raw = "From: app@example.com\r\n\
            To: \"Ann A.\" <ann@example.org>, carl@example.org\r\n\
            Cc: Bob <BOB@example.org>\r\n\
            Bcc: Dee <dee@example.org>\r\n\
            Subject: hi\r\n\r\nhello\r\n";
        // carl is in To but not in the envelope: not sent to; the Bcc one and eve (in no
        // header) are; repeats and <> are folded.
        let s = read(
            raw,
            &[
                "ann@example.org",
                "<bob@example.org>",
                "dee@example.org",
                "Ann@Example.org",
                "eve@example.org",
            ],
        );
        let got: Vec<(Option<&str>, &str)> = s
            .recipients
            .iter()
            .map(|r| (r.name.as_deref(), r.email.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some("Ann A."), "ann@example.org"),
                (Some("Bob"), "bob@example.org"),
                (Some("Dee"), "dee@example.org"),
                (None, "eve@example.org"),
            ]
        );
        // Neither Cc nor Bcc is passed on as a header.
        assert!(s.headers.is_empty(), "{:?}", s.headers);
    }

    #[test]
    fn encoded_words_are_decoded_in_names_and_subject() {
        let raw = "From: =?UTF-8?Q?Andr=C3=A9_M=C3=BCller?= <andre@example.com>\r\n\
            To: =?ISO-8859-1?Q?J=F6rg?= <jorg@example.org>\r\n\
            Subject: =?UTF-8?B?w4ljaMOpYW5jZSDinJM=?=\r\n\
            Reply-To: Support <support@example.com>\r\n\r\nbody\r\n";
        let s = read(raw, &["jorg@example.org"]);
        assert_eq!(s.from.name.as_deref(), Some("André Müller"));
        assert_eq!(s.recipients[0].name.as_deref(), Some("Jörg"));
        assert_eq!(s.subject, "Échéance ✓");
        assert_eq!(s.reply_to.as_deref(), Some("support@example.com"));
    }

    #[test]
    fn attachments_are_decoded_and_inline_parts_keep_their_content_id() {
        let raw = "From: app@example.com\r\nTo: a@example.org\r\nSubject: files\r\n\
            MIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=\"m\"\r\n\r\n\
            --m\r\n\
            Content-Type: multipart/related; boundary=\"r\"\r\n\r\n\
            --r\r\n\
            Content-Type: text/html; charset=utf-8\r\n\r\n\
            <img src=\"cid:logo@app\">\r\n\
            --r\r\n\
            Content-Type: image/png\r\n\
            Content-ID: <logo@app>\r\n\
            Content-Transfer-Encoding: base64\r\n\r\n\
            iVBORw0KGgo=\r\n\
            --r--\r\n\
            --m\r\n\
            Content-Type: application/pdf; name=\"invoice.pdf\"\r\n\
            Content-Disposition: attachment; filename=\"=?UTF-8?Q?facture_n=C2=B03.pdf?=\"\r\n\
            Content-Transfer-Encoding: base64\r\n\r\n\
            JVBERi0xLjQK\r\n\
            --m\r\n\
            Content-Type: text/csv\r\n\
            Content-Disposition: attachment; filename=\"a/b\\\\c.csv\"\r\n\r\n\
            x,y\r\n1,2\r\n\
            --m--\r\n";
        let s = read(raw, &["a@example.org"]);
        assert_eq!(s.html.trim(), "<img src=\"cid:logo@app\">");
        let got: Vec<(&str, &str, Option<&str>)> = s
            .attachments
            .iter()
            .map(|a| {
                (
                    a.filename.as_str(),
                    a.content_type.as_str(),
                    a.content_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("attachment-1.png", "image/png", Some("logo@app")),
                ("facture n°3.pdf", "application/pdf", None),
                ("a_b_c.csv", "text/csv", None),
            ]
        );
        assert_eq!(s.attachments[0].content, b"\x89PNG\r\n\x1a\n");
        assert_eq!(s.attachments[1].content, b"%PDF-1.4\n");
        assert_eq!(s.attachments[2].content, b"x,y\r\n1,2");
    }

    #[test]
    fn a_message_without_from_or_not_a_message_is_554_5_6_0() {
        for raw in [
            "To: a@example.org\r\nSubject: who?\r\n\r\nbody\r\n",
            "From: Nobody\r\nTo: a@example.org\r\n\r\nbody\r\n",
            "",
            "\u{0}\u{1}garbage without headers",
        ] {
            let err = read_message(raw.as_bytes(), &rcpts(&["a@example.org"])).unwrap_err();
            assert_eq!((err.code, err.enhanced.as_str()), (554, "5.6.0"), "{raw:?}");
            assert!(!err.message.contains('\n'));
        }
    }

    #[test]
    fn headers_are_unfolded_and_the_transports_own_left_out() {
        let raw = "Received: from a by b; Sun, 6 Dec 2026 12:00:00 +0000\r\n\
            From: app@example.com\r\nTo: a@example.org\r\nSubject: x\r\n\
            References: <one@example.com>\r\n <two@example.com>\r\n\
            In-Reply-To: <two@example.com>\r\n\
            X-Entity-Ref-ID: 42\r\n\
            X-Entity-Ref-ID: 43\r\n\
            DKIM-Signature: v=1; a=rsa-sha256; d=example.com\r\n\
            Return-Path: <app@example.com>\r\n\
            Content-Language: en\r\n\
            List-Unsubscribe: <https://example.com/u>\r\n\r\nbody\r\n";
        let s = read(raw, &["a@example.org"]);
        let names: Vec<&str> = s.headers.keys().map(String::as_str).collect();
        assert_eq!(names, ["In-Reply-To", "References", "X-Entity-Ref-ID"]);
        assert_eq!(
            s.headers["References"],
            "<one@example.com> <two@example.com>"
        );
        assert_eq!(s.headers["X-Entity-Ref-ID"], "42");
    }

    #[test]
    fn the_idempotency_key_names_the_message_and_its_recipients() {
        let a = read(ALTERNATIVE, &["bob@example.org", "c@example.org"]);
        let b = read(ALTERNATIVE, &["C@example.org", "bob@example.org"]);
        let other = read(ALTERNATIVE, &["d@example.org"]);
        assert!(a.idempotency_key().is_some());
        assert_eq!(a.idempotency_key(), b.idempotency_key());
        assert_ne!(a.idempotency_key(), other.idempotency_key());
        assert!(a.idempotency_key().unwrap().len() <= 255);
        // The same message hashes the same; a changed one does not.
        assert_eq!(
            a.request_hash(),
            read(ALTERNATIVE, &["bob@example.org", "c@example.org"]).request_hash()
        );
        let changed = read(
            &ALTERNATIVE.replace("Your receipt", "Your refund"),
            &["bob@example.org", "c@example.org"],
        );
        assert_eq!(a.idempotency_key(), changed.idempotency_key());
        assert_ne!(a.request_hash(), changed.request_hash());
    }
}
