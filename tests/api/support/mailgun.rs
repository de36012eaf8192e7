//! A loopback stand-in for Mailgun's sending API, `POST /v3/<domain>/messages.mime`: it checks
//! what Mailgun checks (Basic auth `api:<key>`, a sending domain of the account, a
//! `multipart/form-data` body with `to` fields and the `message` file) and answers in Mailgun's
//! format (`{"id": "<…>", "message": "Queued. Thank you."}`, errors as `{"message": …}`,
//! `Forbidden` for a wrong key). Recipients of `reject@…` are refused (400) as Mailgun refuses
//! an address it cannot send to; scripted answers (`fail_next`) come first.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use poem::http::StatusCode;
use poem::web::{Data, Multipart, Path};
use poem::{EndpointExt, Request, Response, Route, handler};
use serde_json::{Value, json};

/// The API key the fake accepts.
pub const API_KEY: &str = "key-test-herald-mailgun";
/// The webhook signing key of the tests.
pub const SIGNING_KEY: &str = "whsk-test-herald-mailgun";

/// One accepted or refused call.
#[derive(Clone, Debug)]
pub struct Call {
    /// The sending domain of the URL.
    pub domain: String,
    /// The `to` fields.
    pub to: Vec<String>,
    /// The `message` file.
    pub message: Vec<u8>,
    /// The status answered.
    pub status: u16,
    /// When it came.
    pub at: Instant,
}

/// What the fake holds and saw.
#[derive(Default)]
pub struct MailgunState {
    /// The account's sending domains.
    pub domains: Vec<String>,
    /// Answers to give before anything else: status, `Retry-After`.
    pub script: VecDeque<(u16, Option<u64>)>,
    /// Every call that passed authentication.
    pub calls: Vec<Call>,
}

/// A running fake.
pub struct FakeMailgun {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<MailgunState>>,
}

impl FakeMailgun {
    /// Starts it on a random loopback port, with the sending domains `domains`.
    pub async fn start(domains: &[&str]) -> FakeMailgun {
        let state = Arc::new(Mutex::new(MailgunState {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            ..MailgunState::default()
        }));
        let app = Route::new()
            .at("/v3/:domain/messages.mime", poem::post(messages_mime))
            .data(state.clone());
        let addr = super::httpd::serve(app).await;
        FakeMailgun { addr, state }
    }

    /// The API base to configure (`plugins.settings.mailgun.api_base`).
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next calls answer `status` (with `Retry-After: retry_after` when given), in order.
    pub fn fail_next(&self, answers: &[(u16, Option<u64>)]) {
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

fn json_response(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(body.to_string())
}

fn message(status: StatusCode, text: &str) -> Response {
    json_response(status, json!({ "message": text }))
}

#[handler]
async fn messages_mime(
    req: &Request,
    Path(domain): Path<String>,
    mut form: Multipart,
    state: Data<&Arc<Mutex<MailgunState>>>,
) -> Response {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("api:{API_KEY}"))
    );
    if req.header("authorization") != Some(expected.as_str()) {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .body("Forbidden");
    }
    if !req
        .content_type()
        .is_some_and(|ct| ct.starts_with("multipart/form-data"))
    {
        return message(StatusCode::BAD_REQUEST, "expected multipart/form-data");
    }
    let mut to = Vec::new();
    let mut mime = None;
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().map(str::to_string);
        match name.as_deref() {
            Some("to") => to.push(field.text().await.unwrap()),
            Some("message") => {
                if field.file_name().is_none() {
                    return message(StatusCode::BAD_REQUEST, "'message' must be a file");
                }
                mime = Some(field.bytes().await.unwrap());
            }
            other => {
                return message(
                    StatusCode::BAD_REQUEST,
                    &format!("unexpected parameter {other:?}"),
                );
            }
        }
    }
    let mut state = state.lock().unwrap();
    if !state.domains.contains(&domain) {
        return message(
            StatusCode::NOT_FOUND,
            &format!("Domain not found: {domain}"),
        );
    }
    let Some(mime) = mime else {
        return message(StatusCode::BAD_REQUEST, "'message' parameter is missing");
    };
    if to.is_empty() {
        return message(StatusCode::BAD_REQUEST, "'to' parameter is missing");
    }
    let scripted = state.script.pop_front();
    let status = match scripted {
        Some((status, _)) => status,
        None if to.iter().any(|t| t.starts_with("reject@")) => 400,
        None => 200,
    };
    state.calls.push(Call {
        domain: domain.clone(),
        to: to.clone(),
        message: mime,
        status,
        at: Instant::now(),
    });
    let id = format!(
        "<20261207.{}.{}@{domain}>",
        state.calls.len(),
        std::process::id()
    );
    match (status, scripted) {
        (200, _) => json_response(
            StatusCode::OK,
            json!({ "id": id, "message": "Queued. Thank you." }),
        ),
        (400, None) => message(
            StatusCode::BAD_REQUEST,
            "to parameter is not a valid address. please check documentation",
        ),
        (429, Some((_, retry_after))) => {
            let mut r = Response::builder().status(StatusCode::TOO_MANY_REQUESTS);
            if let Some(seconds) = retry_after {
                r = r.header("retry-after", seconds.to_string());
            }
            r.content_type("application/json")
                .body(json!({ "message": "Too many requests" }).to_string())
        }
        (status, _) => message(
            StatusCode::from_u16(status).unwrap(),
            "Internal server error",
        ),
    }
}

/// A Mailgun webhook call about `event_data`, signed at `timestamp` with `key`, as Mailgun
/// signs it (hex HMAC-SHA256 of `timestamp + token`).
pub fn signed(key: &str, timestamp: i64, token: &str, event_data: Value) -> Value {
    json!({
        "signature": {
            "timestamp": timestamp.to_string(),
            "token": token,
            "signature": signature(key, timestamp, token),
        },
        "event-data": event_data,
    })
}

/// Mailgun's signature of `timestamp` and `token`.
pub fn signature(key: &str, timestamp: i64, token: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{timestamp}{token}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}
