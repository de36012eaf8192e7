//! A loopback stand-in for Postmark's batch API (`POST /email/batch`), checking what Postmark
//! checks (the `X-Postmark-Server-Token` header, JSON in and out, at most 500 messages a call,
//! each message's `From`, `To`, body and `MessageStream`) and answering in its format: one
//! `{ErrorCode, Message, MessageID, SubmittedAt, To}` per message (ErrorCode 0: accepted; 406:
//! the recipient is inactive, for any recipient whose address starts with `inactive`), and
//! `{ErrorCode, Message}` with a 401 or 422 for a call it refuses whole.

use std::net::SocketAddr;
use std::sync::Arc;

use poem::web::Data;
use poem::{EndpointExt, Request, Response, Route, handler};
use serde_json::{Value, json};

use super::provider::{Recorder, canned, header_has, json_response};

/// The server token the double accepts.
pub const SERVER_TOKEN: &str = "pm-server-token-test";
/// Most messages in one batch call.
pub const MAX_BATCH: usize = 500;
/// The path of the batch endpoint.
pub const BATCH: &str = "/email/batch";

/// A running double.
pub struct FakePostmark {
    pub addr: SocketAddr,
    pub calls: Arc<Recorder>,
}

impl FakePostmark {
    /// Starts it on a random loopback port.
    pub async fn start() -> FakePostmark {
        let calls = Arc::new(Recorder::default());
        let app = Route::new()
            .at(BATCH, poem::post(batch))
            .data(calls.clone());
        let addr = super::httpd::serve(app).await;
        FakePostmark { addr, calls }
    }

    /// The API base to configure (`plugins.settings.postmark.api_base`).
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

fn error(status: u16, code: i64, message: &str) -> Response {
    json_response(
        status,
        &[],
        &json!({ "ErrorCode": code, "Message": message }),
    )
}

/// Postmark's answer for one message of a batch.
fn answer(message: &Value) -> Value {
    let to = message["To"].as_str().unwrap_or_default();
    let has_body = message["HtmlBody"].is_string() || message["TextBody"].is_string();
    if message["From"].as_str().is_none_or(str::is_empty) || to.is_empty() || !has_body {
        return json!({ "ErrorCode": 300, "To": to,
            "Message": "Invalid email request: From, To and a body are required." });
    }
    if !message["MessageStream"].is_string() {
        return json!({ "ErrorCode": 1235, "To": to,
            "Message": "The message stream for the provided 'ID' was not found." });
    }
    if to.split(',').any(|a| a.trim().starts_with("inactive")) {
        return json!({ "ErrorCode": 406, "To": to,
            "Message": "You tried to send to recipient(s) that have been marked as inactive. Found inactive addresses: inactive@example.com." });
    }
    json!({ "ErrorCode": 0, "Message": "OK", "To": to,
        "MessageID": uuid::Uuid::new_v4().to_string(),
        "SubmittedAt": "2026-12-07T02:00:00.0000000Z" })
}

#[handler]
async fn batch(req: &Request, body: String, calls: Data<&Arc<Recorder>>) -> Response {
    if req.header("x-postmark-server-token") != Some(SERVER_TOKEN) {
        return error(
            401,
            10,
            "The Server Token you provided in the X-Postmark-Server-Token request header was invalid.",
        );
    }
    if !header_has(req, "accept", "application/json")
        || !header_has(req, "content-type", "application/json")
    {
        return error(415, 0, "Accept and Content-Type must be application/json.");
    }
    let Ok(Value::Array(messages)) = serde_json::from_str::<Value>(&body) else {
        return error(422, 402, "Received invalid JSON input.");
    };
    if messages.len() > MAX_BATCH {
        return error(
            422,
            300,
            "Invalid email request: at most 500 messages may be sent in one batch.",
        );
    }
    calls.record(BATCH, &Value::Array(messages.clone()));
    calls.gate().await;
    if let Some(c) = calls.scripted() {
        return canned(&c);
    }
    let answers: Vec<Value> = messages.iter().map(answer).collect();
    json_response(200, &[], &Value::Array(answers))
}
