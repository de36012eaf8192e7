//! A person's message: its sender, addressees, subject, bodies, the ids it replies to and its
//! attachments, as `mail-parser` reads them.

use mail_parser::{HeaderValue, Message, MessagePart, MimeHeaders, PartType};

use super::{Received, ReceivedAttachment, clean_id, normalize_address, truncate_str};

/// The longest body (text or HTML) kept, in bytes.
const MAX_BODY_BYTES: usize = 1 << 20;
/// The most addressees kept.
const MAX_TO: usize = 100;
/// The most ids of `In-Reply-To` and of `References` kept.
const MAX_IDS: usize = 100;
/// The most attachments kept.
const MAX_ATTACHMENTS: usize = 32;
/// The longest subject or display name kept, in bytes.
const MAX_LINE_BYTES: usize = 998;

/// `message` as a person's message; `None` when it has no sender address.
pub(super) fn parse(message: &Message<'_>) -> Option<Received> {
    let sender = message
        .from()
        .and_then(|a| a.first())
        .filter(|a| a.address().is_some_and(|s| normalize_address(s).is_some()))
        .or_else(|| message.sender().and_then(|a| a.first()))?;
    let from = normalize_address(sender.address()?)?;
    let from_name = sender
        .name()
        .map(|n| truncate_str(n.trim(), MAX_LINE_BYTES).to_string())
        .filter(|n| !n.is_empty());
    let mut to: Vec<String> = Vec::new();
    for address in message.to().into_iter().flat_map(|a| a.iter()) {
        if to.len() == MAX_TO {
            break;
        }
        if let Some(a) = address.address().and_then(normalize_address)
            && !to.contains(&a)
        {
            to.push(a);
        }
    }
    let text = message
        .text_bodies()
        .next()
        .is_some()
        .then(|| message.body_text(0))
        .flatten()
        .map(|t| body(&t));
    let html = message
        .html_bodies()
        .next()
        .and_then(|part| match &part.body {
            PartType::Html(html) => Some(body(html)),
            _ => None,
        });
    let attachments = message
        .attachments()
        .take(MAX_ATTACHMENTS)
        .map(attachment)
        .collect();
    Some(Received {
        from,
        from_name,
        to,
        subject: truncate_str(message.subject().unwrap_or("").trim(), MAX_LINE_BYTES).to_string(),
        text,
        html,
        message_id: message.message_id().and_then(clean_id),
        in_reply_to: ids(message.in_reply_to()),
        references: ids(message.references()),
        attachments,
    })
}

/// A body with LF line ends, at most `MAX_BODY_BYTES`.
fn body(text: &str) -> String {
    truncate_str(&text.replace("\r\n", "\n"), MAX_BODY_BYTES).to_string()
}

/// The message ids of an id header.
fn ids(value: &HeaderValue<'_>) -> Vec<String> {
    match value {
        HeaderValue::Text(id) => clean_id(id).into_iter().collect(),
        HeaderValue::TextList(list) => list
            .iter()
            .filter_map(|id| clean_id(id))
            .take(MAX_IDS)
            .collect(),
        _ => Vec::new(),
    }
}

fn attachment(part: &MessagePart<'_>) -> ReceivedAttachment {
    let content_type = match part.content_type() {
        Some(ct) => match ct.subtype() {
            Some(sub) => format!("{}/{}", ct.ctype(), sub),
            None => ct.ctype().to_string(),
        }
        .to_ascii_lowercase(),
        None if part.is_message() => "message/rfc822".to_string(),
        None if part.is_text() => "text/plain".to_string(),
        None => "application/octet-stream".to_string(),
    };
    ReceivedAttachment {
        filename: part
            .attachment_name()
            .map(|n| truncate_str(n.trim(), 255).to_string())
            .filter(|n| !n.is_empty()),
        content_type,
        content: part.contents().to_vec(),
    }
}
