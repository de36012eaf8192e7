//! Host-side values of the `step` world, in JSON terms, and their conversion to and from the
//! WIT types (with the checks that turn a malformed plugin result into an error).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::plugins::bindings::imports::herald::plugin::types as wit_types;
use crate::plugins::bindings::step::herald::plugin::step_types as wit;

/// A step config problem: the field path and a message the API can show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Dotted path, e.g. `filter.groups[0].filters[1].operator`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The contact an execution runs for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Contact {
    /// `cnt_…`.
    pub id: String,
    /// The address.
    pub email: String,
    /// Whether the contact is subscribed.
    pub subscribed: bool,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
    /// Custom data.
    pub data: Map<String, Value>,
}

/// An event of the contact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The event name.
    pub name: String,
    pub data: Value,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// How often and when the contact last triggered an event name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSummary {
    /// The event name.
    pub name: String,
    /// How many times.
    pub count: u32,
    /// Unix milliseconds of the last time.
    pub last_at: i64,
}

/// Everything a step run is given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepInput {
    /// The step's config.
    pub config: Value,
    pub contact: Contact,
    /// The triggering event.
    pub event: Option<Event>,
    /// The execution context.
    pub context: Map<String, Value>,
    /// The contact's event history by name.
    pub history: Vec<EventSummary>,
    /// Ids of the contact's segments.
    pub segments: Vec<String>,
}

/// What the execution does next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Go on (along `branch` when set).
    Continue {
        /// The branch, e.g. `yes`.
        branch: Option<String>,
    },
    /// Resume at `at` (Unix milliseconds).
    WaitUntil {
        /// When.
        at: i64,
    },
    /// Wait for an event; resume on branch `event`, or `timeout` at `timeout_at`.
    WaitForEvent {
        /// The event name.
        event_name: String,
        /// When to give up (Unix milliseconds).
        timeout_at: Option<i64>,
    },
    /// End the execution (`EXITED`).
    Exit {
        /// Why.
        reason: Option<String>,
    },
    /// The step failed.
    Fail {
        /// Why.
        message: String,
    },
}

/// An effect a step asks the host to perform.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Effect {
    /// Send a template.
    SendEmail {
        template_id: String,
        /// The recipient; `None` is the contact.
        to: Option<String>,
        /// The topic the mail is about, in place of its template's: a `SEND_EMAIL` step's
        /// `config.topicId`, which the host reads itself (the plugin world has no such field).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        topic_id: Option<String>,
    },
    /// Update the contact.
    UpdateContact {
        /// Data keys to set.
        data: Option<Map<String, Value>>,
        /// New subscription state.
        subscribed: Option<bool>,
    },
    /// Set a context value.
    SetContext { key: String, value: Value },
}

/// A step's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// What happens next.
    pub outcome: Outcome,
    /// What to do first, in order.
    pub effects: Vec<Effect>,
}

/// The most effects one step may ask for.
pub const MAX_EFFECTS: usize = 100;

impl StepInput {
    pub(crate) fn to_wit(&self) -> wit::StepInput {
        wit::StepInput {
            config: self.config.to_string(),
            contact: wit::Contact {
                id: self.contact.id.clone(),
                email: self.contact.email.clone(),
                subscribed: self.contact.subscribed,
                created_at: self.contact.created_at,
                updated_at: self.contact.updated_at,
                data: Value::Object(self.contact.data.clone()).to_string(),
            },
            event: self.event.as_ref().map(|e| wit::Event {
                name: e.name.clone(),
                data: e.data.to_string(),
                created_at: e.created_at,
            }),
            context: Value::Object(self.context.clone()).to_string(),
            history: self
                .history
                .iter()
                .map(|h| wit::EventSummary {
                    name: h.name.clone(),
                    count: h.count,
                    last_at: h.last_at,
                })
                .collect(),
            segments: self.segments.clone(),
        }
    }
}

/// The size of a step result: the bytes of all its strings.
pub(crate) fn result_size(result: &wit::StepResult) -> usize {
    let outcome = match &result.outcome {
        wit::Outcome::Continue(b) | wit::Outcome::Exit(b) => b.as_ref().map_or(0, String::len),
        wit::Outcome::WaitUntil(_) => 0,
        wit::Outcome::WaitForEvent(w) => w.event_name.len(),
        wit::Outcome::Fail(m) => m.len(),
    };
    outcome
        + result
            .effects
            .iter()
            .map(|e| match e {
                wit::Effect::SendEmail(s) => {
                    s.template_id.len() + s.to.as_ref().map_or(0, String::len)
                }
                wit::Effect::UpdateContact(u) => u.data.as_ref().map_or(0, String::len),
                wit::Effect::SetContext((k, v)) => k.len() + v.len(),
            })
            .sum::<usize>()
}

/// Converts and checks a step result; the error says what is malformed.
pub(crate) fn from_wit(result: wit::StepResult) -> Result<StepResult, String> {
    if result.effects.len() > MAX_EFFECTS {
        return Err(format!(
            "{} effects, more than {MAX_EFFECTS}",
            result.effects.len()
        ));
    }
    let outcome = match result.outcome {
        wit::Outcome::Continue(branch) => Outcome::Continue { branch },
        wit::Outcome::WaitUntil(at) => Outcome::WaitUntil { at },
        wit::Outcome::WaitForEvent(w) => {
            if w.event_name.is_empty() {
                return Err("wait-for-event with an empty event name".into());
            }
            Outcome::WaitForEvent {
                event_name: w.event_name,
                timeout_at: w.timeout_at,
            }
        }
        wit::Outcome::Exit(reason) => Outcome::Exit { reason },
        wit::Outcome::Fail(message) => Outcome::Fail { message },
    };
    let effects = result
        .effects
        .into_iter()
        .enumerate()
        .map(|(i, effect)| {
            Ok(match effect {
                wit::Effect::SendEmail(s) => {
                    if s.template_id.is_empty() {
                        return Err(format!("effects[{i}]: send-email without a template"));
                    }
                    Effect::SendEmail {
                        template_id: s.template_id,
                        to: s.to,
                        topic_id: None,
                    }
                }
                wit::Effect::UpdateContact(u) => Effect::UpdateContact {
                    data: match u.data {
                        None => None,
                        Some(json) => match serde_json::from_str(&json) {
                            Ok(Value::Object(map)) => Some(map),
                            _ => {
                                return Err(format!(
                                    "effects[{i}]: update-contact data is not a JSON object"
                                ));
                            }
                        },
                    },
                    subscribed: u.subscribed,
                },
                wit::Effect::SetContext((key, json)) => {
                    if key.is_empty() {
                        return Err(format!("effects[{i}]: set-context with an empty key"));
                    }
                    let value = serde_json::from_str(&json).map_err(|e| {
                        format!("effects[{i}]: set-context value of `{key}` is not JSON ({e})")
                    })?;
                    Effect::SetContext { key, value }
                }
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(StepResult { outcome, effects })
}

pub(crate) fn field_errors(errors: Vec<wit_types::FieldError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|e| FieldError {
            field: e.field,
            message: e.message,
        })
        .collect()
}
