//! The `WEBHOOK` step: calls a URL through the host's HTTP capability (the plugin's allowlist
//! and the address checks apply). A 2xx answer continues and stores `{ status, body }` in the
//! context key `webhook`; anything else fails the step.

use std::collections::BTreeMap;

use herald_sdk::config::FieldError;
use herald_sdk::http::{Request, send};
use herald_sdk::step::{Input, Output, Step};
use serde::Deserialize;
use serde_json::{Value, json};

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];
/// Response bodies up to this size are kept in the context.
const KEEP_BODY: usize = 64 * 1024;

/// `WEBHOOK { url, method?, headers?, body? }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    url: String,
    method: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<Value>,
}

fn valid_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !host.contains(char::is_whitespace)
    })
}

struct Webhook;

impl Step for Webhook {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if !valid_url(&config.url) {
            errors.push(FieldError::new(
                "url",
                "must be an absolute http:// or https:// URL",
            ));
        }
        if let Some(method) = &config.method
            && !METHODS.contains(&method.to_ascii_uppercase().as_str())
        {
            errors.push(FieldError::new(
                "method",
                "must be GET, POST, PUT, PATCH or DELETE",
            ));
        }
        if let Some(headers) = &config.headers {
            for name in headers.keys() {
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
                {
                    errors.push(FieldError::new(
                        format!("headers.{name}"),
                        "is not a valid header name",
                    ));
                }
            }
        }
        errors
    }

    fn run(config: Config, input: Input) -> Output {
        let method = config
            .method
            .as_deref()
            .unwrap_or("POST")
            .to_ascii_uppercase();
        let mut request = Request::new(&method, &config.url);
        let mut has_content_type = false;
        for (name, value) in config.headers.unwrap_or_default() {
            has_content_type |= name.eq_ignore_ascii_case("content-type");
            request.headers.push((name, value));
        }
        if method != "GET" && method != "DELETE" {
            let body = config.body.unwrap_or_else(|| {
                json!({
                    "contact": {
                        "id": input.contact.id,
                        "email": input.contact.email,
                        "subscribed": input.contact.subscribed,
                        "data": input.contact.data,
                    },
                    "event": input.event.as_ref().map(|e| json!({ "name": e.name, "data": e.data })),
                    "context": input.context,
                })
            });
            if !has_content_type {
                request
                    .headers
                    .push(("content-type".into(), "application/json".into()));
            }
            request.body = Some(body.to_string().into_bytes());
        }
        match send(&request) {
            Ok(response) if (200..300).contains(&response.status) => {
                let body = if response.body.len() <= KEEP_BODY {
                    serde_json::from_slice::<Value>(&response.body).unwrap_or(Value::Null)
                } else {
                    Value::Null
                };
                Output::next().set_context(
                    "webhook",
                    json!({ "status": response.status, "body": body }),
                )
            }
            Ok(response) => Output::fail(format!("the webhook answered {}", response.status)),
            Err(err) => Output::fail(format!(
                "the webhook call failed: {}",
                herald_sdk::http::describe(&err)
            )),
        }
    }
}

herald_sdk::export_step!(Webhook);
