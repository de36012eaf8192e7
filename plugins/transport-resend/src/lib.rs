//! `resend`: delivers through Resend's API, using only the `http` capability (granted
//! `api.resend.com`, and the host of `api_base` when set), `clock`, `log` and the plugin's own
//! settings:
//!
//! ```toml
//! [plugins]
//! transport = "resend"
//!
//! [plugins.settings.resend]
//! api_key = "re_…"          # an API key with sending access (required)
//! webhook_secret = "whsec_…" # the webhook's signing secret
//! # api_base = "https://api.resend.com"
//! ```
//!
//! Resend takes a message's fields, not a MIME message: each message Herald built is split
//! into `from`, `to`, `cc`, `bcc`, `reply_to`, `subject`, `html`, `text`, `headers` (its
//! `Message-ID`, `List-Unsubscribe`… kept) and `attachments`, tagged `herald_id` so that the
//! webhooks carry Herald's email id back. A batch goes to `POST /emails/batch`, up to 100
//! messages a call, in permissive validation (`x-batch-validation: permissive`: a message
//! Resend refuses does not hold back the others); a message with attachments goes alone to
//! `POST /emails`, since the batch endpoint does not take attachments.
//!
//! Notifications are Resend's webhooks, signed as Svix signs them (see [`notify`]).

mod notify;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, Guest, Notification, OutgoingMessage, Receipt,
};
use provider_kit::deliver::{Api, Outcome, api_base, each, excerpt, in_order, only, required};
use serde_json::{Map, Value, json};

/// Most messages Resend takes in one batch call.
const MAX_MESSAGES: usize = 100;
const DEFAULT_BASE: &str = "https://api.resend.com";
const API: Api = Api {
    provider: "Resend",
    error_text,
};

/// The message as Resend's `/emails` takes it, and whether it has attachments.
fn resend_message(message: &OutgoingMessage) -> Result<(Value, bool), String> {
    let f = provider_kit::split(&message.raw, &message.recipients)
        .map_err(|e| format!("{e}: Resend needs its fields"))?;
    let headers: Map<String, Value> = f
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let mut m = json!({
        "from": f.from,
        "to": f.to,
        "subject": f.subject,
        "headers": headers,
        "tags": [{ "name": "herald_id", "value": message.id }],
    });
    for (key, list) in [("cc", &f.cc), ("bcc", &f.bcc), ("reply_to", &f.reply_to)] {
        if !list.is_empty() {
            m[key] = json!(list);
        }
    }
    if let Some(html) = f.html {
        m["html"] = json!(html);
    }
    if let Some(text) = f.text {
        m["text"] = json!(text);
    }
    let attached = !f.attachments.is_empty();
    if attached {
        m["attachments"] = f
            .attachments
            .iter()
            .map(|a| {
                let mut part = json!({
                    "filename": a.name,
                    "content": BASE64.encode(&a.content),
                    "content_type": a.content_type,
                });
                if let Some(id) = &a.content_id {
                    part["content_id"] = json!(id);
                }
                part
            })
            .collect();
    }
    Ok((m, attached))
}

/// The text of a Resend error answer: `{statusCode, name, message}`.
fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.get("message").is_some() => format!(
            "{}: {}",
            v["name"].as_str().unwrap_or("error"),
            v["message"].as_str().unwrap_or_default()
        ),
        _ => excerpt(body),
    }
}

fn receipt(id: &Value) -> Outcome {
    match id.as_str() {
        Some(id) if !id.is_empty() => Ok(Receipt {
            provider_id: id.to_string(),
            detail: Some("accepted by Resend".into()),
        }),
        _ => Err(DeliveryError::Transient(
            "Resend's answer names no id for the message".into(),
        )),
    }
}

fn auth(key: &str) -> Vec<(String, String)> {
    vec![("Authorization".to_string(), format!("Bearer {key}"))]
}

/// One email with attachments to `/emails`.
fn send_one(base: &str, key: &str, email: &Value) -> Outcome {
    let body = API.post_json(&format!("{base}/emails"), auth(key), email, "message")?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    receipt(&answer["id"])
}

/// One call to `/emails/batch` in permissive validation: one outcome for each of `emails`.
fn send_batch(base: &str, key: &str, emails: Vec<Value>) -> Vec<Outcome> {
    let count = emails.len();
    let mut headers = auth(key);
    headers.push(("x-batch-validation".into(), "permissive".into()));
    let url = format!("{base}/emails/batch");
    let body = match API.post_json(&url, headers, &Value::Array(emails), "batch") {
        Ok(body) => body,
        Err(e) => return each(count, &e),
    };
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // `{data: [{id}], errors: [{index, message}]}`: the ids of the accepted emails in order,
    // the refused ones by their index in the call.
    let refused: Vec<(usize, String)> = answer["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| {
                    let at = e["index"].as_u64()? as usize;
                    Some((at, e["message"].as_str().unwrap_or("refused").to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let data = answer["data"].as_array().cloned().unwrap_or_default();
    let mut ids = data.iter();
    (0..count)
        .map(|at| {
            if let Some((_, why)) = refused.iter().find(|(i, _)| *i == at) {
                return Err(DeliveryError::Permanent(format!(
                    "Resend refused the message (validation_error): {why}"
                )));
            }
            match ids.next() {
                Some(entry) => receipt(&entry["id"]),
                None => Err(DeliveryError::Transient(format!(
                    "Resend's answer to the batch has no id for message {at}: {}",
                    excerpt(&body)
                ))),
            }
        })
        .collect()
}

struct Resend;

impl Guest for Resend {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        only(Resend::deliver_batch(vec![message]))
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        let key = match required("resend", "api_key") {
            Ok(key) => key,
            Err(e) => return each(messages.len(), &e),
        };
        let base = api_base(DEFAULT_BASE);
        let mut outcomes: Vec<Option<Outcome>> = messages.iter().map(|_| None).collect();
        let mut batched: Vec<(usize, Value)> = Vec::new();
        for (at, message) in messages.iter().enumerate() {
            outcomes[at] = match resend_message(message) {
                Ok((m, true)) => Some(send_one(&base, &key, &m)),
                Ok((m, false)) => {
                    batched.push((at, m));
                    None
                }
                Err(e) => Some(Err(DeliveryError::Permanent(e))),
            };
        }
        let mut batched = batched.into_iter().peekable();
        while batched.peek().is_some() {
            let (ats, emails): (Vec<usize>, Vec<Value>) =
                batched.by_ref().take(MAX_MESSAGES).unzip();
            for (at, outcome) in ats.into_iter().zip(send_batch(&base, &key, emails)) {
                outcomes[at] = Some(outcome);
            }
        }
        in_order(outcomes)
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        notify::parse(notification)
    }
}

herald_sdk::export_transport!(Resend);
