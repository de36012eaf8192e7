//! The rules of workflows (`docs/decisions.md`, "Workflows"): step types and the branches that
//! may leave each, the statuses of executions and step runs, and the checks of a workflow's
//! graph (one entry step, each branch at most once, no cycle) that enabling and starting run.
//! Pure: the store reads the graph, these functions judge it.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::domain::event::EventName;
pub use crate::domain::segment::{Violation, check_description};

/// Longest workflow or step name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// Most steps one workflow may have.
pub const MAX_STEPS: usize = 200;
/// Largest step `config` or execution `context`, as JSON bytes.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// What a step does; the seven built-ins run the built-in step plugins, `PLUGIN` runs the step
/// plugin named by `config.plugin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepType {
    SendEmail,
    Delay,
    WaitForEvent,
    Condition,
    Webhook,
    UpdateContact,
    Exit,
    Plugin,
}

impl StepType {
    /// Every step type.
    pub const ALL: [StepType; 8] = [
        StepType::SendEmail,
        StepType::Delay,
        StepType::WaitForEvent,
        StepType::Condition,
        StepType::Webhook,
        StepType::UpdateContact,
        StepType::Exit,
        StepType::Plugin,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepType::SendEmail => "SEND_EMAIL",
            StepType::Delay => "DELAY",
            StepType::WaitForEvent => "WAIT_FOR_EVENT",
            StepType::Condition => "CONDITION",
            StepType::Webhook => "WEBHOOK",
            StepType::UpdateContact => "UPDATE_CONTACT",
            StepType::Exit => "EXIT",
            StepType::Plugin => "PLUGIN",
        }
    }

    /// Whether the step reads the contact's event history and segment ids from its input:
    /// a `CONDITION` (its filter's `event.` and `segment.` fields) and any `PLUGIN` step. The
    /// other built-in steps never do, and the runner leaves both lists empty for them (two
    /// reads a step saved).
    pub fn reads_history(self) -> bool {
        matches!(self, StepType::Condition | StepType::Plugin)
    }

    /// Accepts the wire names in any case.
    pub fn parse(s: &str) -> Option<StepType> {
        StepType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// The branches a transition out of a step of this type may carry; empty means only one
    /// plain transition (no branch) may leave it. A `PLUGIN` step names its own branches (see
    /// [`check_branch`]).
    pub fn branches(self) -> &'static [&'static str] {
        match self {
            StepType::Condition => &["yes", "no"],
            StepType::WaitForEvent => &["event", "timeout"],
            _ => &[],
        }
    }

    /// Whether a transition may leave a step of this type at all.
    pub fn has_exits(self) -> bool {
        self != StepType::Exit
    }
}

/// Statuses of an execution.
pub mod execution_status {
    /// A step is due or running.
    pub const RUNNING: &str = "RUNNING";
    /// Waiting for a delay or an event.
    pub const WAITING: &str = "WAITING";
    /// Ran out of steps.
    pub const COMPLETED: &str = "COMPLETED";
    /// Ended by an `EXIT` step.
    pub const EXITED: &str = "EXITED";
    /// A step failed for good.
    pub const FAILED: &str = "FAILED";
    /// Cancelled through the API.
    pub const CANCELLED: &str = "CANCELLED";
    /// Every status, for checking a `status` filter.
    pub const ALL: [&str; 6] = [RUNNING, WAITING, COMPLETED, EXITED, FAILED, CANCELLED];
    /// The statuses of an active execution.
    pub const ACTIVE: [&str; 2] = [RUNNING, WAITING];
}

/// Statuses of a step run.
pub mod step_run_status {
    /// Due, not yet run (or being retried).
    pub const PENDING: &str = "PENDING";
    /// Being run.
    pub const RUNNING: &str = "RUNNING";
    /// Waiting for an event (a `WAIT_FOR_EVENT` step).
    pub const WAITING: &str = "WAITING";
    /// Done.
    pub const COMPLETED: &str = "COMPLETED";
    /// Failed for good.
    pub const FAILED: &str = "FAILED";
    /// Never ran: its execution was cancelled first.
    pub const SKIPPED: &str = "SKIPPED";
}

/// A workflow or step name, trimmed: 1 to 200 characters.
pub fn check_name(field: &str, name: &str) -> Result<String, Violation> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Violation::new(
            field,
            "required",
            format!("`{field}` must not be empty"),
        ));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(Violation::new(
            field,
            "too_long",
            format!("`{field}` may be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    Ok(name.to_string())
}

/// The one trigger type: a workflow starts when an event of its trigger name is recorded for a
/// contact.
pub const TRIGGER_EVENT: &str = "EVENT";

/// A trigger event name (`triggerConfig.eventName`, reported at `field`): the syntax rules of
/// `/v1/track` (not empty, at most 255 characters, no control characters), trimmed. Names the
/// service emits itself (`contact.subscribed`, `segment.<slug>.entry`, …) are accepted: they are
/// events a workflow may start from, although a caller cannot track them.
pub fn check_trigger_event(field: &str, name: &str) -> Result<String, Violation> {
    EventName::parse_any(name)
        .map(|n| n.as_str().to_string())
        .map_err(|e| Violation::new(field, "invalid", e.to_string()))
}

/// A trigger type: only `EVENT` (any case).
pub fn check_trigger_type(s: &str) -> Result<&'static str, Violation> {
    if s.trim().eq_ignore_ascii_case(TRIGGER_EVENT) {
        Ok(TRIGGER_EVENT)
    } else {
        Err(Violation::new(
            "triggerType",
            "invalid",
            format!("`{s}` is not a trigger type; the only one is EVENT"),
        ))
    }
}

/// A step type from its wire name (any case).
pub fn check_step_type(s: &str) -> Result<StepType, Violation> {
    StepType::parse(s).ok_or_else(|| {
        let names: Vec<&str> = StepType::ALL.iter().map(|t| t.as_str()).collect();
        Violation::new(
            "type",
            "invalid",
            format!("`{s}` is not a step type; use one of {}", names.join(", ")),
        )
    })
}

/// The shape of a step `config`: a JSON object of at most [`MAX_CONFIG_BYTES`]. What it holds
/// is for the step's plugin to judge.
pub fn check_config(config: &Value) -> Result<(), Violation> {
    if !config.is_object() {
        return Err(Violation::new(
            "config",
            "invalid_type",
            "`config` must be a JSON object",
        ));
    }
    let size = config.to_string().len();
    if size > MAX_CONFIG_BYTES {
        return Err(Violation::new(
            "config",
            "too_long",
            format!("`config` is {size} bytes of JSON; at most {MAX_CONFIG_BYTES} are allowed"),
        ));
    }
    Ok(())
}

/// The largest distance from the origin, on either axis, of a step on the canvas.
pub const MAX_POSITION: f64 = 1_000_000.0;

/// Where a step is drawn on the dashboard's canvas. Only the dashboard reads it: executions
/// do not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepPosition {
    pub x: f64,
    pub y: f64,
}

/// A step's `position`: each coordinate within ±[`MAX_POSITION`].
pub fn check_position(x: f64, y: f64) -> Result<StepPosition, Violation> {
    for (axis, v) in [("x", x), ("y", y)] {
        if !v.is_finite() || v.abs() > MAX_POSITION {
            return Err(Violation::new(
                format!("position.{axis}"),
                "out_of_range",
                format!("`position.{axis}` is {v}; use -{MAX_POSITION} to {MAX_POSITION}"),
            ));
        }
    }
    Ok(StepPosition { x, y })
}

/// The template a `SEND_EMAIL` step sends (`config.templateId`), when it names one.
pub fn step_template_id(step_type: StepType, config: &Value) -> Option<&str> {
    (step_type == StepType::SendEmail)
        .then(|| config.get("templateId").and_then(Value::as_str))
        .flatten()
}

/// The topic a `SEND_EMAIL` step's mail is about (`config.topicId`), when it names one: it
/// takes the place of the template's own topic.
pub fn step_topic_id(step_type: StepType, config: &Value) -> Option<&str> {
    (step_type == StepType::SendEmail)
        .then(|| config.get("topicId").and_then(Value::as_str))
        .flatten()
}

/// A step of a graph, as the checks see it.
#[derive(Clone, Debug)]
pub struct GraphStep<'a> {
    pub id: &'a str,
    pub step_type: StepType,
}

/// A transition of a graph, as the checks see it.
#[derive(Clone, Debug)]
pub struct GraphTransition<'a> {
    pub id: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub branch: Option<&'a str>,
}

/// Checks a transition to add: the branch fits the step it leaves, that branch (or the plain
/// exit) is free, and the transition closes no cycle. `existing` are the workflow's transitions.
pub fn check_new_transition(
    from: &GraphStep<'_>,
    to: &GraphStep<'_>,
    branch: Option<&str>,
    existing: &[GraphTransition<'_>],
) -> Result<(), Violation> {
    if !from.step_type.has_exits() {
        return Err(Violation::new(
            "fromStepId",
            "invalid",
            "an EXIT step ends the execution; no transition may leave it",
        ));
    }
    check_branch(from.step_type, branch)?;
    if from.id == to.id {
        return Err(Violation::new(
            "toStepId",
            "cycle",
            "a step cannot lead to itself",
        ));
    }
    if let Some(taken) = existing
        .iter()
        .find(|t| t.from == from.id && t.branch == branch)
    {
        let what = match branch {
            Some(b) => format!("branch `{b}`"),
            None => "its transition".to_string(),
        };
        return Err(Violation::new(
            if branch.is_some() {
                "branch"
            } else {
                "fromStepId"
            },
            "conflict",
            format!(
                "step {} already has {what} ({}); delete it first",
                from.id, taken.id
            ),
        ));
    }
    if reaches(existing, to.id, from.id) {
        return Err(Violation::new(
            "toStepId",
            "cycle",
            format!(
                "step {} already leads back to step {}; workflows may not loop",
                to.id, from.id
            ),
        ));
    }
    Ok(())
}

/// Longest branch name of a `PLUGIN` step, in bytes.
pub const MAX_BRANCH_LEN: usize = 64;

/// Checks `branch` against the step type it leaves. A `PLUGIN` step may continue along branches
/// of its own naming (`[a-z0-9_-]`, up to 64 bytes) or a plain transition, which it also follows
/// when it names a branch that has no transition.
pub fn check_branch(from: StepType, branch: Option<&str>) -> Result<(), Violation> {
    let allowed = from.branches();
    if from == StepType::Plugin {
        return match branch {
            Some(b)
                if b.is_empty()
                    || b.len() > MAX_BRANCH_LEN
                    || !b
                        .bytes()
                        .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')) =>
            {
                Err(Violation::new(
                    "branch",
                    "invalid",
                    format!(
                        "a PLUGIN step's branch is 1 to {MAX_BRANCH_LEN} of a-z, 0-9, `_` and `-`"
                    ),
                ))
            }
            _ => Ok(()),
        };
    }
    match branch {
        None if allowed.is_empty() => Ok(()),
        None => Err(Violation::new(
            "branch",
            "required",
            format!(
                "a transition out of a {} step needs `branch`: one of {}",
                from.as_str(),
                allowed.join(", ")
            ),
        )),
        Some(b) if allowed.contains(&b) => Ok(()),
        Some(b) if allowed.is_empty() => Err(Violation::new(
            "branch",
            "invalid",
            format!(
                "a {} step has one way out; omit `branch` (got `{b}`)",
                from.as_str()
            ),
        )),
        Some(b) => Err(Violation::new(
            "branch",
            "invalid",
            format!(
                "`{b}` is not a branch of a {} step; use one of {}",
                from.as_str(),
                allowed.join(", ")
            ),
        )),
    }
}

/// Whether `start` reaches `target` along `transitions`.
fn reaches(transitions: &[GraphTransition<'_>], start: &str, target: &str) -> bool {
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for t in transitions {
        next.entry(t.from).or_default().push(t.to);
    }
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(at) = stack.pop() {
        if at == target {
            return true;
        }
        if seen.insert(at) {
            stack.extend(next.get(at).into_iter().flatten().copied());
        }
    }
    false
}

/// The problems of a whole graph, each with the part it is about: no steps, not exactly one
/// entry step (a step no transition leads to), a branch or plain exit used twice, a transition
/// that does not fit its step, or a cycle. Empty means the graph can run.
pub fn check_graph(steps: &[GraphStep<'_>], transitions: &[GraphTransition<'_>]) -> Vec<Violation> {
    let mut problems = Vec::new();
    if steps.is_empty() {
        problems.push(Violation::new(
            "steps",
            "required",
            "the workflow has no steps; add at least one with POST /workflows/:id/steps",
        ));
        return problems;
    }
    let types: HashMap<&str, StepType> = steps.iter().map(|s| (s.id, s.step_type)).collect();
    let targets: HashSet<&str> = transitions.iter().map(|t| t.to).collect();
    let entries: Vec<&str> = steps
        .iter()
        .map(|s| s.id)
        .filter(|id| !targets.contains(id))
        .collect();
    match entries.len() {
        1 => {}
        0 => problems.push(Violation::new(
            "transitions",
            "no_entry",
            "every step has an incoming transition, so there is no entry step",
        )),
        _ => problems.push(Violation::new(
            "steps",
            "several_entries",
            format!(
                "{} steps have no incoming transition ({}); exactly one may be the entry step: connect the others",
                entries.len(),
                entries.join(", ")
            ),
        )),
    }
    let mut used: HashSet<(&str, Option<&str>)> = HashSet::new();
    for (i, t) in transitions.iter().enumerate() {
        let Some(from) = types.get(t.from) else {
            continue;
        };
        if !from.has_exits() {
            problems.push(Violation::new(
                format!("transitions[{i}]"),
                "invalid",
                format!("transition {} leaves an EXIT step", t.id),
            ));
        } else if let Err(v) = check_branch(*from, t.branch) {
            problems.push(Violation::new(
                format!("transitions[{i}].branch"),
                v.code,
                format!("transition {}: {}", t.id, v.message),
            ));
        }
        if !used.insert((t.from, t.branch)) {
            problems.push(Violation::new(
                format!("transitions[{i}]"),
                "duplicate",
                match t.branch {
                    Some(b) => format!("step {} has branch `{b}` more than once", t.from),
                    None => format!("step {} has more than one transition", t.from),
                },
            ));
        }
    }
    if let Some(t) = transitions
        .iter()
        .find(|t| reaches(transitions, t.to, t.from))
    {
        problems.push(Violation::new(
            "transitions",
            "cycle",
            format!(
                "the steps loop through transition {}; workflows may not loop",
                t.id
            ),
        ));
    }
    problems
}

/// The entry step of a graph that passed [`check_graph`].
pub fn entry_step<'a>(
    steps: &[GraphStep<'a>],
    transitions: &[GraphTransition<'_>],
) -> Option<&'a str> {
    let targets: HashSet<&str> = transitions.iter().map(|t| t.to).collect();
    steps.iter().map(|s| s.id).find(|id| !targets.contains(id))
}

/// Where an execution goes after a step that continued along `branch`: the transition with
/// that branch, or for no branch the plain one. `None` ends the execution (completed).
pub fn next_step<'a>(
    transitions: &[GraphTransition<'a>],
    from: &str,
    branch: Option<&str>,
) -> Option<&'a str> {
    transitions
        .iter()
        .find(|t| t.from == from && t.branch == branch)
        .map(|t| t.to)
}

/// How to reconnect the graph around a step that is deleted with `splice=true`: the incoming
/// transitions to re-point (id, new target); every other transition of the step goes with it.
///
/// With one outgoing transition, every incoming one is re-pointed to its target and keeps its
/// own branch (its source and branch do not change, so no branch is taken twice, and removing a
/// step of an acyclic graph while joining its neighbours closes no cycle). With no incoming or no
/// outgoing transition there is nothing to join: the step's transitions are deleted with it. With
/// several outgoing transitions (the `yes`/`no` or `event`/`timeout` branches) there is no single
/// next step, so the step cannot be spliced.
pub fn splice<'a>(
    step: &str,
    transitions: &[GraphTransition<'a>],
) -> Result<Vec<(&'a str, &'a str)>, Violation> {
    let incoming: Vec<&GraphTransition<'a>> = transitions.iter().filter(|t| t.to == step).collect();
    let outgoing: Vec<&GraphTransition<'a>> =
        transitions.iter().filter(|t| t.from == step).collect();
    match (incoming.is_empty(), outgoing.as_slice()) {
        (true, _) | (_, []) => Ok(Vec::new()),
        (false, [next]) => Ok(incoming.iter().map(|t| (t.id, next.to)).collect()),
        (false, several) => Err(Violation::new(
            "splice",
            "ambiguous",
            format!(
                "step {step} has {} outgoing transitions ({}), so there is no single next step to \
                 reconnect its incoming transitions to; delete it without `splice`, or delete all \
                 but one of its outgoing transitions first",
                several.len(),
                {
                    let mut branches: Vec<&str> = several
                        .iter()
                        .map(|t| t.branch.unwrap_or("plain"))
                        .collect();
                    branches.sort_unstable();
                    branches.join(", ")
                }
            ),
        )),
    }
}

/// The fields of the contact a `CONDITION` filter may use, with their types.
pub const CONTACT_FIELDS: [(&str, &str); 4] = [
    ("email", "string"),
    ("subscribed", "boolean"),
    ("createdAt", "date"),
    ("updatedAt", "date"),
];

/// The JSON type of a value: `string`, `number`, `boolean`, `array`, `object` or `null`.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The `reason` of a `SEND_EMAIL` effect whose email is marketing mail to an unsubscribed
/// contact (the suppression list's reasons are `HARD_BOUNCE`, `COMPLAINT` and `MANUAL`).
pub const UNSUBSCRIBED: &str = "UNSUBSCRIBED";

/// What a step run's output (and its effect's idempotency record) says of a `SEND_EMAIL`
/// effect: `{ type, emailId, to, suppressed }`, and `reason` when `suppressed` names why the
/// email is never sent.
pub fn send_effect(email_id: Option<&str>, to: Option<&str>, suppressed: Option<&str>) -> Value {
    let mut effect = serde_json::json!({
        "type": "SEND_EMAIL",
        "emailId": email_id,
        "to": to,
        "suppressed": suppressed.is_some(),
    });
    if let (Some(reason), Some(fields)) = (suppressed, effect.as_object_mut()) {
        fields.insert("reason".into(), Value::from(reason));
    }
    effect
}

/// Marks the [`send_effect`] record of `email_id` as suppressed for `reason`: `value` is the
/// record itself, or a step run's output with the record among its `effects`. Whether it was
/// found.
pub fn mark_send_suppressed(value: &mut Value, email_id: &str, reason: &str) -> bool {
    let is_it = |v: &Value| v["type"] == "SEND_EMAIL" && v["emailId"] == email_id;
    let record = if is_it(value) {
        Some(value)
    } else {
        value
            .get_mut("effects")
            .and_then(Value::as_array_mut)
            .and_then(|effects| effects.iter_mut().find(|e| is_it(e)))
    };
    let Some(Value::Object(fields)) = record else {
        return false;
    };
    fields.insert("suppressed".into(), Value::Bool(true));
    fields.insert("reason".into(), Value::from(reason));
    true
}

/// The top-level data keys of events (newest first) as `event.data.<key>` fields, sorted, each
/// with the JSON type of its newest non-null value (`null` when it was only ever null).
pub fn event_data_fields<'a>(
    events: impl IntoIterator<Item = &'a Map<String, Value>>,
) -> Vec<(String, &'static str)> {
    let mut fields: BTreeMap<&str, &'static str> = BTreeMap::new();
    for data in events {
        for (key, value) in data {
            let seen = fields.entry(key).or_insert("null");
            if *seen == "null" {
                *seen = json_type(value);
            }
        }
    }
    fields
        .into_iter()
        .map(|(k, t)| (format!("event.data.{}", herald_filter::escape_key(k)), t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_effect_is_marked_suppressed_where_it_is_recorded() {
        let id = "eml_0190a1b2c3d4e5f60718293a4b5c6d7e";
        let sent = send_effect(Some(id), Some("ann@example.com"), None);
        assert_eq!(sent["suppressed"], false);
        assert!(sent.get("reason").is_none());
        let unsubscribed = send_effect(Some(id), None, Some(UNSUBSCRIBED));
        assert_eq!(
            (&unsubscribed["suppressed"], &unsubscribed["reason"]),
            (&Value::Bool(true), &Value::from("UNSUBSCRIBED"))
        );
        let mut record = sent.clone();
        assert!(mark_send_suppressed(&mut record, id, "MANUAL"));
        assert_eq!(record["suppressed"], true);
        assert_eq!(record["reason"], "MANUAL");
        let mut output = serde_json::json!({
            "outcome": { "type": "CONTINUE" },
            "effects": [{ "type": "SET_CONTEXT", "key": "x" }, sent],
        });
        assert!(!mark_send_suppressed(&mut output, "eml_other", "MANUAL"));
        assert_eq!(output["effects"][1]["suppressed"], false);
        assert!(mark_send_suppressed(&mut output, id, "HARD_BOUNCE"));
        assert_eq!(output["effects"][1]["reason"], "HARD_BOUNCE");
        assert!(output["effects"][0].get("reason").is_none());
    }

    fn step(id: &str, t: StepType) -> GraphStep<'_> {
        GraphStep { id, step_type: t }
    }

    fn tr<'a>(
        id: &'a str,
        from: &'a str,
        to: &'a str,
        branch: Option<&'a str>,
    ) -> GraphTransition<'a> {
        GraphTransition {
            id,
            from,
            to,
            branch,
        }
    }

    #[test]
    fn step_types_round_trip() {
        for t in StepType::ALL {
            assert_eq!(StepType::parse(t.as_str()), Some(t));
        }
        assert_eq!(StepType::parse("send_email"), Some(StepType::SendEmail));
        assert_eq!(StepType::parse("LOOP"), None);
    }

    #[test]
    fn a_valid_graph_has_one_entry_and_follows_branches() {
        let steps = [
            step("a", StepType::Condition),
            step("b", StepType::SendEmail),
            step("c", StepType::Exit),
        ];
        let ts = [
            tr("t1", "a", "b", Some("yes")),
            tr("t2", "a", "c", Some("no")),
            tr("t3", "b", "c", None),
        ];
        assert!(check_graph(&steps, &ts).is_empty());
        assert_eq!(entry_step(&steps, &ts), Some("a"));
        assert_eq!(next_step(&ts, "a", Some("no")), Some("c"));
        assert_eq!(next_step(&ts, "b", None), Some("c"));
        assert_eq!(next_step(&ts, "c", None), None);
    }

    #[test]
    fn bad_graphs_list_each_problem() {
        let steps = [
            step("a", StepType::Condition),
            step("b", StepType::Delay),
            step("c", StepType::Exit),
            step("d", StepType::Delay),
        ];
        let ts = [
            tr("t1", "a", "b", Some("yes")),
            tr("t2", "a", "c", Some("yes")),
            tr("t3", "c", "b", None),
        ];
        let codes: Vec<_> = check_graph(&steps, &ts)
            .into_iter()
            .map(|v| v.code)
            .collect();
        assert_eq!(codes, vec!["several_entries", "duplicate", "invalid"]);
        assert_eq!(check_graph(&[], &[])[0].code, "required");
        let looped = [tr("t1", "b", "d", None), tr("t2", "d", "b", None)];
        let codes: Vec<_> = check_graph(&steps[1..2], &looped)
            .into_iter()
            .map(|v| v.code)
            .collect();
        assert!(codes.contains(&"cycle"), "{codes:?}");
    }

    #[test]
    fn new_transitions_are_checked_against_the_graph() {
        let a = step("a", StepType::Condition);
        let b = step("b", StepType::Delay);
        let c = step("c", StepType::Exit);
        let existing = [tr("t1", "a", "b", Some("yes"))];
        assert_eq!(
            check_new_transition(&a, &b, None, &existing)
                .unwrap_err()
                .code,
            "required"
        );
        assert_eq!(
            check_new_transition(&a, &c, Some("maybe"), &existing)
                .unwrap_err()
                .code,
            "invalid"
        );
        assert_eq!(
            check_new_transition(&a, &c, Some("yes"), &existing)
                .unwrap_err()
                .code,
            "conflict"
        );
        assert!(check_new_transition(&a, &c, Some("no"), &existing).is_ok());
        assert_eq!(
            check_new_transition(&b, &a, None, &existing)
                .unwrap_err()
                .code,
            "cycle"
        );
        assert_eq!(
            check_new_transition(&c, &b, None, &existing)
                .unwrap_err()
                .code,
            "invalid"
        );
        assert_eq!(
            check_new_transition(&b, &b, None, &existing)
                .unwrap_err()
                .code,
            "cycle"
        );
        assert_eq!(
            check_new_transition(&b, &c, Some("yes"), &existing)
                .unwrap_err()
                .code,
            "invalid"
        );
        let p = step("p", StepType::Plugin);
        assert!(check_new_transition(&p, &c, Some("vip"), &existing).is_ok());
        assert!(check_new_transition(&p, &c, None, &existing).is_ok());
        assert_eq!(
            check_new_transition(&p, &c, Some("V I P"), &existing)
                .unwrap_err()
                .code,
            "invalid"
        );
    }

    #[test]
    fn splice_joins_the_neighbours_or_explains_why_not() {
        // a -yes-> s, b -> s, s -> c: both incoming go to c with their own branch.
        let ts = [
            tr("t1", "a", "s", Some("yes")),
            tr("t2", "b", "s", None),
            tr("t3", "s", "c", None),
        ];
        assert_eq!(splice("s", &ts).unwrap(), vec![("t1", "c"), ("t2", "c")]);
        // No incoming or no outgoing: nothing to join.
        assert!(splice("a", &ts).unwrap().is_empty());
        assert!(splice("c", &ts).unwrap().is_empty());
        // Two ways out: ambiguous.
        let branched = [
            tr("t1", "a", "s", None),
            tr("t2", "s", "b", Some("yes")),
            tr("t3", "s", "c", Some("no")),
        ];
        let v = splice("s", &branched).unwrap_err();
        assert_eq!(v.code, "ambiguous");
        assert!(v.message.contains("(no, yes)"), "{}", v.message);
    }

    #[test]
    fn event_fields_take_the_newest_non_null_type() {
        let newest: Map<String, Value> =
            serde_json::from_str(r#"{"plan":"pro","seats":null,"tags":["a"]}"#).unwrap();
        let older: Map<String, Value> =
            serde_json::from_str(r#"{"plan":3,"seats":2,"gone":null}"#).unwrap();
        assert_eq!(
            event_data_fields([&newest, &older]),
            vec![
                ("event.data.gone".to_string(), "null"),
                ("event.data.plan".to_string(), "string"),
                ("event.data.seats".to_string(), "number"),
                ("event.data.tags".to_string(), "array"),
            ]
        );
    }

    #[test]
    fn configs_triggers_and_types_are_checked() {
        assert!(check_config(&serde_json::json!({ "amount": 1 })).is_ok());
        assert_eq!(
            check_config(&serde_json::json!([1])).unwrap_err().code,
            "invalid_type"
        );
        let big = serde_json::json!({ "x": "a".repeat(MAX_CONFIG_BYTES) });
        assert_eq!(check_config(&big).unwrap_err().code, "too_long");
        assert_eq!(
            check_trigger_event("eventName", " signup ").unwrap(),
            "signup"
        );
        assert_eq!(
            check_trigger_event("eventName", "contact.subscribed").unwrap(),
            "contact.subscribed"
        );
        assert!(check_trigger_event("eventName", "  ").is_err());
        assert!(check_trigger_event("eventName", "a\u{7}b").is_err());
        assert_eq!(check_trigger_type("event").unwrap(), TRIGGER_EVENT);
        assert!(check_trigger_type("SCHEDULE").is_err());
        assert_eq!(check_step_type("delay").unwrap(), StepType::Delay);
        assert!(
            check_step_type("LOOP")
                .unwrap_err()
                .message
                .contains("SEND_EMAIL")
        );
        let send = serde_json::json!({ "templateId": "tpl_1" });
        assert_eq!(step_template_id(StepType::SendEmail, &send), Some("tpl_1"));
        assert_eq!(step_template_id(StepType::Delay, &send), None);
    }
}
