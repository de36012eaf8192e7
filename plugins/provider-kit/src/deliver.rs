//! What every provider transport's delivery does alike: its settings, one outcome per message
//! in order, and a JSON call whose failure of the whole call maps to the delivery error the host
//! expects (`429`: transient with `(retry after N s)`; `5xx` and no answer: transient; another
//! `4xx`: permanent).

use herald_sdk::http::{self, Request};
use herald_sdk::transport::{DeliveryError, Receipt};
use serde_json::Value;

/// The outcome of one message.
pub type Outcome = Result<Receipt, DeliveryError>;

/// A setting of the plugin, when set and not blank.
pub fn setting(name: &str) -> Option<String> {
    herald_sdk::settings::get(name).filter(|v| !v.trim().is_empty())
}

/// The setting `key` of `plugin`, or the permanent error naming it when it is not set.
pub fn required(plugin: &str, key: &str) -> Result<String, DeliveryError> {
    setting(key).ok_or_else(|| {
        DeliveryError::Permanent(format!("plugins.settings.{plugin}.{key} is not set"))
    })
}

/// The API base: the setting `api_base` without its trailing `/`, else `default`.
pub fn api_base(default: &str) -> String {
    setting("api_base")
        .unwrap_or_else(|| default.to_string())
        .trim_end_matches('/')
        .to_string()
}

/// `error` for each of `count` messages.
pub fn each(count: usize, error: &DeliveryError) -> Vec<Outcome> {
    (0..count).map(|_| Err(error.clone())).collect()
}

/// The outcomes in the messages' order; one left without an outcome (which would be a bug) is
/// retried rather than lost.
pub fn in_order(outcomes: Vec<Option<Outcome>>) -> Vec<Outcome> {
    outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                Err(DeliveryError::Transient(
                    "no outcome for the message".into(),
                ))
            })
        })
        .collect()
}

/// The only outcome of a batch of one.
pub fn only(mut outcomes: Vec<Outcome>) -> Outcome {
    outcomes.pop().unwrap_or_else(|| {
        Err(DeliveryError::Transient(
            "no outcome for the message".into(),
        ))
    })
}

/// The start of a body, for an error message.
pub fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// An API of a provider.
pub struct Api {
    /// The provider's name, as error messages say it (`Postmark`).
    pub provider: &'static str,
    /// The text of the provider's error answer.
    pub error_text: fn(&[u8]) -> String,
}

impl Api {
    /// POSTs `body` as JSON to `url` with `headers` (plus `Content-Type` and `Accept`), and
    /// answers the body of a 2xx answer; otherwise the delivery error of the whole call, `what`
    /// naming what was refused (`batch`, `message`).
    pub fn post_json(
        &self,
        url: &str,
        mut headers: Vec<(String, String)>,
        body: &Value,
        what: &str,
    ) -> Result<Vec<u8>, DeliveryError> {
        let provider = self.provider;
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.push(("Accept".into(), "application/json".into()));
        let request = Request {
            method: "POST".into(),
            url: url.to_string(),
            headers,
            body: Some(serde_json::to_vec(body).expect("JSON values serialize")),
            timeout_ms: None,
        };
        let response = http::send(&request).map_err(|e| {
            DeliveryError::Transient(format!(
                "{provider} could not be reached: {}",
                http::describe(&e)
            ))
        })?;
        let text = || (self.error_text)(&response.body);
        match response.status {
            200..=299 => Ok(response.body),
            429 => Err(DeliveryError::Transient(format!(
                "rate limited by {provider} (retry after {} s): {}",
                crate::retry_after(&response.headers),
                text()
            ))),
            s if s >= 500 => Err(DeliveryError::Transient(format!(
                "{provider} answered {s}: {}",
                text()
            ))),
            s => Err(DeliveryError::Permanent(format!(
                "{provider} refused the {what} ({s}, {})",
                text()
            ))),
        }
    }
}
