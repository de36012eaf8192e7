//! Compilation to a boolean SQL expression over a `contacts` row aliased `c`.

use serde_json::Value;

use crate::parse::{time_value, valid_segment};
use crate::{Condition, Field, Filter, FilterError, Group, Logic, Operator, time};

/// The SQL dialect to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite (with its built-in JSON functions; `c.data` is JSON text).
    Sqlite,
    /// PostgreSQL (`c.data` is `JSONB`).
    Postgres,
}

/// A value bound to a `$N` placeholder.
#[derive(Clone, Debug, PartialEq)]
pub enum SqlValue {
    /// Text.
    Text(String),
    /// A 64-bit integer (times in Unix milliseconds).
    Int(i64),
    /// A double (numbers from JSON).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// A never-`NULL` expression, over a `contacts` row aliased `c`, true when the contact is
/// subscribed to the topic whose id is the placeholder `topic` (`$N`): its own choice in
/// `c.topics` (`{ "top_…": true | false }`) when it made one, else the topic's default
/// (`topics.default_subscription = 'OPT_IN'`). False for a topic of another project or none.
/// The rule of topic-scoped sends (campaign snapshots, audience previews) and of `topic.<id>`
/// conditions alike.
pub fn topic_subscribed_sql(dialect: Dialect, topic: &str) -> String {
    let choice = match dialect {
        // Topic ids are `top_` and hex: nothing to escape in the quoted path key.
        Dialect::Sqlite => "json_extract(c.topics, '$.\"' || t.id || '\"')",
        Dialect::Postgres => "(c.topics ->> t.id)::boolean",
    };
    format!(
        "EXISTS (SELECT 1 FROM topics t WHERE t.project_id = c.project_id AND t.id = {topic} \
         AND COALESCE({choice}, t.default_subscription = 'OPT_IN'))"
    )
}

const TRUE: &str = "(1 = 1)";
const FALSE: &str = "(1 = 0)";
const UPPER: &str = "'ABCDEFGHIJKLMNOPQRSTUVWXYZ'";
const LOWER: &str = "'abcdefghijklmnopqrstuvwxyz'";

impl Filter {
    /// Compiles the filter into a boolean SQL expression (never `NULL`) over a `contacts` row
    /// aliased `c`, true exactly when [`Filter::matches`] is for the same contact at `now_ms`
    /// (see the crate docs for the tables it reads).
    ///
    /// Each value is pushed onto `binds` and written as `$N`, `N` being its position in `binds`
    /// counted from 1: push the caller's own values first (`$1` = the project id, say) and the
    /// filter's placeholders follow them.
    ///
    /// Fails for workflow-only fields (`event.data.`, `context.`), which have no SQL form, and
    /// for key paths [`crate::parse`] would refuse (in a hand-built filter), naming the path of
    /// the condition's field. On failure, `binds` may hold values of the part already written.
    pub fn to_sql(
        &self,
        dialect: Dialect,
        now_ms: i64,
        binds: &mut Vec<SqlValue>,
    ) -> Result<String, FilterError> {
        Writer {
            dialect,
            now_ms,
            binds,
        }
        .filter(self, "")
    }
}

struct Writer<'a> {
    dialect: Dialect,
    now_ms: i64,
    binds: &'a mut Vec<SqlValue>,
}

/// How to read a JSON value's type and contents in SQL.
struct Json {
    /// The type name (`json_type` / `jsonb_typeof`), `NULL` when missing.
    ty: String,
    /// The value as text (for strings).
    text: String,
    /// The value as a double (for numbers).
    num: String,
    /// The value as a boolean (for booleans).
    boolean: String,
    /// A `FROM` item listing the elements of an array value as `j` (empty for elements).
    elements: String,
}

fn join(parts: Vec<String>, sep: &str, empty: &str) -> String {
    if parts.is_empty() {
        empty.to_string()
    } else {
        format!("({})", parts.join(sep))
    }
}

fn sql_op(op: Operator) -> &'static str {
    match op {
        Operator::GreaterThan => ">",
        Operator::LessThan => "<",
        Operator::GreaterThanOrEqual | Operator::Within => ">=",
        Operator::LessThanOrEqual => "<=",
        Operator::OlderThan => "<",
        Operator::NotEquals => "<>",
        _ => "=",
    }
}

impl Writer<'_> {
    fn bind(&mut self, value: SqlValue) -> String {
        self.binds.push(value);
        format!("${}", self.binds.len())
    }

    fn sqlite(&self) -> bool {
        self.dialect == Dialect::Sqlite
    }

    fn coalesce(&self, expr: String) -> String {
        let no = if self.sqlite() { "0" } else { "FALSE" };
        format!("COALESCE({expr}, {no})")
    }

    fn filter(&mut self, filter: &Filter, path: &str) -> Result<String, FilterError> {
        let mut parts = Vec::with_capacity(filter.groups.len());
        for (i, group) in filter.groups.iter().enumerate() {
            let gpath = if path.is_empty() {
                format!("groups[{i}]")
            } else {
                format!("{path}.groups[{i}]")
            };
            parts.push(self.group(group, &gpath)?);
        }
        Ok(match filter.logic {
            Logic::And => join(parts, " AND ", TRUE),
            Logic::Or => join(parts, " OR ", FALSE),
        })
    }

    fn group(&mut self, group: &Group, path: &str) -> Result<String, FilterError> {
        let mut parts = Vec::with_capacity(group.filters.len() + 1);
        for (i, condition) in group.filters.iter().enumerate() {
            parts.push(self.condition(condition, &format!("{path}.filters[{i}].field"))?);
        }
        if let Some(nested) = &group.conditions {
            parts.push(self.filter(nested, &format!("{path}.conditions"))?);
        }
        Ok(join(parts, " AND ", TRUE))
    }

    fn condition(&mut self, c: &Condition, path: &str) -> Result<String, FilterError> {
        let (positive, negated) = c.op.positive();
        let expr = self.holds(c, positive, path)?;
        Ok(if negated { format!("NOT {expr}") } else { expr })
    }

    /// A never-`NULL` expression for the condition with the positive operator `op`.
    fn holds(&mut self, c: &Condition, op: Operator, path: &str) -> Result<String, FilterError> {
        use Operator as O;
        let cutoff = c.cutoff_ms(self.now_ms);
        let expected = c.value.as_ref();
        Ok(match (&c.field, op) {
            (Field::EventData(_) | Field::Context(_), _) => {
                return Err(FilterError::new(
                    path,
                    format!(
                        "`{}` exists only in workflow conditions, which have no SQL form",
                        c.field
                    ),
                ));
            }
            (Field::Event(name), O::Triggered | O::TriggeredWithin) => {
                let name = self.bind(SqlValue::Text(name.clone()));
                let since = match (op, cutoff) {
                    (O::Triggered, _) => String::new(),
                    (_, Some(cutoff)) => {
                        format!(" AND es.last_at >= {}", self.bind(SqlValue::Int(cutoff)))
                    }
                    (_, None) => return Ok(FALSE.into()),
                };
                // One row a contact and name (`event_summaries`, kept by a trigger on `events`),
                // however many events the contact has.
                format!(
                    "EXISTS (SELECT 1 FROM event_summaries es WHERE es.contact_id = c.id \
                     AND es.name = {name}{since})"
                )
            }
            (Field::Segment(id), O::MemberOf) => {
                let id = self.bind(SqlValue::Text(id.clone()));
                format!(
                    "EXISTS (SELECT 1 FROM segment_members sm WHERE sm.project_id = c.project_id \
                     AND sm.contact_id = c.id AND sm.segment_id = {id})"
                )
            }
            (Field::Topic(id), O::Subscribed) => {
                let id = self.bind(SqlValue::Text(id.clone()));
                topic_subscribed_sql(self.dialect, &id)
            }
            (Field::Event(_) | Field::Segment(_) | Field::Topic(_), _) => FALSE.into(),
            (_, O::Triggered | O::TriggeredWithin | O::MemberOf | O::Subscribed) => FALSE.into(),
            (Field::Email | Field::Subscribed | Field::CreatedAt | Field::UpdatedAt, O::Exists) => {
                TRUE.into()
            }
            (Field::Email, _) => {
                let Some(Value::String(e)) = expected else {
                    return Ok(FALSE.into());
                };
                match op {
                    O::Equals | O::Contains => {
                        let lowered = self.lower("c.email");
                        let e = self.bind(SqlValue::Text(e.to_ascii_lowercase()));
                        if op == O::Equals {
                            format!("({lowered} = {e})")
                        } else {
                            self.position(&lowered, &e)
                        }
                    }
                    O::GreaterThan | O::LessThan | O::GreaterThanOrEqual | O::LessThanOrEqual => {
                        let e = self.bind(SqlValue::Text(e.clone()));
                        format!("({} {} {e})", self.bytewise("c.email"), sql_op(op))
                    }
                    _ => FALSE.into(),
                }
            }
            (Field::Subscribed, O::Equals) => match expected {
                Some(Value::Bool(b)) => {
                    format!("(c.subscribed = {})", self.bind(SqlValue::Bool(*b)))
                }
                _ => FALSE.into(),
            },
            (Field::Subscribed, _) => FALSE.into(),
            (Field::CreatedAt | Field::UpdatedAt, _) => {
                let column = if c.field == Field::CreatedAt {
                    "c.created_at"
                } else {
                    "c.updated_at"
                };
                let bound = match op {
                    O::Within | O::OlderThan => cutoff,
                    O::Contains => None,
                    _ => expected.and_then(time_value),
                };
                match bound {
                    Some(ms) => {
                        format!("({column} {} {})", sql_op(op), self.bind(SqlValue::Int(ms)))
                    }
                    None => FALSE.into(),
                }
            }
            (Field::Data(keys), _) => {
                if keys.is_empty() || !keys.iter().all(|k| valid_segment(k)) {
                    return Err(FilterError::new(
                        path,
                        format!("bad key path `{}`: a key is empty", c.field),
                    ));
                }
                if let (
                    Dialect::Postgres,
                    O::Equals,
                    Some(e @ (Value::String(_) | Value::Bool(_))),
                ) = (self.dialect, op, expected)
                {
                    // Containment: exact for a string or a boolean (an array at the path does not
                    // contain a scalar below the top level), and a quarter cheaper over a scan
                    // than reading the value out and checking its type.
                    let nested = keys.iter().rev().fold(e.clone(), |inner, k| {
                        Value::Object([(k.clone(), inner)].into_iter().collect())
                    });
                    let doc = self.bind(SqlValue::Text(nested.to_string()));
                    return Ok(format!("(c.data @> CAST({doc} AS jsonb))"));
                }
                let json = self.data(keys);
                let expr = self.value_holds(op, &json, expected, cutoff);
                self.coalesce(expr)
            }
        })
    }

    /// ASCII-only lower-casing, the same in both dialects and in memory.
    fn lower(&self, expr: &str) -> String {
        if self.sqlite() {
            // SQLite's built-in lower() folds ASCII only.
            format!("lower({expr})")
        } else {
            format!("translate({expr}, {UPPER}, {LOWER})")
        }
    }

    /// Whether `needle` (already lower-cased) is in `haystack` (lower-cased).
    fn position(&self, haystack: &str, needle: &str) -> String {
        if self.sqlite() {
            format!("(instr({haystack}, {needle}) > 0)")
        } else {
            format!("(strpos({haystack}, {needle}) > 0)")
        }
    }

    /// Text compared byte-wise.
    fn bytewise(&self, expr: &str) -> String {
        if self.sqlite() {
            expr.to_string()
        } else {
            format!("({expr} COLLATE \"C\")")
        }
    }

    /// How to read `c.data` at a key path. The keys are bound, whatever their characters: on
    /// SQLite the whole JSON path (`$."a"."b"`, [`crate::sqlite_json_path`]), once; on PostgreSQL
    /// each key, read with `->` (an object's member by name: never an array's element, as memory
    /// and SQLite read it, so an index-like key needs no guard) and the last with `->>` for the
    /// text.
    fn data(&mut self, keys: &[String]) -> Json {
        if self.sqlite() {
            let path = self.bind(SqlValue::Text(crate::sqlite_json_path(keys)));
            let ty = format!("json_type(c.data, {path})");
            Json {
                text: format!("json_extract(c.data, {path})"),
                num: format!("CAST(json_extract(c.data, {path}) AS REAL)"),
                boolean: format!("({ty} = 'true')"),
                elements: format!("json_each(c.data, {path}) j"),
                ty,
            }
        } else {
            let binds: Vec<String> = keys
                .iter()
                .map(|k| self.bind(SqlValue::Text(k.clone())))
                .collect();
            let (last, parents) = binds.split_last().expect("a key path has a key");
            let parent: String = parents.iter().map(|b| format!(" -> {b}")).collect();
            let value = format!("(c.data{parent} -> {last})");
            // `->>` reads the text in one step (a third faster over a scan than `->` then
            // `#>> '{}'`).
            let text = format!("(c.data{parent} ->> {last})");
            Json {
                ty: format!("jsonb_typeof({value})"),
                text,
                num: format!("({value})::float8"),
                boolean: format!("({value})::boolean"),
                // Only arrays reach jsonb_array_elements, whatever order the planner picks.
                elements: format!(
                    "jsonb_array_elements(CASE WHEN jsonb_typeof({value}) = 'array' \
                     THEN {value} ELSE '[]'::jsonb END) j(v)"
                ),
            }
        }
    }

    /// How to read one element `j` of a JSON array.
    fn element(&self) -> Json {
        if self.sqlite() {
            Json {
                ty: "j.type".into(),
                text: "j.value".into(),
                num: "CAST(j.value AS REAL)".into(),
                boolean: "(j.type = 'true')".into(),
                elements: String::new(),
            }
        } else {
            Json {
                ty: "jsonb_typeof(j.v)".into(),
                text: "(j.v #>> '{}')".into(),
                num: "(j.v)::float8".into(),
                boolean: "(j.v)::boolean".into(),
                elements: String::new(),
            }
        }
    }

    fn is_string(&self, json: &Json) -> String {
        let name = if self.sqlite() { "text" } else { "string" };
        format!("{} = '{name}'", json.ty)
    }

    fn is_number(&self, json: &Json) -> String {
        if self.sqlite() {
            format!("{} IN ('integer', 'real')", json.ty)
        } else {
            format!("{} = 'number'", json.ty)
        }
    }

    fn is_boolean(&self, json: &Json) -> String {
        if self.sqlite() {
            format!("{} IN ('true', 'false')", json.ty)
        } else {
            format!("{} = 'boolean'", json.ty)
        }
    }

    /// `equals` on a JSON value, `NULL` when the types differ.
    fn equals(&mut self, json: &Json, expected: &Value) -> Option<String> {
        Some(match expected {
            // The text first: most rows fail it, and the type check then never runs (on
            // PostgreSQL, half the cost of the scan). Exact all the same: a number or a list
            // read as text is refused by the type check.
            Value::String(s) => {
                let e = self.bind(SqlValue::Text(s.clone()));
                format!("({} = {e} AND {})", json.text, self.is_string(json))
            }
            Value::Number(n) => {
                let e = self.bind(SqlValue::Float(n.as_f64()?));
                format!(
                    "CASE WHEN {} THEN {} = {e} END",
                    self.is_number(json),
                    json.num
                )
            }
            Value::Bool(b) => {
                let e = self.bind(SqlValue::Bool(*b));
                format!(
                    "CASE WHEN {} THEN {} = {e} END",
                    self.is_boolean(json),
                    json.boolean
                )
            }
            _ => return None,
        })
    }

    /// A possibly-`NULL` expression for a positive operator on a JSON value (`NULL` and false
    /// both mean "does not hold").
    fn value_holds(
        &mut self,
        op: Operator,
        json: &Json,
        expected: Option<&Value>,
        cutoff: Option<i64>,
    ) -> String {
        use Operator as O;
        let none = || "NULL".to_string();
        match op {
            O::Exists => format!("COALESCE({}, 'null') <> 'null'", json.ty),
            O::Equals => expected
                .and_then(|e| self.equals(json, e))
                .unwrap_or_else(none),
            O::Contains => {
                let Some(e) = expected else { return none() };
                let mut branches = Vec::new();
                if let Value::String(s) = e {
                    let needle = self.bind(SqlValue::Text(s.to_ascii_lowercase()));
                    let lowered = self.lower(&json.text);
                    branches.push(format!(
                        "WHEN {} THEN {}",
                        self.is_string(json),
                        self.position(&lowered, &needle)
                    ));
                }
                let element = self.element();
                let Some(item) = self.equals(&element, e) else {
                    return none();
                };
                let item = self.coalesce(item);
                branches.push(format!(
                    "WHEN {} = 'array' THEN EXISTS (SELECT 1 FROM {} WHERE {item})",
                    json.ty, json.elements
                ));
                format!("CASE {} END", branches.join(" "))
            }
            O::GreaterThan | O::LessThan | O::GreaterThanOrEqual | O::LessThanOrEqual => {
                match expected {
                    Some(Value::Number(n)) => {
                        let Some(n) = n.as_f64() else { return none() };
                        let e = self.bind(SqlValue::Float(n));
                        format!(
                            "CASE WHEN {} THEN {} {} {e} END",
                            self.is_number(json),
                            json.num,
                            sql_op(op)
                        )
                    }
                    Some(Value::String(s)) => {
                        let e = self.bind(SqlValue::Text(s.clone()));
                        format!(
                            "CASE WHEN {} THEN {} {} {e} END",
                            self.is_string(json),
                            self.bytewise(&json.text),
                            sql_op(op)
                        )
                    }
                    _ => none(),
                }
            }
            O::Within | O::OlderThan => {
                let Some(cutoff) = cutoff else { return none() };
                let ms = self.bind(SqlValue::Float(cutoff as f64));
                let iso = self.bind(SqlValue::Text(time::format(cutoff)));
                let t = &json.text;
                let (seconds, millis) = if self.sqlite() {
                    (
                        format!("{t} GLOB '{}'", time::GLOB_SECONDS),
                        format!("{t} GLOB '{}'", time::GLOB_MILLIS),
                    )
                } else {
                    (
                        format!("{t} ~ '{}'", time::REGEX_SECONDS),
                        format!("{t} ~ '{}'", time::REGEX_MILLIS),
                    )
                };
                let stored = format!(
                    "CASE WHEN {seconds} THEN substr({t}, 1, 19) || '.000Z' WHEN {millis} THEN {t} END"
                );
                let o = sql_op(op);
                format!(
                    "CASE WHEN {} THEN {} {o} {ms} WHEN {} THEN {} {o} {iso} END",
                    self.is_number(json),
                    json.num,
                    self.is_string(json),
                    self.bytewise(&format!("({stored})")),
                )
            }
            _ => none(),
        }
    }
}
