//! SQL compilation: the text and binds for both dialects, placeholder numbering, refusals.

use herald_filter::{
    Condition, Dialect, Field, Filter, Group, Logic, Operator, Scope, SqlValue, parse,
};
use serde_json::{Value, json};

const NOW: i64 = 1_700_000_000_000; // 2023-11-14T22:13:20.000Z

fn one(field: &str, operator: &str, value: Value, unit: Option<&str>) -> Filter {
    let filter = json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": field, "operator": operator, "value": value, "unit": unit }
    ] }] });
    parse(&filter, Scope::Contacts).unwrap()
}

/// The SQL and the filter's binds, after a caller's `$1`.
fn sql(filter: &Filter, dialect: Dialect) -> (String, Vec<SqlValue>) {
    let mut binds = vec![SqlValue::Text("prj_1".into())];
    let sql = filter.to_sql(dialect, NOW, &mut binds).unwrap();
    assert_eq!(binds.remove(0), SqlValue::Text("prj_1".into()));
    (sql, binds)
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.into())
}

#[test]
fn contact_columns() {
    let f = one("email", "equals", json!("Ada@Example.com"), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "(((lower(c.email) = $2)))".into(),
            vec![text("ada@example.com")]
        )
    );
    assert_eq!(
        sql(&f, Dialect::Postgres).0,
        "(((translate(c.email, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') = $2)))"
    );
    let f = one("email", "notContains", json!("EXAMPLE"), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((NOT (instr(lower(c.email), $2) > 0)))".into(),
            vec![text("example")]
        )
    );
    let f = one("email", "greaterThan", json!("M"), None);
    assert_eq!(sql(&f, Dialect::Sqlite).0, "(((c.email > $2)))");
    assert_eq!(
        sql(&f, Dialect::Postgres).0,
        "((((c.email COLLATE \"C\") > $2)))"
    );
    let f = one("subscribed", "notEquals", json!(true), None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((NOT (c.subscribed = $2)))".into(),
            vec![SqlValue::Bool(true)]
        )
    );
    let f = one("createdAt", "lessThanOrEqual", json!("2024-01-01"), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "(((c.created_at <= $2)))".into(),
            vec![SqlValue::Int(1_704_067_200_000)]
        )
    );
    let f = one("updatedAt", "olderThan", json!(2), Some("hours"));
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "(((c.updated_at < $2)))".into(),
            vec![SqlValue::Int(NOW - 7_200_000)]
        )
    );
    let f = one("email", "notExists", Value::Null, None);
    assert_eq!(sql(&f, Dialect::Sqlite), ("((NOT (1 = 1)))".into(), vec![]));
}

#[test]
fn events_and_segments() {
    let f = one(
        "event.purchase",
        "notTriggeredWithin",
        json!(30),
        Some("minutes"),
    );
    let expected = (
        "((NOT EXISTS (SELECT 1 FROM event_summaries es WHERE es.contact_id = c.id \
         AND es.name = $2 AND es.last_at >= $3)))"
            .to_string(),
        vec![text("purchase"), SqlValue::Int(NOW - 1_800_000)],
    );
    assert_eq!(sql(&f, Dialect::Sqlite), expected);
    assert_eq!(sql(&f, Dialect::Postgres), expected);
    let f = one("event.segment.vip.entry", "triggered", Value::Null, None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((EXISTS (SELECT 1 FROM event_summaries es WHERE es.contact_id = c.id \
             AND es.name = $2)))"
                .into(),
            vec![text("segment.vip.entry")]
        )
    );
    let f = one("segment.seg_1", "memberOf", Value::Null, None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((EXISTS (SELECT 1 FROM segment_members sm WHERE sm.project_id = c.project_id \
             AND sm.contact_id = c.id AND sm.segment_id = $2)))"
                .into(),
            vec![text("seg_1")]
        )
    );
}

#[test]
fn data_values_sqlite() {
    let f = one("data.profile.city", "equals", json!("Paris"), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((COALESCE((json_extract(c.data, $2) = $3 \
             AND json_type(c.data, $2) = 'text'), 0)))"
                .into(),
            vec![text("$.\"profile\".\"city\""), text("Paris")]
        )
    );
    let f = one("data.age", "greaterThan", json!(18), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((COALESCE(CASE WHEN json_type(c.data, $2) IN ('integer', 'real') \
             THEN CAST(json_extract(c.data, $2) AS REAL) > $3 END, 0)))"
                .into(),
            vec![text("$.\"age\""), SqlValue::Float(18.0)]
        )
    );
    let f = one("data.vip", "notEquals", json!(true), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite).0,
        "((NOT COALESCE(CASE WHEN json_type(c.data, $2) IN ('true', 'false') \
         THEN (json_type(c.data, $2) = 'true') = $3 END, 0)))"
    );
    let f = one("data.x", "exists", Value::Null, None);
    assert_eq!(
        sql(&f, Dialect::Sqlite).0,
        "((COALESCE(COALESCE(json_type(c.data, $2), 'null') <> 'null', 0)))"
    );
    let f = one("data.tags", "contains", json!("B"), None);
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((COALESCE(CASE WHEN json_type(c.data, $2) = 'text' \
             THEN (instr(lower(json_extract(c.data, $2)), $3) > 0) \
             WHEN json_type(c.data, $2) = 'array' THEN EXISTS (SELECT 1 FROM \
             json_each(c.data, $2) j WHERE COALESCE((j.value = $4 \
             AND j.type = 'text'), 0)) END, 0)))"
                .into(),
            vec![text("$.\"tags\""), text("b"), text("B")]
        )
    );
    let f = one("data.seen", "within", json!(1), Some("days"));
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((COALESCE(CASE WHEN json_type(c.data, $2) IN ('integer', 'real') \
             THEN CAST(json_extract(c.data, $2) AS REAL) >= $3 \
             WHEN json_type(c.data, $2) = 'text' THEN (CASE \
             WHEN json_extract(c.data, $2) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z' \
             THEN substr(json_extract(c.data, $2), 1, 19) || '.000Z' \
             WHEN json_extract(c.data, $2) GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z' \
             THEN json_extract(c.data, $2) END) >= $4 END, 0)))"
                .into(),
            vec![
                text("$.\"seen\""),
                SqlValue::Float((NOW - 86_400_000) as f64),
                text("2023-11-13T22:13:20.000Z")
            ]
        )
    );
}

#[test]
fn data_values_postgres() {
    let f = one("data.profile.city", "lessThan", json!("Q"), None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((COALESCE(CASE WHEN jsonb_typeof((c.data -> $2 -> $3)) = 'string' \
             THEN ((c.data -> $2 ->> $3) COLLATE \"C\") < $4 END, FALSE)))"
                .into(),
            vec![text("profile"), text("city"), text("Q")]
        )
    );
    let f = one("data.age", "equals", json!(30), None);
    assert_eq!(
        sql(&f, Dialect::Postgres).0,
        "((COALESCE(CASE WHEN jsonb_typeof((c.data -> $2)) = 'number' \
         THEN ((c.data -> $2))::float8 = $3 END, FALSE)))"
    );
    let f = one("data.tags", "contains", json!(3), None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((COALESCE(CASE WHEN jsonb_typeof((c.data -> $2)) = 'array' \
             THEN EXISTS (SELECT 1 FROM jsonb_array_elements(CASE \
             WHEN jsonb_typeof((c.data -> $2)) = 'array' \
             THEN (c.data -> $2) ELSE '[]'::jsonb END) j(v) \
             WHERE COALESCE(CASE WHEN jsonb_typeof(j.v) = 'number' \
             THEN (j.v)::float8 = $3 END, FALSE)) END, FALSE)))"
                .into(),
            vec![text("tags"), SqlValue::Float(3.0)]
        )
    );
    // `->` with a text key reads an object's member only (never `0` as an index into a list),
    // and every key is bound, whatever its characters (`.` and `\` escaped in the field).
    let f = one("data.a.0", "exists", Value::Null, None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((COALESCE(COALESCE(jsonb_typeof((c.data -> $2 -> $3)), 'null') <> 'null', FALSE)))"
                .into(),
            vec![text("a"), text("0")]
        )
    );
    let f = one("data.a\\.b'); --.c\\\\d", "exists", Value::Null, None);
    assert_eq!(
        sql(&f, Dialect::Postgres),
        (
            "((COALESCE(COALESCE(jsonb_typeof((c.data -> $2 -> $3)), 'null') <> 'null', FALSE)))"
                .into(),
            vec![text("a.b'); --"), text("c\\d")]
        )
    );
    assert_eq!(
        sql(&f, Dialect::Sqlite),
        (
            "((COALESCE(COALESCE(json_type(c.data, $2), 'null') <> 'null', 0)))".into(),
            vec![text("$.\"a.b'); --\".\"c\\\\d\"")]
        )
    );
}

#[test]
fn groups_nesting_and_numbering() {
    let filter = parse(
        &json!({ "logic": "OR", "groups": [
            { "filters": [
                { "field": "data.tier", "operator": "equals", "value": "gold" },
                { "field": "subscribed", "operator": "equals", "value": true }
            ] },
            { "filters": [], "conditions": { "logic": "AND", "groups": [
                { "filters": [{ "field": "segment.s1", "operator": "notMemberOf" }] },
                { "filters": [] }
            ] } }
        ] }),
        Scope::Contacts,
    )
    .unwrap();
    let mut binds = vec![text("prj_1"), text("other")];
    let sql = filter.to_sql(Dialect::Sqlite, NOW, &mut binds).unwrap();
    assert_eq!(
        sql,
        "((COALESCE((json_extract(c.data, $3) = $4 \
         AND json_type(c.data, $3) = 'text'), 0) AND (c.subscribed = $5)) \
         OR (((NOT EXISTS (SELECT 1 FROM segment_members sm WHERE sm.project_id = c.project_id \
         AND sm.contact_id = c.id AND sm.segment_id = $6)) AND (1 = 1))))"
    );
    assert_eq!(
        binds,
        [
            text("prj_1"),
            text("other"),
            text("$.\"tier\""),
            text("gold"),
            SqlValue::Bool(true),
            text("s1")
        ]
    );
    let empty = |logic| Filter {
        logic,
        groups: vec![],
    };
    assert_eq!(
        empty(Logic::And).to_sql(Dialect::Postgres, NOW, &mut vec![]),
        Ok("(1 = 1)".into())
    );
    assert_eq!(
        empty(Logic::Or).to_sql(Dialect::Postgres, NOW, &mut vec![]),
        Ok("(1 = 0)".into())
    );
}

#[test]
fn user_text_only_ever_goes_through_binds() {
    let evil = "x' OR 1=1 --";
    let filter = parse(
        &json!({ "logic": "AND", "groups": [{ "filters": [
            { "field": "data.a", "operator": "contains", "value": evil },
            { "field": format!("event.{evil}"), "operator": "triggered" },
            { "field": format!("segment.{evil}"), "operator": "memberOf" },
            { "field": "email", "operator": "lessThan", "value": evil }
        ] }] }),
        Scope::Contacts,
    )
    .unwrap();
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let mut binds = vec![];
        let sql = filter.to_sql(dialect, NOW, &mut binds).unwrap();
        assert!(!sql.contains(evil), "{sql}");
        assert!(binds.contains(&text(evil)));
    }
}

#[test]
fn workflow_fields_and_bad_hand_built_paths_are_refused() {
    let filter = parse(
        &json!({ "logic": "AND", "groups": [
            { "filters": [{ "field": "email", "operator": "exists" }] },
            { "filters": [{ "field": "data.a", "operator": "exists" },
                          { "field": "context.score", "operator": "exists" }] }
        ] }),
        Scope::Workflow,
    )
    .unwrap();
    let err = filter
        .to_sql(Dialect::Sqlite, NOW, &mut vec![])
        .unwrap_err();
    assert_eq!(err.path, "groups[1].filters[1].field");
    assert_eq!(
        err.message,
        "`context.score` exists only in workflow conditions, which have no SQL form"
    );
    let hand_built = Filter {
        logic: Logic::And,
        groups: vec![Group {
            filters: vec![Condition {
                field: Field::Data(vec!["a".into(), String::new()]),
                op: Operator::Exists,
                value: None,
                unit: None,
            }],
            conditions: None,
        }],
    };
    let err = hand_built
        .to_sql(Dialect::Postgres, NOW, &mut vec![])
        .unwrap_err();
    assert_eq!(err.path, "groups[0].filters[0].field");
}
