//! Postmark's webhooks: one JSON record a call, its kind in `RecordType`.
//!
//! Authenticated by the setting `webhook_secret`, which the webhook URL carries either as the
//! Basic-auth password (`https://postmark:<secret>@herald.example/webhooks/notify/postmark`,
//! any user name) or as the query parameter `secret` (`…/webhooks/notify/postmark?secret=…`;
//! the host passes the raw query string as the pseudo-header `:query`).
//!
//! | `RecordType` | event |
//! | --- | --- |
//! | `Bounce` | `bounced-hard` for `HardBounce`, `BadEmailAddress`, `ManuallyDeactivated` or any bounce that made the recipient inactive; `complained` for `SpamComplaint`; `bounced-soft` for `Transient`, `SoftBounce`, `DnsError`, `SpamNotification`, `Blocked`, `Unknown`, `VirusNotification`, `DMARCPolicy`, `SMTPApiError`; others (auto-responders, subscribe requests…) are skipped |
//! | `SpamComplaint` | `complained` |
//! | `Delivery` | `delivered` |
//! | `Open` | `opened` |
//! | `Click` | `clicked` (the link as detail) |
//!
//! Each names Herald's email by `Metadata.herald_id`; other record types are skipped.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::transport::{DeliveryEvent, DeliveryEventKind, Notification};
use serde_json::Value;

use provider_kit::deliver::setting;

fn header<'a>(n: &'a Notification, name: &str) -> Option<&'a str> {
    provider_kit::header(&n.headers, name)
}

/// Whether the call carries the secret, as the Basic-auth password or `?secret=`.
fn authenticate(n: &Notification) -> Result<(), String> {
    let Some(secret) = setting("webhook_secret") else {
        return Err(
            "the notification cannot be authenticated: plugins.settings.postmark.webhook_secret is not set"
                .into(),
        );
    };
    let basic = header(n, "authorization")
        .and_then(|v| {
            let (scheme, value) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("basic").then_some(value)
        })
        .and_then(|b64| BASE64.decode(b64.trim()).ok())
        .and_then(|decoded| {
            let at = decoded.iter().position(|b| *b == b':')?;
            Some(decoded[at + 1..].to_vec())
        });
    let query = header(n, ":query").and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "secret")
            .map(|(_, v)| v.into_owned().into_bytes())
    });
    let ok = [basic, query]
        .into_iter()
        .flatten()
        .any(|given| provider_kit::same(&given, secret.as_bytes()));
    if ok {
        Ok(())
    } else {
        Err("the notification is not authenticated: it carries neither the webhook secret as Basic-auth password nor as the `secret` query parameter".into())
    }
}

/// The event kind of a `Bounce` record, or `None` for the types that are not bounces.
fn bounce_kind(record: &Value) -> Option<DeliveryEventKind> {
    let kind = record["Type"].as_str().unwrap_or_default();
    let code = record["TypeCode"].as_i64().unwrap_or(-1);
    match (kind, code) {
        ("SpamComplaint", _) | (_, 100_001) => Some(DeliveryEventKind::Complained),
        ("HardBounce" | "BadEmailAddress" | "ManuallyDeactivated", _)
        | (_, 1 | 100_000 | 100_002) => Some(DeliveryEventKind::BouncedHard),
        _ if record["Inactive"].as_bool() == Some(true) => Some(DeliveryEventKind::BouncedHard),
        (
            "Transient" | "SoftBounce" | "DnsError" | "SpamNotification" | "Blocked" | "Unknown"
            | "VirusNotification" | "DMARCPolicy" | "SMTPApiError",
            _,
        )
        | (_, 2 | 4096 | 256 | 512 | 100_006 | 2048 | 8192 | 100_009 | 100_007) => {
            Some(DeliveryEventKind::BouncedSoft)
        }
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    v.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The event of one record, or `None` for what Herald does not track.
fn event(record: &Value) -> Option<DeliveryEvent> {
    let (kind, email, at, detail) = match record["RecordType"].as_str()? {
        "Bounce" => {
            let detail = [text(&record["Name"]), text(&record["Details"])]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            (
                bounce_kind(record)?,
                &record["Email"],
                &record["BouncedAt"],
                Some(detail).filter(|d| !d.is_empty()),
            )
        }
        "SpamComplaint" => (
            DeliveryEventKind::Complained,
            &record["Email"],
            &record["BouncedAt"],
            text(&record["Details"]),
        ),
        "Delivery" => (
            DeliveryEventKind::Delivered,
            &record["Recipient"],
            &record["DeliveredAt"],
            text(&record["Details"]),
        ),
        "Open" => (
            DeliveryEventKind::Opened,
            &record["Recipient"],
            &record["ReceivedAt"],
            None,
        ),
        "Click" => (
            DeliveryEventKind::Clicked,
            &record["Recipient"],
            &record["ReceivedAt"],
            text(&record["OriginalLink"]),
        ),
        _ => return None,
    };
    Some(DeliveryEvent {
        kind,
        message_id: text(&record["Metadata"]["herald_id"]),
        email: text(email)?.to_ascii_lowercase(),
        at: at
            .as_str()
            .and_then(provider_kit::timestamp)
            .unwrap_or_else(herald_sdk::clock::now),
        detail,
    })
}

/// Authenticates and parses one webhook call (a record, or a list of records).
pub(crate) fn parse(n: Notification) -> Result<Vec<DeliveryEvent>, String> {
    authenticate(&n)?;
    let body: Value = serde_json::from_slice(&n.body)
        .map_err(|e| format!("the notification is not Postmark's JSON: {e}"))?;
    let records = match body {
        Value::Array(records) => records,
        record @ Value::Object(_) => vec![record],
        _ => return Err("the notification is not a Postmark webhook record".into()),
    };
    Ok(records.iter().filter_map(event).collect())
}
