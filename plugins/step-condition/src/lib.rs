//! The `CONDITION` step: evaluates a filter (the language of the `herald-filter` crate, shared
//! with segments and campaign audiences) over the contact, the triggering event and the
//! execution context; continues on branch `yes` or `no`.
//!
//! Fields: `email`, `subscribed`, `createdAt`, `updatedAt`, `data.<key>` (dotted paths reach
//! nested data), `event.data.<key>` (the triggering event's data), `context.<key>`,
//! `event.<name>` (the contact's event history) and `segment.<id>` (membership).

use herald_filter::{EventStats, Filter, FilterError, Scope, Subject};
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

/// The filter's errors as config errors, under `filter`.
fn field_errors(errors: Vec<FilterError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|e| FieldError::new(e.path_under("filter"), e.message))
        .collect()
}

fn parse(config: &Config) -> Result<Filter, Vec<FieldError>> {
    herald_filter::parse(&config.filter, Scope::Workflow).map_err(field_errors)
}

/// What the filter sees of the step's input, at time `now_ms`.
fn subject(input: Input, now_ms: i64) -> Subject {
    let contact = input.contact;
    Subject {
        email: contact.email,
        subscribed: contact.subscribed,
        created_at: contact.created_at,
        updated_at: contact.updated_at,
        data: contact.data,
        events: input
            .history
            .into_iter()
            .map(|h| {
                let stats = EventStats {
                    count: h.count.into(),
                    last_at: h.last_at,
                };
                (h.name, stats)
            })
            .collect(),
        segments: input.segments.into_iter().collect(),
        topics: Default::default(),
        event_data: match input.event.map(|e| e.data) {
            Some(Value::Object(data)) => data,
            _ => Default::default(),
        },
        context: input.context,
        now_ms,
    }
}

impl Step for Condition {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        parse(config).err().unwrap_or_default()
    }

    fn run(config: Config, input: Input) -> Output {
        match parse(&config) {
            Ok(filter) => {
                let subject = subject(input, herald_sdk::clock::now());
                Output::branch(if filter.matches(&subject) {
                    "yes"
                } else {
                    "no"
                })
            }
            Err(errors) => Output::fail(format!("{}: {}", errors[0].field, errors[0].message)),
        }
    }
}

herald_sdk::export_step!(Condition);
