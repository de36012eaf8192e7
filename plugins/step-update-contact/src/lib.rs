//! The `UPDATE_CONTACT` step: asks the host to set custom data keys and/or the subscription.

use herald_sdk::config::FieldError;
use herald_sdk::step::{Effect, Input, Output, Step};
use serde::Deserialize;
use serde_json::{Map, Value};

/// `UPDATE_CONTACT { data?, subscribed? }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    data: Option<Map<String, Value>>,
    subscribed: Option<bool>,
}

struct UpdateContact;

impl Step for UpdateContact {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if config.data.is_none() && config.subscribed.is_none() {
            errors.push(FieldError::new(
                "config",
                "set at least one of `data` and `subscribed`",
            ));
        }
        if let Some(data) = &config.data {
            for key in data.keys() {
                if key.trim().is_empty() {
                    errors.push(FieldError::new("data", "keys must not be empty"));
                }
            }
        }
        errors
    }

    fn run(config: Config, _input: Input) -> Output {
        Output::next().effect(Effect::UpdateContact {
            data: config.data,
            subscribed: config.subscribed,
        })
    }
}

herald_sdk::export_step!(UpdateContact);
