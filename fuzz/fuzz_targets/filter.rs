//! Parses arbitrary JSON as a filter (segments' and workflows' scopes): never a panic; a refusal
//! names at least one mistake; an accepted filter evaluates in memory, and a segment's filter
//! compiles to SQL for both databases with one bound value for each placeholder it writes and
//! a text linear in the input's size.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use herald_filter::{Dialect, EventStats, Scope, SqlValue, Subject, parse};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const NOW_MS: i64 = 1_790_000_000_000;

/// A contact with a value of every JSON type, events and a membership.
fn subject() -> Subject {
    let data = json!({
        "plan": "pro", "score": 42, "ratio": 0.5, "flag": true, "none": null,
        "signedUpAt": "2026-01-01T00:00:00Z", "tags": ["a", "b"], "nested": {"a": {"b": 1}},
    });
    let Value::Object(data) = data else {
        unreachable!()
    };
    Subject {
        email: "Ada@Example.com".into(),
        subscribed: true,
        created_at: NOW_MS - 86_400_000,
        updated_at: NOW_MS - 1_000,
        data: data.clone(),
        events: BTreeMap::from([(
            "login".to_string(),
            EventStats {
                count: 2,
                last_at: NOW_MS - 3_600_000,
            },
        )]),
        segments: BTreeSet::from(["seg_1".to_string()]),
        topics: Default::default(),
        event_data: data.clone(),
        context: data,
        now_ms: NOW_MS,
    }
}

/// The highest `$N` in `sql`.
fn highest_placeholder(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let mut highest = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if let Ok(n) = sql[i + 1..i + 1 + digits].parse::<usize>() {
                highest = highest.max(n);
            }
            i += digits;
        }
        i += 1;
    }
    highest
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let full = subject();
    for scope in [Scope::Contacts, Scope::Workflow] {
        let filter = match parse(&value, scope) {
            Ok(filter) => filter,
            Err(errors) => {
                assert!(!errors.is_empty(), "a refusal without a mistake");
                assert!(errors.iter().all(|e| !e.message.is_empty()));
                continue;
            }
        };
        filter.matches(&full);
        filter.matches(&Subject::default());
        if scope == Scope::Workflow {
            continue;
        }
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            // `$1` is the caller's (the project), as the store binds it.
            let mut binds = vec![SqlValue::Text("prj_1".into())];
            let sql = filter
                .to_sql(dialect, NOW_MS, &mut binds)
                .unwrap_or_else(|e| panic!("an accepted segment filter does not compile: {e:?}"));
            assert!(
                highest_placeholder(&sql) <= binds.len(),
                "{sql} names a placeholder past its {} values",
                binds.len()
            );
            assert!(
                sql.len() <= 256 * data.len() + 8192,
                "{} bytes of SQL from {} bytes of filter",
                sql.len(),
                data.len()
            );
        }
    }
});
