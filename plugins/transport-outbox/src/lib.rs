//! `outbox`, the default transport: needs no network. Each message is written as an `.eml` file
//! under the data directory and recorded in the outbox index (capability `outbox`).
//!
//! Notifications are JSON, `{ "events": [{ "type", "messageId"?, "email", "at"?, "detail"? }] }`,
//! authenticated by the header `x-herald-secret` when a secret is configured; `type` is one of
//! `delivered`, `bounced-hard`, `bounced-soft`, `complained`, `opened`, `clicked`, `inbound`.

use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, DeliveryEventKind, Guest, Notification, OutgoingMessage, Receipt,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Body {
    events: Vec<EventBody>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventBody {
    r#type: String,
    message_id: Option<String>,
    email: String,
    at: Option<i64>,
    detail: Option<String>,
}

fn kind(name: &str) -> Option<DeliveryEventKind> {
    Some(match name {
        "delivered" => DeliveryEventKind::Delivered,
        "bounced-hard" => DeliveryEventKind::BouncedHard,
        "bounced-soft" => DeliveryEventKind::BouncedSoft,
        "complained" => DeliveryEventKind::Complained,
        "opened" => DeliveryEventKind::Opened,
        "clicked" => DeliveryEventKind::Clicked,
        "inbound" => DeliveryEventKind::Inbound,
        _ => return None,
    })
}

fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !id.starts_with('.')
}

struct Outbox;

impl Guest for Outbox {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        if !safe_id(&message.id) {
            return Err(DeliveryError::Permanent(format!(
                "message id `{}` is not usable as a file name",
                message.id
            )));
        }
        if message.recipients.is_empty() {
            return Err(DeliveryError::Permanent("no recipients".into()));
        }
        match herald_sdk::outbox::store(
            &message.id,
            &message.sender,
            &message.recipients,
            &message.raw,
        ) {
            Ok(path) => Ok(Receipt {
                provider_id: format!("outbox-{}", message.id),
                detail: Some(path),
            }),
            Err(err) => Err(DeliveryError::Transient(err)),
        }
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        messages.into_iter().map(Outbox::deliver).collect()
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        if let Some(secret) = &notification.secret {
            let given = notification
                .headers
                .iter()
                .find(|(name, _)| name == "x-herald-secret")
                .map(|(_, value)| value.as_str());
            if given != Some(secret.as_str()) {
                return Err("the notification is not authenticated (x-herald-secret)".into());
            }
        }
        let body: Body = serde_json::from_slice(&notification.body)
            .map_err(|e| format!("the notification is not valid JSON: {e}"))?;
        let now = herald_sdk::clock::now();
        body.events
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                Ok(DeliveryEvent {
                    kind: kind(&e.r#type)
                        .ok_or_else(|| format!("events[{i}].type `{}` is unknown", e.r#type))?,
                    message_id: e.message_id,
                    email: e.email,
                    at: e.at.unwrap_or(now),
                    detail: e.detail,
                })
            })
            .collect()
    }
}

herald_sdk::export_transport!(Outbox);
