//! Mail Herald receives, classified without I/O: [`classify`] turns one raw RFC 5322 message
//! into a bounce, a complaint, an automatic message to ignore, or a person's message.
//!
//! `mail-parser` does the MIME; this module only reads what the standards put inside: the
//! `message/delivery-status` fields of a delivery status notification (RFC 3464, `dsn.rs`), the
//! `message/feedback-report` fields of an abuse report (RFC 5965, `arf.rs`), the plain-text
//! bounces of servers that send no report (`plain.rs`), RFC 3834 auto-replies and out-of-office
//! notices (`autoreply.rs`) and a person's message (`received.rs`). The order: a report decides
//! (a complaint before a delivery status); then a message from a person's address that says it
//! is automatic is an auto-reply; then a plain-text bounce; then anything else a mailer daemon
//! sent is automatic too, and the rest is a person's message.
//!
//! Finding the email a bounce or complaint names: `original_message_id` is the id of the
//! returned message, without angle brackets (`eml_…@domain` for Herald's own mail, taken from
//! its `X-Herald-Message-Id` header first, which relays do not rewrite, then its `Message-ID`).
//! `services::delivery_events::email_id` turns it into the email's id (`mail` may not import
//! `services`, see ARCHITECTURE.md's layering table).
//!
//! For the SMTP server, roughly (a `DeliveryEvent` per bounced recipient, for
//! `DeliveryEvents::apply`, which applies it only when the address is the named email's
//! recipient):
//!
//! ```text
//! Inbound::Bounce(b)    => for r in b.recipients: DeliveryEvent { kind: if r.hard
//!                          { BouncedHard } else { BouncedSoft }, email: r.address,
//!                          message_id: b.original_message_id (else the id in the
//!                          `bounces+<email id>@…` RCPT), detail: r.diagnostic }
//! Inbound::Complaint(c) => DeliveryEvent { kind: Complained, email: c.original_recipient,
//!                          message_id: c.original_message_id, detail: c.feedback_type }
//! Inbound::AutoReply    => nothing (answer 250 and drop it)
//! Inbound::Message(m)   => InboundMail::receive(project, rcpt, m)
//! ```
//!
//! Everything is linear in the input and capped: at most [`MAX_INPUT_BYTES`] of the message are
//! parsed, at most 64 KiB of a report or of a bounce's text are read, and the lists are bounded.
//! Nothing here panics on any input (a property test feeds it garbage).

mod arf;
mod autoreply;
mod dsn;
mod plain;
mod received;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use mail_parser::{Message, MessageParser, MessagePart, MimeHeaders};

use crate::domain::email::EmailAddress;

/// The most of a message [`classify`] parses; bytes after it are not looked at (the SMTP server's
/// message size limit should be at most this).
pub const MAX_INPUT_BYTES: usize = 64 << 20;
/// The most of a report's fields, or of a bounce's text, that is read.
const MAX_REPORT_BYTES: usize = 64 << 10;
/// The most recipients one bounce reports.
const MAX_RECIPIENTS: usize = 100;
/// The longest diagnostic kept, in characters.
const MAX_DIAGNOSTIC_CHARS: usize = 1000;
/// The longest field value of a report kept while reading it (folded lines joined), in bytes.
const MAX_FIELD_BYTES: usize = 4096;

/// What a received message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A delivery status notification or plain-text bounce.
    Bounce(Bounce),
    /// A feedback-loop (ARF) report.
    Complaint(Complaint),
    /// Automatic mail that is neither a bounce nor a person's message (RFC 3834 auto-replies,
    /// out-of-office notices, other mailer-daemon notices), or mail with no sender address to
    /// attribute it to: nothing to record.
    AutoReply,
    /// A person's message.
    Message(Received),
}

/// A bounce: the recipients that failed (or are delayed) and the email they were sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounce {
    /// The recipients reported failed or delayed (at most 100); a report of successful
    /// deliveries only (`Action: delivered`, `relayed`, `expanded`) has none.
    pub recipients: Vec<BounceRecipient>,
    /// The returned message's id, without angle brackets (see the module docs).
    pub original_message_id: Option<String>,
}

/// One recipient of a bounce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BounceRecipient {
    /// The recipient Herald sent to: the report's `Original-Recipient` when it gives one (the
    /// address before forwarding), else its `Final-Recipient`; normalised (lowercased) like
    /// `domain::email::EmailAddress`.
    pub address: String,
    /// The enhanced status code, `"5.1.1"`; `"5.0.0"` / `"4.0.0"` when the bounce gives only a
    /// basic SMTP reply or an action.
    pub status: String,
    /// A permanent failure (`5.x.x`); a `4.x.x` status is a soft bounce.
    pub hard: bool,
    /// The server's reply (`Diagnostic-Code` without its `smtp;` type), at most 1,000
    /// characters.
    pub diagnostic: Option<String>,
}

/// A feedback-loop report (RFC 5965).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complaint {
    /// `Feedback-Type`, lowercased: `abuse`, `fraud`, `virus`, `other`, `not-spam`…
    pub feedback_type: String,
    /// The returned message's id, without angle brackets (see the module docs).
    pub original_message_id: Option<String>,
    /// `Original-Rcpt-To` (else the returned message's single `To`), lowercased.
    pub original_recipient: Option<String>,
}

/// A person's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The `From` address (else `Sender`), normalised (lowercased); never empty.
    pub from: String,
    /// The `From` display name.
    pub from_name: Option<String>,
    /// The `To` addresses, normalised, at most 100.
    pub to: Vec<String>,
    /// The subject (empty when there is none).
    pub subject: String,
    /// The text body (converted from the HTML one when there is only HTML), with LF line ends,
    /// at most 1 MiB.
    pub text: Option<String>,
    /// The HTML body, when there is one, with LF line ends, at most 1 MiB.
    pub html: Option<String>,
    /// `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// `In-Reply-To` ids, without angle brackets.
    pub in_reply_to: Vec<String>,
    /// `References` ids, without angle brackets, at most 100.
    pub references: Vec<String>,
    /// The attachments (and inline parts), at most 32.
    pub attachments: Vec<ReceivedAttachment>,
}

/// An attachment of a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedAttachment {
    /// Its file name, if it has one.
    pub filename: Option<String>,
    /// `type/subtype`, lowercased.
    pub content_type: String,
    /// The decoded content.
    pub content: Vec<u8>,
}

/// Classifies one raw message (see the module docs). Never panics; linear in the input.
pub fn classify(raw: &[u8]) -> Inbound {
    let raw = &raw[..raw.len().min(MAX_INPUT_BYTES)];
    // mail-parser 0.11 has debug assertions and subtractions that fire on some malformed MIME
    // in debug builds (in release they are no-ops and wrap harmlessly; `tests.rs` keeps two such
    // messages): a message the parser cannot read is one nothing can be recorded from.
    std::panic::catch_unwind(|| match MessageParser::default().parse(raw) {
        Some(message) => classify_message(&message),
        None => Inbound::AutoReply,
    })
    .unwrap_or(Inbound::AutoReply)
}

fn classify_message(message: &Message<'_>) -> Inbound {
    let mut feedback = None;
    let mut status = None;
    let mut returned = None;
    for part in message.parts.iter().skip(1) {
        match part_kind(part) {
            PartKind::Feedback if feedback.is_none() => feedback = Some(part),
            PartKind::DeliveryStatus if status.is_none() => status = Some(part),
            PartKind::Returned if returned.is_none() => returned = Some(part),
            _ => {}
        }
    }
    if let Some(report) = feedback
        && let Some(complaint) = arf::parse(report.contents(), returned)
    {
        return Inbound::Complaint(complaint);
    }
    if let Some(report) = status {
        return Inbound::Bounce(dsn::parse(report.contents(), returned));
    }
    let daemon = from_mailer_daemon(message);
    if !daemon && autoreply::is_auto_reply(message) {
        return Inbound::AutoReply;
    }
    if let Some(bounce) = plain::parse(message, returned, daemon) {
        return Inbound::Bounce(bounce);
    }
    if daemon {
        return Inbound::AutoReply;
    }
    match received::parse(message) {
        Some(received) => Inbound::Message(received),
        None => Inbound::AutoReply,
    }
}

/// What a part of a report is.
enum PartKind {
    /// `message/feedback-report` (RFC 5965).
    Feedback,
    /// `message/delivery-status` (RFC 3464) or `message/global-delivery-status` (RFC 6533).
    DeliveryStatus,
    /// The returned message or its headers.
    Returned,
    Other,
}

fn part_kind(part: &MessagePart<'_>) -> PartKind {
    let Some(ct) = part.content_type() else {
        return PartKind::Other;
    };
    let ctype = ct.ctype();
    let sub = ct.subtype().unwrap_or("");
    let is = |t: &str, s: &str| ctype.eq_ignore_ascii_case(t) && sub.eq_ignore_ascii_case(s);
    if is("message", "feedback-report") {
        PartKind::Feedback
    } else if is("message", "delivery-status") || is("message", "global-delivery-status") {
        PartKind::DeliveryStatus
    } else if is("message", "rfc822")
        || is("message", "global")
        || is("text", "rfc822-headers")
        || is("message", "rfc822-headers")
        || is("message", "global-headers")
    {
        PartKind::Returned
    } else {
        PartKind::Other
    }
}

/// Whether a mailer daemon sent the message: a null return path (`Return-Path: <>`), or a
/// `From` of `MAILER-DAEMON`, `postmaster` or a "Mail Delivery" system.
fn from_mailer_daemon(message: &Message<'_>) -> bool {
    if message
        .header_raw("Return-Path")
        .is_some_and(|r| r.trim() == "<>")
    {
        return true;
    }
    let Some(from) = message.from().and_then(|f| f.first()) else {
        return false;
    };
    let local = from
        .address()
        .and_then(|a| a.rsplit_once('@').map(|(l, _)| l).or(Some(a)))
        .unwrap_or("");
    let daemon_local = [
        "mailer-daemon",
        "mailerdaemon",
        "mail-daemon",
        "maildaemon",
        "postmaster",
    ]
    .iter()
    .any(|d| local.eq_ignore_ascii_case(d));
    daemon_local
        || from
            .name()
            .is_some_and(|n| contains_ignore_case(n, "mail delivery"))
}

/// The text value of a header of `message` (first of that name, any case).
fn header_text<'a>(message: &'a Message<'_>, name: &str) -> Option<&'a str> {
    message
        .root_part()
        .headers()
        .iter()
        .find(|h| h.name().eq_ignore_ascii_case(name))
        .and_then(|h| h.value().as_text())
}

/// The id of the returned message (or of its headers) in `part`.
fn returned_message_id(part: &MessagePart<'_>) -> Option<String> {
    with_returned(part, message_id_of)
}

/// Calls `f` with the returned message (or its headers) in `part`.
fn with_returned<T>(
    part: &MessagePart<'_>,
    f: impl FnOnce(&Message<'_>) -> Option<T>,
) -> Option<T> {
    match part.message() {
        Some(message) => f(message),
        None => {
            let contents = part.contents();
            let headers = &contents[..contents.len().min(MAX_REPORT_BYTES)];
            MessageParser::default()
                .parse_headers(headers)
                .and_then(|m| f(&m))
        }
    }
}

/// Herald's id of a returned message: `X-Herald-Message-Id`, else `Message-ID`.
fn message_id_of(message: &Message<'_>) -> Option<String> {
    header_text(message, "X-Herald-Message-Id")
        .and_then(clean_id)
        .or_else(|| message.message_id().and_then(clean_id))
}

/// The single `To` address of a message (none when it names several).
fn single_to(message: &Message<'_>) -> Option<String> {
    let mut to = message.to()?.iter();
    let first = to.next()?;
    if to.next().is_some() {
        return None;
    }
    normalize_address(first.address()?)
}

/// A message id without its angle brackets and space; `None` when nothing is left.
fn clean_id(id: &str) -> Option<String> {
    let id = id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!id.is_empty() && id.len() <= 998 && !id.contains(char::is_whitespace)).then(|| id.to_string())
}

/// An address normalised like the contacts' (`EmailAddress`), from a value that may carry a
/// display name or angle brackets, a trailing comment or punctuation:
/// `Ann <Ann@Example.com> (user unknown):` is `ann@example.com`.
fn normalize_address(value: &str) -> Option<String> {
    let value = value.split('(').next().unwrap_or("");
    let value = match (value.find('<'), value.rfind('>')) {
        (Some(open), Some(close)) if open < close => &value[open + 1..close],
        _ => value,
    };
    let value = value
        .trim()
        .trim_end_matches([':', ',', ';', '.'])
        .trim_matches(['<', '>'])
        .trim();
    EmailAddress::parse(value)
        .ok()
        .map(|a| a.as_str().to_string())
}

/// At most `max` bytes of `bytes` as text (invalid UTF-8 replaced).
fn capped_text(bytes: &[u8], max: usize) -> Cow<'_, str> {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)])
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate_str(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with its whitespace runs made single spaces, at most `MAX_DIAGNOSTIC_CHARS` chars.
fn diagnostic(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = 0;
    for word in text.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == MAX_DIAGNOSTIC_CHARS {
                return Some(out);
            }
            out.push(c);
            chars += 1;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Whether `haystack` contains `needle` (ASCII, any case).
fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// The header-like field groups of a report (RFC 3464 §2.1, RFC 5965 §3.1): `name: value` lines,
/// folded lines joined, groups separated by blank lines; names lowercased. At most
/// `MAX_RECIPIENTS + 1` groups.
fn field_groups(text: &str) -> Vec<Vec<(String, String)>> {
    let mut groups: Vec<Vec<(String, String)>> = Vec::new();
    let mut current: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                groups.push(std::mem::take(&mut current));
                if groups.len() > MAX_RECIPIENTS {
                    return groups;
                }
            }
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = current.last_mut()
                && value.len() < MAX_FIELD_BYTES
            {
                value.push(' ');
                value.push_str(truncate_str(line.trim(), MAX_FIELD_BYTES));
            }
        } else if let Some((name, value)) = line.split_once(':') {
            let value = truncate_str(value.trim(), MAX_FIELD_BYTES);
            current.push((name.trim().to_ascii_lowercase(), value.to_string()));
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

/// The value of the first field `name` (lowercase) of a group.
fn field<'a>(group: &'a [(String, String)], name: &str) -> Option<&'a str> {
    group
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// An enhanced status code (RFC 3463) of class 2, 4 or 5 that starts `token`: `"5.1.1"`.
fn status_code(token: &str) -> Option<String> {
    let b = token.as_bytes();
    let class = *b.first()?;
    if !matches!(class, b'2' | b'4' | b'5') || b.get(1) != Some(&b'.') {
        return None;
    }
    let mut i = 2;
    for part in 0..2 {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() && i - start < 4 {
            i += 1;
        }
        if i == start || i - start > 3 {
            return None;
        }
        if part == 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
    }
    // Not the start of something longer (an IP address, a version).
    let next = b.get(i).copied();
    let after = b.get(i + 1).copied();
    if next.is_some_and(|c| c.is_ascii_digit() || c.is_ascii_alphabetic())
        || (next == Some(b'.') && after.is_some_and(|c| c.is_ascii_digit()))
    {
        return None;
    }
    Some(token[..i].to_string())
}

/// The first enhanced status code of class 4 or 5 in `text`, standing alone.
fn find_status(text: &str) -> Option<String> {
    let b = text.as_bytes();
    (0..b.len())
        .filter(|&i| matches!(b[i], b'4' | b'5'))
        .filter(|&i| i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'))
        .find_map(|i| status_code(&text[i..]))
}

/// The first basic SMTP reply code of class 4 or 5 in `text` (`550`, `554-`, `421:`).
fn find_reply_code(text: &str) -> Option<u16> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(2)).find_map(|i| {
        let code = &b[i..i + 3];
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.');
        let after_ok = b
            .get(i + 3)
            .is_none_or(|c| matches!(c, b' ' | b'-' | b':' | b'\t' | b'\r' | b'\n'));
        (before_ok
            && after_ok
            && matches!(code[0], b'4' | b'5')
            && matches!(code[1], b'0'..=b'5')
            && code[2].is_ascii_digit())
        .then(|| {
            u16::from(code[0] - b'0') * 100
                + u16::from(code[1] - b'0') * 10
                + u16::from(code[2] - b'0')
        })
    })
}

/// A bounce recipient from its address, status and diagnostic.
fn bounce_recipient(
    address: String,
    status: String,
    diagnostic: Option<String>,
) -> BounceRecipient {
    BounceRecipient {
        hard: status.starts_with('5'),
        address,
        status,
        diagnostic,
    }
}
