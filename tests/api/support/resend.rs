//! A loopback stand-in for Resend's sending API (`POST /emails/batch`, `POST /emails`),
//! checking what Resend checks (`Authorization: Bearer <key>`, JSON, at most 100 emails a batch
//! and no attachments in one, each email's `from`, `to`, `subject` and body) and answering in
//! its format: `{data: [{id}]}` for a batch (with `errors: [{index, message}]` for the emails
//! it refuses in permissive validation, the whole batch refused with a 422 in strict
//! validation), `{id}` for one email, and errors as `{statusCode, name, message}`. A recipient
//! whose address starts with `invalid` stands for an email Resend's validation refuses.

use std::net::SocketAddr;
use std::sync::Arc;

use poem::web::Data;
use poem::{EndpointExt, Request, Response, Route, handler};
use serde_json::{Value, json};

use super::provider::{Recorder, canned, header_has, json_response};

/// The API key the double accepts.
pub const API_KEY: &str = "re_test_herald";
/// Most emails in one batch call.
pub const MAX_BATCH: usize = 100;
/// The batch endpoint.
pub const BATCH: &str = "/emails/batch";
/// The single email endpoint.
pub const SINGLE: &str = "/emails";

/// A running double.
pub struct FakeResend {
    pub addr: SocketAddr,
    pub calls: Arc<Recorder>,
}

impl FakeResend {
    /// Starts it on a random loopback port.
    pub async fn start() -> FakeResend {
        let calls = Arc::new(Recorder::default());
        let app = Route::new()
            .at(BATCH, poem::post(batch))
            .at(SINGLE, poem::post(single))
            .data(calls.clone());
        let addr = super::httpd::serve(app).await;
        FakeResend { addr, calls }
    }

    /// The API base to configure (`plugins.settings.resend.api_base`).
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

fn error(status: u16, name: &str, message: &str) -> Response {
    json_response(
        status,
        &[],
        &json!({ "statusCode": status, "name": name, "message": message }),
    )
}

/// Resend's 401/403 unless the request carries the key, and 415 unless it is JSON.
fn refused(req: &Request) -> Option<Response> {
    match req.header("authorization") {
        None => {
            return Some(error(
                401,
                "missing_api_key",
                "Missing API key in the authorization header. Include the following header Authorization: Bearer YOUR_API_KEY in the request.",
            ));
        }
        Some(v) if v != format!("Bearer {API_KEY}") => {
            return Some(error(403, "invalid_api_key", "API key is invalid"));
        }
        Some(_) => {}
    }
    if !header_has(req, "content-type", "application/json") {
        return Some(error(
            422,
            "validation_error",
            "Content-Type must be application/json",
        ));
    }
    None
}

/// Why Resend's validation refuses `email`, if it does.
fn invalid(email: &Value) -> Option<String> {
    let to: Vec<&str> = match &email["to"] {
        Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
        Value::String(one) => vec![one.as_str()],
        _ => Vec::new(),
    };
    if email["from"].as_str().is_none_or(str::is_empty) || to.is_empty() {
        return Some("The `from` and `to` fields are required.".into());
    }
    if !email["subject"].is_string() {
        return Some("The `subject` field is required.".into());
    }
    if !email["html"].is_string() && !email["text"].is_string() {
        return Some("Either `html` or `text` is required.".into());
    }
    if let Some(bad) = to.iter().find(|a| a.starts_with("invalid")) {
        return Some(format!(
            "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format: {bad}"
        ));
    }
    None
}

#[handler]
async fn batch(req: &Request, body: String, calls: Data<&Arc<Recorder>>) -> Response {
    if let Some(r) = refused(req) {
        return r;
    }
    let Ok(Value::Array(emails)) = serde_json::from_str::<Value>(&body) else {
        return error(
            422,
            "validation_error",
            "The batch must be a list of emails.",
        );
    };
    if emails.len() > MAX_BATCH {
        return error(
            422,
            "validation_error",
            "Too many emails in the batch: at most 100.",
        );
    }
    if emails.iter().any(|e| e.get("attachments").is_some()) {
        return error(
            422,
            "validation_error",
            "The `attachments` field is not supported in batch emails.",
        );
    }
    let permissive = req.header("x-batch-validation") == Some("permissive");
    calls.record(BATCH, &Value::Array(emails.clone()));
    calls.gate().await;
    if let Some(c) = calls.scripted() {
        return canned(&c);
    }
    let mut data = Vec::new();
    let mut errors = Vec::new();
    for (index, email) in emails.iter().enumerate() {
        match invalid(email) {
            Some(message) if permissive => {
                errors.push(json!({ "index": index, "message": message }));
            }
            Some(message) => return error(422, "validation_error", &message),
            None => data.push(json!({ "id": uuid::Uuid::new_v4().to_string() })),
        }
    }
    let mut answer = json!({ "data": data });
    if permissive {
        answer["errors"] = json!(errors);
    }
    json_response(200, &[], &answer)
}

#[handler]
async fn single(req: &Request, body: String, calls: Data<&Arc<Recorder>>) -> Response {
    if let Some(r) = refused(req) {
        return r;
    }
    let Ok(email @ Value::Object(_)) = serde_json::from_str::<Value>(&body) else {
        return error(422, "validation_error", "The body must be an email object.");
    };
    calls.record(SINGLE, &email);
    calls.gate().await;
    if let Some(c) = calls.scripted() {
        return canned(&c);
    }
    if let Some(message) = invalid(&email) {
        return error(422, "validation_error", &message);
    }
    json_response(200, &[], &json!({ "id": uuid::Uuid::new_v4().to_string() }))
}
