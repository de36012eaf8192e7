//! The rules that keep the OpenAPI document exact, checked on the source of the response and
//! request types (`host/src/api/`), so a new field cannot break them unnoticed:
//!
//! - a field that can be `null` (`Option<…>`) is declared `nullable`, unless it is left out when
//!   empty (`skip_serializing_if_is_none`), so strict generated clients accept the body;
//! - a time (`…_at`, `timestamp`) is a `Timestamp`, declared `format: date-time`;
//! - a change (`PATCH`) field whose description says `null` clears it is declared `nullable`.

use std::path::Path;

const API: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api");

/// `(file, line, field line, attributes above it)` for every field of every `Object` type.
fn object_fields() -> Vec<(String, usize, String, String)> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    super::architecture::rust_files(Path::new(API), &mut files);
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = source.lines().collect();
        let mut in_object = false;
        let mut derive_object = false;
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t.starts_with("#[derive(") {
                derive_object = t.contains("Object");
            } else if t.starts_with("pub struct") || t.starts_with("struct") {
                in_object = derive_object && t.ends_with('{');
                derive_object = false;
            } else if t == "}" {
                in_object = false;
            } else if in_object && t.starts_with("pub ") && t.contains(':') {
                let mut attrs = String::new();
                let mut j = i;
                while j > 0 {
                    j -= 1;
                    let above = lines[j].trim();
                    if above.starts_with("#[") || above.starts_with("///") {
                        attrs.push_str(above);
                        attrs.push('\n');
                    } else {
                        break;
                    }
                }
                let file = path.file_name().unwrap().to_string_lossy().to_string();
                out.push((file, i + 1, t.to_string(), attrs));
            }
        }
    }
    assert!(out.len() > 200, "found {} fields", out.len());
    out
}

#[test]
fn every_optional_field_is_nullable_or_left_out() {
    let bad: Vec<String> = object_fields()
        .into_iter()
        .filter(|(_, _, field, attrs)| {
            field.contains(": Option<")
                && !attrs.contains("nullable")
                && !attrs.contains("skip_serializing_if_is_none")
        })
        .map(|(file, line, field, _)| format!("{file}:{line}: {field}"))
        .collect();
    assert!(
        bad.is_empty(),
        "add #[oai(nullable)] (or skip_serializing_if_is_none) to:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_time_is_a_date_time() {
    let bad: Vec<String> = object_fields()
        .into_iter()
        .filter(|(_, _, field, _)| {
            let name = field
                .trim_start_matches("pub ")
                .split(':')
                .next()
                .unwrap_or("");
            (name.ends_with("_at") || name == "timestamp") && !field.contains("Timestamp")
        })
        .map(|(file, line, field, _)| format!("{file}:{line}: {field}"))
        .collect();
    assert!(
        bad.is_empty(),
        "make these `Timestamp` (format: date-time):\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_change_that_takes_null_says_so() {
    let bad: Vec<String> = object_fields()
        .into_iter()
        .filter(|(_, _, field, attrs)| {
            field.contains(": MaybeUndefined<")
                && attrs.contains("null")
                && !attrs.contains("nullable")
        })
        .map(|(file, line, field, _)| format!("{file}:{line}: {field}"))
        .collect();
    assert!(
        bad.is_empty(),
        "these changes document `null` but the document does not accept it; add #[oai(nullable)]:\n{}",
        bad.join("\n")
    );
}
