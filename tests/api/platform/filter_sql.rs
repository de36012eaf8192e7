//! The filter language's two back ends agree: for random filters (every field and operator of
//! `docs/decisions.md`, nested `conditions`, AND/OR) over random contacts (data of mixed types,
//! ISO dates, nested objects and lists, event histories, segment memberships), the SQL that
//! `herald-filter` compiles, run by the store ([`Store::contacts_matching`]) on the database
//! under test (SQLite, or PostgreSQL with `HERALD_TEST_POSTGRES_URL`), selects exactly the
//! contacts that [`Filter::matches`] accepts in memory, at the same `now`.
//!
//! The run is bounded and repeatable: a fixed seed, no failure file, 64 cases (each a fresh
//! project of up to 8 contacts and 4 filters); `HERALD_FILTER_CASES` asks for more. Every
//! disagreement it found is also kept below as a fixed regression case.

use std::collections::{BTreeMap, BTreeSet};

use herald::domain::ids::{ContactId, ProjectId};
use herald::store::{Db, Store};
use herald_filter::{EventStats, Filter, Scope, Subject};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Map, Value, json};
use sqlx::types::Json;

use crate::support::harness::store_with_project;

/// The time both back ends evaluate at: fixed, so that dates near it are generated exactly.
const NOW: i64 = 1_760_000_000_123;
const MINUTE: i64 = 60_000;
const DAY: i64 = 86_400_000;

/// Segment ids the memberships and `segment.<id>` conditions draw from (the last is never a
/// segment).
const SEGMENTS: [&str; 3] = [
    "seg_00000000000000000000000000000001",
    "seg_00000000000000000000000000000002",
    "seg_000000000000000000000000000000ff",
];
const EVENTS: [&str; 3] = ["signup", "buy", "never"];
/// Data keys: index-like ones, and ones a field path escapes (`.`, `\`) or SQL would choke on
/// as text (quotes), which only ever reach SQL bound.
const KEYS: [&str; 10] = [
    "a", "b", "n", "0", "x-y", "-1", "01", "a.b", "q\\'\"", "é $[0]",
];

/// One generated contact.
#[derive(Clone, Debug)]
struct ContactSpec {
    local: String,
    subscribed: bool,
    created_at: i64,
    updated_at: i64,
    data: Map<String, Value>,
    /// Event name → times.
    events: BTreeMap<String, Vec<i64>>,
    /// Indexes into `SEGMENTS[..2]`.
    segments: BTreeSet<usize>,
}

/// Doubles whose decimal forms are hard to read back exactly, and the edges of `f64`.
const HARD_FLOATS: &[f64] = &[
    0.5,
    -0.0,
    1.0,
    2.5,
    0.1,
    0.300_000_000_000_000_04,
    1e23,
    8.988_465_674_311_579e307,
    1.797_693_134_862_315_7e308,
    5e-324,
    2.225_073_858_507_201_4e-308,
    123_456_789.123_456_79,
    9_007_199_254_740_993.0,
    1_760_000_000_123.5,
];

/// A time near [`NOW`]: on a minute, day or cutoff boundary, or just beside one.
fn near_now() -> impl Strategy<Value = i64> {
    (
        prop_oneof![Just(0i64), Just(MINUTE), Just(DAY), Just(30 * DAY)],
        0i64..4,
        prop_oneof![Just(0i64), Just(1), Just(-1), Just(500)],
        any::<bool>(),
    )
        .prop_map(|(unit, n, jitter, past)| {
            let offset = unit * n + jitter;
            if past { NOW - offset } else { NOW + offset }
        })
}

/// `ms` as the fixed form, with or without milliseconds.
fn iso(ms: i64, millis: bool) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    if millis {
        t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(2),
            Just(10),
            Just(9_007_199_254_740_993),
            Just(i64::MIN),
        ]
        .prop_map(Value::from),
        prop::sample::select(HARD_FLOATS).prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(-9_223_372_036_854_775_809.0f64)),
        near_now().prop_map(Value::from),
        prop_oneof![
            Just(""),
            Just("a"),
            Just("A"),
            Just("abc"),
            Just("ABC"),
            Just("aBc"),
            Just("é"),
            Just("É"),
            Just("10"),
            Just("9"),
            Just("true"),
            Just("2024-01-02"),
            Just("2024-01-02T03:04:05+00:00"),
            Just("null"),
            Just("ß"),
            Just("SS"),
            Just("z"),
            Just("Z"),
            Just("a\u{301}"),
            Just("\u{1F600}"),
            Just("ab%_"),
            Just("0000-13-45T99:99:99Z"),
            Just("2024-01-02T03:04:05.6789Z"),
            Just("2024-01-02t03:04:05Z"),
            Just(" 2024-01-02T03:04:05Z"),
            // Escaped in the stored JSON text.
            Just("a\"b"),
            Just("a\\b"),
            Just("x\ny"),
            Just("\u{1}"),
            Just("\":\"a"),
        ]
        .prop_map(Value::from),
        (near_now(), any::<bool>()).prop_map(|(ms, millis)| Value::from(iso(ms, millis))),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(&KEYS[..]), inner, 0..3).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

fn contact() -> impl Strategy<Value = ContactSpec> {
    (
        prop::sample::select(vec!["ann", "Ann", "BOB", "bob.x", "zed"]),
        any::<bool>(),
        near_now(),
        near_now(),
        prop::collection::btree_map(prop::sample::select(&KEYS[..]), value(), 2..5),
        prop::collection::btree_map(
            prop::sample::select(&EVENTS[..2]),
            prop::collection::vec(near_now(), 1..3),
            0..3,
        ),
        prop::collection::btree_set(0usize..2, 0..3),
    )
        .prop_map(
            |(local, subscribed, created_at, updated_at, data, events, segments)| ContactSpec {
                local: local.to_string(),
                subscribed,
                created_at,
                updated_at,
                data: data.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                events: events
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                segments,
            },
        )
}

fn amount() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(1)),
        Just(json!(2)),
        Just(json!(30)),
        Just(json!(0.5)),
        Just(json!(1.5)),
        Just(json!("2")),
    ]
}

fn unit() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["minutes", "hours", "days"])
}

fn op(names: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(names)
}

const COMPARES: &[&str] = &[
    "equals",
    "notEquals",
    "contains",
    "notContains",
    "greaterThan",
    "lessThan",
    "greaterThanOrEqual",
    "lessThanOrEqual",
];
const ORDERS: &[&str] = &[
    "equals",
    "notEquals",
    "greaterThan",
    "lessThan",
    "greaterThanOrEqual",
    "lessThanOrEqual",
];

/// A condition that a parser accepts, over every field and every operator that fits it.
fn condition() -> impl Strategy<Value = Value> {
    let timed = |field: BoxedStrategy<String>| {
        (field, op(&["within", "olderThan"]), amount(), unit())
            .prop_map(|(f, o, v, u)| json!({ "field": f, "operator": o, "value": v, "unit": u }))
    };
    let exists = |field: BoxedStrategy<String>| {
        (field, op(&["exists", "notExists"]))
            .prop_map(|(f, o)| json!({ "field": f, "operator": o }))
    };
    let data_field = || {
        prop::collection::vec(prop::sample::select(&KEYS[..]), 1..3)
            .prop_map(|keys| format!("data.{}", herald_filter::join_path(&keys)))
            .boxed()
    };
    let time_field = || {
        prop::sample::select(vec!["createdAt", "updatedAt"])
            .prop_map(String::from)
            .boxed()
    };
    prop_oneof![
        // email
        (
            op(COMPARES),
            prop::sample::select(vec![
                "ann",
                "ANN@",
                "@example.com",
                "b",
                "bob.x-3@example.com",
                ""
            ])
        )
            .prop_map(|(o, v)| json!({ "field": "email", "operator": o, "value": v })),
        exists(Just("email".to_string()).boxed()),
        // subscribed
        (op(&["equals", "notEquals"]), any::<bool>())
            .prop_map(|(o, v)| json!({ "field": "subscribed", "operator": o, "value": v })),
        exists(Just("subscribed".to_string()).boxed()),
        // createdAt / updatedAt
        (
            time_field(),
            op(ORDERS),
            prop_oneof![
                near_now().prop_map(Value::from),
                (near_now(), any::<bool>()).prop_map(|(ms, m)| Value::from(iso(ms, m))),
                near_now().prop_map(|ms| {
                    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
                    Value::from(t.format("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string())
                }),
                near_now().prop_map(|ms| {
                    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
                    Value::from(t.format("%Y-%m-%d").to_string())
                }),
            ]
        )
            .prop_map(|(f, o, v)| json!({ "field": f, "operator": o, "value": v })),
        timed(time_field()),
        exists(time_field()),
        // data.<path>
        (
            data_field(),
            op(COMPARES),
            scalar().prop_filter("a comparable value", |v| !v.is_null())
        )
            .prop_filter("orders take numbers and strings", |(_, o, v)| {
                !(ORDERS.contains(o) && *o != "equals" && *o != "notEquals" && v.is_boolean())
            })
            .prop_map(|(f, o, v)| json!({ "field": f, "operator": o, "value": v })),
        timed(data_field()),
        exists(data_field()),
        // event.<name>
        (
            prop::sample::select(&EVENTS[..]),
            op(&["triggered", "notTriggered"])
        )
            .prop_map(|(e, o)| json!({ "field": format!("event.{e}"), "operator": o })),
        (
            prop::sample::select(&EVENTS[..]),
            op(&["triggeredWithin", "notTriggeredWithin"]),
            amount(),
            unit()
        )
            .prop_map(
                |(e, o, v, u)| json!({ "field": format!("event.{e}"), "operator": o,
                                             "value": v, "unit": u })
            ),
        // segment.<id>
        (
            prop::sample::select(&SEGMENTS[..]),
            op(&["memberOf", "notMemberOf"])
        )
            .prop_map(|(s, o)| json!({ "field": format!("segment.{s}"), "operator": o })),
    ]
}

fn filter() -> impl Strategy<Value = Value> {
    let group = |nested: Option<BoxedStrategy<Value>>| {
        let filters = prop::collection::vec(condition(), 0..3);
        match nested {
            None => filters.prop_map(|f| json!({ "filters": f })).boxed(),
            Some(nested) => (filters, prop::option::of(nested))
                .prop_map(|(f, n)| match n {
                    Some(n) => json!({ "filters": f, "conditions": n }),
                    None => json!({ "filters": f }),
                })
                .boxed(),
        }
    };
    let logic = || prop::sample::select(vec!["AND", "OR"]);
    let leaf = (logic(), prop::collection::vec(group(None), 1..3))
        .prop_map(|(l, g)| json!({ "logic": l, "groups": g }));
    leaf.prop_recursive(2, 8, 2, move |inner| {
        (
            logic(),
            prop::collection::vec(group(Some(inner.boxed())), 1..3),
        )
            .prop_map(|(l, g)| json!({ "logic": l, "groups": g }))
    })
}

/// Runs one statement with no binds on either backend.
async fn execute(store: &Store, sql: &str, binds: &[Value]) {
    macro_rules! run {
        ($pool:expr) => {{
            let mut q = sqlx::query(sql);
            for b in binds {
                q = match b {
                    Value::String(s) => q.bind(s.clone()),
                    Value::Bool(v) => q.bind(*v),
                    Value::Number(n) => q.bind(n.as_i64().unwrap()),
                    Value::Object(m) => q.bind(Json(m.clone())),
                    other => panic!("no bind for {other}"),
                };
            }
            q.execute($pool).await.map(|_| ())
        }};
    }
    match store.db() {
        Db::Sqlite { writer, .. } => run!(writer),
        Db::Postgres(pool) => run!(pool),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Writes the contacts (with their events and memberships) into `project`; answers their ids in
/// order.
async fn insert(store: &Store, project: &ProjectId, contacts: &[ContactSpec]) -> Vec<ContactId> {
    let p = project.as_str();
    for segment in &SEGMENTS[..2] {
        execute(
            store,
            "INSERT INTO segments (id, project_id, name, type, track_membership, member_count, \
             created_at, updated_at) VALUES ($1, $2, $1, 'STATIC', FALSE, 0, 0, 0)",
            &[json!(format!("{segment}{p}")), json!(p)],
        )
        .await;
    }
    let mut ids = Vec::new();
    for (i, c) in contacts.iter().enumerate() {
        let id = ContactId::generate();
        execute(
            store,
            "INSERT INTO contacts (id, project_id, email, subscribed, data, version, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5, 0, $6, $7)",
            &[
                json!(id.as_str()),
                json!(p),
                json!(format!("{}-{i}@example.com", c.local)),
                json!(c.subscribed),
                Value::Object(c.data.clone()),
                json!(c.created_at),
                json!(c.updated_at),
            ],
        )
        .await;
        for (name, times) in &c.events {
            for at in times {
                execute(
                    store,
                    "INSERT INTO events (id, project_id, contact_id, name, data, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        json!(herald::domain::ids::EventId::generate().as_str()),
                        json!(p),
                        json!(id.as_str()),
                        json!(name),
                        json!({}),
                        json!(at),
                    ],
                )
                .await;
            }
        }
        for s in &c.segments {
            execute(
                store,
                "INSERT INTO segment_members (segment_id, contact_id, project_id, added_at) \
                 VALUES ($1, $2, $3, 0)",
                &[
                    json!(format!("{}{p}", SEGMENTS[*s])),
                    json!(id.as_str()),
                    json!(p),
                ],
            )
            .await;
        }
        ids.push(id);
    }
    ids
}

/// The filter with the segment ids of `project` (segment ids are global keys, so each case's
/// project has its own).
fn localise(filter: &Value, project: &ProjectId) -> Value {
    let text = filter.to_string();
    let mut text = text;
    for s in SEGMENTS {
        text = text.replace(s, &format!("{s}{}", project.as_str()));
    }
    serde_json::from_str(&text).unwrap()
}

fn subject(c: &ContactSpec, i: usize, project: &ProjectId) -> Subject {
    Subject {
        email: format!("{}-{i}@example.com", c.local),
        subscribed: c.subscribed,
        created_at: c.created_at,
        updated_at: c.updated_at,
        data: c.data.clone(),
        events: c
            .events
            .iter()
            .map(|(name, times)| {
                (
                    name.clone(),
                    EventStats {
                        count: times.len() as u64,
                        last_at: *times.iter().max().unwrap(),
                    },
                )
            })
            .collect(),
        segments: c
            .segments
            .iter()
            .map(|s| format!("{}{}", SEGMENTS[*s], project.as_str()))
            .collect(),
        now_ms: NOW,
        ..Subject::default()
    }
}

/// How many filters selected some but not all of their case's contacts, of how many.
static SPLITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static FILTERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Checks that SQL and memory select the same contacts for each filter.
async fn agree(
    store: &Store,
    contacts: &[ContactSpec],
    filters: &[Value],
) -> Result<(), TestCaseError> {
    let project = new_project(store).await;
    let ids = insert(store, &project, contacts).await;
    for raw in filters {
        let raw = localise(raw, &project);
        let filter: Filter = herald_filter::parse(&raw, Scope::Contacts).map_err(|e| {
            TestCaseError::fail(format!("generated an invalid filter {raw}: {e:?}"))
        })?;
        let in_sql: BTreeSet<String> = store
            .contacts_matching(&project, &filter, NOW)
            .await
            .map_err(|e| TestCaseError::fail(format!("{raw}: {e}")))?
            .into_iter()
            .map(ContactId::into_string)
            .collect();
        FILTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !in_sql.is_empty() && in_sql.len() < contacts.len() {
            SPLITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for (i, (c, id)) in contacts.iter().zip(&ids).enumerate() {
            let in_memory = filter.matches(&subject(c, i, &project));
            prop_assert_eq!(
                in_sql.contains(id.as_str()),
                in_memory,
                "SQL and memory disagree (memory says {}) on\n  filter {}\n  contact {:?}",
                in_memory,
                raw,
                c
            );
        }
    }
    Ok(())
}

async fn new_project(store: &Store) -> ProjectId {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let email =
        herald::domain::email::EmailAddress::parse(&format!("o-{suffix}@example.com")).unwrap();
    let user = store.create_user(&email, "x").await.unwrap();
    let name = herald::domain::project::ProjectName::parse("p").unwrap();
    store
        .create_project(&name, &user.id, &herald::domain::keys::KeyPair::generate())
        .await
        .unwrap()
        .id
}

#[test]
fn sql_selects_exactly_what_memory_matches() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = runtime.block_on(store_with_project(dir.path()));
    let cases = std::env::var("HERALD_FILTER_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64);
    let config = Config {
        cases,
        failure_persistence: None,
        // Shrinking re-runs cases against the database: bounded, it still finds small examples.
        max_shrink_iters: 200,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let case = (
        prop::collection::vec(contact(), 2..10),
        prop::collection::vec(filter(), 1..4),
    );
    let result = runner.run(&case, |(contacts, filters)| {
        runtime.block_on(agree(&store, &contacts, &filters))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generators make filters that tell contacts apart, not only all-or-nothing ones.
    let (splits, filters) = (
        SPLITS.load(std::sync::atomic::Ordering::Relaxed),
        FILTERS.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!("{filters} filters, {splits} of them selected some but not all contacts");
    assert!(
        splits * 10 >= filters,
        "only {splits} of {filters} filters selected some but not all contacts"
    );
}
