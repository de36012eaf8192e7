//! What the tests of the provider transports (`http::transport_*`) share: posting a provider's
//! notification, the ids of a send, the suppression list, the clock.

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::harness::{Reply, TestApp, TestProject, read};

/// Posts a notification of `transport`'s provider to `/webhooks/notify/<transport>`, as the
/// provider would: the raw `body` with `headers`.
pub async fn notify(app: &TestApp, transport: &str, headers: HeaderMap, body: &str) -> Reply {
    let r = app
        .client
        .post(app.url(&format!("/webhooks/notify/{transport}")))
        .header("content-type", "application/json")
        .headers(headers)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    read(r).await
}

/// The ids of the emails of a `/v1/send` answer, in the order of `to`.
pub fn email_ids(r: &Reply, to: &[&str]) -> Vec<String> {
    let emails = r.body["data"]["emails"].as_array().unwrap();
    to.iter()
        .map(|address| {
            let email = emails
                .iter()
                .find(|e| e["contact"]["email"] == *address)
                .unwrap_or_else(|| panic!("no email to {address}: {}", r.body));
            email["email"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The project's suppression list as (address, reason), sorted.
pub async fn suppressions(app: &TestApp, p: &TestProject) -> Vec<(String, String)> {
    let r = app.get("/suppressions?limit=100", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut listed: Vec<(String, String)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e: &Value| {
            (
                e["email"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    listed.sort();
    listed
}

/// Whether some entry of the email's history has a detail containing `text`.
pub fn history_mentions(email: &Value, text: &str) -> bool {
    email["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["detail"].as_str().is_some_and(|d| d.contains(text)))
}

/// The error message of an error answer.
pub fn error_message(r: &Reply) -> &str {
    r.body["error"]["message"].as_str().unwrap_or_default()
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
