//! `smtp`: delivers through the host's pooled SMTP client (capability `smtp`; the relay, TLS
//! mode and credentials are host settings). A batch is sent message by message over the pool's
//! connection, which each send hands back for the next one.
//!
//! Notifications are delivery status notifications (RFC 3464 `message/delivery-status` parts)
//! forwarded as the raw message body, authenticated by the header `x-herald-secret` when a
//! secret is configured: `Action: failed` with a `5.x.x` status is a hard bounce, with `4.x.x` a
//! soft bounce; `Action: delivered` is a delivery.

use herald_sdk::smtp::{Envelope, Error};
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, DeliveryEventKind, Guest, Notification, OutgoingMessage, Receipt,
};

struct Smtp;

fn header<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    block.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

impl Guest for Smtp {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        let envelope = Envelope {
            sender: message.sender,
            recipients: message.recipients,
        };
        match herald_sdk::smtp::send(&envelope, &message.raw) {
            Ok(reply) => Ok(Receipt {
                provider_id: message.id,
                detail: Some(reply),
            }),
            Err(Error::Transient(e)) => Err(DeliveryError::Transient(e)),
            Err(Error::Permanent(e)) => Err(DeliveryError::Permanent(e)),
        }
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        messages.into_iter().map(Smtp::deliver).collect()
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
        let text = String::from_utf8_lossy(&notification.body).replace("\r\n", "\n");
        let message_id = header(&text, "X-Herald-Message-Id")
            .or_else(|| header(&text, "Original-Message-ID"))
            .map(|id| id.trim_matches(['<', '>']).to_string());
        let now = herald_sdk::clock::now();
        let mut events = Vec::new();
        // Per-recipient blocks of the delivery-status part are separated by blank lines.
        for block in text.split("\n\n") {
            let Some(recipient) = header(block, "Final-Recipient") else {
                continue;
            };
            let email = recipient
                .split_once(';')
                .map_or(recipient, |(_, a)| a)
                .trim()
                .to_string();
            let action = header(block, "Action").unwrap_or("").to_ascii_lowercase();
            let status = header(block, "Status").unwrap_or("");
            let diagnostic = header(block, "Diagnostic-Code").map(str::to_string);
            let kind = match action.as_str() {
                "delivered" | "relayed" | "expanded" => DeliveryEventKind::Delivered,
                "failed" if status.starts_with('4') => DeliveryEventKind::BouncedSoft,
                "failed" => DeliveryEventKind::BouncedHard,
                "delayed" => DeliveryEventKind::BouncedSoft,
                _ => continue,
            };
            events.push(DeliveryEvent {
                kind,
                message_id: message_id.clone(),
                email,
                at: now,
                detail: diagnostic.or_else(|| (!status.is_empty()).then(|| status.to_string())),
            });
        }
        if events.is_empty() {
            return Err("no delivery status found in the notification".into());
        }
        Ok(events)
    }
}

herald_sdk::export_transport!(Smtp);
