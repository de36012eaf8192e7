//! Herald's filter language, in one place: segments, campaign audiences and workflow `CONDITION`
//! steps all parse, evaluate and compile filters with this crate, so they can never disagree.
//! It does no I/O and builds for the host and for `wasm32-wasip2`.
//!
//! # The language
//!
//! ```json
//! { "logic": "AND" | "OR",
//!   "groups": [ { "filters": [ { "field": "...", "operator": "...", "value": ..., "unit": "..." } ],
//!                 "conditions": { "logic": ..., "groups": [...] } } ] }
//! ```
//!
//! The conditions of a group (its `filters` and its nested `conditions`) are ANDed; the groups
//! are joined by `logic`. A group may omit `filters` when it has `conditions`. Unknown keys are
//! ignored. [`parse`] turns the JSON into a [`Filter`] and reports every mistake with its path
//! (`groups[1].filters[0].operator`); it caps the work at [`MAX_DEPTH`] levels of nesting,
//! [`MAX_GROUPS`] groups and [`MAX_CONDITIONS`] conditions.
//!
//! Fields ([`Field`]): `email`, `subscribed`, `createdAt`, `updatedAt`, `data.<path>` (a dotted
//! path into the contact's custom data), `event.<name>` (the contact's event history),
//! `segment.<id>` (segment membership); in workflow conditions ([`Scope::Workflow`]) also
//! `event.data.<path>` (the triggering event's data) and `context.<path>` (the execution's
//! context).
//!
//! A path is keys joined by `.`. A key may hold any character; a `.` inside a key is written
//! `\.` and a `\` is written `\\` (in JSON: `"data.a\\.b"` names the key `a.b`, and
//! `"data.a\\\\b"` the key `a\b`); no other `\` escape exists, and no key is empty
//! ([`split_path`], [`join_path`], [`escape_key`]).
//!
//! # Semantics
//!
//! The same rules hold in memory ([`Filter::matches`]) and in SQL ([`Filter::to_sql`]):
//!
//! - A value path (`data.`, `event.data.`, `context.`) is *missing* when a key is absent, when it
//!   crosses something that is not an object, or when it ends on JSON `null`.
//! - `exists` / `notExists`: whether the value is present (always true for `email`,
//!   `subscribed`, `createdAt`, `updatedAt`).
//! - `equals`: a string equals a string (exactly; `email` ignores ASCII case), a number a number
//!   (as `f64`), a boolean a boolean. A type mismatch or a missing value never matches.
//! - `contains`: a string contains a string, ignoring ASCII case (`A-Z` only, so that SQLite's
//!   `lower()` and memory agree); a list contains an element that `equals` the value.
//! - `greaterThan`, `lessThan`, `greaterThanOrEqual`, `lessThanOrEqual`: numbers compare as
//!   numbers, strings byte-wise (ISO 8601 dates in one form compare as dates);
//!   `createdAt`/`updatedAt` compare as times (the value is Unix milliseconds or an ISO 8601
//!   date).
//! - `within` / `olderThan` (`value` × `unit`): the time is at or after / before the cutoff
//!   `now - value × unit`. A time is `createdAt`/`updatedAt`, a JSON number (Unix
//!   milliseconds) or a string in exactly the form `YYYY-MM-DDTHH:MM:SSZ` or
//!   `YYYY-MM-DDTHH:MM:SS.sssZ`, compared as text with the cutoff written as
//!   `YYYY-MM-DDTHH:MM:SS.sssZ` (other strings never match).
//! - `triggered`: the contact has an event of that name; `triggeredWithin`: its last one is at or
//!   after the cutoff. `memberOf`: the contact is in the segment.
//! - Every `not…` operator is exactly the negation of its positive form (so `notEquals` matches
//!   a missing value).
//!
//! # Evaluation in memory
//!
//! The caller fills a [`Subject`] (see its fields for what each must hold) and calls
//! [`Filter::matches`].
//!
//! # SQL
//!
//! [`Filter::to_sql`] compiles a filter into a boolean SQL expression over a `contacts` row
//! aliased `c`, for [`Dialect::Sqlite`] and [`Dialect::Postgres`]. It assumes:
//!
//! - `contacts c(id, project_id, email, subscribed BOOLEAN, data, created_at BIGINT,
//!   updated_at BIGINT)`, `data` being JSON text on SQLite and `JSONB` on PostgreSQL, times Unix
//!   milliseconds;
//! - `event_summaries(contact_id, name, count BIGINT, last_at BIGINT)`: one row per contact and
//!   event name, the count and the latest `created_at` of the contact's events of that name (the
//!   event summaries of [`Subject::events`]);
//! - `segment_members(segment_id, contact_id, project_id)`: [`Subject::segments`] are the
//!   `segment_id`s of the contact's rows.
//!
//! Every value from the filter is bound (`$N` placeholders, numbered after the binds already in
//! the vector), keys of paths included (a SQLite JSON path, or each key of a PostgreSQL `->`
//! chain), so a key can hold any character; the SQL text holds no part of the filter. The time
//! `now` is a parameter, so the expression is deterministic. Workflow-only fields have no SQL
//! form. For equal inputs (the subject built from the same rows, the same `now`), SQL and
//! memory give the same answer.
//!
//! It needs SQLite's built-in JSON functions (3.38 and later, or JSON1) without ICU (so that
//! `lower()` folds ASCII only, as memory does), and PostgreSQL 11 or later (casts from `jsonb` to
//! `float8` and `boolean`). A data number is read as an `f64` on all three sides.

#![warn(missing_docs)]

mod eval;
mod parse;
mod path;
mod sql;
mod time;

use std::fmt;

use serde_json::Value;

pub use eval::{EventStats, Subject};
pub use parse::{MAX_CONDITIONS, MAX_DEPTH, MAX_GROUPS, parse};
pub use path::{escape_key, join_path, split_path, sqlite_json_path};
pub use sql::{Dialect, SqlValue, topic_subscribed_sql};

/// A parsed, valid filter: groups joined by `logic`.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    /// How the groups are joined.
    pub logic: Logic,
    /// The groups (at least one after [`parse`]).
    pub groups: Vec<Group>,
}

impl Filter {
    /// Every condition of the filter, nested groups included, in document order.
    pub fn conditions(&self) -> Vec<&Condition> {
        let mut all = Vec::new();
        self.collect_conditions(&mut all);
        all
    }

    fn collect_conditions<'a>(&'a self, all: &mut Vec<&'a Condition>) {
        for group in &self.groups {
            all.extend(&group.filters);
            if let Some(nested) = &group.conditions {
                nested.collect_conditions(all);
            }
        }
    }

    /// The event names the filter's `event.<name>` conditions name (nested groups included):
    /// the only names whose [`EventStats`] a [`Subject`] needs.
    pub fn event_names(&self) -> std::collections::BTreeSet<String> {
        self.conditions()
            .into_iter()
            .filter_map(|c| match &c.field {
                Field::Event(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether the filter reads the contact's own fields (`email`, `subscribed`, `createdAt`,
    /// `updatedAt`, `data.<path>`, `topic.<id>`), nested groups included: whether a change of the contact,
    /// as opposed to its events or memberships, can change the answer.
    pub fn reads_contact_fields(&self) -> bool {
        self.conditions().iter().any(|c| {
            matches!(
                c.field,
                Field::Email
                    | Field::Subscribed
                    | Field::CreatedAt
                    | Field::UpdatedAt
                    | Field::Data(_)
                    | Field::Topic(_)
            )
        })
    }

    /// Whether the filter reads the contact's event history or segment memberships (an
    /// `event.<name>` or `segment.<id>` condition, nested groups included): whether a
    /// [`Subject`] needs more than the contact, the trigger event and the context.
    pub fn reads_history(&self) -> bool {
        self.conditions()
            .iter()
            .any(|c| matches!(c.field, Field::Event(_) | Field::Segment(_)))
    }

    /// Whether the filter's answer for a contact can change with time alone, without the
    /// contact or its events changing: it has a `within`, `olderThan`, `triggeredWithin` or
    /// `notTriggeredWithin` condition (nested groups included).
    pub fn is_time_relative(&self) -> bool {
        self.conditions().iter().any(|c| c.op.is_timed())
    }
}

/// How the groups of a filter are joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logic {
    /// Every group must match (`"AND"`).
    And,
    /// At least one group must match (`"OR"`).
    Or,
}

/// A group: its conditions and its nested filter, all ANDed.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The group's conditions (its `filters` in JSON).
    pub filters: Vec<Condition>,
    /// The nested filter (its `conditions` in JSON), if any.
    pub conditions: Option<Box<Filter>>,
}

/// One condition: `field operator value [unit]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// What is tested.
    pub field: Field,
    /// How.
    pub op: Operator,
    /// The value compared with (absent for `exists`, `triggered`, `memberOf`…); for the time
    /// operators, how many units (a positive number, or a string holding one).
    pub value: Option<Value>,
    /// The unit of the time operators (`within`, `olderThan`, `triggeredWithin`,
    /// `notTriggeredWithin`); `None` for the others.
    pub unit: Option<Unit>,
}

/// What a condition tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// `email`: the contact's address.
    Email,
    /// `subscribed`: the contact's subscription.
    Subscribed,
    /// `createdAt`: when the contact was created.
    CreatedAt,
    /// `updatedAt`: when the contact last changed.
    UpdatedAt,
    /// `data.<path>`: a value in the contact's custom data, by key path (the keys unescaped).
    Data(Vec<String>),
    /// `event.<name>`: the contact's history of events of that name.
    Event(String),
    /// `segment.<id>`: membership of the segment with that id.
    Segment(String),
    /// `topic.<id>`: the contact's subscription to the topic with that id (its own choice, else
    /// the topic's default).
    Topic(String),
    /// `event.data.<path>`: a value in the triggering event's data (workflows only).
    EventData(Vec<String>),
    /// `context.<path>`: a value in the execution's context (workflows only).
    Context(Vec<String>),
}

impl Field {
    /// Whether the field exists only in workflow conditions ([`Scope::Workflow`]).
    pub fn workflow_only(&self) -> bool {
        matches!(self, Field::EventData(_) | Field::Context(_))
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Email => f.write_str("email"),
            Field::Subscribed => f.write_str("subscribed"),
            Field::CreatedAt => f.write_str("createdAt"),
            Field::UpdatedAt => f.write_str("updatedAt"),
            Field::Data(path) => write!(f, "data.{}", join_path(path)),
            Field::Event(name) => write!(f, "event.{name}"),
            Field::Segment(id) => write!(f, "segment.{id}"),
            Field::Topic(id) => write!(f, "topic.{id}"),
            Field::EventData(path) => write!(f, "event.data.{}", join_path(path)),
            Field::Context(path) => write!(f, "context.{}", join_path(path)),
        }
    }
}

/// A condition's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `equals`.
    Equals,
    /// `notEquals`.
    NotEquals,
    /// `contains` (substring, or list element).
    Contains,
    /// `notContains`.
    NotContains,
    /// `greaterThan`.
    GreaterThan,
    /// `lessThan`.
    LessThan,
    /// `greaterThanOrEqual`.
    GreaterThanOrEqual,
    /// `lessThanOrEqual`.
    LessThanOrEqual,
    /// `exists`.
    Exists,
    /// `notExists`.
    NotExists,
    /// `within` the last `value` `unit`s.
    Within,
    /// `olderThan` `value` `unit`s.
    OlderThan,
    /// `triggered` (for `event.<name>`).
    Triggered,
    /// `notTriggered` (for `event.<name>`).
    NotTriggered,
    /// `triggeredWithin` the last `value` `unit`s (for `event.<name>`).
    TriggeredWithin,
    /// `notTriggeredWithin` the last `value` `unit`s (for `event.<name>`).
    NotTriggeredWithin,
    /// `memberOf` (for `segment.<id>`).
    MemberOf,
    /// `notMemberOf` (for `segment.<id>`).
    NotMemberOf,
    /// `subscribed` (for `topic.<id>`).
    Subscribed,
    /// `notSubscribed` (for `topic.<id>`).
    NotSubscribed,
}

impl Operator {
    /// Every operator, in the order of the spec.
    pub const ALL: [Operator; 20] = [
        Operator::Equals,
        Operator::NotEquals,
        Operator::Contains,
        Operator::NotContains,
        Operator::GreaterThan,
        Operator::LessThan,
        Operator::GreaterThanOrEqual,
        Operator::LessThanOrEqual,
        Operator::Exists,
        Operator::NotExists,
        Operator::Within,
        Operator::OlderThan,
        Operator::Triggered,
        Operator::NotTriggered,
        Operator::TriggeredWithin,
        Operator::NotTriggeredWithin,
        Operator::MemberOf,
        Operator::NotMemberOf,
        Operator::Subscribed,
        Operator::NotSubscribed,
    ];

    /// The operator's name in JSON (`greaterThanOrEqual`).
    pub fn name(self) -> &'static str {
        match self {
            Operator::Equals => "equals",
            Operator::NotEquals => "notEquals",
            Operator::Contains => "contains",
            Operator::NotContains => "notContains",
            Operator::GreaterThan => "greaterThan",
            Operator::LessThan => "lessThan",
            Operator::GreaterThanOrEqual => "greaterThanOrEqual",
            Operator::LessThanOrEqual => "lessThanOrEqual",
            Operator::Exists => "exists",
            Operator::NotExists => "notExists",
            Operator::Within => "within",
            Operator::OlderThan => "olderThan",
            Operator::Triggered => "triggered",
            Operator::NotTriggered => "notTriggered",
            Operator::TriggeredWithin => "triggeredWithin",
            Operator::NotTriggeredWithin => "notTriggeredWithin",
            Operator::MemberOf => "memberOf",
            Operator::NotMemberOf => "notMemberOf",
            Operator::Subscribed => "subscribed",
            Operator::NotSubscribed => "notSubscribed",
        }
    }

    /// The operator named `name` in JSON, if any.
    pub fn from_name(name: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The positive form of the operator and whether this one negates it: every `not…`
    /// operator means exactly "not" its positive form (`notEquals` → `(Equals, true)`,
    /// `equals` → `(Equals, false)`).
    pub fn positive(self) -> (Operator, bool) {
        let positive = match self {
            Operator::NotEquals => Operator::Equals,
            Operator::NotContains => Operator::Contains,
            Operator::NotExists => Operator::Exists,
            Operator::NotTriggered => Operator::Triggered,
            Operator::NotTriggeredWithin => Operator::TriggeredWithin,
            Operator::NotMemberOf => Operator::MemberOf,
            Operator::NotSubscribed => Operator::Subscribed,
            op => op,
        };
        (positive, positive != self)
    }

    /// Whether the operator tests event history (`triggered` and the like).
    pub fn is_history(self) -> bool {
        matches!(
            self,
            Operator::Triggered
                | Operator::NotTriggered
                | Operator::TriggeredWithin
                | Operator::NotTriggeredWithin
        )
    }

    /// Whether the operator tests segment membership.
    pub fn is_membership(self) -> bool {
        matches!(self, Operator::MemberOf | Operator::NotMemberOf)
    }

    /// Whether the operator tests a topic subscription.
    pub fn is_subscription(self) -> bool {
        matches!(self, Operator::Subscribed | Operator::NotSubscribed)
    }

    /// Whether the operator takes `value` × `unit` (a duration).
    pub fn is_timed(self) -> bool {
        matches!(
            self,
            Operator::Within
                | Operator::OlderThan
                | Operator::TriggeredWithin
                | Operator::NotTriggeredWithin
        )
    }

    /// Whether the operator compares with a `value` (`equals` to `lessThanOrEqual`).
    pub fn compares(self) -> bool {
        matches!(
            self,
            Operator::Equals
                | Operator::NotEquals
                | Operator::Contains
                | Operator::NotContains
                | Operator::GreaterThan
                | Operator::LessThan
                | Operator::GreaterThanOrEqual
                | Operator::LessThanOrEqual
        )
    }

    /// Whether the operator orders (`greaterThan` and the like).
    pub fn orders(self) -> bool {
        matches!(
            self,
            Operator::GreaterThan
                | Operator::LessThan
                | Operator::GreaterThanOrEqual
                | Operator::LessThanOrEqual
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The unit of a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// `minutes`.
    Minutes,
    /// `hours`.
    Hours,
    /// `days`.
    Days,
}

impl Unit {
    /// The unit named `name` in JSON (`minutes`, `hours`, `days`), if any.
    pub fn from_name(name: &str) -> Option<Unit> {
        match name {
            "minutes" => Some(Unit::Minutes),
            "hours" => Some(Unit::Hours),
            "days" => Some(Unit::Days),
            _ => None,
        }
    }

    /// The unit's length in milliseconds.
    pub fn ms(self) -> i64 {
        match self {
            Unit::Minutes => 60_000,
            Unit::Hours => 3_600_000,
            Unit::Days => 86_400_000,
        }
    }
}

impl Condition {
    /// The duration of a time operator (`value` × `unit`) in milliseconds, if the condition has
    /// one. Fractions are allowed (`1.5` hours); the product saturates.
    pub fn span_ms(&self) -> Option<i64> {
        let amount = amount(self.value.as_ref()?)?;
        Some((amount * self.unit?.ms() as f64) as i64)
    }

    /// The cutoff of a time operator at time `now_ms`: `now_ms - value × unit`.
    pub fn cutoff_ms(&self, now_ms: i64) -> Option<i64> {
        Some(now_ms.saturating_sub(self.span_ms()?))
    }
}

/// How many units a time operator's `value` holds: a positive, finite number (or a string
/// holding one).
fn amount(value: &Value) -> Option<f64> {
    let n = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (n.is_finite() && n > 0.0).then_some(n)
}

/// Where a filter is used, which decides the fields it may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Segments and campaign audiences: contact fields, `event.<name>` and `segment.<id>`;
    /// filters of this scope compile to SQL.
    Contacts,
    /// Workflow conditions: also `event.data.<path>` and `context.<path>` (memory only).
    Workflow,
}

/// A mistake in a filter: where (`groups[1].filters[0].operator`; empty for the filter itself)
/// and what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// The path of the bad part, from the filter's root (empty for the root itself).
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FilterError {
    /// An error at `path` saying `message`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FilterError {
        FilterError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The path under a prefix naming the filter itself: `filter` + `groups[0]` gives
    /// `filter.groups[0]`, and an empty path gives `filter`.
    pub fn path_under(&self, prefix: &str) -> String {
        match (prefix.is_empty(), self.path.is_empty()) {
            (_, true) => prefix.to_string(),
            (true, false) => self.path.clone(),
            (false, false) => format!("{prefix}.{}", self.path),
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for FilterError {}
