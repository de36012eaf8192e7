//! The `CONDITION` step: evaluates a filter (the filter language of the spec's decisions) over
//! the contact, the triggering event and the execution context; continues on branch `yes` or `no`.
//!
//! Fields: `email`, `subscribed`, `createdAt`, `updatedAt`, `data.<key>` (dotted paths reach
//! nested data), `event.data.<key>` (the triggering event's data), `context.<key>`,
//! `event.<name>` (the contact's event history) and `segment.<id>` (membership).

mod filter;
mod time;

use herald_sdk::config::FieldError;
use herald_sdk::step::{Input, Output, Step};
use serde::Deserialize;
use serde_json::Value;

/// `CONDITION { filter }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    filter: Value,
}

struct Condition;

impl Step for Condition {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        match filter::Filter::parse(&config.filter, "filter") {
            Ok(_) => Vec::new(),
            Err(errors) => errors,
        }
    }

    fn run(config: Config, input: Input) -> Output {
        match filter::Filter::parse(&config.filter, "filter") {
            Ok(filter) => {
                let now = herald_sdk::clock::now();
                if filter.matches(&input, now) {
                    Output::branch("yes")
                } else {
                    Output::branch("no")
                }
            }
            Err(errors) => Output::fail(errors[0].message.clone()),
        }
    }
}

herald_sdk::export_step!(Condition);
