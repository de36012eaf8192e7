//! JSON → [`Filter`], reporting every mistake with its path.

use serde_json::{Map, Value};

use crate::{Condition, Field, Filter, FilterError, Group, Logic, Operator, Scope, Unit, time};

/// The deepest nesting of `conditions`: the root filter is level 1.
pub const MAX_DEPTH: usize = 10;
/// The most conditions (entries of `filters`) in one filter, nested ones included.
pub const MAX_CONDITIONS: usize = 200;
/// The most groups in one filter, nested ones included.
pub const MAX_GROUPS: usize = 200;

const OPERATOR_NAMES: &str = "equals, notEquals, contains, notContains, greaterThan, lessThan, \
     greaterThanOrEqual, lessThanOrEqual, exists, notExists, within, olderThan, triggered, \
     notTriggered, triggeredWithin, notTriggeredWithin, memberOf, notMemberOf, subscribed or \
     notSubscribed";

/// Parses and validates a filter for `scope`. On error, returns every mistake found (each with
/// the path of the bad part, from the filter's root), in document order.
///
/// The work is bounded: past [`MAX_DEPTH`] levels, [`MAX_GROUPS`] groups or
/// [`MAX_CONDITIONS`] conditions the parser reports the first part over the limit and reads no
/// further.
pub fn parse(value: &Value, scope: Scope) -> Result<Filter, Vec<FilterError>> {
    let mut parser = Parser {
        scope,
        errors: Vec::new(),
        groups: 0,
        conditions: 0,
    };
    let filter = parser.filter(value, "", 1);
    match filter {
        Some(filter) if parser.errors.is_empty() => Ok(filter),
        _ => Err(parser.errors),
    }
}

struct Parser {
    scope: Scope,
    errors: Vec<FilterError>,
    groups: usize,
    conditions: usize,
}

fn key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Parser {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FilterError::new(path, message));
    }

    fn fields_hint(&self) -> &'static str {
        match self.scope {
            Scope::Contacts => {
                "email, subscribed, createdAt, updatedAt, data.<key>, event.<name>, segment.<id> \
                 or topic.<id>"
            }
            Scope::Workflow => {
                "email, subscribed, createdAt, updatedAt, data.<key>, event.<name>, segment.<id>, \
                 event.data.<key> or context.<key>"
            }
        }
    }

    fn filter(&mut self, value: &Value, path: &str, depth: usize) -> Option<Filter> {
        let Some(obj) = value.as_object() else {
            self.error(
                path,
                "must be an object: { \"logic\": \"AND\" or \"OR\", \"groups\": [...] }",
            );
            return None;
        };
        let logic = match obj.get("logic").and_then(Value::as_str) {
            Some("AND") => Some(Logic::And),
            Some("OR") => Some(Logic::Or),
            _ => {
                self.error(key(path, "logic"), "must be \"AND\" or \"OR\"");
                None
            }
        };
        let gpath = key(path, "groups");
        let items = match obj.get("groups") {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => {
                self.error(gpath, "must have at least one group");
                return None;
            }
            _ => {
                self.error(
                    gpath,
                    "must be an array of groups: { \"filters\": [...], \"conditions\"?: {...} }",
                );
                return None;
            }
        };
        let mut groups = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let path = format!("{gpath}[{i}]");
            if self.groups == MAX_GROUPS {
                self.error(
                    path,
                    format!("too many groups: a filter has at most {MAX_GROUPS}"),
                );
                return None;
            }
            self.groups += 1;
            match self.group(item, &path, depth) {
                Some(group) => groups.push(group),
                None => ok = false,
            }
        }
        (ok && logic.is_some()).then(|| Filter {
            logic: logic.unwrap_or(Logic::And),
            groups,
        })
    }

    fn group(&mut self, value: &Value, path: &str, depth: usize) -> Option<Group> {
        let Some(obj) = value.as_object() else {
            self.error(
                path,
                "must be an object: { \"filters\": [...], \"conditions\"?: {...} }",
            );
            return None;
        };
        let mut ok = true;
        let mut filters = Vec::new();
        let fpath = key(path, "filters");
        match obj.get("filters") {
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("{fpath}[{i}]");
                    if self.conditions == MAX_CONDITIONS {
                        self.error(
                            path,
                            format!("too many conditions: a filter has at most {MAX_CONDITIONS}"),
                        );
                        return None;
                    }
                    self.conditions += 1;
                    match self.condition(item, &path) {
                        Some(c) => filters.push(c),
                        None => ok = false,
                    }
                }
            }
            None if obj.get("conditions").is_some_and(|c| !c.is_null()) => {}
            _ => {
                self.error(
                    fpath,
                    "must be an array of conditions: { \"field\", \"operator\", \"value\"?, \"unit\"? }",
                );
                ok = false;
            }
        }
        let cpath = key(path, "conditions");
        let conditions = match obj.get("conditions") {
            None | Some(Value::Null) => None,
            Some(_) if depth >= MAX_DEPTH => {
                self.error(
                    cpath,
                    format!("nested too deep: at most {MAX_DEPTH} levels of filters"),
                );
                return None;
            }
            Some(v) => match self.filter(v, &cpath, depth + 1) {
                Some(f) => Some(Box::new(f)),
                None => return None,
            },
        };
        ok.then_some(Group {
            filters,
            conditions,
        })
    }

    fn condition(&mut self, value: &Value, path: &str) -> Option<Condition> {
        let Some(obj) = value.as_object() else {
            self.error(
                path,
                "must be an object: { \"field\", \"operator\", \"value\"?, \"unit\"? }",
            );
            return None;
        };
        let field = self.field(obj, path);
        let op = match obj.get("operator") {
            Some(Value::String(name)) => match Operator::from_name(name) {
                Some(op) => Some(op),
                None => {
                    self.error(
                        key(path, "operator"),
                        format!("unknown operator `{name}`: use one of {OPERATOR_NAMES}"),
                    );
                    None
                }
            },
            _ => {
                self.error(
                    key(path, "operator"),
                    format!("is required: one of {OPERATOR_NAMES}"),
                );
                None
            }
        };
        let (field, op) = (field?, op?);
        if let Err(message) = fits(&field, op) {
            self.error(key(path, "operator"), message);
            return None;
        }
        let value = obj.get("value").filter(|v| !v.is_null()).cloned();
        let before = self.errors.len();
        let mut unit = None;
        if op.compares() {
            match &value {
                None => self.error(key(path, "value"), format!("`{op}` needs a `value`")),
                Some(v) => {
                    if let Err(message) = value_fits(&field, op, v) {
                        self.error(key(path, "value"), message);
                    }
                }
            }
        } else if op.is_timed() {
            if value.as_ref().and_then(crate::amount).is_none() {
                self.error(
                    key(path, "value"),
                    format!(
                        "`{op}` needs a positive number `value`: how many minutes, hours or days"
                    ),
                );
            }
            match obj.get("unit") {
                Some(Value::String(name)) => match Unit::from_name(name) {
                    Some(u) => unit = Some(u),
                    None => self.error(
                        key(path, "unit"),
                        format!("unknown unit `{name}`: use minutes, hours or days"),
                    ),
                },
                _ => self.error(
                    key(path, "unit"),
                    format!("`{op}` needs `unit`: minutes, hours or days"),
                ),
            }
        }
        (self.errors.len() == before).then_some(Condition {
            field,
            op,
            value,
            unit,
        })
    }

    fn field(&mut self, obj: &Map<String, Value>, path: &str) -> Option<Field> {
        let path = key(path, "field");
        let Some(name) = obj.get("field").and_then(Value::as_str) else {
            let message = format!("is required: {}", self.fields_hint());
            self.error(path, message);
            return None;
        };
        match parse_field(name) {
            Ok(field) if field.workflow_only() && self.scope == Scope::Contacts => {
                let kind = match field {
                    Field::EventData(_) => "event.data.<key>",
                    _ => "context.<key>",
                };
                self.error(
                    path,
                    format!("`{kind}` fields exist only in workflow conditions"),
                );
                None
            }
            Ok(Field::Topic(_)) if self.scope == Scope::Workflow => {
                self.error(
                    path,
                    "`topic.<id>` fields are not available in workflow conditions; use a \
                     segment with the topic condition and `segment.<id>`",
                );
                None
            }
            Ok(field) => Some(field),
            Err(None) => {
                let message = format!("unknown field `{name}`: use {}", self.fields_hint());
                self.error(path, message);
                None
            }
            Err(Some(message)) => {
                self.error(path, message);
                None
            }
        }
    }
}

/// Whether `key` may be a key of a path: any key but the empty one (it is bound in SQL).
pub(crate) fn valid_segment(key: &str) -> bool {
    !key.is_empty()
}

/// A field by name; `Err(None)` for an unknown name, `Err(Some(message))` for a bad one.
fn parse_field(name: &str) -> Result<Field, Option<String>> {
    let key_path = |prefix: &str, rest: &str| -> Result<Vec<String>, Option<String>> {
        crate::split_path(rest).map_err(|e| Some(format!("bad key path `{prefix}{rest}`: {e}")))
    };
    Ok(match name {
        "email" => Field::Email,
        "subscribed" => Field::Subscribed,
        "createdAt" => Field::CreatedAt,
        "updatedAt" => Field::UpdatedAt,
        _ => {
            if let Some(rest) = name.strip_prefix("data.") {
                Field::Data(key_path("data.", rest)?)
            } else if let Some(rest) = name.strip_prefix("event.data.") {
                Field::EventData(key_path("event.data.", rest)?)
            } else if let Some(rest) = name.strip_prefix("context.") {
                Field::Context(key_path("context.", rest)?)
            } else if let Some(rest) = name.strip_prefix("event.") {
                if rest.is_empty() {
                    return Err(Some("`event.` needs an event name: `event.<name>`".into()));
                }
                Field::Event(rest.to_string())
            } else if let Some(rest) = name.strip_prefix("segment.") {
                if rest.is_empty() {
                    return Err(Some("`segment.` needs a segment id: `segment.<id>`".into()));
                }
                Field::Segment(rest.to_string())
            } else if let Some(rest) = name.strip_prefix("topic.") {
                if rest.is_empty() {
                    return Err(Some("`topic.` needs a topic id: `topic.<id>`".into()));
                }
                Field::Topic(rest.to_string())
            } else {
                return Err(None);
            }
        }
    })
}

/// Whether `op` applies to `field`; the message says what does.
fn fits(field: &Field, op: Operator) -> Result<(), String> {
    match field {
        Field::Event(_) if !op.is_history() => Err(
            "`event.<name>` fields take triggered, notTriggered, triggeredWithin or notTriggeredWithin"
                .into(),
        ),
        Field::Segment(_) if !op.is_membership() => {
            Err("`segment.<id>` fields take memberOf or notMemberOf".into())
        }
        Field::Topic(_) if !op.is_subscription() => {
            Err("`topic.<id>` fields take subscribed or notSubscribed".into())
        }
        Field::Event(_) | Field::Segment(_) | Field::Topic(_) => Ok(()),
        _ if op.is_history() => Err(format!("`{op}` applies to `event.<name>` fields")),
        _ if op.is_membership() => Err(format!("`{op}` applies to `segment.<id>` fields")),
        _ if op.is_subscription() => Err(format!("`{op}` applies to `topic.<id>` fields")),
        Field::Subscribed
            if !matches!(
                op,
                Operator::Equals | Operator::NotEquals | Operator::Exists | Operator::NotExists
            ) =>
        {
            Err("`subscribed` takes equals, notEquals, exists or notExists".into())
        }
        Field::Email if matches!(op, Operator::Within | Operator::OlderThan) => Err(format!(
            "`{op}` applies to times: createdAt, updatedAt or a data value"
        )),
        Field::CreatedAt | Field::UpdatedAt
            if matches!(op, Operator::Contains | Operator::NotContains) =>
        {
            Err(format!("`{op}` applies to text and lists, not `{field}`"))
        }
        _ => Ok(()),
    }
}

/// Whether `value` suits a comparing `op` on `field`; the message says what does.
fn value_fits(field: &Field, op: Operator, value: &Value) -> Result<(), String> {
    match field {
        Field::Email if !value.is_string() => Err("`email` compares with a string".into()),
        Field::Subscribed if !value.is_boolean() => {
            Err("`subscribed` compares with true or false".into())
        }
        Field::CreatedAt | Field::UpdatedAt if time_value(value).is_none() => Err(format!(
            "`{field}` compares with a time: Unix milliseconds (an integer) or an ISO 8601 date"
        )),
        Field::Data(_) | Field::EventData(_) | Field::Context(_) => {
            if op.orders() && !(value.is_number() || value.is_string()) {
                Err(format!("`{op}` compares with a number or a string"))
            } else if !(value.is_number() || value.is_string() || value.is_boolean()) {
                Err("must be a string, a number or a boolean".into())
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// A comparison value for `createdAt`/`updatedAt`: an integer (Unix milliseconds) or an
/// ISO 8601 date.
pub(crate) fn time_value(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => time::parse(s),
        _ => None,
    }
}
