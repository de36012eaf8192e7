//! Resend's webhooks, signed as Svix signs them: the headers `svix-id`, `svix-timestamp`
//! (Unix seconds) and `svix-signature` (space-separated `v1,<base64>` signatures), each
//! signature the HMAC-SHA256 of `<id>.<timestamp>.<body>` keyed with the base64 after `whsec_`
//! of the setting `webhook_secret`. A call is accepted when one signature matches and its
//! timestamp is within 5 minutes of the host's clock (either way).
//!
//! | `type` | event |
//! | --- | --- |
//! | `email.delivered` | `delivered` |
//! | `email.bounced` | `bounced-soft` when `data.bounce.type` is `Transient`, else `bounced-hard` |
//! | `email.complained` | `complained` |
//! | `email.opened` | `opened` |
//! | `email.clicked` | `clicked` (the link as detail) |
//!
//! One event per address of `data.to`; Herald's email is named by the tag `herald_id`
//! (`data.tags`, an object or a list of `{name, value}`), else by the `Message-ID` of
//! `data.headers`. Other types are skipped.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::transport::{DeliveryEvent, DeliveryEventKind, Notification};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use provider_kit::deliver::setting;

/// How far a signature's timestamp may be from now.
const TOLERANCE_SECONDS: i64 = 300;

fn header<'a>(n: &'a Notification, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| provider_kit::header(&n.headers, name))
}

/// Whether the call is signed with the webhook secret, recently.
fn authenticate(n: &Notification) -> Result<(), String> {
    let Some(secret) = setting("webhook_secret") else {
        return Err(
            "the notification cannot be authenticated: plugins.settings.resend.webhook_secret is not set"
                .into(),
        );
    };
    let key = BASE64
        .decode(secret.trim().trim_start_matches("whsec_"))
        .map_err(|_| {
            "the notification cannot be authenticated: plugins.settings.resend.webhook_secret is not a `whsec_…` signing secret (base64)".to_string()
        })?;
    let (Some(id), Some(timestamp), Some(signatures)) = (
        header(n, &["svix-id", "webhook-id"]),
        header(n, &["svix-timestamp", "webhook-timestamp"]),
        header(n, &["svix-signature", "webhook-signature"]),
    ) else {
        return Err("the notification is not authenticated: svix-id, svix-timestamp and svix-signature are required".into());
    };
    let at: i64 = timestamp.trim().parse().map_err(|_| {
        "the notification is not authenticated: svix-timestamp is not a Unix time".to_string()
    })?;
    let now = herald_sdk::clock::now() / 1000;
    if (now - at).abs() > TOLERANCE_SECONDS {
        return Err(format!(
            "the notification is not authenticated: its svix-timestamp is {} s from now (at most {TOLERANCE_SECONDS} s)",
            (now - at).abs()
        ));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes keys of any size");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(&n.body);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    let matches = signatures.split_whitespace().any(|s| {
        s.split_once(',').is_some_and(|(v, sig)| {
            v == "v1" && provider_kit::same(sig.as_bytes(), expected.as_bytes())
        })
    });
    if matches {
        Ok(())
    } else {
        Err(
            "the notification is not authenticated: no svix-signature matches the webhook secret"
                .into(),
        )
    }
}

fn text(v: &Value) -> Option<String> {
    v.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The value named `name` in a list of `{name, value}` or an object.
fn named(v: &Value, name: &str) -> Option<String> {
    match v {
        Value::Object(map) => map
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| text(v)),
        Value::Array(list) => list.iter().find_map(|e| {
            let key = e["name"].as_str()?;
            key.eq_ignore_ascii_case(name)
                .then(|| text(&e["value"]))
                .flatten()
        }),
        _ => None,
    }
}

/// The events of one webhook call (none for the types Herald does not track).
fn events(body: &Value) -> Vec<DeliveryEvent> {
    let data = &body["data"];
    let (kind, detail) = match body["type"].as_str().unwrap_or_default() {
        "email.delivered" => (DeliveryEventKind::Delivered, None),
        "email.bounced" => {
            let bounce = &data["bounce"];
            let kind = match bounce["type"].as_str() {
                Some(t) if t.eq_ignore_ascii_case("transient") => DeliveryEventKind::BouncedSoft,
                _ => DeliveryEventKind::BouncedHard,
            };
            (kind, text(&bounce["message"]))
        }
        "email.complained" => (DeliveryEventKind::Complained, None),
        "email.opened" => (DeliveryEventKind::Opened, None),
        "email.clicked" => (DeliveryEventKind::Clicked, text(&data["click"]["link"])),
        _ => return Vec::new(),
    };
    let message_id =
        named(&data["tags"], "herald_id").or_else(|| named(&data["headers"], "message-id"));
    let at = [&body["created_at"], &data["created_at"]]
        .into_iter()
        .find_map(|v| v.as_str().and_then(provider_kit::timestamp))
        .unwrap_or_else(herald_sdk::clock::now);
    let to: Vec<String> = match &data["to"] {
        Value::Array(list) => list.iter().filter_map(text).collect(),
        v => text(v).into_iter().collect(),
    };
    to.into_iter()
        .map(|email| DeliveryEvent {
            kind,
            message_id: message_id.clone(),
            email: bare_address(&email),
            at,
            detail: detail.clone(),
        })
        .collect()
}

/// `ann@example.com` of `Ann <ann@example.com>`, lower-cased.
fn bare_address(mailbox: &str) -> String {
    let inner = match (mailbox.rfind('<'), mailbox.rfind('>')) {
        (Some(open), Some(close)) if open < close => &mailbox[open + 1..close],
        _ => mailbox,
    };
    inner.trim().to_ascii_lowercase()
}

/// Authenticates and parses one webhook call.
pub(crate) fn parse(n: Notification) -> Result<Vec<DeliveryEvent>, String> {
    authenticate(&n)?;
    let body: Value = serde_json::from_slice(&n.body)
        .map_err(|e| format!("the notification is not Resend's JSON: {e}"))?;
    if !body.is_object() || body.get("type").is_none() {
        return Err("the notification is not a Resend webhook event (no `type`)".into());
    }
    Ok(events(&body))
}
