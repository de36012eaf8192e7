//! SendGrid's Event Webhook: a JSON array of events, signed with ECDSA (P-256, SHA-256).

use base64::Engine;
use herald_sdk::transport::{DeliveryEvent, DeliveryEventKind};
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use serde_json::Value;

/// How far (in seconds) a signature's timestamp may be from the clock.
const TOLERANCE_SECONDS: i64 = 300;

fn unauthenticated(why: &str) -> String {
    format!("the notification is not authenticated: {why}")
}

/// The public key of the setting: base64 of the DER SubjectPublicKeyInfo, as SendGrid shows it
/// (a PEM block is accepted too).
fn public_key(setting: &str) -> Result<VerifyingKey, String> {
    let b64: String = setting
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| {
            "the notification cannot be authenticated: plugins.settings.sendgrid.\
             webhook_public_key is not base64"
                .to_string()
        })?;
    VerifyingKey::from_public_key_der(&der).map_err(|_| {
        "the notification cannot be authenticated: plugins.settings.sendgrid.webhook_public_key \
         is not a P-256 public key (paste the key SendGrid shows under Signature Verification)"
            .to_string()
    })
}

/// Checks the signature of `body`; `now` in unix seconds.
pub fn verify(
    key: &str,
    signature: Option<&str>,
    timestamp: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), String> {
    let key = public_key(key)?;
    let signature = signature
        .ok_or_else(|| unauthenticated("X-Twilio-Email-Event-Webhook-Signature is missing"))?;
    let timestamp = timestamp
        .ok_or_else(|| unauthenticated("X-Twilio-Email-Event-Webhook-Timestamp is missing"))?;
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| unauthenticated("X-Twilio-Email-Event-Webhook-Timestamp is not a number"))?;
    if (now - seconds).abs() > TOLERANCE_SECONDS {
        return Err(unauthenticated(&format!(
            "its timestamp is more than {TOLERANCE_SECONDS} s away from the clock (replayed, or \
             the clocks differ)"
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .map_err(|_| unauthenticated("the signature is not base64"))?;
    let signature = Signature::from_der(&bytes)
        .or_else(|_| Signature::from_slice(&bytes))
        .map_err(|_| unauthenticated("the signature is not an ECDSA signature"))?;
    let mut signed = Vec::with_capacity(timestamp.len() + body.len());
    signed.extend_from_slice(timestamp.as_bytes());
    signed.extend_from_slice(body);
    key.verify(&signed, &signature).map_err(|_| {
        unauthenticated(
            "the signature does not match the body under plugins.settings.sendgrid.\
             webhook_public_key",
        )
    })
}

/// The Herald events of an authenticated call (events Herald does not follow are left out).
/// `now` in unix milliseconds (for events without a timestamp).
pub fn events(body: &[u8], now: i64) -> Result<Vec<DeliveryEvent>, String> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the notification is not SendGrid's event JSON: {e}"))?;
    let list = parsed
        .as_array()
        .ok_or("the notification is not an array of SendGrid events")?;
    Ok(list.iter().filter_map(|e| event(e, now)).collect())
}

fn text(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

fn event(e: &Value, now: i64) -> Option<DeliveryEvent> {
    let reason = || text(&e["reason"]).or_else(|| text(&e["response"]));
    let (kind, detail) = match e["event"].as_str()? {
        "delivered" => (DeliveryEventKind::Delivered, text(&e["response"])),
        // `type` tells a bounce (the receiver refused the address) from a block (it refused
        // this message, for now).
        "bounce" => match e["type"].as_str() {
            Some("blocked") => (DeliveryEventKind::BouncedSoft, reason()),
            _ => (DeliveryEventKind::BouncedHard, reason()),
        },
        // SendGrid did not send it: for an address on its bounce or invalid lists that is a
        // hard bounce, for one on its spam report list a complaint; other drops (an
        // unsubscribed address, a message SendGrid refused) are not about the address.
        "dropped" => match e["reason"].as_str().unwrap_or("") {
            "Bounced Address" | "Invalid" => (DeliveryEventKind::BouncedHard, reason()),
            "Spam Reporting Address" => (DeliveryEventKind::Complained, reason()),
            _ => return None,
        },
        "spamreport" => (DeliveryEventKind::Complained, None),
        "open" => (DeliveryEventKind::Opened, None),
        "click" => (DeliveryEventKind::Clicked, text(&e["url"])),
        // processed, deferred (SendGrid keeps retrying for 72 hours; a deferral is not a
        // bounce), unsubscribe, group_unsubscribe, group_resubscribe…
        _ => return None,
    };
    let email = e["email"].as_str()?.trim().to_ascii_lowercase();
    let message_id = text(&e["herald_id"]).or_else(|| text(&e["smtp-id"]));
    let at = e["timestamp"].as_i64().map(|s| s * 1000).unwrap_or(now);
    Some(DeliveryEvent {
        kind,
        message_id,
        email,
        at,
        detail,
    })
}
