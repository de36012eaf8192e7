//! Evaluation in memory, over a [`Subject`] the caller fills.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::parse::time_value;
use crate::{Condition, Field, Filter, Group, Logic, Operator, time};

/// How often, and when last, a contact triggered events of one name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventStats {
    /// How many events of the name the contact has (0 counts as never triggered).
    pub count: u64,
    /// The latest `created_at` of those events, Unix milliseconds.
    pub last_at: i64,
}

/// Everything a filter may look at, filled by the caller.
///
/// To agree with [`Filter::to_sql`], build it from the same rows: the contact's columns, the
/// contact's `events` rows summed up by name, and its `segment_members` rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subject {
    /// The contact's email address (`c.email`).
    pub email: String,
    /// Whether the contact is subscribed (`c.subscribed`).
    pub subscribed: bool,
    /// When the contact was created, Unix milliseconds (`c.created_at`).
    pub created_at: i64,
    /// When the contact last changed, Unix milliseconds (`c.updated_at`).
    pub updated_at: i64,
    /// The contact's custom data (`c.data`).
    pub data: Map<String, Value>,
    /// The contact's events by name: count and latest `created_at` (`events` rows).
    pub events: BTreeMap<String, EventStats>,
    /// The ids of the segments the contact is a member of (`segment_members` rows).
    pub segments: BTreeSet<String>,
    /// The contact's state for each topic of its project, by topic id: its own choice
    /// (`c.topics`) when it made one, else the topic's default (`topics` rows). A topic not
    /// listed does not exist: `subscribed` to it does not match.
    pub topics: BTreeMap<String, bool>,
    /// The triggering event's data, for `event.data.<path>` (workflows; empty otherwise).
    pub event_data: Map<String, Value>,
    /// The execution's context, for `context.<path>` (workflows; empty otherwise).
    pub context: Map<String, Value>,
    /// The time "now" for `within`, `olderThan` and `triggeredWithin`, Unix milliseconds.
    pub now_ms: i64,
}

impl Filter {
    /// Whether `subject` matches the filter.
    ///
    /// Never fails: a condition that does not apply (a type mismatch, a missing value, a field
    /// and operator that do not fit in a hand-built filter) does not match, and its `not…`
    /// form does. A filter with no groups matches under `AND` and not under `OR`.
    pub fn matches(&self, subject: &Subject) -> bool {
        let mut results = self.groups.iter().map(|g| g.matches(subject));
        match self.logic {
            Logic::And => results.all(|r| r),
            Logic::Or => results.any(|r| r),
        }
    }
}

impl Group {
    fn matches(&self, subject: &Subject) -> bool {
        self.filters.iter().all(|c| c.matches(subject))
            && self.conditions.as_ref().is_none_or(|f| f.matches(subject))
    }
}

/// The value at `path` in `map`: `None` when a key is absent, a step is not an object, or the
/// value is `null`.
fn walk<'a>(map: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let mut current = map.get(first)?;
    for key in rest {
        current = current.as_object()?.get(key)?;
    }
    (!current.is_null()).then_some(current)
}

/// `equals` on JSON values: same type and same value (numbers as `f64`).
pub(crate) fn json_equals(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::String(a), Value::String(e)) => a == e,
        (Value::Number(a), Value::Number(e)) => a.as_f64() == e.as_f64(),
        (Value::Bool(a), Value::Bool(e)) => a == e,
        _ => false,
    }
}

/// `contains` on JSON values: a string in a string (ignoring ASCII case), or an equal element.
fn json_contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::String(a), Value::String(e)) => contains_ignoring_ascii_case(a, e),
        (Value::Array(items), e) => items.iter().any(|item| json_equals(item, e)),
        _ => false,
    }
}

fn contains_ignoring_ascii_case(haystack: &str, needle: &str) -> bool {
    haystack
        .to_ascii_lowercase()
        .contains(&needle.to_ascii_lowercase())
}

/// The order of two JSON values: numbers as `f64`, strings byte-wise, else none.
fn json_order(actual: &Value, expected: &Value) -> Option<Ordering> {
    match (actual, expected) {
        (Value::Number(a), Value::Number(e)) => a.as_f64()?.partial_cmp(&e.as_f64()?),
        (Value::String(a), Value::String(e)) => Some(a.as_bytes().cmp(e.as_bytes())),
        _ => None,
    }
}

/// Whether `ordering` satisfies an ordering operator.
fn ordered(op: Operator, ordering: Ordering) -> bool {
    match op {
        Operator::GreaterThan => ordering == Ordering::Greater,
        Operator::LessThan => ordering == Ordering::Less,
        Operator::GreaterThanOrEqual => ordering != Ordering::Less,
        Operator::LessThanOrEqual => ordering != Ordering::Greater,
        _ => false,
    }
}

/// The order of a stored time relative to the cutoff: numbers as Unix milliseconds (`f64`),
/// strings in the fixed form as text.
fn time_order(actual: &Value, cutoff_ms: i64) -> Option<Ordering> {
    match actual {
        Value::Number(n) => n.as_f64()?.partial_cmp(&(cutoff_ms as f64)),
        Value::String(s) => Some(
            time::stored(s)?
                .as_str()
                .cmp(time::format(cutoff_ms).as_str()),
        ),
        _ => None,
    }
}

impl Condition {
    /// Whether `subject` matches this one condition.
    pub fn matches(&self, subject: &Subject) -> bool {
        let (positive, negated) = self.op.positive();
        let result = self.holds(positive, subject);
        result != negated
    }

    /// Whether the condition holds with the positive operator `op`.
    fn holds(&self, op: Operator, s: &Subject) -> bool {
        use Operator as O;
        let expected = self.value.as_ref();
        let cutoff = self.cutoff_ms(s.now_ms);
        match (&self.field, op) {
            (Field::Event(name), O::Triggered | O::TriggeredWithin) => {
                let Some(stats) = s.events.get(name).filter(|e| e.count > 0) else {
                    return false;
                };
                op == O::Triggered || cutoff.is_some_and(|c| stats.last_at >= c)
            }
            (Field::Segment(id), O::MemberOf) => s.segments.contains(id),
            (Field::Topic(id), O::Subscribed) => s.topics.get(id) == Some(&true),
            (Field::Event(_) | Field::Segment(_) | Field::Topic(_), _) => false,
            (_, O::Triggered | O::TriggeredWithin | O::MemberOf | O::Subscribed) => false,
            (Field::Email | Field::Subscribed | Field::CreatedAt | Field::UpdatedAt, O::Exists) => {
                true
            }
            (Field::Email, _) => {
                let (Some(Value::String(e)), a) = (expected, &s.email) else {
                    return false;
                };
                match op {
                    O::Equals => a.eq_ignore_ascii_case(e),
                    O::Contains => contains_ignoring_ascii_case(a, e),
                    _ => ordered(op, a.as_bytes().cmp(e.as_bytes())),
                }
            }
            (Field::Subscribed, O::Equals) => expected == Some(&Value::Bool(s.subscribed)),
            (Field::Subscribed, _) => false,
            (Field::CreatedAt | Field::UpdatedAt, _) => {
                let at = if self.field == Field::CreatedAt {
                    s.created_at
                } else {
                    s.updated_at
                };
                match op {
                    O::Within => cutoff.is_some_and(|c| at >= c),
                    O::OlderThan => cutoff.is_some_and(|c| at < c),
                    O::Equals => expected.and_then(time_value) == Some(at),
                    _ => expected
                        .and_then(time_value)
                        .is_some_and(|e| ordered(op, at.cmp(&e))),
                }
            }
            (Field::Data(path), _) => value_holds(op, walk(&s.data, path), expected, cutoff),
            (Field::EventData(path), _) => {
                value_holds(op, walk(&s.event_data, path), expected, cutoff)
            }
            (Field::Context(path), _) => value_holds(op, walk(&s.context, path), expected, cutoff),
        }
    }
}

/// Whether a positive operator holds for a JSON value (`None`: missing).
fn value_holds(
    op: Operator,
    actual: Option<&Value>,
    expected: Option<&Value>,
    cutoff: Option<i64>,
) -> bool {
    use Operator as O;
    let Some(actual) = actual else {
        return false;
    };
    match op {
        O::Exists => true,
        O::Equals => expected.is_some_and(|e| json_equals(actual, e)),
        O::Contains => expected.is_some_and(|e| json_contains(actual, e)),
        O::Within | O::OlderThan => {
            let Some(ordering) = cutoff.and_then(|c| time_order(actual, c)) else {
                return false;
            };
            if op == O::Within {
                ordering != Ordering::Less
            } else {
                ordering == Ordering::Less
            }
        }
        _ => expected
            .and_then(|e| json_order(actual, e))
            .is_some_and(|ordering| ordered(op, ordering)),
    }
}
