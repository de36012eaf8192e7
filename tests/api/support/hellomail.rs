//! A loopback stand-in for "Hello Mail", the imaginary API of the SDK's example transport
//! (`sdk/examples/hello-transport`): `POST /send` takes `{"messages": [{id, sender, recipients,
//! raw}]}` (JSON, `raw` base64) and answers `{"results": [{"id"} | {"error"}]}`, one per
//! message. It refuses what the API would (not JSON, a message without its fields, more than
//! [`BATCH_LIMIT`] messages: 400) and answers by recipient, so that a test chooses the outcome:
//! `refused…@` is refused alone; a call with `limited…@` is answered `429` with `Retry-After: 7`
//! (`limitless…@`: `429` without it), `down…@` `503`, `invalid…@` `400`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{EndpointExt, Response, Route, handler};
use serde_json::{Value, json};

/// The most messages the API takes in one call.
pub const BATCH_LIMIT: usize = 50;

/// A message as the API received it, `raw` decoded.
#[derive(Clone, Debug)]
pub struct Received {
    pub id: String,
    pub sender: String,
    pub recipients: Vec<String>,
    pub raw: String,
}

/// A running double.
pub struct HelloMail {
    pub addr: SocketAddr,
    /// Every call accepted (2xx or not), as the messages it carried.
    pub calls: Arc<Mutex<Vec<Vec<Received>>>>,
}

impl HelloMail {
    /// Starts it on a random loopback port.
    pub async fn start() -> HelloMail {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let app = Route::new()
            .at("/send", poem::post(send))
            .data(calls.clone());
        let addr = super::httpd::serve(app).await;
        HelloMail { addr, calls }
    }

    /// The URL to configure (`plugins.settings.hellomail.url`).
    pub fn url(&self) -> String {
        format!("http://{}/send", self.addr)
    }

    /// The calls it has received so far.
    pub fn calls(&self) -> Vec<Vec<Received>> {
        self.calls.lock().unwrap().clone()
    }
}

fn answer(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(body.to_string())
}

/// Reads one message of the body, or says what is missing.
fn message(m: &Value) -> Result<Received, String> {
    let field = |name: &str| {
        m[name]
            .as_str()
            .map(str::to_string)
            .ok_or(format!("`{name}` is required"))
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(field("raw")?)
        .map_err(|_| "`raw` is not base64".to_string())?;
    let recipients: Vec<String> = m["recipients"]
        .as_array()
        .ok_or("`recipients` is required")?
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    if recipients.is_empty() {
        return Err("`recipients` is empty".into());
    }
    Ok(Received {
        id: field("id")?,
        sender: field("sender")?,
        recipients,
        raw: String::from_utf8(raw).map_err(|_| "`raw` is not UTF-8".to_string())?,
    })
}

#[handler]
fn send(body: poem::web::Json<Value>, calls: Data<&Arc<Mutex<Vec<Vec<Received>>>>>) -> Response {
    // (A body that is not `application/json` is refused by the extractor: 400/415.)
    let Some(list) = body.0["messages"].as_array() else {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({ "error": "`messages` is required" }),
        );
    };
    if list.len() > BATCH_LIMIT {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({ "error": format!("at most {BATCH_LIMIT} messages a call") }),
        );
    }
    let messages: Vec<Received> = match list.iter().map(message).collect() {
        Ok(messages) => messages,
        Err(e) => return answer(StatusCode::BAD_REQUEST, json!({ "error": e })),
    };
    calls.lock().unwrap().push(messages.clone());
    let any = |prefix: &str| {
        messages
            .iter()
            .flat_map(|m| &m.recipients)
            .any(|r| r.starts_with(prefix))
    };
    if any("limitless") {
        return answer(
            StatusCode::TOO_MANY_REQUESTS,
            json!({ "error": "slow down" }),
        );
    }
    if any("limited") {
        let mut r = answer(
            StatusCode::TOO_MANY_REQUESTS,
            json!({ "error": "slow down" }),
        );
        r.headers_mut()
            .insert("retry-after", poem::http::HeaderValue::from_static("7"));
        return r;
    }
    if any("down") {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "maintenance" }),
        );
    }
    if any("invalid") {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({ "error": "sender not allowed" }),
        );
    }
    let results: Vec<Value> = messages
        .iter()
        .map(|m| {
            if m.recipients.iter().any(|r| r.starts_with("refused")) {
                json!({ "error": "mailbox on the provider's block list" })
            } else {
                json!({ "id": format!("hm-{}", m.id) })
            }
        })
        .collect();
    answer(StatusCode::OK, json!({ "results": results }))
}
