//! `mailgun`: delivers through Mailgun's API, `POST /v3/<domain>/messages.mime`, one call per
//! message (the endpoint takes one MIME message), using only the `http`, `clock`, `log` and
//! `settings` capabilities:
//!
//! ```toml
//! [plugins]
//! transport = "mailgun"
//!
//! [plugins.settings.mailgun]
//! api_key = "key-…"                 # a Mailgun API key (sending key or account key)
//! region = "eu"                      # `us` (default) or `eu`: api.mailgun.net / api.eu.mailgun.net
//! webhook_signing_key = "…"          # Webhooks → HTTP webhook signing key
//! # domain = "mg.{domain}"           # the Mailgun sending domain; default: the sender's domain
//! # api_base = "https://api.mailgun.net"
//! ```
//!
//! The message is the one Herald built and DKIM-signed, sent as is with one header line
//! prepended, `X-Mailgun-Variables: {"herald_id":"eml_…"}` (a header added above a DKIM
//! signature leaves it valid: the signature covers only the headers it names). Mailgun echoes
//! the variables in every webhook event as `user-variables`, which names the email.
//!
//! Webhooks are Mailgun's JSON events, `{"signature": {timestamp, token, signature},
//! "event-data": {…}}`, authenticated as Mailgun documents: HMAC-SHA256 of `timestamp + token`
//! under the webhook signing key, compared in constant time; a timestamp more than 5 minutes
//! away from the clock is refused.

mod webhook;

use base64::Engine;
use herald_sdk::http::{self, Request};
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, Guest, Notification, OutgoingMessage, Receipt,
};
use provider_kit::deliver::{api_base, each, excerpt, required, setting};

/// The settings' table, for messages.
const TABLE: &str = "plugins.settings.mailgun";

struct Mailgun;

/// The configured client.
struct Client {
    base: String,
    api_key: String,
    domain: Option<String>,
}

impl Client {
    fn from_settings() -> Result<Client, DeliveryError> {
        let api_key = required("mailgun", "api_key")?;
        let base = match setting("api_base") {
            Some(_) => api_base(""),
            None => match setting("region")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str()
            {
                "" | "us" => "https://api.mailgun.net".to_string(),
                "eu" => "https://api.eu.mailgun.net".to_string(),
                other => {
                    return Err(DeliveryError::Permanent(format!(
                        "{TABLE}.region is `{other}`: set `us` or `eu` (the region of the Mailgun \
                         sending domain)"
                    )));
                }
            },
        };
        Ok(Client {
            base,
            api_key,
            domain: setting("domain"),
        })
    }

    /// The Mailgun sending domain of a message from `sender`: the `domain` setting (where
    /// `{domain}` stands for the sender's domain), else the sender's domain, less the `bounces.`
    /// label of Herald's return path.
    fn domain_of(&self, sender: &str) -> Result<String, DeliveryError> {
        let own = sender
            .rsplit_once('@')
            .map(|(_, d)| d.trim_end_matches('>').to_ascii_lowercase())
            .filter(|d| !d.is_empty())
            .map(|d| match d.strip_prefix("bounces.") {
                Some(rest) if rest.contains('.') => rest.to_string(),
                _ => d,
            });
        match (&self.domain, own) {
            (Some(set), Some(own)) => Ok(set.replace("{domain}", &own)),
            (Some(set), None) if !set.contains("{domain}") => Ok(set.clone()),
            (None, Some(own)) => Ok(own),
            _ => Err(DeliveryError::Permanent(format!(
                "the envelope sender `{sender}` has no domain to send from"
            ))),
        }
    }

    fn send(&self, message: &OutgoingMessage) -> Result<Receipt, DeliveryError> {
        let domain = self.domain_of(&message.sender)?;
        let mime = with_variables(&message.id, &message.raw);
        let boundary = boundary_for(&message.id, &mime);
        let body = form_data(&boundary, &message.recipients, &mime);
        let mut request = Request::new("POST", &format!("{}/v3/{domain}/messages.mime", self.base));
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("api:{}", self.api_key));
        request
            .headers
            .push(("authorization".into(), format!("Basic {credentials}")));
        request.headers.push((
            "content-type".into(),
            format!("multipart/form-data; boundary={boundary}"),
        ));
        request.body = Some(body);
        let response = http::send(&request).map_err(|e| match e {
            http::Error::Timeout | http::Error::Transport(_) | http::Error::TooLarge(_) => {
                DeliveryError::Transient(format!("calling Mailgun failed: {}", http::describe(&e)))
            }
            _ => {
                DeliveryError::Permanent(format!("calling Mailgun failed: {}", http::describe(&e)))
            }
        })?;
        answer(&domain, &response)
    }
}

/// The message with `X-Mailgun-Variables` prepended (the line ending of the message's own).
fn with_variables(id: &str, raw: &[u8]) -> Vec<u8> {
    let eol: &[u8] = if raw.windows(2).any(|w| w == b"\r\n") {
        b"\r\n"
    } else {
        b"\n"
    };
    let variables = serde_json::json!({ "herald_id": id }).to_string();
    let mut out = Vec::with_capacity(raw.len() + variables.len() + 24);
    out.extend_from_slice(b"X-Mailgun-Variables: ");
    out.extend_from_slice(variables.as_bytes());
    out.extend_from_slice(eol);
    out.extend_from_slice(raw);
    out
}

/// A multipart boundary that does not occur in `content`.
fn boundary_for(id: &str, content: &[u8]) -> String {
    let mut n = 0u32;
    loop {
        let boundary = format!("herald-{id}-{n}");
        if !content
            .windows(boundary.len())
            .any(|w| w == boundary.as_bytes())
        {
            return boundary;
        }
        n += 1;
    }
}

/// The `multipart/form-data` body: one `to` field per recipient and the message as the file
/// field `message`.
fn form_data(boundary: &str, recipients: &[String], mime: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(mime.len() + 256 * (recipients.len() + 1));
    for to in recipients {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"to\"\r\n\r\n{to}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"message\"; \
             filename=\"message.mime\"\r\nContent-Type: message/rfc822\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(mime);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// What Mailgun's answer means for the message.
fn answer(domain: &str, response: &http::Response) -> Result<Receipt, DeliveryError> {
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    let said = body["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| excerpt(&response.body));
    let status = response.status;
    match status {
        200..=299 => {
            let id = body["id"]
                .as_str()
                .map(|id| id.trim_matches(['<', '>']).to_string())
                .ok_or_else(|| {
                    DeliveryError::Transient(format!(
                        "Mailgun answered {status} without a message id"
                    ))
                })?;
            Ok(Receipt {
                provider_id: id,
                detail: Some(said),
            })
        }
        401 | 403 => Err(DeliveryError::Permanent(format!(
            "Mailgun refused the API key ({status} {said}): check {TABLE}.api_key, and \
             {TABLE}.region (a key of the EU region is refused by the US API)"
        ))),
        404 => Err(DeliveryError::Permanent(format!(
            "Mailgun knows no sending domain `{domain}` for this key ({said}): add it at Mailgun, \
             or set {TABLE}.domain (and {TABLE}.region)"
        ))),
        429 => {
            let seconds = provider_kit::retry_after(&response.headers);
            Err(DeliveryError::Transient(format!(
                "rate limited by Mailgun (retry after {seconds} s)"
            )))
        }
        500..=599 => Err(DeliveryError::Transient(format!(
            "Mailgun answered {status}: {said}"
        ))),
        _ => Err(DeliveryError::Permanent(format!(
            "Mailgun refused the message ({status}): {said}"
        ))),
    }
}

impl Guest for Mailgun {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        Client::from_settings()?.send(&message)
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        // messages.mime takes one message a call; the settings are read once for the batch.
        match Client::from_settings() {
            Ok(client) => messages.iter().map(|m| client.send(m)).collect(),
            Err(e) => each(messages.len(), &e),
        }
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        let key = setting("webhook_signing_key").ok_or_else(|| {
            format!(
                "the notification cannot be authenticated: {TABLE}.webhook_signing_key is \
                     not set"
            )
        })?;
        webhook::parse(&notification.body, &key, herald_sdk::clock::now())
    }
}

herald_sdk::export_transport!(Mailgun);
