//! The `WAIT_FOR_EVENT` step: waits for an event, optionally with a timeout; the execution
//! resumes on branch `event` or `timeout`.

use herald_sdk::config::FieldError;
use herald_sdk::step::{Input, Outcome, Output, Step};
use serde::Deserialize;

const MAX_SECONDS: u64 = 365 * 24 * 60 * 60;

/// `WAIT_FOR_EVENT { eventName, timeoutSeconds? }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    event_name: String,
    timeout_seconds: Option<u64>,
}

struct WaitForEvent;

impl Step for WaitForEvent {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if config.event_name.trim().is_empty() {
            errors.push(FieldError::new("eventName", "must not be empty"));
        }
        match config.timeout_seconds {
            Some(0) => errors.push(FieldError::new("timeoutSeconds", "must be at least 1")),
            Some(s) if s > MAX_SECONDS => errors.push(FieldError::new(
                "timeoutSeconds",
                "a timeout is at most 365 days",
            )),
            _ => {}
        }
        errors
    }

    fn run(config: Config, _input: Input) -> Output {
        let timeout_at = config
            .timeout_seconds
            .map(|s| herald_sdk::clock::now() + (s * 1000) as i64);
        Output::with(Outcome::WaitForEvent {
            event_name: config.event_name,
            timeout_at,
        })
    }
}

herald_sdk::export_step!(WaitForEvent);
