//! `postmark`: delivers through Postmark's batch API (`POST /email/batch`, up to 500 messages
//! a call), using only the `http` capability (granted `api.postmarkapp.com`, and the host of
//! `api_base` when set), `clock`, `log` and the plugin's own settings:
//!
//! ```toml
//! [plugins]
//! transport = "postmark"
//!
//! [plugins.settings.postmark]
//! server_token = "…"            # the server's API token (required)
//! message_stream = "outbound"   # the transactional stream by default
//! webhook_secret = "…"          # the webhooks' Basic-auth password or `?secret=` value
//! # api_base = "https://api.postmarkapp.com"
//! ```
//!
//! Postmark takes a message's fields, not a MIME message: each message Herald built is split
//! into `From`, `To`, `Cc`, `Bcc`, `ReplyTo`, `Subject`, `HtmlBody`, `TextBody`, `Headers`
//! (its `Message-ID`, `List-Unsubscribe`… kept) and `Attachments`, with
//! `Metadata.herald_id` naming Herald's email so that the webhooks carry it back. Open and
//! link tracking stay off: Herald tracks them itself.
//!
//! Notifications are Postmark's webhooks (see [`notify`]).

mod notify;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, Guest, Notification, OutgoingMessage, Receipt,
};
use provider_kit::deliver::{
    Api, Outcome, api_base, each, excerpt, in_order, only, required, setting,
};
use serde_json::{Value, json};

/// Most messages Postmark takes in one batch call.
const MAX_MESSAGES: usize = 500;
/// Most bytes of one batch call (Postmark's limit is 50 MB a call).
const MAX_BYTES: usize = 45 * 1024 * 1024;
const DEFAULT_BASE: &str = "https://api.postmarkapp.com";
const API: Api = Api {
    provider: "Postmark",
    error_text,
};

/// The message as Postmark's `/email` and `/email/batch` take it.
fn postmark_message(message: &OutgoingMessage, stream: &str) -> Result<Value, String> {
    let f = provider_kit::split(&message.raw, &message.recipients)
        .map_err(|e| format!("{e}: Postmark needs its fields"))?;
    let mut m = json!({
        "From": f.from,
        "To": f.to.join(", "),
        "Subject": f.subject,
        "Headers": f.headers.iter().map(|(n, v)| json!({ "Name": n, "Value": v })).collect::<Vec<_>>(),
        "TrackOpens": false,
        "TrackLinks": "None",
        "Metadata": { "herald_id": message.id },
        "MessageStream": stream,
    });
    for (key, list) in [("Cc", &f.cc), ("Bcc", &f.bcc), ("ReplyTo", &f.reply_to)] {
        if !list.is_empty() {
            m[key] = json!(list.join(", "));
        }
    }
    if let Some(html) = f.html {
        m["HtmlBody"] = json!(html);
    }
    if let Some(text) = f.text {
        m["TextBody"] = json!(text);
    }
    if !f.attachments.is_empty() {
        m["Attachments"] = f
            .attachments
            .iter()
            .map(|a| {
                let mut part = json!({
                    "Name": a.name,
                    "Content": BASE64.encode(&a.content),
                    "ContentType": a.content_type,
                });
                if let Some(id) = &a.content_id {
                    part["ContentID"] = json!(format!("cid:{id}"));
                }
                part
            })
            .collect();
    }
    Ok(m)
}

/// The text of a Postmark error answer: `{ErrorCode, Message}`.
fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.get("Message").is_some() => format!(
            "ErrorCode {}: {}",
            v["ErrorCode"],
            v["Message"].as_str().unwrap_or_default()
        ),
        _ => excerpt(body),
    }
}

/// The outcome of one message by its entry of the batch answer.
fn outcome(answer: &Value) -> Outcome {
    let code = answer["ErrorCode"].as_i64().unwrap_or(-1);
    let text = answer["Message"].as_str().unwrap_or_default();
    if code == 0 {
        return Ok(Receipt {
            provider_id: answer["MessageID"].as_str().unwrap_or_default().to_string(),
            detail: Some(format!("Postmark: {text}")),
        });
    }
    let to = answer["To"].as_str().unwrap_or("the recipient");
    let why = match code {
        406 => "inactive recipient",
        300 => "invalid email request",
        _ => "refused",
    };
    Err(DeliveryError::Permanent(format!(
        "Postmark refused the message to {to} ({why}, ErrorCode {code}): {text}"
    )))
}

/// One call to `/email/batch` for `messages` (already Postmark's JSON): one outcome each.
fn send_batch(base: &str, token: &str, messages: Vec<Value>) -> Vec<Outcome> {
    let count = messages.len();
    let headers = vec![("X-Postmark-Server-Token".to_string(), token.to_string())];
    let url = format!("{base}/email/batch");
    let body = match API.post_json(&url, headers, &Value::Array(messages), "batch") {
        Ok(body) => body,
        Err(e) => return each(count, &e),
    };
    match serde_json::from_slice(&body) {
        Ok(Value::Array(answers)) if answers.len() == count => {
            answers.iter().map(outcome).collect()
        }
        _ => each(
            count,
            &DeliveryError::Transient(format!(
                "Postmark's answer to the batch is not one result per message: {}",
                excerpt(&body)
            )),
        ),
    }
}

struct Postmark;

impl Guest for Postmark {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        only(Postmark::deliver_batch(vec![message]))
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        let token = match required("postmark", "server_token") {
            Ok(token) => token,
            Err(e) => return each(messages.len(), &e),
        };
        let stream = setting("message_stream").unwrap_or_else(|| "outbound".into());
        let base = api_base(DEFAULT_BASE);
        let mut outcomes: Vec<Option<Outcome>> = messages.iter().map(|_| None).collect();
        // The messages that split into fields, in chunks within Postmark's limits.
        let mut chunks: Vec<Vec<(usize, Value)>> = vec![Vec::new()];
        let mut bytes = 0;
        for (at, message) in messages.iter().enumerate() {
            let m = match postmark_message(message, &stream) {
                Ok(m) => m,
                Err(e) => {
                    outcomes[at] = Some(Err(DeliveryError::Permanent(e)));
                    continue;
                }
            };
            let size = message.raw.len() * 4 / 3 + 1024;
            let full = chunks.last().is_some_and(|c| {
                !c.is_empty() && (c.len() == MAX_MESSAGES || bytes + size > MAX_BYTES)
            });
            if full {
                chunks.push(Vec::new());
                bytes = 0;
            }
            bytes += size;
            chunks.last_mut().expect("one chunk at least").push((at, m));
        }
        for chunk in chunks.into_iter().filter(|c| !c.is_empty()) {
            let (ats, bodies): (Vec<usize>, Vec<Value>) = chunk.into_iter().unzip();
            for (at, outcome) in ats.into_iter().zip(send_batch(&base, &token, bodies)) {
                outcomes[at] = Some(outcome);
            }
        }
        in_order(outcomes)
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        notify::parse(notification)
    }
}

herald_sdk::export_transport!(Postmark);
