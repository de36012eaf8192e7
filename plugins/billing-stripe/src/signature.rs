//! Stripe's webhook signatures: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=…]`, where each
//! `v1` is HMAC-SHA256 of `"<t>.<body>"` under the endpoint's signing secret.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How old (or how far in the future) a signature's timestamp may be, as Stripe's libraries.
pub const DEFAULT_TOLERANCE_SECONDS: i64 = 300;

/// Checks `header` against `body`; the error says what is wrong.
pub fn verify(
    header: &str,
    body: &[u8],
    secret: &str,
    now: i64,
    tolerance: i64,
) -> Result<(), String> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = t.parse::<i64>().ok(),
            Some(("v1", sig)) => {
                if let Ok(bytes) = hex::decode(sig) {
                    signatures.push(bytes);
                }
            }
            _ => {}
        }
    }
    let timestamp =
        timestamp.ok_or("the Stripe-Signature header has no timestamp (`t=`)".to_string())?;
    if signatures.is_empty() {
        return Err("the Stripe-Signature header has no `v1` signature".into());
    }
    if (now - timestamp).abs() > tolerance {
        return Err(format!(
            "the signature's timestamp is outside the tolerance of {tolerance} s (replayed or \
             the clocks differ)"
        ));
    }
    for signature in &signatures {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|_| "the signing secret is unusable".to_string())?;
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        // `verify_slice` compares in constant time.
        if mac.verify_slice(signature).is_ok() {
            return Ok(());
        }
    }
    Err("no signature matches the body under the configured signing secret".into())
}
