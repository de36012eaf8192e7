//! Plain-text bounces: mailer daemons that send no delivery-status report (Exim's "Mail delivery
//! failed", qmail's and Yahoo's "failure notice", older Postfix and Sendmail, provider
//! variants). A message from a mailer daemon, or with a bounce subject, is a bounce when its
//! text names the failed recipients (a line starting with the address, Exim's
//! `X-Failed-Recipients`, or the quoted original's single `To`) and an enhanced status code or
//! a `4xx`/`5xx` SMTP reply. The original's headers come from a returned part or are quoted in
//! the text, after a line such as "This is a copy of the message".

use mail_parser::{Message, MessageParser, MessagePart};

use super::{
    Bounce, BounceRecipient, MAX_RECIPIENTS, MAX_REPORT_BYTES, bounce_recipient,
    contains_ignore_case, diagnostic, find_reply_code, find_status, header_text, message_id_of,
    normalize_address, returned_message_id, single_to, truncate_str, with_returned,
};

/// Subjects of bounces (lowercase, found anywhere in the subject).
const SUBJECTS: [&str; 18] = [
    "undelivered mail",
    "mail delivery failed",
    "delivery status notification",
    "undeliverable",
    "returned mail",
    "failure notice",
    "delivery failure",
    "delivery has failed",
    "message not delivered",
    "could not be delivered",
    "non-delivery",
    "nondeliverable",
    "could not send message",
    "delayed mail",
    "delivery delayed",
    "mail system error",
    "unzustellbar",
    "non remis",
];

/// Lines that introduce the original message quoted in a bounce (lowercase, found anywhere in
/// the line).
const ORIGINAL_MARKERS: [&str; 9] = [
    "copy of the message",
    "copy of the original message",
    "original message follows",
    "original message headers",
    "below this line is a copy",
    "message headers follow",
    "original message was",
    "undelivered message headers",
    "----- original message -----",
];

/// Phrases that say a failure is permanent when no code does.
const PERMANENT: [&str; 3] = [
    "permanent error",
    "permanent failure",
    "permanent fatal error",
];

/// The bounce `message` is, if it is a plain-text one. `returned` is its returned message part,
/// `daemon` whether a mailer daemon sent it.
pub(super) fn parse(
    message: &Message<'_>,
    returned: Option<&MessagePart<'_>>,
    daemon: bool,
) -> Option<Bounce> {
    if !daemon && !bounce_subject(message) {
        return None;
    }
    let body = message.body_text(0)?;
    let body = truncate_str(&body, MAX_REPORT_BYTES);
    let (explanation, quoted) = split_original(body);
    let quoted_headers = quoted.map(|q| q.trim_start_matches(['\r', '\n', ' ', '\t']));

    let (mut entries, rest) = recipient_entries(explanation);
    if entries.is_empty() {
        let named = header_text(message, "X-Failed-Recipients")
            .map(|v| {
                v.split(',')
                    .filter_map(normalize_address)
                    .collect::<Vec<_>>()
            })
            .filter(|v| !v.is_empty())
            .or_else(|| {
                let to = returned
                    .and_then(|p| with_returned(p, single_to))
                    .or_else(|| quoted_headers.and_then(quoted_single_to))?;
                Some(vec![to])
            })?;
        entries = named.into_iter().map(|a| (a, String::new())).collect();
    }

    // A recipient without a code of its own takes the one the rest of the text gives.
    let shared_status = find_status(&rest)
        .or_else(|| find_reply_code(&rest).map(basic_status))
        .or_else(|| {
            (daemon && PERMANENT.iter().any(|p| contains_ignore_case(&rest, p)))
                .then(|| "5.0.0".to_string())
        });
    let shared_diagnostic = status_line(&rest);
    let recipients: Vec<BounceRecipient> = entries
        .into_iter()
        .filter_map(|(address, text)| {
            let own = find_status(&text).or_else(|| find_reply_code(&text).map(basic_status));
            let (status, diag) = match own {
                Some(status) => (status, diagnostic(&text)),
                None => (
                    shared_status.clone()?,
                    diagnostic(&text).or_else(|| shared_diagnostic.clone()),
                ),
            };
            Some(bounce_recipient(address, status, diag))
        })
        .take(MAX_RECIPIENTS)
        .collect();
    if recipients.is_empty() {
        return None;
    }
    let original_message_id = returned
        .and_then(returned_message_id)
        .or_else(|| quoted_headers.and_then(quoted_message_id));
    Some(Bounce {
        recipients,
        original_message_id,
    })
}

/// Whether the subject is a bounce's (and not a person's reply to or forward of one).
fn bounce_subject(message: &Message<'_>) -> bool {
    let Some(subject) = message.subject() else {
        return false;
    };
    let subject = truncate_str(subject.trim(), 200).to_lowercase();
    let reply = ["re:", "fwd:", "fw:", "aw:", "wg:", "tr:"]
        .iter()
        .any(|p| subject.starts_with(p));
    !reply && SUBJECTS.iter().any(|s| subject.contains(s))
}

/// The bounce's own text and the quoted original (after its marker line), if it quotes one.
fn split_original(body: &str) -> (&str, Option<&str>) {
    let mut offset = 0;
    let mut header_start = None;
    for line in body.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if ORIGINAL_MARKERS
            .iter()
            .any(|m| contains_ignore_case(line, m))
        {
            return (&body[..start], Some(&body[offset..]));
        }
        let starts_headers = ["received:", "return-path:"].iter().any(|h| {
            line.len() >= h.len() && line.as_bytes()[..h.len()].eq_ignore_ascii_case(h.as_bytes())
        });
        if header_start.is_none() && starts_headers {
            header_start = Some(start);
        }
    }
    match header_start {
        Some(start) => (&body[..start], Some(&body[start..])),
        None => (body, None),
    }
}

/// The recipients a bounce's text lists, each with the text that follows it until a blank line
/// (a line starting with the address: `user@example.com`, `<user@example.com>: …`), and the
/// rest of the text.
fn recipient_entries(explanation: &str) -> (Vec<(String, String)>, String) {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut rest = String::new();
    let mut open = false;
    for line in explanation.lines() {
        let line = line.trim();
        if line.is_empty() {
            open = false;
            rest.push('\n');
        } else if let Some((address, after)) = leading_address(line)
            && entries.len() < MAX_RECIPIENTS
        {
            entries.push((address, after.to_string()));
            open = true;
        } else if open && let Some((_, text)) = entries.last_mut() {
            if text.len() < MAX_REPORT_BYTES / 4 {
                text.push(' ');
                text.push_str(line);
            }
        } else {
            rest.push_str(line);
            rest.push('\n');
        }
    }
    (entries, rest)
}

/// The address a line starts with, and the rest of the line.
fn leading_address(line: &str) -> Option<(String, &str)> {
    let inner = line.strip_prefix('<').unwrap_or(line);
    let end = inner
        .find(|c: char| c.is_whitespace() || matches!(c, '>' | ',' | ';' | '(' | ')'))
        .unwrap_or(inner.len());
    let candidate = inner[..end].trim_end_matches([':', '.']);
    if !candidate.contains('@') {
        return None;
    }
    let address = normalize_address(candidate)?;
    let rest = inner[end..].trim_start_matches(['>', ':', ' ', '\t', ',']);
    Some((address, rest))
}

/// The status of a basic SMTP reply code: `5.0.0` for `5xx`, `4.0.0` for `4xx`.
fn basic_status(code: u16) -> String {
    format!("{}.0.0", code / 100)
}

/// The first line of the text holding a status or reply code.
fn status_line(explanation: &str) -> Option<String> {
    explanation
        .lines()
        .find(|l| find_status(l).is_some() || find_reply_code(l).is_some())
        .and_then(diagnostic)
}

fn quoted_single_to(quoted: &str) -> Option<String> {
    MessageParser::default()
        .parse_headers(quoted.as_bytes())
        .and_then(|m| single_to(&m))
}

/// The original's id from its quoted headers: parsed as headers, else a `Message-ID:` line
/// anywhere in the quote (quotes are sometimes indented).
fn quoted_message_id(quoted: &str) -> Option<String> {
    MessageParser::default()
        .parse_headers(quoted.as_bytes())
        .and_then(|m| message_id_of(&m))
        .or_else(|| {
            let mut message_id = None;
            for line in quoted.lines() {
                let line = line.trim();
                let Some((name, value)) = line.split_once(':') else {
                    continue;
                };
                if name.eq_ignore_ascii_case("x-herald-message-id") {
                    return super::clean_id(value);
                }
                if message_id.is_none() && name.eq_ignore_ascii_case("message-id") {
                    message_id = super::clean_id(value);
                }
            }
            message_id
        })
}
