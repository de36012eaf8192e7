//! Evaluation in memory: every operator, type mismatches, missing values, times.

use std::collections::{BTreeMap, BTreeSet};

use herald_filter::{EventStats, Filter, Logic, Scope, Subject, parse};
use serde_json::{Map, Value, json};

const NOW: i64 = 1_700_000_000_000; // 2023-11-14T22:13:20.000Z
const HOUR: i64 = 3_600_000;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

fn subject() -> Subject {
    Subject {
        email: "ada@example.com".into(),
        subscribed: true,
        created_at: NOW - 2 * HOUR,
        updated_at: NOW - 60_000,
        data: object(json!({
            "tier": "gold",
            "age": 30,
            "score": 4.5,
            "vip": true,
            "nothing": null,
            "tags": ["a", "b", 3, false],
            "renewal": "2030-01-01T00:00:00Z",
            "lastSeen": "2023-11-14T21:13:20.000Z",
            "lastSeenMs": NOW - HOUR,
            "loose": "2023-11-14T22:00:00+00:00",
            "profile": { "city": "Paris", "list": [{ "x": 1 }] }
        })),
        events: BTreeMap::from([
            (
                "purchase".to_string(),
                EventStats {
                    count: 2,
                    last_at: NOW - HOUR,
                },
            ),
            (
                "ghost".to_string(),
                EventStats {
                    count: 0,
                    last_at: NOW,
                },
            ),
        ]),
        segments: BTreeSet::from(["seg_vip".to_string()]),
        topics: Default::default(),
        event_data: object(json!({ "plan": "pro", "seats": 3 })),
        context: object(json!({ "score": 5 })),
        now_ms: NOW,
    }
}

fn condition(field: &str, operator: &str, value: Value, unit: Option<&str>) -> Filter {
    let filter = json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": field, "operator": operator, "value": value, "unit": unit }
    ] }] });
    parse(&filter, Scope::Workflow).unwrap_or_else(|e| panic!("{filter}: {e:?}"))
}

/// Asserts each `(field, operator, value, expected)`, and that the negated operator (if any)
/// gives the opposite.
fn check(cases: &[(&str, &str, Value, bool)]) {
    let subject = subject();
    for (field, op, value, expected) in cases {
        let got = condition(field, op, value.clone(), None).matches(&subject);
        assert_eq!(got, *expected, "{field} {op} {value}");
        let negated = match *op {
            "equals" => Some("notEquals"),
            "contains" => Some("notContains"),
            "exists" => Some("notExists"),
            _ => None,
        };
        if let Some(negated) = negated {
            let got = condition(field, negated, value.clone(), None).matches(&subject);
            assert_eq!(got, !*expected, "{field} {negated} {value}");
        }
    }
}

fn timed(cases: &[(&str, &str, Value, &str, bool)]) {
    let subject = subject();
    for (field, op, value, unit, expected) in cases {
        let got = condition(field, op, value.clone(), Some(unit)).matches(&subject);
        assert_eq!(got, *expected, "{field} {op} {value} {unit}");
    }
}

#[test]
fn equals_and_not_equals() {
    check(&[
        ("data.tier", "equals", json!("gold"), true),
        ("data.tier", "equals", json!("Gold"), false),
        ("data.age", "equals", json!(30), true),
        ("data.age", "equals", json!(30.0), true),
        ("data.score", "equals", json!(4.5), true),
        ("data.vip", "equals", json!(true), true),
        ("data.vip", "equals", json!(false), false),
        ("data.profile.city", "equals", json!("Paris"), true),
        // Type mismatches never match (so their negation always does).
        ("data.age", "equals", json!("30"), false),
        ("data.vip", "equals", json!("true"), false),
        ("data.tier", "equals", json!(1), false),
        ("data.tags", "equals", json!("a"), false),
        // Missing values: absent keys, null, paths through lists and scalars.
        ("data.missing", "equals", json!("x"), false),
        ("data.nothing", "equals", json!("x"), false),
        ("data.profile.list.0", "equals", json!(1), false),
        ("data.tier.x", "equals", json!("gold"), false),
        ("email", "equals", json!("ADA@Example.com"), true),
        ("email", "equals", json!("bob@example.com"), false),
        ("subscribed", "equals", json!(true), true),
        ("subscribed", "equals", json!(false), false),
        ("createdAt", "equals", json!(NOW - 2 * HOUR), true),
        ("createdAt", "equals", json!("2023-11-14T20:13:20Z"), true),
        (
            "createdAt",
            "equals",
            json!("2023-11-14T20:13:20.001Z"),
            false,
        ),
        ("event.data.plan", "equals", json!("pro"), true),
        ("context.score", "equals", json!(5), true),
        ("context.score", "equals", json!(6), false),
    ]);
}

#[test]
fn contains_and_not_contains() {
    check(&[
        ("data.tier", "contains", json!("OL"), true),
        ("data.tier", "contains", json!(""), true),
        ("data.tier", "contains", json!("x"), false),
        ("data.tags", "contains", json!("b"), true),
        ("data.tags", "contains", json!("B"), false),
        ("data.tags", "contains", json!(3), true),
        ("data.tags", "contains", json!(false), true),
        ("data.tags", "contains", json!(true), false),
        ("data.age", "contains", json!(3), false),
        ("data.tier", "contains", json!(1), false),
        ("data.missing", "contains", json!("x"), false),
        ("email", "contains", json!("EXAMPLE"), true),
        ("email", "contains", json!("bob"), false),
        ("event.data.plan", "contains", json!("r"), true),
    ]);
    // Case is folded for ASCII only, the same as SQL.
    let mut s = subject();
    s.data.insert("city".into(), json!("ÉCOLE"));
    assert!(!condition("data.city", "contains", json!("école"), None).matches(&s));
    assert!(condition("data.city", "contains", json!("Écol"), None).matches(&s));
}

#[test]
fn ordering() {
    check(&[
        ("data.age", "greaterThan", json!(18), true),
        ("data.age", "greaterThan", json!(30), false),
        ("data.age", "greaterThanOrEqual", json!(30), true),
        ("data.age", "lessThan", json!(30.5), true),
        ("data.age", "lessThanOrEqual", json!(29), false),
        ("data.age", "lessThanOrEqual", json!("29"), false),
        ("data.age", "greaterThan", json!("29"), false),
        ("data.tier", "greaterThan", json!("a"), true),
        ("data.tier", "lessThan", json!("h"), true),
        ("data.tier", "lessThan", json!("Z"), false),
        ("data.renewal", "greaterThan", json!("2029-12-31"), true),
        ("data.missing", "lessThan", json!(1), false),
        ("email", "greaterThan", json!("a"), true),
        ("email", "lessThan", json!("B"), false),
        ("createdAt", "greaterThan", json!(NOW - 3 * HOUR), true),
        ("createdAt", "lessThan", json!("2023-11-14"), false),
        ("updatedAt", "greaterThanOrEqual", json!(NOW - 60_000), true),
        ("updatedAt", "lessThanOrEqual", json!(NOW - 60_001), false),
        ("event.data.seats", "greaterThanOrEqual", json!(4), false),
        ("context.score", "lessThan", json!(10), true),
    ]);
}

#[test]
fn exists_and_not_exists() {
    check(&[
        ("data.tier", "exists", Value::Null, true),
        ("data.profile", "exists", Value::Null, true),
        ("data.tags", "exists", Value::Null, true),
        ("data.missing", "exists", Value::Null, false),
        ("data.nothing", "exists", Value::Null, false),
        ("data.profile.city.x", "exists", Value::Null, false),
        ("email", "exists", Value::Null, true),
        ("subscribed", "exists", Value::Null, true),
        ("createdAt", "exists", Value::Null, true),
        ("updatedAt", "exists", Value::Null, true),
        ("event.data.plan", "exists", Value::Null, true),
        ("context.nope", "exists", Value::Null, false),
    ]);
}

#[test]
fn within_and_older_than() {
    timed(&[
        ("createdAt", "within", json!(1), "days", true),
        ("createdAt", "within", json!(1), "hours", false),
        ("createdAt", "within", json!(120), "minutes", true),
        ("createdAt", "within", json!(119), "minutes", false),
        ("createdAt", "olderThan", json!(1), "hours", true),
        ("createdAt", "olderThan", json!(120), "minutes", false),
        ("createdAt", "olderThan", json!("1.5"), "hours", true),
        ("updatedAt", "within", json!(1), "minutes", true),
        // Data strings in the fixed form, seconds or milliseconds.
        ("data.lastSeen", "within", json!(60), "minutes", true),
        ("data.lastSeen", "within", json!(59), "minutes", false),
        ("data.lastSeen", "olderThan", json!(59), "minutes", true),
        ("data.renewal", "within", json!(1), "days", true),
        ("data.renewal", "olderThan", json!(1), "days", false),
        // Unix milliseconds in data.
        ("data.lastSeenMs", "within", json!(1), "hours", true),
        ("data.lastSeenMs", "within", json!(59), "minutes", false),
        ("data.lastSeenMs", "olderThan", json!(59), "minutes", true),
        // Other forms and types never match.
        ("data.loose", "within", json!(1), "days", false),
        ("data.loose", "olderThan", json!(1), "minutes", false),
        ("data.tier", "within", json!(1), "days", false),
        ("data.vip", "olderThan", json!(1), "days", false),
        ("data.missing", "olderThan", json!(1), "days", false),
    ]);
    // Seconds and milliseconds forms compare as the times they are.
    let mut s = subject();
    let within = |s: &Subject, text: &str, minutes: i64| {
        let mut s = s.clone();
        s.data.insert("t".into(), json!(text));
        condition("data.t", "within", json!(minutes), Some("minutes")).matches(&s)
    };
    s.now_ms = NOW + 500; // cutoff one minute back: 2023-11-14T22:12:20.500Z
    assert!(!within(&s, "2023-11-14T22:12:20Z", 1));
    assert!(!within(&s, "2023-11-14T22:12:20.499Z", 1));
    assert!(within(&s, "2023-11-14T22:12:20.500Z", 1));
    assert!(within(&s, "2023-11-14T22:12:21Z", 1));
}

#[test]
fn event_history() {
    timed(&[
        (
            "event.purchase",
            "triggeredWithin",
            json!(60),
            "minutes",
            true,
        ),
        (
            "event.purchase",
            "triggeredWithin",
            json!(59),
            "minutes",
            false,
        ),
        (
            "event.purchase",
            "notTriggeredWithin",
            json!(59),
            "minutes",
            true,
        ),
        (
            "event.purchase",
            "notTriggeredWithin",
            json!(1),
            "days",
            false,
        ),
        ("event.ghost", "triggeredWithin", json!(1), "days", false),
        ("event.refund", "notTriggeredWithin", json!(1), "days", true),
    ]);
    check(&[
        ("event.purchase", "triggered", Value::Null, true),
        ("event.purchase", "notTriggered", Value::Null, false),
        ("event.ghost", "triggered", Value::Null, false),
        ("event.refund", "triggered", Value::Null, false),
        ("event.refund", "notTriggered", Value::Null, true),
    ]);
}

#[test]
fn segment_membership() {
    check(&[
        ("segment.seg_vip", "memberOf", Value::Null, true),
        ("segment.seg_vip", "notMemberOf", Value::Null, false),
        ("segment.seg_other", "memberOf", Value::Null, false),
        ("segment.seg_other", "notMemberOf", Value::Null, true),
    ]);
}

#[test]
fn groups_logic_and_nesting() {
    let s = subject();
    let yes = json!({ "field": "data.tier", "operator": "equals", "value": "gold" });
    let no = json!({ "field": "data.tier", "operator": "equals", "value": "silver" });
    let filter = |v: Value| parse(&v, Scope::Workflow).unwrap();
    let and = |a: &Value, b: &Value| json!({ "logic": "AND", "groups": [{ "filters": [a, b] }] });
    assert!(filter(and(&yes, &yes)).matches(&s));
    assert!(!filter(and(&yes, &no)).matches(&s));
    let or = json!({ "logic": "OR", "groups": [{ "filters": [no] }, { "filters": [yes] }] });
    assert!(filter(or).matches(&s));
    let and_groups =
        json!({ "logic": "AND", "groups": [{ "filters": [yes] }, { "filters": [no] }] });
    assert!(!filter(and_groups).matches(&s));
    let nested = |inner: &Value| {
        json!({ "logic": "AND", "groups": [{ "filters": [yes],
            "conditions": { "logic": "OR", "groups": [{ "filters": [no] }, { "filters": [inner] }] } }] })
    };
    assert!(filter(nested(&yes)).matches(&s));
    assert!(!filter(nested(&no)).matches(&s));
    // A group with no conditions matches; so does AND over no groups, and OR over none does not.
    assert!(filter(json!({ "logic": "OR", "groups": [{ "filters": [] }] })).matches(&s));
    let empty = |logic| Filter {
        logic,
        groups: vec![],
    };
    assert!(empty(Logic::And).matches(&s));
    assert!(!empty(Logic::Or).matches(&s));
}

#[test]
fn event_names_lists_every_event_condition_nested_included() {
    let f = parse(
        &json!({ "logic": "OR", "groups": [
            { "filters": [
                { "field": "event.signup", "operator": "triggered" },
                { "field": "data.plan", "operator": "equals", "value": "pro" } ] },
            { "filters": [ { "field": "email", "operator": "exists" } ],
              "conditions": { "logic": "AND", "groups": [ { "filters": [
                { "field": "event.purchase", "operator": "notTriggered" },
                { "field": "event.signup", "operator": "triggeredWithin", "value": 2, "unit": "days" } ] } ] } } ] }),
        Scope::Contacts,
    )
    .unwrap();
    assert_eq!(
        f.event_names(),
        BTreeSet::from(["purchase".to_string(), "signup".to_string()])
    );
}

#[test]
fn reads_contact_fields_is_true_only_for_a_contact_field_nested_included() {
    let contact_free = parse(
        &json!({ "logic": "OR", "groups": [
            { "filters": [ { "field": "event.signup", "operator": "triggered" } ] },
            { "filters": [ { "field": "segment.seg_1", "operator": "memberOf" } ] } ] }),
        Scope::Contacts,
    )
    .unwrap();
    assert!(!contact_free.reads_contact_fields());
    for field in ["email", "subscribed", "createdAt", "updatedAt", "data.plan"] {
        let f = parse(
            &json!({ "logic": "AND", "groups": [
                { "filters": [ { "field": "event.signup", "operator": "triggered" } ],
                  "conditions": { "logic": "AND", "groups": [ { "filters": [
                    { "field": field, "operator": "exists" } ] } ] } } ] }),
            Scope::Contacts,
        )
        .unwrap();
        assert!(f.reads_contact_fields(), "{field}");
    }
}

#[test]
fn reads_history_is_true_only_for_an_event_or_segment_condition_nested_included() {
    let history_free = parse(
        &json!({ "logic": "AND", "groups": [
            { "filters": [ { "field": "subscribed", "operator": "equals", "value": true } ] },
            { "filters": [ { "field": "event.data.source", "operator": "equals", "value": "ads" },
                           { "field": "context.step", "operator": "exists" } ] } ] }),
        Scope::Workflow,
    )
    .unwrap();
    assert!(!history_free.reads_history());
    for (field, operator) in [("event.signup", "triggered"), ("segment.seg_1", "memberOf")] {
        let f = parse(
            &json!({ "logic": "AND", "groups": [
                { "filters": [ { "field": "data.plan", "operator": "exists" } ],
                  "conditions": { "logic": "OR", "groups": [ { "filters": [
                    { "field": field, "operator": operator } ] } ] } } ] }),
            Scope::Workflow,
        )
        .unwrap();
        assert!(f.reads_history(), "{field}");
    }
}

#[test]
fn topic_subscription_reads_the_subjects_states_and_is_contacts_only() {
    let mut subject = subject();
    subject.topics.insert("top_in".into(), true);
    subject.topics.insert("top_out".into(), false);
    let on = |topic: &str, op: &str| {
        let filter = json!({ "logic": "AND", "groups": [{ "filters": [
            { "field": format!("topic.{topic}"), "operator": op }
        ] }] });
        parse(&filter, Scope::Contacts).unwrap().matches(&subject)
    };
    assert!(on("top_in", "subscribed"));
    assert!(!on("top_in", "notSubscribed"));
    assert!(!on("top_out", "subscribed"));
    assert!(on("top_out", "notSubscribed"));
    // A topic the subject does not list does not exist: no one is subscribed to it.
    assert!(!on("top_gone", "subscribed"));
    assert!(on("top_gone", "notSubscribed"));
    // Workflow conditions have no topic states.
    let filter = json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": "topic.top_in", "operator": "subscribed" }
    ] }] });
    let errors = parse(&filter, Scope::Workflow).unwrap_err();
    assert_eq!(errors[0].path, "groups[0].filters[0].field");
}
