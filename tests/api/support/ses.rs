//! Loopback stand-ins for Amazon SES API v2 and Amazon SNS.
//!
//! The SES double serves `POST /v2/email/outbound-emails` (`SendEmail`) as SES does: it checks
//! the AWS Signature Version 4 `Authorization` header by computing it again with the known
//! secret (its own code, not the plugin's), the credential scope (key, day, region, `ses`) and
//! the clock; then the body (`Content.Raw.Data` base64, `Destination`, the `herald_id` tag, the
//! message's `Message-ID`). It answers `{"MessageId"}`, or an error the way SES writes them:
//! the type in `x-amzn-ErrorType`, `{"message"}` in the body (`MessageRejected` for a recipient
//! whose local part starts with `rejected`, scripted errors such as a `429` or a `500`).
//!
//! The SNS double serves the signing certificate (`tests/fixtures/sns-signing-cert.pem`) and the
//! `SubscribeURL` (`ConfirmSubscription`), and [`signed`] signs messages the way SNS does with
//! the certificate's key.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{EndpointExt, Request, Response, Route, handler};
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::pkcs8::DecodePrivateKey;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const ACCESS_KEY_ID: &str = "AKIAHERALDTEST00001";
pub const SECRET_ACCESS_KEY: &str = "herald/Test+Secret/Access/Key0000000001";
pub const REGION: &str = "eu-west-1";

/// The key of the SNS double's signing certificate.
pub const SIGNING_KEY: &str = include_str!("../../fixtures/sns-signing-key.pem");
/// A key no certificate of the double holds (a forger's).
pub const OTHER_KEY: &str = include_str!("../../fixtures/sns-other-key.pem");
const SIGNING_CERT: &str = include_str!("../../fixtures/sns-signing-cert.pem");

/// One message SES accepted.
#[derive(Clone, Debug)]
pub struct Sent {
    pub herald_id: String,
    pub to: Vec<String>,
    pub raw: String,
    pub message_id: String,
}

/// What the SES double holds and saw.
#[derive(Default)]
pub struct SesState {
    /// Every call that reached `SendEmail`.
    pub calls: usize,
    /// The messages accepted, in order.
    pub sent: Vec<Sent>,
    /// Refusals (status, error type), in order.
    pub refused: Vec<(u16, String)>,
    /// Answers for the next calls instead of sending: status, error type, `Retry-After`.
    pub script: VecDeque<(u16, &'static str, Option<u64>)>,
}

/// A running SES double.
pub struct FakeSes {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<SesState>>,
}

impl FakeSes {
    pub async fn start() -> FakeSes {
        let state = Arc::new(Mutex::new(SesState::default()));
        let app = Route::new()
            .at("/v2/email/outbound-emails", poem::post(send_email))
            .data(state.clone());
        let addr = super::httpd::serve(app).await;
        FakeSes { addr, state }
    }

    /// `plugins.settings.ses.api_base`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next call is answered `status` with error `kind` (and `Retry-After`).
    pub fn script(&self, status: u16, kind: &'static str, retry_after: Option<u64>) {
        let mut state = self.state.lock().unwrap();
        state.script.push_back((status, kind, retry_after));
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state.lock().unwrap().sent.clone()
    }

    pub fn calls(&self) -> usize {
        self.state.lock().unwrap().calls
    }

    pub fn refused(&self) -> Vec<(u16, String)> {
        self.state.lock().unwrap().refused.clone()
    }
}

/// An SES error answer.
fn error(status: u16, kind: &str, message: &str, retry_after: Option<u64>) -> Response {
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .content_type("application/json")
        .header(
            "x-amzn-ErrorType",
            format!("{kind}:http://internal.amazon.com/coral/com.amazonaws.sesv2/"),
        )
        .header("x-amzn-RequestId", "0b9e1a3c-test-request");
    if let Some(seconds) = retry_after {
        response = response.header("retry-after", seconds.to_string());
    }
    response.body(json!({ "message": message }).to_string())
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Why SES refuses a request's signature: its error type and message (a 403).
type Refusal = (&'static str, String);

/// Checks the request's SigV4 `Authorization` as SES does.
fn check_signature(req: &Request, body: &[u8]) -> Result<(), Refusal> {
    let invalid = |message: &str| Err(("InvalidSignatureException", message.to_string()));
    let header = |name: &str| req.header(name).map(str::to_string);
    let Some(auth) = header("authorization") else {
        return Err((
            "MissingAuthenticationTokenException",
            "Missing Authentication Token".into(),
        ));
    };
    let Some(fields) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return invalid("Unsupported authorization type");
    };
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in fields.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v.to_string()),
            Some(("SignedHeaders", v)) => signed_headers = Some(v.to_string()),
            Some(("Signature", v)) => signature = Some(v.to_string()),
            _ => {
                return invalid(
                    "Authorization header requires Credential, SignedHeaders, Signature",
                );
            }
        }
    }
    let (Some(credential), Some(signed_headers), Some(signature)) =
        (credential, signed_headers, signature)
    else {
        return invalid("Authorization header requires Credential, SignedHeaders, Signature");
    };
    let scope: Vec<&str> = credential.split('/').collect();
    if scope.len() != 5 || scope[4] != "aws4_request" {
        return invalid("Credential should be scoped to a valid region, service and request");
    }
    if scope[0] != ACCESS_KEY_ID {
        return Err((
            "UnrecognizedClientException",
            "The security token included in the request is invalid.".into(),
        ));
    }
    if scope[2] != REGION || scope[3] != "ses" {
        return invalid(&format!(
            "Credential should be scoped to a valid region ('{REGION}') and service ('ses'), not '{}'/'{}'",
            scope[2], scope[3]
        ));
    }
    let Some(amz_date) = header("x-amz-date") else {
        return invalid("Missing x-amz-date");
    };
    let Ok(at) = chrono::NaiveDateTime::parse_from_str(&amz_date, "%Y%m%dT%H%M%SZ") else {
        return invalid("x-amz-date is not ISO 8601 basic format");
    };
    if (chrono::Utc::now().naive_utc() - at).num_seconds().abs() > 300 {
        return invalid("Signature expired: the request time is too far from the server time");
    }
    if scope[1] != &amz_date[..8] {
        return invalid("Credential date does not match x-amz-date");
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-amz-date") {
        return invalid("SignedHeaders must include host and x-amz-date");
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if sorted != names {
        return invalid("SignedHeaders are not sorted");
    }
    let mut canonical_headers = String::new();
    for name in &names {
        let value = header(name).unwrap_or_default();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        req.method(),
        req.uri().path(),
        req.uri().query().unwrap_or(""),
        hex::encode(Sha256::digest(body)),
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}/{REGION}/ses/aws4_request\n{}",
        scope[1],
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let key = [scope[1], REGION, "ses", "aws4_request"].iter().fold(
        format!("AWS4{SECRET_ACCESS_KEY}").into_bytes(),
        |key, part| hmac(&key, part),
    );
    if hex::encode(hmac(&key, &string_to_sign)) != signature {
        return invalid(
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method. Consult the service \
             documentation for details.",
        );
    }
    Ok(())
}

#[handler]
fn send_email(req: &Request, body: Vec<u8>, state: Data<&Arc<Mutex<SesState>>>) -> Response {
    let bad = |message: &str| error(400, "BadRequestException", message, None);
    if let Err((kind, message)) = check_signature(req, &body) {
        let mut state = state.lock().unwrap();
        state.calls += 1;
        state.refused.push((403, kind.into()));
        return error(403, kind, &message, None);
    }
    let mut state = state.lock().unwrap();
    state.calls += 1;
    if let Some((status, kind, retry_after)) = state.script.pop_front() {
        state.refused.push((status, kind.into()));
        let message = match status {
            429 => "Maximum sending rate exceeded.",
            _ => "Internal failure.",
        };
        return error(status, kind, message, retry_after);
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad("Could not parse the request body as JSON");
    };
    let Some(raw) = request["Content"]["Raw"]["Data"]
        .as_str()
        .and_then(|data| STANDARD.decode(data).ok())
    else {
        return bad("Content.Raw.Data must be base64-encoded data");
    };
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let to: Vec<String> = request["Destination"]["ToAddresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    if to.is_empty() || to.len() > 50 {
        return bad("Destination.ToAddresses must name 1 to 50 recipients");
    }
    let tags = request["EmailTags"].as_array().cloned().unwrap_or_default();
    let herald_id = tags
        .iter()
        .find(|t| t["Name"] == "herald_id")
        .and_then(|t| t["Value"].as_str())
        .unwrap_or("")
        .to_string();
    let tag_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 256
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b))
    };
    if !tags
        .iter()
        .all(|t| t["Name"].as_str().is_some_and(tag_ok) && t["Value"].as_str().is_some_and(tag_ok))
        || herald_id.is_empty()
    {
        return bad(&format!(
            "EmailTags must carry a valid herald_id tag: {tags:?}"
        ));
    }
    if !raw.contains(&format!("Message-ID: <{herald_id}@")) {
        return bad("the raw message's Message-ID is not the herald_id's");
    }
    if let Some(rejected) = to.iter().find(|a| a.starts_with("rejected")) {
        state.refused.push((400, "MessageRejected".into()));
        return error(
            400,
            "MessageRejected",
            &format!(
                "Email address is not verified. The following identities failed the check in region {}: {rejected}",
                REGION.to_ascii_uppercase()
            ),
            None,
        );
    }
    let message_id = format!(
        "0102018c{:08x}-ses-double-{:06}",
        state.sent.len() + 1,
        state.sent.len() + 1
    );
    state.sent.push(Sent {
        herald_id,
        to,
        raw,
        message_id: message_id.clone(),
    });
    Response::builder()
        .content_type("application/json")
        .body(json!({ "MessageId": message_id }).to_string())
}

/// What the SNS double saw of its certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertificateFetches {
    /// Requests for the certificate.
    pub count: usize,
    /// Those that carried Herald's `x-herald-cache` header (which the host must take off).
    pub with_cache_header: usize,
}

/// A running SNS double.
pub struct FakeSns {
    pub addr: SocketAddr,
    /// The `Token`s of the confirmed subscriptions.
    pub confirmed: Arc<Mutex<Vec<String>>>,
    fetches: Arc<Mutex<CertificateFetches>>,
}

impl FakeSns {
    pub async fn start() -> FakeSns {
        let confirmed = Arc::new(Mutex::new(Vec::new()));
        let fetches = Arc::new(Mutex::new(CertificateFetches::default()));
        let app = Route::new()
            .at(
                "/SimpleNotificationService-herald-test.pem",
                poem::get(certificate),
            )
            .at("/", poem::get(confirm))
            .data(confirmed.clone())
            .data(fetches.clone());
        let addr = super::httpd::serve(app).await;
        FakeSns {
            addr,
            confirmed,
            fetches,
        }
    }

    /// The requests for the signing certificate so far.
    pub fn certificate_fetches(&self) -> CertificateFetches {
        self.fetches.lock().unwrap().clone()
    }

    /// `plugins.settings.ses.sns_base`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `SigningCertURL` of its messages.
    pub fn cert_url(&self) -> String {
        format!("{}/SimpleNotificationService-herald-test.pem", self.base())
    }

    /// The `SubscribeURL` of a confirmation with `token`.
    pub fn subscribe_url(&self, topic: &str, token: &str) -> String {
        format!(
            "{}/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
            self.base()
        )
    }

    pub fn confirmed(&self) -> Vec<String> {
        self.confirmed.lock().unwrap().clone()
    }
}

#[handler]
fn certificate(req: &Request, fetches: Data<&Arc<Mutex<CertificateFetches>>>) -> Response {
    let mut seen = fetches.lock().unwrap();
    seen.count += 1;
    if req.headers().contains_key("x-herald-cache") {
        seen.with_cache_header += 1;
    }
    Response::builder()
        .content_type("application/x-x509-ca-cert")
        .body(SIGNING_CERT)
}

#[handler]
fn confirm(
    Query(query): Query<std::collections::HashMap<String, String>>,
    confirmed: Data<&Arc<Mutex<Vec<String>>>>,
) -> Response {
    if query.get("Action").map(String::as_str) != Some("ConfirmSubscription") {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body("<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>");
    }
    let token = query.get("Token").cloned().unwrap_or_default();
    confirmed.lock().unwrap().push(token);
    let topic = query.get("TopicArn").cloned().unwrap_or_default();
    Response::builder().content_type("text/xml").body(format!(
        "<ConfirmSubscriptionResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">\
         <ConfirmSubscriptionResult><SubscriptionArn>{topic}:2bcfbf39-05c3-41de-beaa-fcfcc21c8f55\
         </SubscriptionArn></ConfirmSubscriptionResult></ConfirmSubscriptionResponse>"
    ))
}

/// The string an SNS message signs, as AWS documents it (this test's own code).
pub fn string_to_sign(message: &Value) -> String {
    let keys: &[&str] = if message["Type"] == "Notification" {
        &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]
    } else {
        &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]
    };
    keys.iter()
        .filter_map(|k| message[*k].as_str().map(|v| format!("{k}\n{v}\n")))
        .collect()
}

/// `message` with `SignatureVersion` `version` (1: SHA1withRSA, 2: SHA256withRSA) and its
/// `Signature` by `key` (PKCS#8 PEM).
pub fn signed(mut message: Value, version: u8, key: &str) -> Value {
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(key).unwrap();
    message["SignatureVersion"] = json!(version.to_string());
    let text = string_to_sign(&message);
    let signature = if version == 1 {
        // DigestInfo of SHA-1 (RFC 8017 9.2), then the digest.
        let mut info = vec![
            0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04,
            0x14,
        ];
        info.extend_from_slice(
            ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes()).as_ref(),
        );
        key.sign(Pkcs1v15Sign::new_unprefixed(), &info).unwrap()
    } else {
        key.sign(
            Pkcs1v15Sign::new::<Sha256>(),
            &Sha256::digest(text.as_bytes()),
        )
        .unwrap()
    };
    message["Signature"] = json!(STANDARD.encode(signature));
    message
}
