//! The NUL character (U+0000) refused in what a client sends: PostgreSQL stores neither it in
//! `TEXT` nor its escape in `JSONB`, so a string holding it would fail the write there (and be
//! kept on SQLite). Requests are refused at the edge instead, alike on both databases: a JSON body
//! with `\u0000` in a string or a key (422, naming the field), a query parameter with `%00` (400,
//! naming the parameter).

use std::fmt::Write;

use serde_json::Value;

use super::error::{ApiError, FieldError};

/// What to do instead, in every refusal.
const FIX: &str = "must not contain the NUL character (\\u0000); remove it";

/// The refusal of a JSON body that holds a NUL character in a string or a key, naming the first
/// such field (`data.plan`, `contactIds[2]`). Linear in the body's size: a scan for the escape,
/// and only when one is found, a parse to name its field. `None` for a body without one, and
/// for a body that is not JSON (the handler reports that).
pub fn in_json_body(body: &[u8]) -> Option<ApiError> {
    if !has_escaped_nul(body) {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let field = path_of_nul(&value)?;
    Some(ApiError::validation(vec![FieldError::new(
        if field.is_empty() {
            "body".into()
        } else {
            field
        },
        "invalid",
        FIX,
    )]))
}

/// The refusal of a query string with a percent-encoded NUL (`%00`) in a parameter's name or
/// value, naming the parameter.
pub fn in_query(query: &str) -> Option<ApiError> {
    let pair = query.split('&').find(|p| p.contains("%00"))?;
    let name = pair
        .split('=')
        .next()
        .unwrap_or_default()
        .replace("%00", "");
    Some(ApiError::invalid_parameter(
        &name,
        &format!("{FIX} (`%00`)"),
    ))
}

/// Whether the JSON text holds the escape `\u0000` (a raw NUL byte is not JSON at all): the six
/// characters, found by `memchr`'s substring search, after an even number of other backslashes
/// (`\\u0000` is a backslash, then text).
fn has_escaped_nul(body: &[u8]) -> bool {
    memchr::memmem::find_iter(body, b"\\u0000").any(|at| {
        let before = body[..at].iter().rev().take_while(|&&b| b == b'\\').count();
        before % 2 == 0
    })
}

/// One step of a path into a JSON value.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path of the first string or key holding a NUL character (empty: the body itself), or
/// `None`. The steps are kept as references and written out once, so the work stays linear in
/// the body's size however deep and long its keys.
fn path_of_nul(value: &Value) -> Option<String> {
    fn find<'a>(value: &'a Value, path: &mut Vec<Step<'a>>) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(i, v)| {
                path.push(Step::Index(i));
                let found = find(v, path);
                if !found {
                    path.pop();
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(k, v)| {
                path.push(Step::Key(k));
                let found = k.contains('\0') || find(v, path);
                if !found {
                    path.pop();
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = Vec::new();
    if !find(value, &mut path) {
        return None;
    }
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.extend(k.chars().filter(|&c| c != '\0'));
            }
            Step::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: &str) -> Option<String> {
        in_json_body(body.as_bytes()).map(|e| e.errors[0].field.clone())
    }

    #[test]
    fn a_nul_in_a_string_or_a_key_is_refused_at_its_field() {
        assert_eq!(
            field(r#"{"email":"a@b.c","data":{"plan":"p\u0000"}}"#).as_deref(),
            Some("data.plan")
        );
        assert_eq!(
            field(r#"{"contactIds":["cnt_1","\u0000"]}"#).as_deref(),
            Some("contactIds[1]")
        );
        assert_eq!(
            field(r#"{"data":{"k\u0000ey":1}}"#).as_deref(),
            Some("data.key")
        );
        assert_eq!(field(r#""\u0000""#).as_deref(), Some("body"));
        assert_eq!(
            field(r#"{"a":[{"b":1},{"b":{"c":["x","\u0000"]}}]}"#).as_deref(),
            Some("a[1].b.c[1]")
        );
    }

    #[test]
    fn an_escaped_backslash_before_u0000_and_bodies_that_are_not_json_pass() {
        assert_eq!(field(r#"{"a":"\\u0000"}"#), None);
        assert_eq!(field(r#"{"a":"\\\u0000"}"#).as_deref(), Some("a"));
        assert_eq!(field(r#"{"a":"\u00001"}"#).as_deref(), Some("a"));
        assert_eq!(field(r#"{"a":"\u0001"}"#), None);
        assert_eq!(
            field(r#"{"a":"\u0000"#),
            None,
            "not JSON: the handler says so"
        );
        assert_eq!(field("\\"), None);
    }

    #[test]
    fn a_percent_encoded_nul_in_a_query_names_its_parameter() {
        let e = in_query("limit=5&search=a%00b").unwrap();
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.errors[0].field, "search");
        assert!(
            in_query("search=a%2500").is_none(),
            "an encoded `%` followed by 00"
        );
        assert!(in_query("limit=5&search=ab").is_none());
    }
}
