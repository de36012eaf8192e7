//! `hello-transport`: an example mail transport for Herald, for an imaginary provider, Hello
//! Mail, with an HTTP API. See `docs/writing-a-transport.md`.
//!
//! Settings (`[plugins.settings.hellomail]`): `url`, the API endpoint the messages are posted to;
//! `secret`, the key its notifications are signed with.
//!
//! **Delivery.** One `POST <url>` per batch, with the JSON body
//! `{"messages": [{"id", "sender", "recipients", "raw"}]}` (`raw`: the whole RFC 5322 message,
//! base64). The API answers `2xx` with `{"results": [{"id": "<its id>"} | {"error": "<why>"}]}`,
//! one per message in order: an `error` is that message's permanent refusal, the others are
//! delivered. Any other answer concerns the whole call: `429` is transient and says how long to
//! wait (`Retry-After`, in the `(retry after N s)` form the host reads), `5xx` and network
//! failures are transient, other `4xx` permanent.
//!
//! **Notifications.** Hello Mail posts `[{"type", "messageId", "email", "detail"?}]` to
//! `/webhooks/notify/hellomail`, signed: `x-hello-signature` is the hex HMAC-SHA256 of the body
//! under `secret`. A sender that cannot set headers may put the same hex in the URL instead,
//! `?signature=<hex>` (the host passes the query string as the pseudo-header `:query`). Types:
//! `delivered`, `bounced` (hard), `deferred` (soft bounce), `complained`, `opened`, `clicked`;
//! others are skipped.

use base64::Engine;
use herald_sdk::http::{self, Request};
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, DeliveryEventKind, Guest, Notification, OutgoingMessage, Receipt,
};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The name in `hellomail.toml`: its settings are `plugins.settings.hellomail.*`. Rename both
/// together.
const NAME: &str = "hellomail";

/// How long to wait after a `429` without a usable `Retry-After`, in seconds.
const DEFAULT_RETRY_AFTER: u64 = 60;

/// A message as the API takes it.
#[derive(Serialize)]
struct ApiMessage<'a> {
    id: &'a str,
    sender: &'a str,
    recipients: &'a [String],
    /// The raw message, base64.
    raw: String,
}

#[derive(Serialize)]
struct SendRequest<'a> {
    messages: Vec<ApiMessage<'a>>,
}

/// The API's answer to a successful call: one result per message, in order.
#[derive(Deserialize)]
struct SendResponse {
    results: Vec<ApiResult>,
}

#[derive(Deserialize)]
struct ApiResult {
    id: Option<String>,
    error: Option<String>,
}

/// One event of a notification.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiEvent {
    r#type: String,
    message_id: Option<String>,
    email: String,
    detail: Option<String>,
}

/// A required setting, or the permanent error naming it.
fn setting(key: &str) -> Result<String, String> {
    herald_sdk::settings::get(key)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| format!("plugins.settings.{NAME}.{key} is not set"))
}

/// The `Retry-After` of a response in seconds (only the delay form; an HTTP date, or none,
/// counts as [`DEFAULT_RETRY_AFTER`]).
fn retry_after(headers: &[(String, String)]) -> u64 {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(DEFAULT_RETRY_AFTER)
}

/// The first 200 characters of a response body, for an error message.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

/// Posts `messages` in one call and answers one outcome per message, in order.
fn send(messages: &[OutgoingMessage]) -> Vec<Result<Receipt, DeliveryError>> {
    let all = |error: DeliveryError| messages.iter().map(|_| Err(error.clone())).collect();
    let url = match setting("url") {
        Ok(url) => url,
        Err(message) => return all(DeliveryError::Permanent(message)),
    };
    // The whole batch is one JSON body: the host sizes batches within a quarter of the memory
    // limit, and base64 makes each message a third larger, so encode straight into the body
    // rather than keeping copies around.
    let engine = base64::engine::general_purpose::STANDARD;
    let body = SendRequest {
        messages: messages
            .iter()
            .map(|m| ApiMessage {
                id: &m.id,
                sender: &m.sender,
                recipients: &m.recipients,
                raw: engine.encode(&m.raw),
            })
            .collect(),
    };
    let body = match serde_json::to_vec(&body) {
        Ok(body) => body,
        Err(e) => return all(DeliveryError::Permanent(format!("cannot encode: {e}"))),
    };
    let mut request = Request::new("POST", &url);
    request.headers = vec![("content-type".into(), "application/json".into())];
    request.body = Some(body);
    let response = match http::send(&request) {
        Ok(response) => response,
        // Timeouts and connection failures pass; a host refused by the allowlist or a bad URL
        // is the operator's to fix, and the message waits for that as for an outage.
        Err(error) => {
            return all(DeliveryError::Transient(format!(
                "Hello Mail: {}",
                http::describe(&error)
            )));
        }
    };
    match response.status {
        200..=299 => {}
        429 => {
            let wait = retry_after(&response.headers);
            return all(DeliveryError::Transient(format!(
                "rate limited by Hello Mail (retry after {wait} s)"
            )));
        }
        status @ 500..=599 => {
            return all(DeliveryError::Transient(format!(
                "Hello Mail answered {status}: {}",
                excerpt(&response.body)
            )));
        }
        status => {
            return all(DeliveryError::Permanent(format!(
                "Hello Mail refused the message ({status}): {}",
                excerpt(&response.body)
            )));
        }
    }
    // Accepted. An answer without one result per message still means the API took them.
    let results = serde_json::from_slice::<SendResponse>(&response.body)
        .ok()
        .map(|r| r.results)
        .filter(|r| r.len() == messages.len());
    let Some(results) = results else {
        herald_sdk::log::warn("Hello Mail accepted the batch without one result per message");
        return messages
            .iter()
            .map(|m| {
                Ok(Receipt {
                    provider_id: m.id.clone(),
                    detail: Some(format!("accepted ({})", response.status)),
                })
            })
            .collect();
    };
    results
        .into_iter()
        .zip(messages)
        .map(|(result, message)| match result.error {
            Some(reason) => Err(DeliveryError::Permanent(format!(
                "Hello Mail refused the message: {reason}"
            ))),
            None => Ok(Receipt {
                provider_id: result.id.unwrap_or_else(|| message.id.clone()),
                detail: None,
            }),
        })
        .collect()
}

/// The signature the sender gave: the header `x-hello-signature`, else the query parameter
/// `signature` of the pseudo-header `:query` (the raw query string, still percent-encoded; a
/// hex value needs no decoding).
fn given_signature(headers: &[(String, String)]) -> Option<&str> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    header("x-hello-signature").or_else(|| {
        header(":query")?
            .split('&')
            .find_map(|pair| pair.strip_prefix("signature="))
    })
}

/// Checks the body's HMAC-SHA256 under the setting `secret`, in constant time.
fn authenticate(notification: &Notification) -> Result<(), String> {
    let secret =
        setting("secret").map_err(|e| format!("cannot authenticate the notification: {e}"))?;
    let given = given_signature(&notification.headers)
        .ok_or("the notification is not authenticated: no x-hello-signature header")?;
    let given = hex::decode(given.trim())
        .map_err(|_| "the notification is not authenticated: the signature is not hex")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|e| format!("cannot authenticate the notification: {e}"))?;
    mac.update(&notification.body);
    mac.verify_slice(&given)
        .map_err(|_| "the notification is not authenticated: the signature does not match".into())
}

fn kind(name: &str) -> Option<DeliveryEventKind> {
    Some(match name {
        "delivered" => DeliveryEventKind::Delivered,
        "bounced" => DeliveryEventKind::BouncedHard,
        "deferred" => DeliveryEventKind::BouncedSoft,
        "complained" => DeliveryEventKind::Complained,
        "opened" => DeliveryEventKind::Opened,
        "clicked" => DeliveryEventKind::Clicked,
        _ => return None,
    })
}

struct HelloMail;

impl Guest for HelloMail {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        send(std::slice::from_ref(&message))
            .pop()
            .unwrap_or_else(|| Err(DeliveryError::Transient("no outcome".into())))
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        if messages.is_empty() {
            return Vec::new();
        }
        send(&messages)
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        // Authenticate before reading anything of the body.
        authenticate(&notification)?;
        let events: Vec<ApiEvent> = serde_json::from_slice(&notification.body)
            .map_err(|e| format!("the notification is not a JSON list of events: {e}"))?;
        let now = herald_sdk::clock::now();
        Ok(events
            .into_iter()
            .filter_map(|e| {
                Some(DeliveryEvent {
                    kind: kind(&e.r#type)?,
                    message_id: e.message_id,
                    email: e.email.to_ascii_lowercase(),
                    at: now,
                    detail: e.detail,
                })
            })
            .collect())
    }
}

herald_sdk::export_transport!(HelloMail);
