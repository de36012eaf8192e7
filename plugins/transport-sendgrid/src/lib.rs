//! `sendgrid`: delivers through SendGrid's v3 API, `POST /v3/mail/send`, using only the `http`,
//! `clock`, `log` and `settings` capabilities:
//!
//! ```toml
//! [plugins]
//! transport = "sendgrid"
//!
//! [plugins.settings.sendgrid]
//! api_key = "SG.…"                   # an API key with the Mail Send permission
//! webhook_public_key = "MFkw…"       # Event Webhook → Signature Verification's public key
//! # api_base = "https://api.sendgrid.com"   # https://api.eu.sendgrid.com for EU subusers
//! ```
//!
//! SendGrid takes fields, not a MIME message, so each message Herald built is parsed into them
//! (see [`mail`]) and SendGrid builds and DKIM-signs its own message from them; the headers that
//! are not fields (`Message-ID`, `List-Unsubscribe`, the caller's) travel in `headers`.
//!
//! One call per message. A call could carry up to 1,000 personalizations, but they share one
//! body, subject and set of headers: SendGrid would give every copy the same `Message-ID`, and
//! each Herald email has its own (its id, which bounces and replies quote), its own rendered
//! content and its own unsubscribe link. The email's id also travels as the custom argument
//! `herald_id`, which SendGrid puts in every event of the message.
//!
//! Event Webhook calls are verified with SendGrid's signature: ECDSA P-256 over SHA-256 of the
//! `X-Twilio-Email-Event-Webhook-Timestamp` header followed by the raw body, in the
//! `X-Twilio-Email-Event-Webhook-Signature` header (base64 DER), checked against the public key
//! SendGrid shows (base64 DER SubjectPublicKeyInfo); timestamps more than 5 minutes from the
//! clock are refused.

mod mail;
mod webhook;

use herald_sdk::http::{self, Request};
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, Guest, Notification, OutgoingMessage, Receipt,
};
use provider_kit::deliver::{api_base, each, excerpt, required, setting};
use provider_kit::header;

/// The settings' table, for messages.
const TABLE: &str = "plugins.settings.sendgrid";

struct SendGrid;

struct Client {
    url: String,
    api_key: String,
}

impl Client {
    fn from_settings() -> Result<Client, DeliveryError> {
        Ok(Client {
            url: format!("{}/v3/mail/send", api_base("https://api.sendgrid.com")),
            api_key: required("sendgrid", "api_key")?,
        })
    }

    fn send(&self, message: &OutgoingMessage) -> Result<Receipt, DeliveryError> {
        let body = mail::body(&message.id, &message.recipients, &message.raw)
            .map_err(DeliveryError::Permanent)?;
        let mut request = Request::new("POST", &self.url);
        request
            .headers
            .push(("authorization".into(), format!("Bearer {}", self.api_key)));
        request
            .headers
            .push(("content-type".into(), "application/json".into()));
        request.body = Some(body.to_string().into_bytes());
        let response = http::send(&request).map_err(|e| {
            let reason = format!("calling SendGrid failed: {}", http::describe(&e));
            match e {
                http::Error::Timeout | http::Error::Transport(_) | http::Error::TooLarge(_) => {
                    DeliveryError::Transient(reason)
                }
                _ => DeliveryError::Permanent(reason),
            }
        })?;
        outcome(&response, herald_sdk::clock::now() / 1000)
    }
}

/// SendGrid's error messages (`{"errors": [{"message", "field"}]}`), joined.
fn errors(body: &[u8]) -> String {
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let listed: Vec<String> = parsed["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| {
                    let message = e["message"].as_str()?;
                    Some(match e["field"].as_str().filter(|f| !f.is_empty()) {
                        Some(field) => format!("{field}: {message}"),
                        None => message.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if listed.is_empty() {
        excerpt(body)
    } else {
        listed.join("; ")
    }
}

/// What SendGrid's answer means for the message; `now` in unix seconds.
fn outcome(response: &http::Response, now: i64) -> Result<Receipt, DeliveryError> {
    let status = response.status;
    match status {
        200..=299 => Ok(Receipt {
            provider_id: header(&response.headers, "x-message-id")
                .filter(|id| !id.is_empty())
                .ok_or_else(|| {
                    DeliveryError::Transient(format!(
                        "SendGrid answered {status} without an X-Message-Id"
                    ))
                })?
                .to_string(),
            detail: Some(format!("{status} accepted")),
        }),
        401 | 403 => Err(DeliveryError::Permanent(format!(
            "SendGrid refused the API key ({status} {}): check {TABLE}.api_key (it needs the \
             Mail Send permission)",
            errors(&response.body)
        ))),
        429 => {
            let seconds = header(&response.headers, "retry-after")
                .map(|_| provider_kit::retry_after(&response.headers) as i64)
                .or_else(|| {
                    header(&response.headers, "x-ratelimit-reset")
                        .and_then(|v| v.parse::<i64>().ok())
                        .map(|reset| reset - now)
                })
                .map(|s| s.max(1))
                .unwrap_or(60);
            Err(DeliveryError::Transient(format!(
                "rate limited by SendGrid (retry after {seconds} s)"
            )))
        }
        500..=599 => Err(DeliveryError::Transient(format!(
            "SendGrid answered {status}: {}",
            errors(&response.body)
        ))),
        _ => Err(DeliveryError::Permanent(format!(
            "SendGrid refused the message ({status}): {}",
            errors(&response.body)
        ))),
    }
}

impl Guest for SendGrid {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        Client::from_settings()?.send(&message)
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        // One call per message (see the module's docs); the settings are read once.
        match Client::from_settings() {
            Ok(client) => messages.iter().map(|m| client.send(m)).collect(),
            Err(e) => each(messages.len(), &e),
        }
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        let key = setting("webhook_public_key").ok_or_else(|| {
            format!(
                "the notification cannot be authenticated: {TABLE}.webhook_public_key is not \
                     set"
            )
        })?;
        let header = |name: &str| {
            notification
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
        };
        let now = herald_sdk::clock::now();
        webhook::verify(
            &key,
            header("x-twilio-email-event-webhook-signature"),
            header("x-twilio-email-event-webhook-timestamp"),
            &notification.body,
            now / 1000,
        )?;
        webhook::events(&notification.body, now)
    }
}

herald_sdk::export_transport!(SendGrid);
