//! Mailgun's webhook events: `{"signature": {"timestamp", "token", "signature"},
//! "event-data": {…}}`, one event per call.
//!
//! The signature is HMAC-SHA256 of `timestamp + token` under the webhook signing key, in hex. It
//! does not cover `event-data` (Mailgun's scheme): what it proves is that the call comes from
//! Mailgun within the last 5 minutes. Mailgun suggests remembering tokens to refuse a replay
//! within that window; a plugin instance lives for one call, so this one cannot: a replayed
//! delivery, bounce or complaint changes nothing more, a replayed open or click is counted
//! again.

use herald_sdk::transport::{DeliveryEvent, DeliveryEventKind};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How far (in seconds) a signature's timestamp may be from the clock.
const TOLERANCE_SECONDS: i64 = 300;

/// Authenticates and parses one webhook call; `now` in unix milliseconds.
pub fn parse(body: &[u8], key: &str, now: i64) -> Result<Vec<DeliveryEvent>, String> {
    let call: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the notification is not Mailgun's webhook JSON: {e}"))?;
    verify(&call["signature"], key, now)?;
    let data = &call["event-data"];
    if !data.is_object() {
        return Err("the notification has no `event-data` object".into());
    }
    Ok(event(data, now).into_iter().collect())
}

/// Checks the `signature` object.
fn verify(signature: &Value, key: &str, now: i64) -> Result<(), String> {
    let text = |name: &str| -> Result<String, String> {
        match &signature[name] {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(format!(
                "the notification is not authenticated: `signature.{name}` is missing"
            )),
        }
    };
    let timestamp = text("timestamp")?;
    let token = text("token")?;
    let given = hex::decode(text("signature")?).map_err(|_| {
        "the notification is not authenticated: `signature.signature` is not hex".to_string()
    })?;
    let seconds: i64 = timestamp.parse().map_err(|_| {
        "the notification is not authenticated: `signature.timestamp` is not a number".to_string()
    })?;
    if (now / 1000 - seconds).abs() > TOLERANCE_SECONDS {
        return Err(format!(
            "the notification is not authenticated: its timestamp is more than \
             {TOLERANCE_SECONDS} s away from the clock (replayed, or the clocks differ)"
        ));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes())
        .map_err(|_| "the webhook signing key is unusable".to_string())?;
    mac.update(timestamp.as_bytes());
    mac.update(token.as_bytes());
    // `verify_slice` compares in constant time.
    mac.verify_slice(&given).map_err(|_| {
        "the notification is not authenticated: the signature does not match \
         plugins.settings.mailgun.webhook_signing_key"
            .to_string()
    })
}

/// The Herald event of one Mailgun event (none for kinds Herald does not follow).
fn event(data: &Value, now: i64) -> Option<DeliveryEvent> {
    let kind = match data["event"].as_str()? {
        "delivered" => DeliveryEventKind::Delivered,
        "failed" | "permanent_fail" | "temporary_fail" => {
            let temporary = data["severity"] == "temporary" || data["event"] == "temporary_fail";
            if temporary {
                DeliveryEventKind::BouncedSoft
            } else {
                DeliveryEventKind::BouncedHard
            }
        }
        "complained" => DeliveryEventKind::Complained,
        "opened" => DeliveryEventKind::Opened,
        "clicked" => DeliveryEventKind::Clicked,
        // accepted, rejected, unsubscribed, stored…: nothing Herald records.
        _ => return None,
    };
    let email = data["recipient"].as_str()?.trim().to_ascii_lowercase();
    let message_id = data["user-variables"]["herald_id"]
        .as_str()
        .or_else(|| data["message"]["headers"]["message-id"].as_str())
        .map(str::to_string);
    let at = data["timestamp"]
        .as_f64()
        .map(|s| (s * 1000.0) as i64)
        .unwrap_or(now);
    let detail = match kind {
        DeliveryEventKind::Clicked => data["url"].as_str().map(str::to_string),
        DeliveryEventKind::BouncedHard | DeliveryEventKind::BouncedSoft => {
            let status = &data["delivery-status"];
            let message = status["description"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| status["message"].as_str().filter(|s| !s.is_empty()))
                .or_else(|| data["reason"].as_str());
            match (status["code"].as_i64(), message) {
                (Some(code), Some(m)) => Some(format!("{code} {m}")),
                (None, Some(m)) => Some(m.to_string()),
                (Some(code), None) => Some(code.to_string()),
                (None, None) => None,
            }
        }
        _ => None,
    };
    Some(DeliveryEvent {
        kind,
        message_id,
        email,
        at,
        detail,
    })
}
