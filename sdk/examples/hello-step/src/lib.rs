//! `hello-step`: an example custom workflow step for Herald.
//!
//! Config: `{ "plugin": "hello", "greeting": "Hello", "vipField"?: "tier" }`.
//! It stores `"<greeting>, <email>!"` in the context key `greeting`, logs it, and continues on
//! branch `vip` when the contact's `data.<vipField>` is `"vip"`, else on branch `regular`.

use herald_sdk::config::FieldError;
use herald_sdk::step::{Input, Output, Step};
use serde::Deserialize;

/// The step's config (`plugin` names this plugin and is set by the workflow).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[allow(dead_code)]
    plugin: Option<String>,
    greeting: String,
    vip_field: Option<String>,
}

struct Hello;

impl Step for Hello {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        if config.greeting.trim().is_empty() {
            vec![FieldError::new("greeting", "must not be empty")]
        } else {
            Vec::new()
        }
    }

    fn run(config: Config, input: Input) -> Output {
        let greeting = format!("{}, {}!", config.greeting, input.contact.email);
        herald_sdk::log::info(&greeting);
        let field = config.vip_field.as_deref().unwrap_or("tier");
        let vip = input.contact.data.get(field).and_then(|v| v.as_str()) == Some("vip");
        Output::branch(if vip { "vip" } else { "regular" }).set_context("greeting", greeting.into())
    }
}

herald_sdk::export_step!(Hello);
