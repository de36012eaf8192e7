//! Amazon SNS HTTP(S) messages: the string each one signs and the check of its signature
//! against the certificate at `SigningCertURL` (as AWS documents "Verifying the signatures of
//! Amazon SNS messages").

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rsa::RsaPublicKey;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::pkcs8::DecodePublicKey;
use serde_json::Value;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::{Decode, Encode};

/// The keys signed, in order, per message type (`Subject` only when the message has one).
fn signed_keys(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Notification" => Some(&[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]),
        "SubscriptionConfirmation" | "UnsubscribeConfirmation" => Some(&[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]),
        _ => None,
    }
}

/// The string a message signs: each signed key and its value, one per line.
pub fn string_to_sign(message: &Value) -> Result<String, String> {
    let kind = message["Type"].as_str().unwrap_or("");
    let keys =
        signed_keys(kind).ok_or_else(|| format!("not an Amazon SNS message (Type `{kind}`)"))?;
    let mut text = String::new();
    for key in keys {
        match message.get(*key) {
            Some(Value::String(value)) => {
                text.push_str(key);
                text.push('\n');
                text.push_str(value);
                text.push('\n');
            }
            None | Some(Value::Null) if *key == "Subject" => {}
            _ => return Err(format!("the Amazon SNS {kind} has no `{key}`")),
        }
    }
    Ok(text)
}

/// The RSA public key of a PEM certificate.
pub fn public_key(pem: &[u8]) -> Result<RsaPublicKey, String> {
    let text = std::str::from_utf8(pem).map_err(|_| "the certificate is not PEM")?;
    let begin = "-----BEGIN CERTIFICATE-----";
    let start = text.find(begin).ok_or("the certificate is not PEM")? + begin.len();
    let end = text[start..]
        .find("-----END CERTIFICATE-----")
        .ok_or("the certificate is not PEM")?;
    let encoded: String = text[start..start + end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = STANDARD
        .decode(encoded)
        .map_err(|_| "the certificate is not PEM")?;
    let certificate =
        Certificate::from_der(&der).map_err(|e| format!("the certificate is not X.509: {e}"))?;
    let spki = certificate
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("the certificate's key: {e}"))?;
    RsaPublicKey::from_public_key_der(&spki)
        .map_err(|e| format!("the certificate's key is not RSA: {e}"))
}

/// Checks the message's `Signature` (base64) over its string to sign with `key`:
/// `SignatureVersion` 1 is SHA1withRSA, 2 SHA256withRSA.
pub fn verify(message: &Value, key: &RsaPublicKey) -> Result<(), String> {
    let text = string_to_sign(message)?;
    let signature = message["Signature"]
        .as_str()
        .and_then(|s| STANDARD.decode(s).ok())
        .ok_or("the Amazon SNS message is not authenticated: no base64 Signature")?;
    let outcome = match message["SignatureVersion"].as_str() {
        Some("1") => key.verify(
            Pkcs1v15Sign::new::<Sha1>(),
            &Sha1::digest(text.as_bytes()),
            &signature,
        ),
        Some("2") => key.verify(
            Pkcs1v15Sign::new::<Sha256>(),
            &Sha256::digest(text.as_bytes()),
            &signature,
        ),
        other => {
            return Err(format!(
                "the Amazon SNS message is not authenticated: SignatureVersion {} is not 1 or 2",
                other.unwrap_or("missing")
            ));
        }
    };
    outcome.map_err(|_| {
        "the Amazon SNS message is not authenticated: its signature does not match its \
         signing certificate"
            .to_string()
    })
}

/// Whether `url` is an `https` (or, for a test double, the configured base's) URL on the SNS
/// host `base` (`scheme://host[:port]`, no trailing slash): the same scheme and authority,
/// then a path.
pub fn on_host(url: &str, base: &str) -> bool {
    url.len() > base.len() + 1
        && url[..base.len()].eq_ignore_ascii_case(base)
        && url.as_bytes()[base.len()] == b'/'
        && !url.contains(['\\', ' ', '\t', '\r', '\n'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_to_sign_as_documented() {
        let notification = json!({
            "Type": "Notification", "MessageId": "m", "TopicArn": "arn", "Message": "hi",
            "Timestamp": "t", "SignatureVersion": "1", "Signature": "x",
        });
        assert_eq!(
            string_to_sign(&notification).unwrap(),
            "Message\nhi\nMessageId\nm\nTimestamp\nt\nTopicArn\narn\nType\nNotification\n"
        );
        let mut with_subject = notification.clone();
        with_subject["Subject"] = json!("s");
        assert!(
            string_to_sign(&with_subject)
                .unwrap()
                .contains("MessageId\nm\nSubject\ns\nTimestamp")
        );
        let confirmation = json!({
            "Type": "SubscriptionConfirmation", "MessageId": "m", "Token": "tok",
            "TopicArn": "arn", "Message": "hi", "SubscribeURL": "u", "Timestamp": "t",
        });
        assert_eq!(
            string_to_sign(&confirmation).unwrap(),
            "Message\nhi\nMessageId\nm\nSubscribeURL\nu\nTimestamp\nt\nToken\ntok\nTopicArn\narn\nType\nSubscriptionConfirmation\n"
        );
        assert!(string_to_sign(&json!({ "Type": "Other" })).is_err());
    }

    #[test]
    fn urls_only_on_the_sns_host() {
        let base = "https://sns.eu-west-1.amazonaws.com";
        assert!(on_host(
            "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
            base
        ));
        for url in [
            "https://sns.eu-west-1.amazonaws.com.evil.test/x.pem",
            "https://sns.eu-west-1.amazonaws.com:8443/x.pem",
            "https://sns.eu-west-1.amazonaws.com@evil.test/x.pem",
            "http://sns.eu-west-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.eu-west-1.amazonaws.com/",
            "https://sns.eu-west-1.amazonaws.com\\@evil.test/",
        ] {
            assert!(!on_host(url, base), "{url}");
        }
    }
}
