//! Workflow steps as plain Rust functions over typed input and output.
//!
//! ```ignore
//! use herald_sdk::step::{Input, Output, Step};
//!
//! #[derive(serde::Deserialize)]
//! struct Config { greeting: String }
//!
//! struct Hello;
//! impl Step for Hello {
//!     type Config = Config;
//!     fn run(config: Config, input: Input) -> Output {
//!         Output::next().set_context("greeting", format!("{} {}", config.greeting, input.contact.email).into())
//!     }
//! }
//! herald_sdk::export_step!(Hello);
//! ```

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::bindings::exports::herald::plugin::workflow_step as wit_step;
use crate::bindings::herald::plugin::step_types as wit;
pub use crate::config::FieldError;

/// The contact an execution runs for.
#[derive(Clone, Debug, PartialEq)]
pub struct Contact {
    /// The contact's id (`cnt_…`).
    pub id: String,
    /// The contact's email address.
    pub email: String,
    /// Whether the contact is subscribed.
    pub subscribed: bool,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at: i64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at: i64,
    /// Custom data.
    pub data: Map<String, Value>,
}

/// An event tracked for the contact.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The event's name.
    pub name: String,
    /// The event's data.
    pub data: Value,
    /// When it happened, milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// How often and when the contact last triggered one event name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSummary {
    /// The event's name.
    pub name: String,
    /// How many times it was tracked.
    pub count: u32,
    /// The last time, milliseconds since the Unix epoch.
    pub last_at: i64,
}

/// Everything a step is given besides its config.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The contact.
    pub contact: Contact,
    /// The event that triggered the execution, if any.
    pub event: Option<Event>,
    /// The execution's context values.
    pub context: Map<String, Value>,
    /// The contact's event history by name.
    pub history: Vec<EventSummary>,
    /// Ids of the segments the contact is a member of.
    pub segments: Vec<String>,
}

/// What the execution does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Go on, along the transition with `branch` (or the only one).
    Continue {
        /// The branch to follow, e.g. `yes`.
        branch: Option<String>,
    },
    /// Resume at this time (milliseconds since the Unix epoch).
    WaitUntil(i64),
    /// Wait for an event.
    WaitForEvent {
        /// The event name that resumes the execution on branch `event`.
        event_name: String,
        /// When to resume on branch `timeout` instead.
        timeout_at: Option<i64>,
    },
    /// End the execution (status `EXITED`).
    Exit {
        /// Why.
        reason: Option<String>,
    },
    /// Fail the step.
    Fail(String),
}

/// Something the step asks the host to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send an email.
    SendEmail {
        /// The template to render.
        template_id: String,
        /// The recipient; `None` means the contact.
        to: Option<String>,
    },
    /// Update the contact.
    UpdateContact {
        /// Custom data keys to set.
        data: Option<Map<String, Value>>,
        /// The new subscription state.
        subscribed: Option<bool>,
    },
    /// Set a context value.
    SetContext {
        /// The key.
        key: String,
        /// The value.
        value: Value,
    },
}

/// A step's decision: what happens next and what the host should do first.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// What happens next.
    pub outcome: Outcome,
    /// The effects, performed in order.
    pub effects: Vec<Effect>,
}

impl Output {
    /// Continue to the next step.
    pub fn next() -> Output {
        Output::with(Outcome::Continue { branch: None })
    }

    /// Continue along `branch`.
    pub fn branch(branch: &str) -> Output {
        Output::with(Outcome::Continue {
            branch: Some(branch.to_string()),
        })
    }

    /// Fail the step with `message`.
    pub fn fail(message: impl Into<String>) -> Output {
        Output::with(Outcome::Fail(message.into()))
    }

    /// An output with `outcome` and no effects.
    pub fn with(outcome: Outcome) -> Output {
        Output {
            outcome,
            effects: Vec::new(),
        }
    }

    /// Adds an effect.
    pub fn effect(mut self, effect: Effect) -> Output {
        self.effects.push(effect);
        self
    }

    /// Adds a [`Effect::SetContext`].
    pub fn set_context(self, key: &str, value: Value) -> Output {
        self.effect(Effect::SetContext {
            key: key.to_string(),
            value,
        })
    }
}

/// A workflow step.
pub trait Step {
    /// The step's config, parsed from JSON (a parse error is reported with its field path).
    type Config: DeserializeOwned;

    /// Checks a parsed config beyond its shape; the default accepts it.
    fn check(config: &Self::Config) -> Vec<FieldError> {
        let _ = config;
        Vec::new()
    }

    /// Decides what the execution does.
    fn run(config: Self::Config, input: Input) -> Output;
}

/// Parses and checks a config the way the host's `validate` call does.
pub fn validate<S: Step>(config: &str) -> Result<S::Config, Vec<FieldError>> {
    let parsed: S::Config = crate::config::parse(config).map_err(|e| vec![e])?;
    let errors = S::check(&parsed);
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(errors)
    }
}

fn object(json: &str) -> Map<String, Value> {
    match serde_json::from_str(json) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

#[doc(hidden)]
pub fn __validate<S: Step>(
    config: String,
) -> Vec<crate::bindings::herald::plugin::types::FieldError> {
    match validate::<S>(&config) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .into_iter()
            .map(|e| crate::bindings::herald::plugin::types::FieldError {
                field: e.field,
                message: e.message,
            })
            .collect(),
    }
}

#[doc(hidden)]
pub fn __run<S: Step>(input: wit::StepInput) -> wit::StepResult {
    let output = match validate::<S>(&input.config) {
        Err(errors) => Output::fail(
            errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Ok(config) => {
            let typed = Input {
                contact: Contact {
                    id: input.contact.id,
                    email: input.contact.email,
                    subscribed: input.contact.subscribed,
                    created_at: input.contact.created_at,
                    updated_at: input.contact.updated_at,
                    data: object(&input.contact.data),
                },
                event: input.event.map(|e| Event {
                    name: e.name,
                    data: serde_json::from_str(&e.data).unwrap_or(Value::Null),
                    created_at: e.created_at,
                }),
                context: object(&input.context),
                history: input
                    .history
                    .into_iter()
                    .map(|h| EventSummary {
                        name: h.name,
                        count: h.count,
                        last_at: h.last_at,
                    })
                    .collect(),
                segments: input.segments,
            };
            S::run(config, typed)
        }
    };
    lower(output)
}

fn lower(output: Output) -> wit::StepResult {
    let outcome = match output.outcome {
        Outcome::Continue { branch } => wit::Outcome::Continue(branch),
        Outcome::WaitUntil(at) => wit::Outcome::WaitUntil(at),
        Outcome::WaitForEvent {
            event_name,
            timeout_at,
        } => wit::Outcome::WaitForEvent(wit::WaitForEvent {
            event_name,
            timeout_at,
        }),
        Outcome::Exit { reason } => wit::Outcome::Exit(reason),
        Outcome::Fail(message) => wit::Outcome::Fail(message),
    };
    let effects = output
        .effects
        .into_iter()
        .map(|effect| match effect {
            Effect::SendEmail { template_id, to } => {
                wit::Effect::SendEmail(wit::SendEmail { template_id, to })
            }
            Effect::UpdateContact { data, subscribed } => {
                wit::Effect::UpdateContact(wit::ContactUpdate {
                    data: data.map(|d| Value::Object(d).to_string()),
                    subscribed,
                })
            }
            Effect::SetContext { key, value } => wit::Effect::SetContext((key, value.to_string())),
        })
        .collect();
    wit::StepResult { outcome, effects }
}

#[doc(hidden)]
pub use wit_step::Guest as __Guest;

/// Exports a type implementing [`Step`] as the plugin's step.
#[macro_export]
macro_rules! export_step {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __HeraldStepExport;
        impl $crate::step::__Guest for __HeraldStepExport {
            fn validate(
                config: ::std::string::String,
            ) -> ::std::vec::Vec<$crate::bindings::herald::plugin::types::FieldError> {
                $crate::step::__validate::<$ty>(config)
            }
            fn run(
                input: $crate::bindings::herald::plugin::step_types::StepInput,
            ) -> $crate::bindings::herald::plugin::step_types::StepResult {
                $crate::step::__run::<$ty>(input)
            }
        }
        $crate::bindings::__export_world!(__HeraldStepExport with_types_in $crate::bindings);
    };
}
