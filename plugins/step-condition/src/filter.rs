//! The filter language: `{ logic, groups: [{ filters: [{ field, operator, value?, unit? }], conditions? }] }`.

use herald_sdk::config::FieldError;
use herald_sdk::step::Input;
use serde_json::{Map, Value};

use crate::time;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Logic {
    And,
    Or,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Equals,
    NotEquals,
    Contains,
    NotContains,
    GreaterThan,
    LessThan,
    GreaterThanOrEqual,
    LessThanOrEqual,
    Exists,
    NotExists,
    Within,
    OlderThan,
    Triggered,
    NotTriggered,
    TriggeredWithin,
    NotTriggeredWithin,
    MemberOf,
    NotMemberOf,
}

const OPERATORS: [(&str, Op); 18] = [
    ("equals", Op::Equals),
    ("notEquals", Op::NotEquals),
    ("contains", Op::Contains),
    ("notContains", Op::NotContains),
    ("greaterThan", Op::GreaterThan),
    ("lessThan", Op::LessThan),
    ("greaterThanOrEqual", Op::GreaterThanOrEqual),
    ("lessThanOrEqual", Op::LessThanOrEqual),
    ("exists", Op::Exists),
    ("notExists", Op::NotExists),
    ("within", Op::Within),
    ("olderThan", Op::OlderThan),
    ("triggered", Op::Triggered),
    ("notTriggered", Op::NotTriggered),
    ("triggeredWithin", Op::TriggeredWithin),
    ("notTriggeredWithin", Op::NotTriggeredWithin),
    ("memberOf", Op::MemberOf),
    ("notMemberOf", Op::NotMemberOf),
];

/// Where a field's value comes from.
enum Field {
    Email,
    Subscribed,
    CreatedAt,
    UpdatedAt,
    Data(Vec<String>),
    EventData(Vec<String>),
    Context(Vec<String>),
    Event(String),
    Segment(String),
}

struct Condition {
    field: Field,
    op: Op,
    value: Option<Value>,
    /// Milliseconds of `value` × `unit`, for the time operators.
    span_ms: Option<i64>,
}

struct Group {
    filters: Vec<Condition>,
    nested: Option<Filter>,
}

/// A parsed, valid filter.
pub struct Filter {
    logic: Logic,
    groups: Vec<Group>,
}

fn segments(rest: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = rest.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        None
    } else {
        Some(parts)
    }
}

fn parse_field(name: &str) -> Option<Field> {
    Some(match name {
        "email" => Field::Email,
        "subscribed" => Field::Subscribed,
        "createdAt" => Field::CreatedAt,
        "updatedAt" => Field::UpdatedAt,
        _ => {
            if let Some(rest) = name.strip_prefix("data.") {
                Field::Data(segments(rest)?)
            } else if let Some(rest) = name.strip_prefix("event.data.") {
                Field::EventData(segments(rest)?)
            } else if let Some(rest) = name.strip_prefix("context.") {
                Field::Context(segments(rest)?)
            } else if let Some(rest) = name.strip_prefix("event.") {
                (!rest.is_empty()).then(|| Field::Event(rest.to_string()))?
            } else if let Some(rest) = name.strip_prefix("segment.") {
                (!rest.is_empty()).then(|| Field::Segment(rest.to_string()))?
            } else {
                return None;
            }
        }
    })
}

fn unit_ms(unit: &str) -> Option<i64> {
    match unit {
        "minutes" => Some(60_000),
        "hours" => Some(3_600_000),
        "days" => Some(86_400_000),
        _ => None,
    }
}

impl Filter {
    /// Parses and validates a filter; errors carry the path of the bad part under `path`.
    pub fn parse(value: &Value, path: &str) -> Result<Filter, Vec<FieldError>> {
        let mut errors = Vec::new();
        let filter = Filter::parse_into(value, path, &mut errors);
        match filter {
            Some(filter) if errors.is_empty() => Ok(filter),
            _ => Err(errors),
        }
    }

    fn parse_into(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Filter> {
        let Some(obj) = value.as_object() else {
            errors.push(FieldError::new(path, "must be an object"));
            return None;
        };
        let logic = match obj.get("logic").and_then(Value::as_str) {
            Some("AND") => Some(Logic::And),
            Some("OR") => Some(Logic::Or),
            _ => {
                errors.push(FieldError::new(
                    format!("{path}.logic"),
                    "must be \"AND\" or \"OR\"",
                ));
                None
            }
        };
        let groups = match obj.get("groups").and_then(Value::as_array) {
            Some(groups) if !groups.is_empty() => groups,
            Some(_) => {
                errors.push(FieldError::new(
                    format!("{path}.groups"),
                    "must have at least one group",
                ));
                return None;
            }
            None => {
                errors.push(FieldError::new(
                    format!("{path}.groups"),
                    "must be an array of groups",
                ));
                return None;
            }
        };
        let mut parsed = Vec::new();
        for (i, group) in groups.iter().enumerate() {
            let gpath = format!("{path}.groups[{i}]");
            if let Some(g) = parse_group(group, &gpath, errors) {
                parsed.push(g);
            }
        }
        Some(Filter {
            logic: logic?,
            groups: parsed,
        })
    }

    /// Whether the input matches the filter at time `now` (Unix milliseconds).
    pub fn matches(&self, input: &Input, now: i64) -> bool {
        let mut results = self.groups.iter().map(|g| g.matches(input, now));
        match self.logic {
            Logic::And => results.all(|r| r),
            Logic::Or => results.any(|r| r),
        }
    }
}

fn parse_group(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Group> {
    let Some(obj) = value.as_object() else {
        errors.push(FieldError::new(path, "must be an object"));
        return None;
    };
    let mut filters = Vec::new();
    match obj.get("filters") {
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(c) = parse_condition(item, &format!("{path}.filters[{i}]"), errors) {
                    filters.push(c);
                }
            }
        }
        None if obj.contains_key("conditions") => {}
        _ => errors.push(FieldError::new(
            format!("{path}.filters"),
            "must be an array of filters",
        )),
    }
    let nested = match obj.get("conditions") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Filter::parse_into(
            v,
            &format!("{path}.conditions"),
            errors,
        )?),
    };
    Some(Group { filters, nested })
}

fn parse_condition(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Condition> {
    let Some(obj) = value.as_object() else {
        errors.push(FieldError::new(path, "must be an object"));
        return None;
    };
    let before = errors.len();
    let field = match obj.get("field").and_then(Value::as_str) {
        Some(name) => parse_field(name).or_else(|| {
            errors.push(FieldError::new(
                format!("{path}.field"),
                format!("unknown field `{name}`"),
            ));
            None
        }),
        None => {
            errors.push(FieldError::new(format!("{path}.field"), "is required"));
            None
        }
    };
    let op = match obj.get("operator").and_then(Value::as_str) {
        Some(name) => OPERATORS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, op)| *op)
            .or_else(|| {
                errors.push(FieldError::new(
                    format!("{path}.operator"),
                    format!("unknown operator `{name}`"),
                ));
                None
            }),
        None => {
            errors.push(FieldError::new(format!("{path}.operator"), "is required"));
            None
        }
    };
    let (field, op) = (field?, op?);
    let value = obj.get("value").filter(|v| !v.is_null()).cloned();
    // Which operators fit which fields.
    let history_op = matches!(
        op,
        Op::Triggered | Op::NotTriggered | Op::TriggeredWithin | Op::NotTriggeredWithin
    );
    let segment_op = matches!(op, Op::MemberOf | Op::NotMemberOf);
    match (&field, history_op, segment_op) {
        (Field::Event(_), false, _) => errors.push(FieldError::new(
            format!("{path}.operator"),
            "`event.<name>` fields take triggered, notTriggered, triggeredWithin or notTriggeredWithin",
        )),
        (Field::Segment(_), _, false) => errors.push(FieldError::new(
            format!("{path}.operator"),
            "`segment.<id>` fields take memberOf or notMemberOf",
        )),
        (Field::Event(_), true, _) | (Field::Segment(_), _, true) => {}
        (_, true, _) => errors.push(FieldError::new(
            format!("{path}.operator"),
            "only `event.<name>` fields take the triggered operators",
        )),
        (_, _, true) => errors.push(FieldError::new(
            format!("{path}.operator"),
            "only `segment.<id>` fields take memberOf and notMemberOf",
        )),
        _ => {}
    }
    let needs_value = matches!(
        op,
        Op::Equals
            | Op::NotEquals
            | Op::Contains
            | Op::NotContains
            | Op::GreaterThan
            | Op::LessThan
            | Op::GreaterThanOrEqual
            | Op::LessThanOrEqual
    );
    if needs_value && value.is_none() {
        errors.push(FieldError::new(format!("{path}.value"), "is required"));
    }
    let timed = matches!(
        op,
        Op::Within | Op::OlderThan | Op::TriggeredWithin | Op::NotTriggeredWithin
    );
    let mut span_ms = None;
    if timed {
        let amount = value.as_ref().and_then(|v| {
            v.as_f64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        });
        match amount {
            Some(a) if a > 0.0 => {}
            _ => errors.push(FieldError::new(
                format!("{path}.value"),
                "must be a positive number",
            )),
        }
        match obj.get("unit").and_then(Value::as_str).and_then(unit_ms) {
            Some(unit) => span_ms = amount.map(|a| (a * unit as f64) as i64),
            None => errors.push(FieldError::new(
                format!("{path}.unit"),
                "must be \"minutes\", \"hours\" or \"days\"",
            )),
        }
    }
    if errors.len() > before {
        return None;
    }
    Some(Condition {
        field,
        op,
        value,
        span_ms,
    })
}

fn walk<'a>(map: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let mut current = map.get(path.first()?)?;
    for key in &path[1..] {
        current = current.as_object()?.get(key)?;
    }
    (!current.is_null()).then_some(current)
}

fn as_number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// A value as a time: Unix milliseconds (numbers) or an RFC 3339 date (strings).
fn as_time(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => time::parse(s),
        _ => None,
    }
}

fn equals(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::String(y)) | (Value::String(y), Value::Bool(x)) => {
            y == if *x { "true" } else { "false" }
        }
        _ => match (as_number(a), as_number(b)) {
            (Some(x), Some(y)) if !a.is_string() || !b.is_string() => x == y,
            _ => a == b,
        },
    }
}

fn contains(haystack: &Value, needle: &Value) -> bool {
    match haystack {
        Value::String(s) => match needle {
            Value::String(n) => s.to_lowercase().contains(&n.to_lowercase()),
            other => s.contains(&other.to_string()),
        },
        Value::Array(items) => items.iter().any(|item| equals(item, needle)),
        _ => false,
    }
}

fn compare(actual: &Value, expected: &Value, date_field: bool) -> Option<std::cmp::Ordering> {
    if date_field {
        return as_time(actual)?.partial_cmp(&as_time(expected)?);
    }
    match (as_number(actual), as_number(expected)) {
        (Some(a), Some(b)) => a.partial_cmp(&b),
        _ => match (actual, expected) {
            (Value::String(a), Value::String(b)) => match (time::parse(a), time::parse(b)) {
                (Some(x), Some(y)) => Some(x.cmp(&y)),
                _ => Some(a.as_str().cmp(b.as_str())),
            },
            _ => None,
        },
    }
}

impl Group {
    fn matches(&self, input: &Input, now: i64) -> bool {
        self.filters.iter().all(|c| c.matches(input, now))
            && self.nested.as_ref().is_none_or(|n| n.matches(input, now))
    }
}

impl Condition {
    fn matches(&self, input: &Input, now: i64) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match &self.field {
            Field::Event(name) => {
                let last = input
                    .history
                    .iter()
                    .find(|h| &h.name == name && h.count > 0)
                    .map(|h| h.last_at);
                let within = |span: i64| last.is_some_and(|at| at >= now - span);
                return match self.op {
                    Op::Triggered => last.is_some(),
                    Op::NotTriggered => last.is_none(),
                    Op::TriggeredWithin => within(self.span_ms.unwrap_or(0)),
                    Op::NotTriggeredWithin => !within(self.span_ms.unwrap_or(0)),
                    _ => false,
                };
            }
            Field::Segment(id) => {
                let member = input.segments.iter().any(|s| s == id);
                return match self.op {
                    Op::MemberOf => member,
                    Op::NotMemberOf => !member,
                    _ => false,
                };
            }
            _ => {}
        }
        let contact = &input.contact;
        let empty = Map::new();
        let event_data = input
            .event
            .as_ref()
            .and_then(|e| e.data.as_object())
            .unwrap_or(&empty);
        let owned;
        let actual: Option<&Value> = match &self.field {
            Field::Email => {
                owned = Value::String(contact.email.clone());
                Some(&owned)
            }
            Field::Subscribed => {
                owned = Value::Bool(contact.subscribed);
                Some(&owned)
            }
            Field::CreatedAt => {
                owned = Value::from(contact.created_at);
                Some(&owned)
            }
            Field::UpdatedAt => {
                owned = Value::from(contact.updated_at);
                Some(&owned)
            }
            Field::Data(path) => walk(&contact.data, path),
            Field::EventData(path) => walk(event_data, path),
            Field::Context(path) => walk(&input.context, path),
            Field::Event(_) | Field::Segment(_) => None,
        };
        let date_field = matches!(self.field, Field::CreatedAt | Field::UpdatedAt);
        let expected = self.value.as_ref();
        match self.op {
            Op::Exists => actual.is_some(),
            Op::NotExists => actual.is_none(),
            Op::Equals => matches!((actual, expected), (Some(a), Some(e)) if
                if matches!(self.field, Field::Email) { a.as_str().zip(e.as_str()).is_some_and(|(x, y)| x.eq_ignore_ascii_case(y)) }
                else if date_field { compare(a, e, true) == Some(Equal) } else { equals(a, e) }),
            Op::NotEquals => !matches!((actual, expected), (Some(a), Some(e)) if
                if matches!(self.field, Field::Email) { a.as_str().zip(e.as_str()).is_some_and(|(x, y)| x.eq_ignore_ascii_case(y)) }
                else if date_field { compare(a, e, true) == Some(Equal) } else { equals(a, e) }),
            Op::Contains => matches!((actual, expected), (Some(a), Some(e)) if contains(a, e)),
            Op::NotContains => !matches!((actual, expected), (Some(a), Some(e)) if contains(a, e)),
            Op::GreaterThan | Op::LessThan | Op::GreaterThanOrEqual | Op::LessThanOrEqual => {
                let Some(ordering) = actual
                    .zip(expected)
                    .and_then(|(a, e)| compare(a, e, date_field))
                else {
                    return false;
                };
                match self.op {
                    Op::GreaterThan => ordering == Greater,
                    Op::LessThan => ordering == Less,
                    Op::GreaterThanOrEqual => ordering != Less,
                    _ => ordering != Greater,
                }
            }
            Op::Within | Op::OlderThan => {
                let Some(at) = actual.and_then(as_time) else {
                    return false;
                };
                let span = self.span_ms.unwrap_or(0);
                if self.op == Op::Within {
                    at >= now - span
                } else {
                    at < now - span
                }
            }
            _ => false,
        }
    }
}
