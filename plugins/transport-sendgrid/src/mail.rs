//! Herald's MIME message as the JSON body of SendGrid's `POST /v3/mail/send`: SendGrid takes
//! fields, not a message, so the message is parsed (with `mail-parser`) into them.

use base64::Engine;
use mail_parser::{Addr, MessageParser, MimeHeaders};
use serde_json::{Map, Value, json};

/// Headers SendGrid sets itself or refuses in `headers` (its reserved headers, and the ones the
/// fields of the body carry): left out.
const RESERVED: [&str; 16] = [
    "x-sg-id",
    "x-sg-eid",
    "received",
    "dkim-signature",
    "content-type",
    "content-transfer-encoding",
    "to",
    "from",
    "subject",
    "reply-to",
    "cc",
    "bcc",
    "mime-version",
    "date",
    "return-path",
    "x-smtpapi",
];

fn mailbox(addr: &Addr<'_>) -> Option<Value> {
    let email = addr.address()?;
    let mut m = Map::new();
    m.insert("email".into(), json!(email));
    if let Some(name) = addr.name().filter(|n| !n.is_empty()) {
        m.insert("name".into(), json!(name));
    }
    Some(Value::Object(m))
}

/// The body of one message to `recipients` (the envelope's), carrying `id` as the custom
/// argument `herald_id`.
pub fn body(id: &str, recipients: &[String], raw: &[u8]) -> Result<Value, String> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or("the message cannot be parsed as MIME")?;
    let from = message
        .from()
        .and_then(|a| a.first())
        .and_then(mailbox)
        .ok_or("the message has no From address")?;
    // Each envelope recipient, with its display name when the To header names it.
    let named: Vec<&Addr<'_>> = message.to().map(|a| a.iter().collect()).unwrap_or_default();
    let to: Vec<Value> = recipients
        .iter()
        .map(|r| {
            named
                .iter()
                .find(|a| a.address().is_some_and(|x| x.eq_ignore_ascii_case(r)))
                .and_then(|a| a.name())
                .filter(|n| !n.is_empty())
                .map_or_else(
                    || json!({ "email": r }),
                    |name| json!({ "email": r, "name": name }),
                )
        })
        .collect();
    if to.is_empty() {
        return Err("the message has no recipient".into());
    }

    // SendGrid requires text/plain before text/html.
    let mut content = Vec::new();
    if let Some(text) = message
        .text_bodies()
        .find(|p| !p.is_text_html())
        .and_then(|p| p.text_contents())
    {
        content.push(json!({ "type": "text/plain", "value": text }));
    }
    if let Some(html) = message
        .html_bodies()
        .find(|p| p.is_text_html())
        .and_then(|p| p.text_contents())
    {
        content.push(json!({ "type": "text/html", "value": html }));
    }
    if content.is_empty() {
        return Err("the message has neither a text nor an HTML body".into());
    }

    let mut headers = Map::new();
    for (name, value) in message.headers_raw() {
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
            continue;
        }
        let value = value.replace(['\r', '\n'], "");
        headers.insert(name.to_string(), json!(value.trim()));
    }

    let attachments: Vec<Value> = message
        .attachments()
        .map(|part| {
            let mut a = Map::new();
            a.insert(
                "content".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(part.contents())),
            );
            // SendGrid requires a filename; inline parts often have only their Content-ID.
            let filename = part
                .attachment_name()
                .or_else(|| part.content_id().map(|cid| cid.trim_matches(['<', '>'])))
                .unwrap_or("attachment");
            a.insert("filename".into(), json!(filename));
            if let Some(ct) = part.content_type() {
                let kind = match ct.subtype() {
                    Some(sub) => format!("{}/{sub}", ct.ctype()),
                    None => ct.ctype().to_string(),
                };
                a.insert("type".into(), json!(kind));
            }
            let inline = part
                .content_disposition()
                .is_some_and(|d| d.ctype().eq_ignore_ascii_case("inline"));
            match part.content_id().filter(|_| inline) {
                Some(cid) => {
                    a.insert("disposition".into(), json!("inline"));
                    a.insert("content_id".into(), json!(cid.trim_matches(['<', '>'])));
                }
                None => {
                    a.insert("disposition".into(), json!("attachment"));
                }
            }
            Value::Object(a)
        })
        .collect();

    let mut body = json!({
        "personalizations": [{ "to": to }],
        "from": from,
        "subject": message.subject().unwrap_or(""),
        "content": content,
        "custom_args": { "herald_id": id },
        // Herald tracks opens and clicks itself (and adds its own unsubscribe links).
        "tracking_settings": {
            "click_tracking": { "enable": false, "enable_text": false },
            "open_tracking": { "enable": false },
            "subscription_tracking": { "enable": false },
        },
    });
    if !headers.is_empty() {
        body["headers"] = Value::Object(headers);
    }
    if let Some(reply_to) = message.reply_to().and_then(|a| a.first()).and_then(mailbox) {
        body["reply_to"] = reply_to;
    }
    if !attachments.is_empty() {
        body["attachments"] = Value::Array(attachments);
    }
    Ok(body)
}
