//! Parsing: the AST it builds, and every kind of mistake with its exact path.

use herald_filter::{
    Condition, Field, Filter, FilterError, Group, Logic, MAX_CONDITIONS, MAX_DEPTH, MAX_GROUPS,
    Operator, Scope, Unit, parse,
};
use serde_json::{Value, json};

fn one(field: &str, operator: &str, value: Value) -> Value {
    json!({ "logic": "AND", "groups": [{ "filters": [{ "field": field, "operator": operator, "value": value }] }] })
}

fn errors(filter: Value, scope: Scope) -> Vec<(String, String)> {
    parse(&filter, scope)
        .expect_err("the filter should be refused")
        .into_iter()
        .map(|e| (e.path, e.message))
        .collect()
}

fn paths(filter: Value) -> Vec<String> {
    errors(filter, Scope::Workflow)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// The one error of a one-condition filter.
fn single(field: &str, operator: &str, value: Value, scope: Scope) -> (String, String) {
    let mut all = errors(one(field, operator, value), scope);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

#[test]
fn builds_the_typed_tree() {
    let filter = parse(
        &json!({ "logic": "OR", "groups": [
            { "filters": [
                { "field": "data.profile.city", "operator": "equals", "value": "Paris" },
                { "field": "createdAt", "operator": "within", "value": 7, "unit": "days", "ignored": 1 }
            ] },
            { "conditions": { "logic": "AND", "groups": [{ "filters": [
                { "field": "event.segment.vip.entry", "operator": "triggered", "value": null },
                { "field": "segment.seg_1", "operator": "notMemberOf" }
            ] }] } }
        ] }),
        Scope::Contacts,
    )
    .unwrap();
    let cond = |field, op, value, unit| Condition {
        field,
        op,
        value,
        unit,
    };
    assert_eq!(
        filter,
        Filter {
            logic: Logic::Or,
            groups: vec![
                Group {
                    filters: vec![
                        cond(
                            Field::Data(vec!["profile".into(), "city".into()]),
                            Operator::Equals,
                            Some(json!("Paris")),
                            None
                        ),
                        cond(
                            Field::CreatedAt,
                            Operator::Within,
                            Some(json!(7)),
                            Some(Unit::Days)
                        ),
                    ],
                    conditions: None,
                },
                Group {
                    filters: vec![],
                    conditions: Some(Box::new(Filter {
                        logic: Logic::And,
                        groups: vec![Group {
                            filters: vec![
                                cond(
                                    Field::Event("segment.vip.entry".into()),
                                    Operator::Triggered,
                                    None,
                                    None
                                ),
                                cond(
                                    Field::Segment("seg_1".into()),
                                    Operator::NotMemberOf,
                                    None,
                                    None
                                ),
                            ],
                            conditions: None,
                        }],
                    })),
                },
            ],
        }
    );
    assert_eq!(filter.groups[0].filters[1].span_ms(), Some(7 * 86_400_000));
}

#[test]
fn every_field_and_operator_name_parses() {
    let fields = [
        ("email", Field::Email),
        ("subscribed", Field::Subscribed),
        ("createdAt", Field::CreatedAt),
        ("updatedAt", Field::UpdatedAt),
        (
            "data.a-b.c_1",
            Field::Data(vec!["a-b".into(), "c_1".into()]),
        ),
        ("event.data.plan", Field::EventData(vec!["plan".into()])),
        ("context.x.y", Field::Context(vec!["x".into(), "y".into()])),
        ("event.signup", Field::Event("signup".into())),
        ("segment.seg_1", Field::Segment("seg_1".into())),
    ];
    for (name, field) in fields {
        assert_eq!(field.to_string(), name);
    }
    for op in Operator::ALL {
        assert_eq!(Operator::from_name(op.name()), Some(op));
    }
    assert_eq!(Operator::from_name("Equals"), None);
}

#[test]
fn the_filter_itself_and_its_groups() {
    assert_eq!(paths(json!([1])), [""]);
    assert_eq!(
        paths(json!({ "logic": "XOR", "groups": [] })),
        ["logic", "groups"]
    );
    assert_eq!(paths(json!({ "groups": {} })), ["logic", "groups"]);
    assert_eq!(
        paths(json!({ "logic": "and", "groups": [{}] })),
        ["logic", "groups[0].filters"]
    );
    assert_eq!(
        paths(json!({ "logic": "AND", "groups": [1, { "filters": {} }, { "filters": [2] }] })),
        ["groups[0]", "groups[1].filters", "groups[2].filters[0]"]
    );
    let (_, message) = &errors(json!({ "logic": "AND", "groups": [] }), Scope::Workflow)[0];
    assert_eq!(message, "must have at least one group");
    let (_, message) = &errors(
        json!({ "logic": 1, "groups": [{ "filters": [] }] }),
        Scope::Workflow,
    )[0];
    assert_eq!(message, "must be \"AND\" or \"OR\"");
}

#[test]
fn every_error_is_reported_with_its_path() {
    let bad = json!({ "logic": "AND", "groups": [
        { "filters": [
            { "field": "data.tier", "operator": "equals", "value": "gold" },
            { "field": "data.tier", "operator": "sortOf", "value": "x" },
            { "field": "nickname", "operator": "equals", "value": "x" },
            { "field": "data.tier", "operator": "equals" },
            { "field": "createdAt", "operator": "within", "value": 3 },
            { "field": "data.tier", "operator": "triggered" },
            { "field": "event.signup", "operator": "equals", "value": 1 },
            { "field": "segment.s1", "operator": "exists" }
        ] },
        { "filters": [{ "operator": "nope" }],
          "conditions": { "logic": "OR", "groups": [{ "filters": [
              { "field": "data.x", "operator": "within", "value": -1, "unit": "weeks" }
          ] }] } }
    ] });
    assert_eq!(
        paths(bad),
        [
            "groups[0].filters[1].operator",
            "groups[0].filters[2].field",
            "groups[0].filters[3].value",
            "groups[0].filters[4].unit",
            "groups[0].filters[5].operator",
            "groups[0].filters[6].operator",
            "groups[0].filters[7].operator",
            "groups[1].filters[0].field",
            "groups[1].filters[0].operator",
            "groups[1].conditions.groups[0].filters[0].value",
            "groups[1].conditions.groups[0].filters[0].unit",
        ]
    );
}

#[test]
fn messages_say_what_to_fix() {
    let w = Scope::Workflow;
    let c = Scope::Contacts;
    type Case<'a> = ((&'a str, &'a str, Value, Scope), (&'a str, &'a str));
    let cases: Vec<Case> = vec![
        (
            ("data.x", "foo", json!(1), w),
            (
                "groups[0].filters[0].operator",
                "unknown operator `foo`: use one of equals, notEquals, contains, notContains, \
                 greaterThan, lessThan, greaterThanOrEqual, lessThanOrEqual, exists, notExists, \
                 within, olderThan, triggered, notTriggered, triggeredWithin, notTriggeredWithin, \
                 memberOf, notMemberOf, subscribed or notSubscribed",
            ),
        ),
        (
            ("nickname", "equals", json!(1), c),
            (
                "groups[0].filters[0].field",
                "unknown field `nickname`: use email, subscribed, createdAt, updatedAt, \
                 data.<key>, event.<name>, segment.<id> or topic.<id>",
            ),
        ),
        (
            ("data.a..b", "exists", Value::Null, w),
            (
                "groups[0].filters[0].field",
                "bad key path `data.a..b`: `a..b` has an empty key: keys are joined by `.`; write \
                 a `.` inside a key as `\\.`",
            ),
        ),
        (
            ("data.a\\b", "exists", Value::Null, c),
            (
                "groups[0].filters[0].field",
                "bad key path `data.a\\b`: `a\\b`: `\\b` is not an escape; in a key write `\\.` \
                 for a `.` and `\\\\` for a `\\`",
            ),
        ),
        (
            ("context.a\\", "exists", Value::Null, w),
            (
                "groups[0].filters[0].field",
                "bad key path `context.a\\`: `a\\` ends with a lone `\\`; write a `\\` inside a \
                 key as `\\\\`",
            ),
        ),
        (
            ("event.", "triggered", Value::Null, c),
            (
                "groups[0].filters[0].field",
                "`event.` needs an event name: `event.<name>`",
            ),
        ),
        (
            ("segment.", "memberOf", Value::Null, c),
            (
                "groups[0].filters[0].field",
                "`segment.` needs a segment id: `segment.<id>`",
            ),
        ),
        (
            ("event.data.plan", "equals", json!("pro"), c),
            (
                "groups[0].filters[0].field",
                "`event.data.<key>` fields exist only in workflow conditions",
            ),
        ),
        (
            ("context.score", "exists", Value::Null, c),
            (
                "groups[0].filters[0].field",
                "`context.<key>` fields exist only in workflow conditions",
            ),
        ),
        (
            ("createdAt", "within", json!(3), w),
            (
                "groups[0].filters[0].unit",
                "`within` needs `unit`: minutes, hours or days",
            ),
        ),
        (
            ("data.x", "triggered", Value::Null, w),
            (
                "groups[0].filters[0].operator",
                "`triggered` applies to `event.<name>` fields",
            ),
        ),
        (
            ("email", "memberOf", Value::Null, w),
            (
                "groups[0].filters[0].operator",
                "`memberOf` applies to `segment.<id>` fields",
            ),
        ),
        (
            ("event.signup", "equals", json!(1), w),
            (
                "groups[0].filters[0].operator",
                "`event.<name>` fields take triggered, notTriggered, triggeredWithin or \
                 notTriggeredWithin",
            ),
        ),
        (
            ("segment.s1", "exists", Value::Null, w),
            (
                "groups[0].filters[0].operator",
                "`segment.<id>` fields take memberOf or notMemberOf",
            ),
        ),
        (
            ("subscribed", "contains", json!(true), w),
            (
                "groups[0].filters[0].operator",
                "`subscribed` takes equals, notEquals, exists or notExists",
            ),
        ),
        (
            ("email", "olderThan", json!(1), w),
            (
                "groups[0].filters[0].operator",
                "`olderThan` applies to times: createdAt, updatedAt or a data value",
            ),
        ),
        (
            ("updatedAt", "notContains", json!(1), w),
            (
                "groups[0].filters[0].operator",
                "`notContains` applies to text and lists, not `updatedAt`",
            ),
        ),
        (
            ("data.x", "equals", Value::Null, w),
            ("groups[0].filters[0].value", "`equals` needs a `value`"),
        ),
        (
            ("data.x", "equals", json!([1]), w),
            (
                "groups[0].filters[0].value",
                "must be a string, a number or a boolean",
            ),
        ),
        (
            ("data.x", "lessThan", json!(true), w),
            (
                "groups[0].filters[0].value",
                "`lessThan` compares with a number or a string",
            ),
        ),
        (
            ("email", "contains", json!(1), w),
            (
                "groups[0].filters[0].value",
                "`email` compares with a string",
            ),
        ),
        (
            ("subscribed", "equals", json!("true"), w),
            (
                "groups[0].filters[0].value",
                "`subscribed` compares with true or false",
            ),
        ),
        (
            ("createdAt", "greaterThan", json!("yesterday"), w),
            (
                "groups[0].filters[0].value",
                "`createdAt` compares with a time: Unix milliseconds (an integer) or an ISO 8601 \
                 date",
            ),
        ),
        (
            ("createdAt", "greaterThan", json!(1.5), w),
            (
                "groups[0].filters[0].value",
                "`createdAt` compares with a time: Unix milliseconds (an integer) or an ISO 8601 \
                 date",
            ),
        ),
    ];
    for ((field, op, value, scope), (path, message)) in cases {
        let got = single(field, op, value, scope);
        assert_eq!(got, (path.to_string(), message.to_string()), "{field} {op}");
    }
    let unit = errors(
        json!({ "logic": "AND", "groups": [{ "filters": [
            { "field": "data.x", "operator": "olderThan", "value": "2", "unit": "weeks" }
        ] }] }),
        w,
    );
    assert_eq!(
        unit,
        [(
            "groups[0].filters[0].unit".to_string(),
            "unknown unit `weeks`: use minutes, hours or days".to_string()
        )]
    );
    let amount = errors(
        json!({ "logic": "AND", "groups": [{ "filters": [
            { "field": "event.x", "operator": "triggeredWithin", "value": 0, "unit": "days" }
        ] }] }),
        w,
    );
    assert_eq!(
        amount,
        [(
            "groups[0].filters[0].value".to_string(),
            "`triggeredWithin` needs a positive number `value`: how many minutes, hours or days"
                .to_string()
        )]
    );
    let missing = errors(
        json!({ "logic": "AND", "groups": [{ "filters": [{}] }] }),
        c,
    );
    assert_eq!(
        missing,
        [
            (
                "groups[0].filters[0].field".to_string(),
                "is required: email, subscribed, createdAt, updatedAt, data.<key>, event.<name>, \
                 segment.<id> or topic.<id>"
                    .to_string()
            ),
            (
                "groups[0].filters[0].operator".to_string(),
                "is required: one of equals, notEquals, contains, notContains, greaterThan, \
                 lessThan, greaterThanOrEqual, lessThanOrEqual, exists, notExists, within, \
                 olderThan, triggered, notTriggered, triggeredWithin, notTriggeredWithin, \
                 memberOf, notMemberOf, subscribed or notSubscribed"
                    .to_string()
            ),
        ]
    );
}

#[test]
fn values_that_fit_are_accepted() {
    for (field, op, value) in [
        ("createdAt", "greaterThan", json!("2024-01-01")),
        ("createdAt", "equals", json!(1_700_000_000_000_i64)),
        ("updatedAt", "lessThan", json!("2024-01-01T10:00:00+02:00")),
        ("email", "greaterThan", json!("m")),
        ("data.x", "contains", json!(true)),
        ("data.x", "within", json!("1.5")),
        ("data.x", "exists", json!({ "ignored": true })),
        ("subscribed", "notEquals", json!(false)),
    ] {
        let unit = if op == "within" {
            json!("hours")
        } else {
            Value::Null
        };
        let filter = json!({ "logic": "AND", "groups": [{ "filters": [
            { "field": field, "operator": op, "value": value, "unit": unit }
        ] }] });
        assert!(parse(&filter, Scope::Contacts).is_ok(), "{filter}");
    }
}

fn nested(levels: usize) -> Value {
    let mut filter = one("email", "exists", Value::Null);
    for _ in 1..levels {
        filter = json!({ "logic": "AND", "groups": [{ "conditions": filter }] });
    }
    filter
}

#[test]
fn nesting_is_capped() {
    assert!(parse(&nested(MAX_DEPTH), Scope::Contacts).is_ok());
    let too_deep = errors(nested(MAX_DEPTH + 1), Scope::Contacts);
    let path =
        format!("groups[0]{}", ".conditions.groups[0]".repeat(MAX_DEPTH - 1)) + ".conditions";
    assert_eq!(
        too_deep,
        [(
            path,
            "nested too deep: at most 10 levels of filters".to_string()
        )]
    );
    // Far deeper input is refused at the same place, without reading further.
    assert_eq!(errors(nested(100), Scope::Contacts).len(), 1);
}

#[test]
fn conditions_and_groups_are_capped() {
    let condition = json!({ "field": "email", "operator": "exists" });
    let many = |n: usize| {
        json!({ "logic": "OR", "groups": [
        { "filters": vec![condition.clone(); n / 2] },
        { "conditions": { "logic": "AND", "groups": [{ "filters": vec![condition.clone(); n - n / 2] }] } }
    ] })
    };
    assert!(parse(&many(MAX_CONDITIONS), Scope::Contacts).is_ok());
    assert_eq!(
        errors(many(MAX_CONDITIONS + 1), Scope::Contacts),
        [(
            format!(
                "groups[1].conditions.groups[0].filters[{}]",
                MAX_CONDITIONS / 2
            ),
            "too many conditions: a filter has at most 200".to_string()
        )]
    );
    let groups = |n: usize| json!({ "logic": "OR", "groups": vec![json!({ "filters": [] }); n] });
    assert!(parse(&groups(MAX_GROUPS), Scope::Contacts).is_ok());
    assert_eq!(
        errors(groups(MAX_GROUPS + 1), Scope::Contacts),
        [(
            format!("groups[{MAX_GROUPS}]"),
            "too many groups: a filter has at most 200".to_string()
        )]
    );
}

#[test]
fn errors_name_their_place_under_a_prefix() {
    let at = |path: &str| FilterError::new(path, "x");
    assert_eq!(at("").path_under("filter"), "filter");
    assert_eq!(
        at("groups[0].field").path_under("filter"),
        "filter.groups[0].field"
    );
    assert_eq!(at("logic").path_under(""), "logic");
    assert_eq!(at("groups[0]").to_string(), "groups[0]: x");
}

/// Keys with a `.` or a `\` are written escaped (`\.`, `\\`), and any other character is part of
/// the key; the field's name is the escaped form again.
#[test]
fn escaped_keys_are_one_key() {
    for (name, keys) in [
        ("data.a\\.b", vec!["a.b"]),
        ("data.a\\\\b", vec!["a\\b"]),
        ("data.x\\.y.z", vec!["x.y", "z"]),
        ("data.a b'\"; --", vec!["a b'\"; --"]),
        ("data.\\\\\\.", vec!["\\."]),
    ] {
        let filter = parse(
            &json!({ "logic": "AND", "groups": [{ "filters": [
                { "field": name, "operator": "exists" }
            ] }] }),
            Scope::Contacts,
        )
        .unwrap();
        let field = &filter.groups[0].filters[0].field;
        assert_eq!(
            field,
            &Field::Data(keys.iter().map(|k| k.to_string()).collect()),
            "{name}"
        );
        assert_eq!(field.to_string(), name);
    }
}
