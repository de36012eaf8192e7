//! `ses`: delivers through Amazon SES API v2 (`SendEmail` with the raw message Herald built,
//! tagged `herald_id`), signing each call with AWS Signature Version 4; one call per message.
//!
//! Notifications arrive through Amazon SNS: every message's signature is checked against the
//! signing certificate, fetched from the configured region's SNS host only and kept for a day
//! by the host's HTTP response cache (`x-herald-cache`: a plugin instance lives for one call,
//! so it cannot keep it itself);
//! a `SubscriptionConfirmation` is confirmed by fetching its `SubscribeURL` on the same host; a
//! `Notification` carrying an SES event becomes delivery events (bounces, complaints,
//! deliveries, opens and clicks).
//!
//! Settings (`plugins.settings.ses.*`): `access_key_id`, `secret_access_key`, `region`
//! (required), `session_token`, `configuration_set`, `topic_arn` (comma-separated topics whose
//! notifications are accepted; any topic when unset), `api_base` (default
//! `https://email.<region>.amazonaws.com`) and `sns_base` (default
//! `https://sns.<region>.amazonaws.com`; for a test double, or the China regions' `.com.cn` hosts).

mod events;
mod sigv4;
mod sns;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use herald_sdk::http::{self, Request};
use herald_sdk::transport::{
    DeliveryError, DeliveryEvent, Guest, Notification, OutgoingMessage, Receipt,
};
use serde_json::{Value, json};

/// The retry delay of a `429` without `Retry-After`, in seconds.
const DEFAULT_RETRY_AFTER: u64 = 60;

/// How long the host keeps the SNS signing certificate (a day; SNS serves a rotated
/// certificate under a new `SigningCertURL`).
const CERTIFICATE_CACHE_SECONDS: u32 = 86_400;
/// How old a notification may be (SNS retries a delivery for a while; its default HTTP policy
/// gives up within a minute).
const MAX_AGE_MS: i64 = 24 * 3600 * 1000;
/// How far in the future a notification's timestamp may be (clock skew).
const MAX_SKEW_MS: i64 = 5 * 60 * 1000;

struct Ses;

/// A setting, when set to something other than blanks.
fn setting(name: &str) -> Option<String> {
    herald_sdk::settings::get(name)
        .map(|value| value.trim().to_string())
        .filter(|value| !value.is_empty())
}

fn required(name: &str) -> Result<String, String> {
    setting(name).ok_or_else(|| format!("plugins.settings.ses.{name} is not set"))
}

/// The AWS region (`us-east-1`): it names hosts, so only its characters are accepted.
fn region() -> Result<String, String> {
    let region = required("region")?;
    let valid = region
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if valid {
        Ok(region)
    } else {
        Err(format!(
            "plugins.settings.ses.region `{region}` is not an AWS region (like `eu-west-1`)"
        ))
    }
}

/// A base URL (`scheme://authority[/prefix]`) without its trailing slash.
fn base(name: &str, default: String) -> String {
    setting(name)
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_string()
}

/// The `Host` header and the path prefix of a base URL.
fn host_and_prefix(base: &str) -> Result<(String, String), String> {
    let (scheme, rest) = base
        .split_once("://")
        .ok_or_else(|| format!("plugins.settings.ses.api_base `{base}` is not a URL"))?;
    let (authority, prefix) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        ":443"
    } else {
        ":80"
    };
    let host = authority
        .strip_suffix(default_port)
        .unwrap_or(authority)
        .to_ascii_lowercase();
    Ok((host, prefix.to_string()))
}

/// What a call needs from the settings.
struct Client {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    region: String,
    api_base: String,
    configuration_set: Option<String>,
}

impl Client {
    fn from_settings() -> Result<Client, String> {
        let access_key_id = required("access_key_id")?;
        let secret_access_key = required("secret_access_key")?;
        let region = region()?;
        Ok(Client {
            access_key_id,
            secret_access_key,
            session_token: setting("session_token"),
            api_base: base("api_base", format!("https://email.{region}.amazonaws.com")),
            configuration_set: setting("configuration_set"),
            region,
        })
    }

    /// `SendEmail` of one message.
    fn send(&self, message: &OutgoingMessage) -> Result<Receipt, DeliveryError> {
        let mut body = json!({
            "Destination": { "ToAddresses": message.recipients },
            "Content": { "Raw": { "Data": STANDARD.encode(&message.raw) } },
            "EmailTags": [{ "Name": "herald_id", "Value": message.id }],
        });
        if let Some(set) = &self.configuration_set {
            body["ConfigurationSetName"] = json!(set);
        }
        let body = body.to_string().into_bytes();
        let (host, prefix) = host_and_prefix(&self.api_base).map_err(DeliveryError::Permanent)?;
        let path = format!("{prefix}/v2/email/outbound-emails");
        let signed = sigv4::sign(
            &sigv4::Request {
                method: "POST",
                host: &host,
                path: &path,
                query: "",
                headers: &[("content-type", "application/json")],
                body: &body,
            },
            &sigv4::Credentials {
                access_key_id: &self.access_key_id,
                secret_access_key: &self.secret_access_key,
                session_token: self.session_token.as_deref(),
            },
            &self.region,
            "ses",
            herald_sdk::clock::now(),
        );
        let mut request = Request::new(
            "POST",
            &format!("{}/v2/email/outbound-emails", self.api_base),
        );
        request
            .headers
            .push(("content-type".into(), "application/json".into()));
        request.headers.extend(signed);
        request.body = Some(body);
        let response = http::send(&request).map_err(|e| {
            DeliveryError::Transient(format!("calling Amazon SES failed: {}", http::describe(&e)))
        })?;
        outcome(message, &response)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// A message's outcome from SES's answer: `{"MessageId"}` when accepted; otherwise its error
/// (type in `x-amzn-ErrorType`, text in `message`): throttling and 5xx are transient, other
/// refusals permanent.
fn outcome(message: &OutgoingMessage, response: &http::Response) -> Result<Receipt, DeliveryError> {
    let body: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    if (200..300).contains(&response.status) {
        let id = body["MessageId"]
            .as_str()
            .unwrap_or(&message.id)
            .to_string();
        return Ok(Receipt {
            detail: Some(format!("accepted by Amazon SES as {id}")),
            provider_id: id,
        });
    }
    let kind = header(&response.headers, "x-amzn-errortype")
        .or_else(|| body["__type"].as_str())
        .or_else(|| body["code"].as_str())
        .map(|t| t.split([':', '#']).find(|p| !p.is_empty()).unwrap_or(t))
        .unwrap_or("")
        .to_string();
    let text = body["message"]
        .as_str()
        .or_else(|| body["Message"].as_str())
        .unwrap_or("no message");
    let status = response.status;
    let what = if kind.is_empty() {
        format!("{status}")
    } else {
        format!("{status} {kind}")
    };
    let throttled = status == 429
        || matches!(
            kind.as_str(),
            "TooManyRequestsException" | "ThrottlingException" | "Throttling"
        );
    if throttled {
        let seconds = header(&response.headers, "retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(DEFAULT_RETRY_AFTER);
        return Err(DeliveryError::Transient(format!(
            "rate limited by Amazon SES (retry after {seconds} s): {what}: {text}"
        )));
    }
    if status >= 500 || kind == "SendingPausedException" {
        return Err(DeliveryError::Transient(format!(
            "Amazon SES answered {what}: {text}"
        )));
    }
    Err(DeliveryError::Permanent(format!(
        "Amazon SES refused the message ({what}): {text}"
    )))
}

/// A GET through the host; the body of a 2xx answer. With `cache_for` (seconds), the host
/// keeps a 2xx answer that long and answers the same GET from it (`x-herald-cache`).
fn fetch(url: &str, what: &str, cache_for: Option<u32>) -> Result<Vec<u8>, String> {
    let mut request = Request::new("GET", url);
    if let Some(seconds) = cache_for {
        request
            .headers
            .push(("x-herald-cache".into(), seconds.to_string()));
    }
    let response = http::send(&request)
        .map_err(|e| format!("fetching {what} ({url}) failed: {}", http::describe(&e)))?;
    if (200..300).contains(&response.status) {
        Ok(response.body)
    } else {
        Err(format!(
            "fetching {what} ({url}) failed: answered {}",
            response.status
        ))
    }
}

fn not_authenticated(why: impl std::fmt::Display) -> String {
    format!("the Amazon SNS message is not authenticated: {why}")
}

/// Authenticates an SNS message (signing certificate on the SNS host, signature, topic, age).
fn authenticate(message: &Value, sns_base: &str, now: i64) -> Result<(), String> {
    let cert_url = message["SigningCertURL"]
        .as_str()
        .or_else(|| message["SigningCertUrl"].as_str())
        .ok_or_else(|| not_authenticated("no SigningCertURL"))?;
    if !sns::on_host(cert_url, sns_base) || !cert_url.ends_with(".pem") {
        return Err(not_authenticated(format!(
            "its SigningCertURL {cert_url} is not a .pem on {sns_base}"
        )));
    }
    let pem = fetch(
        cert_url,
        "the SNS signing certificate",
        Some(CERTIFICATE_CACHE_SECONDS),
    )?;
    let key = sns::public_key(&pem)?;
    sns::verify(message, &key)?;
    let topic = message["TopicArn"].as_str().unwrap_or("");
    if let Some(topics) = setting("topic_arn")
        && !topics.split(',').any(|t| t.trim() == topic)
    {
        return Err(not_authenticated(format!(
            "topic {topic} is not in plugins.settings.ses.topic_arn"
        )));
    }
    let at = message["Timestamp"]
        .as_str()
        .and_then(sigv4::parse_iso8601)
        .ok_or_else(|| not_authenticated("no Timestamp"))?;
    if at < now - MAX_AGE_MS || at > now + MAX_SKEW_MS {
        return Err(not_authenticated(format!(
            "its Timestamp {} is stale or in the future",
            message["Timestamp"].as_str().unwrap_or("")
        )));
    }
    Ok(())
}

impl Guest for Ses {
    fn deliver(message: OutgoingMessage) -> Result<Receipt, DeliveryError> {
        Client::from_settings()
            .map_err(DeliveryError::Permanent)?
            .send(&message)
    }

    fn deliver_batch(messages: Vec<OutgoingMessage>) -> Vec<Result<Receipt, DeliveryError>> {
        match Client::from_settings() {
            Ok(client) => messages.iter().map(|m| client.send(m)).collect(),
            Err(e) => messages
                .iter()
                .map(|_| Err(DeliveryError::Permanent(e.clone())))
                .collect(),
        }
    }

    fn parse_notification(notification: Notification) -> Result<Vec<DeliveryEvent>, String> {
        let message: Value = serde_json::from_slice(&notification.body)
            .ok()
            .filter(Value::is_object)
            .ok_or("the notification is not an Amazon SNS message (a JSON object)")?;
        let region = region()?;
        let sns_base = base("sns_base", format!("https://sns.{region}.amazonaws.com"));
        let now = herald_sdk::clock::now();
        // The type is checked before anything is fetched.
        sns::string_to_sign(&message)?;
        authenticate(&message, &sns_base, now)?;
        match message["Type"].as_str().unwrap_or("") {
            "SubscriptionConfirmation" => {
                let url = message["SubscribeURL"].as_str().unwrap_or("");
                if !sns::on_host(url, &sns_base) {
                    return Err(not_authenticated(format!(
                        "its SubscribeURL {url} is not on {sns_base}"
                    )));
                }
                fetch(url, "the SubscribeURL", None)?;
                herald_sdk::log::info(&format!(
                    "confirmed the subscription to Amazon SNS topic {}",
                    message["TopicArn"].as_str().unwrap_or("")
                ));
                Ok(Vec::new())
            }
            "Notification" => {
                let event: Value = message["Message"]
                    .as_str()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .filter(Value::is_object)
                    .ok_or("the SNS notification's Message is not an Amazon SES event (JSON)")?;
                Ok(events::from_ses(&event, now))
            }
            _ => Ok(Vec::new()),
        }
    }
}

herald_sdk::export_transport!(Ses);
