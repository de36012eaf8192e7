//! A loopback stand-in for SendGrid's `POST /v3/mail/send`: it checks what SendGrid checks
//! (`Authorization: Bearer <key>`, a JSON body with personalizations, a from address, a subject,
//! `text/plain` content before `text/html`, no reserved header in `headers`, string custom
//! arguments, attachments with content and a filename) and answers as SendGrid does: `202` with
//! an empty body and the `X-Message-Id` header, errors as `{"errors": [{message, field, help}]}`.
//! Recipients `reject@…` are refused (400) as SendGrid refuses an address; scripted answers
//! (`fail_next`) come first. Also the Event Webhook's signing key (P-256) and signature.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use poem::http::StatusCode;
use poem::web::{Data, Json};
use poem::{EndpointExt, Request, Response, Route, handler};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The API key the fake accepts.
pub const API_KEY: &str = "SG.test-herald.sendgrid";

/// Headers SendGrid does not take in `headers`.
const RESERVED: [&str; 12] = [
    "x-sg-id",
    "x-sg-eid",
    "received",
    "dkim-signature",
    "content-type",
    "content-transfer-encoding",
    "to",
    "from",
    "subject",
    "reply-to",
    "cc",
    "bcc",
];

/// One call that passed authentication.
#[derive(Clone, Debug)]
pub struct Call {
    /// The JSON body.
    pub body: Value,
    /// The status answered.
    pub status: u16,
    /// When it came.
    pub at: Instant,
}

/// What the fake holds and saw.
#[derive(Default)]
pub struct SendGridState {
    /// Answers to give before anything else: status, `Retry-After`, `X-RateLimit-Reset`.
    pub script: VecDeque<(u16, Option<u64>, Option<i64>)>,
    /// Every call that passed authentication.
    pub calls: Vec<Call>,
}

/// A running fake.
pub struct FakeSendGrid {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<SendGridState>>,
}

impl FakeSendGrid {
    /// Starts it on a random loopback port.
    pub async fn start() -> FakeSendGrid {
        let state = Arc::new(Mutex::new(SendGridState::default()));
        let app = Route::new()
            .at("/v3/mail/send", poem::post(mail_send))
            .data(state.clone());
        let addr = super::httpd::serve(app).await;
        FakeSendGrid { addr, state }
    }

    /// The API base to configure (`plugins.settings.sendgrid.api_base`).
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next calls answer these: status, `Retry-After`, `X-RateLimit-Reset`.
    pub fn fail_next(&self, answers: &[(u16, Option<u64>, Option<i64>)]) {
        self.state
            .lock()
            .unwrap()
            .script
            .extend(answers.iter().copied());
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }
}

fn errors(status: StatusCode, message: &str, field: Option<&str>) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(
            json!({ "errors": [{ "message": message, "field": field, "help": null }] }).to_string(),
        )
}

/// What SendGrid would refuse in `body`, as its error.
fn invalid(body: &Value) -> Option<(String, String)> {
    let bad = |field: &str, message: &str| Some((field.to_string(), message.to_string()));
    let personalizations = body["personalizations"].as_array()?;
    if personalizations.is_empty() || personalizations.len() > 1000 {
        return bad(
            "personalizations",
            "The personalizations field is required and must have at least one personalization.",
        );
    }
    for (i, p) in personalizations.iter().enumerate() {
        let to = p["to"].as_array()?;
        if to.is_empty() {
            return bad(
                &format!("personalizations.{i}.to"),
                "The to array is required for all personalization objects, and must have at least one email object with a valid email address.",
            );
        }
        for (j, t) in to.iter().enumerate() {
            let email = t["email"].as_str().unwrap_or("");
            if !email.contains('@') || email.starts_with("reject@") {
                return bad(
                    &format!("personalizations.{i}.to.{j}.email"),
                    "Does not contain a valid address.",
                );
            }
        }
    }
    if !body["from"]["email"]
        .as_str()
        .is_some_and(|e| e.contains('@'))
    {
        return bad(
            "from.email",
            "The from email does not contain a valid address.",
        );
    }
    if body["subject"].as_str().is_none_or(str::is_empty) {
        return bad("subject", "The subject is required.");
    }
    let types: Vec<&str> = body["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    if types.is_empty() {
        return bad(
            "content",
            "Unless a valid template_id is provided, the content parameter is required.",
        );
    }
    if types.len() > 1 && (types[0] != "text/plain" || types[1] != "text/html") {
        return bad(
            "content",
            "If present, text/plain and text/html may only be provided in this order.",
        );
    }
    if let Some(headers) = body["headers"].as_object() {
        for name in headers.keys() {
            if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
                return bad(
                    &format!("headers.{name}"),
                    "This header is reserved and cannot be set.",
                );
            }
        }
    }
    if let Some(args) = body["custom_args"].as_object()
        && args.values().any(|v| !v.is_string())
    {
        return bad("custom_args", "Custom args values must be strings.");
    }
    for (i, a) in body["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let decodes = a["content"]
            .as_str()
            .is_some_and(|c| base64::engine::general_purpose::STANDARD.decode(c).is_ok());
        if !decodes || !a["filename"].is_string() {
            return bad(
                &format!("attachments.{i}"),
                "The attachment content must be base64 encoded and have a filename.",
            );
        }
    }
    None
}

#[handler]
fn mail_send(
    req: &Request,
    body: Json<Value>,
    state: Data<&Arc<Mutex<SendGridState>>>,
) -> Response {
    if req.header("authorization") != Some(format!("Bearer {API_KEY}").as_str()) {
        return errors(
            StatusCode::UNAUTHORIZED,
            "The provided authorization grant is invalid, expired, or revoked",
            None,
        );
    }
    let mut state = state.lock().unwrap();
    let scripted = state.script.pop_front();
    let refused = invalid(&body.0);
    let status = match (&scripted, &refused) {
        (Some((status, _, _)), _) => *status,
        (None, Some(_)) => 400,
        (None, None) => 202,
    };
    state.calls.push(Call {
        body: body.0.clone(),
        status,
        at: Instant::now(),
    });
    match (status, scripted, refused) {
        (202, _, _) => Response::builder()
            .status(StatusCode::ACCEPTED)
            .header("x-message-id", format!("sgmsg{}", state.calls.len()))
            .body(""),
        (400, None, Some((field, message))) => {
            errors(StatusCode::BAD_REQUEST, &message, Some(&field))
        }
        (429, Some((_, retry_after, reset)), _) => {
            let mut r = Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("x-ratelimit-limit", "600")
                .header("x-ratelimit-remaining", "0");
            if let Some(seconds) = retry_after {
                r = r.header("retry-after", seconds.to_string());
            }
            if let Some(reset) = reset {
                r = r.header("x-ratelimit-reset", reset.to_string());
            }
            r.content_type("application/json").body(
                json!({ "errors": [{ "field": null, "message": "too many requests" }] })
                    .to_string(),
            )
        }
        (status, _, _) => errors(
            StatusCode::from_u16(status).unwrap(),
            "Internal server error",
            None,
        ),
    }
}

/// A P-256 key pair of the tests, made with ring (which SendGrid's signatures verify alike).
pub struct SigningKey(EcdsaKeyPair);

fn key_pair() -> SigningKey {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    SigningKey(
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap(),
    )
}

/// The Event Webhook's signing key of the tests (one per process).
pub fn signing_key() -> &'static SigningKey {
    static KEY: std::sync::OnceLock<SigningKey> = std::sync::OnceLock::new();
    KEY.get_or_init(key_pair)
}

/// Another key, for signatures SendGrid did not make.
pub fn other_key() -> SigningKey {
    key_pair()
}

/// The public key of `key` as SendGrid shows it: base64 of the DER SubjectPublicKeyInfo
/// (the fixed prefix of an uncompressed P-256 point, then the point).
pub fn public_key(key: &SigningKey) -> String {
    const SPKI_PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.0.public_key().as_ref());
    base64::engine::general_purpose::STANDARD.encode(der)
}

/// The `X-Twilio-Email-Event-Webhook-Signature` of `body` at `timestamp`, as SendGrid signs:
/// ECDSA (SHA-256) over the timestamp followed by the body, base64 DER.
pub fn signature(key: &SigningKey, timestamp: i64, body: &str) -> String {
    let signature = key
        .0
        .sign(
            &SystemRandom::new(),
            format!("{timestamp}{body}").as_bytes(),
        )
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(signature.as_ref())
}
