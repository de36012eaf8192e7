//! The custom data rules of the spec, applied to `data` on contact create and update, `/v1/track`
//! and `/v1/send`:
//!
//! - a primitive is stored; `null` deletes the key; an empty string is ignored;
//! - `{ "value": v, "persistent": false }` is used for this request only and never stored
//!   (`{ "value": v, "persistent": true }` stores `v`);
//! - reserved keys are dropped silently;
//! - `data` is a patch: keys not sent keep their values. A nested object or array is stored as
//!   sent and replaces the previous value of its top-level key (dotted paths such as
//!   `profile.tier` read into it).
//!
//! The type of each key is inferred per project from the first non-null value; see
//! [`FieldType::infer`].

use serde_json::{Map, Value};

/// Keys that are never stored in `data`.
pub const RESERVED_KEYS: [&str; 7] = [
    "id",
    "svc_id",
    "svc_email",
    "email",
    "unsubscribeUrl",
    "subscribeUrl",
    "manageUrl",
];

/// Longest accepted key, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// Most keys in one `data` object (or data columns in one CSV file). Far above what contact
/// data needs, and far below what one database statement can bind.
pub const MAX_KEYS: usize = 1000;

/// A parsed `data` object: what to store, what to delete and what to use once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DataPatch {
    /// Keys to set, with their values.
    pub set: Map<String, Value>,
    /// Keys to delete.
    pub delete: Vec<String>,
    /// Values for this request only (`persistent: false`).
    pub transient: Map<String, Value>,
}

/// A key of `data` that cannot be accepted, or too many keys.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DataKeyError {
    /// The offending key (empty when the object as a whole is refused).
    pub key: String,
    /// The object as a whole has too many keys.
    pub too_many: bool,
    /// What to fix.
    pub message: String,
}

impl DataPatch {
    /// Applies the rules to a request's `data` object.
    pub fn parse(data: Map<String, Value>) -> Result<DataPatch, DataKeyError> {
        let mut patch = DataPatch::default();
        if data.len() > MAX_KEYS {
            return Err(DataKeyError {
                key: String::new(),
                too_many: true,
                message: format!(
                    "`data` has {} keys; at most {MAX_KEYS} are accepted in one request",
                    data.len()
                ),
            });
        }
        for (key, value) in data {
            if RESERVED_KEYS.contains(&key.as_str()) {
                continue;
            }
            if key.trim().is_empty() {
                return Err(DataKeyError {
                    key,
                    too_many: false,
                    message: "data keys must not be empty".into(),
                });
            }
            if key.len() > MAX_KEY_LEN {
                return Err(DataKeyError {
                    too_many: false,
                    message: format!("data keys are at most {MAX_KEY_LEN} characters"),
                    key,
                });
            }
            match value {
                Value::Null => patch.delete.push(key),
                Value::String(s) if s.is_empty() => {}
                Value::Object(mut obj) if is_wrapped(&obj) => {
                    let persistent = obj
                        .get("persistent")
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    let inner = obj.remove("value").unwrap_or(Value::Null);
                    if !persistent {
                        patch.transient.insert(key, inner);
                    } else {
                        match inner {
                            Value::Null => patch.delete.push(key),
                            Value::String(s) if s.is_empty() => {}
                            v => {
                                patch.set.insert(key, v);
                            }
                        }
                    }
                }
                v => {
                    patch.set.insert(key, v);
                }
            }
        }
        Ok(patch)
    }

    /// True when nothing would be stored or deleted.
    pub fn is_noop(&self) -> bool {
        self.set.is_empty() && self.delete.is_empty()
    }

    /// Applies the patch to stored data; returns whether anything changed.
    pub fn apply(&self, data: &mut Map<String, Value>) -> bool {
        let mut changed = false;
        for key in &self.delete {
            changed |= data.remove(key).is_some();
        }
        for (key, value) in &self.set {
            if data.get(key) != Some(value) {
                data.insert(key.clone(), value.clone());
                changed = true;
            }
        }
        changed
    }
}

/// `{ value, persistent }` with nothing else is the wrapped form; any other object is data.
fn is_wrapped(obj: &Map<String, Value>) -> bool {
    obj.contains_key("value")
        && obj.get("persistent").is_some_and(Value::is_boolean)
        && obj.len() == 2
}

/// The inferred type of a custom field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// Any other string.
    String,
    /// A JSON number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SS[.sss]Z`.
    Date,
    /// A nested object (reachable by dotted path).
    Object,
    /// A list.
    Array,
}

impl FieldType {
    /// Infers the type of a non-null value.
    pub fn infer(value: &Value) -> Option<FieldType> {
        Some(match value {
            Value::Null => return None,
            Value::Bool(_) => FieldType::Boolean,
            Value::Number(_) => FieldType::Number,
            Value::String(s) if is_date(s) => FieldType::Date,
            Value::String(_) => FieldType::String,
            Value::Object(_) => FieldType::Object,
            Value::Array(_) => FieldType::Array,
        })
    }

    /// The name used over the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Date => "date",
            FieldType::Object => "object",
            FieldType::Array => "array",
        }
    }
}

fn digits(s: &[u8]) -> bool {
    s.iter().all(u8::is_ascii_digit)
}

/// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SS[.sss]Z`, with plausible field ranges.
pub fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 10
        || !digits(&b[0..4])
        || b[4] != b'-'
        || !digits(&b[5..7])
        || b[7] != b'-'
        || !digits(&b[8..10])
    {
        return false;
    }
    let month = (b[5] - b'0') * 10 + (b[6] - b'0');
    let day = (b[8] - b'0') * 10 + (b[9] - b'0');
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return false;
    }
    if b.len() == 10 {
        return true;
    }
    let rest = &b[10..];
    if rest.len() < 10 || rest[0] != b'T' || rest[rest.len() - 1] != b'Z' {
        return false;
    }
    let time = &rest[1..rest.len() - 1];
    if time.len() < 8
        || !digits(&time[0..2])
        || time[2] != b':'
        || !digits(&time[3..5])
        || time[5] != b':'
        || !digits(&time[6..8])
    {
        return false;
    }
    match &time[8..] {
        [] => true,
        [b'.', frac @ ..] => !frac.is_empty() && frac.len() <= 9 && digits(frac),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> DataPatch {
        DataPatch::parse(v.as_object().unwrap().clone()).unwrap()
    }

    #[test]
    fn rules_of_the_spec() {
        let p = parse(json!({
            "plan": "pro", "age": 3, "vip": true, "gone": null, "blank": "",
            "once": { "value": "x", "persistent": false }, "kept": { "value": 7, "persistent": true },
            "email": "x@y.z", "id": "1", "manageUrl": "u", "profile": { "tier": "gold" }
        }));
        assert_eq!(p.set.len(), 5);
        assert_eq!(p.set["kept"], json!(7));
        assert_eq!(p.set["profile"], json!({ "tier": "gold" }));
        assert_eq!(p.delete, vec!["gone".to_string()]);
        assert_eq!(p.transient["once"], json!("x"));
        assert!(!p.set.contains_key("blank") && !p.set.contains_key("email"));
    }

    #[test]
    fn patch_keeps_other_keys() {
        let mut data = json!({ "a": 1, "b": 2 }).as_object().unwrap().clone();
        assert!(parse(json!({ "b": null, "c": 3 })).apply(&mut data));
        assert_eq!(Value::Object(data.clone()), json!({ "a": 1, "c": 3 }));
        assert!(!parse(json!({ "a": 1, "x": "" })).apply(&mut data));
    }

    #[test]
    fn infers_types() {
        assert_eq!(
            FieldType::infer(&json!("2024-01-31")),
            Some(FieldType::Date)
        );
        assert_eq!(
            FieldType::infer(&json!("2024-01-31T10:00:00Z")),
            Some(FieldType::Date)
        );
        assert_eq!(
            FieldType::infer(&json!("2024-01-31T10:00:00.123Z")),
            Some(FieldType::Date)
        );
        assert_eq!(
            FieldType::infer(&json!("2024-13-31")),
            Some(FieldType::String)
        );
        assert_eq!(
            FieldType::infer(&json!("2024-01-31 10:00")),
            Some(FieldType::String)
        );
        assert_eq!(FieldType::infer(&json!(1.5)), Some(FieldType::Number));
        assert_eq!(FieldType::infer(&json!(false)), Some(FieldType::Boolean));
        assert_eq!(FieldType::infer(&Value::Null), None);
    }

    #[test]
    fn empty_key_is_an_error() {
        assert!(DataPatch::parse(json!({ "": 1 }).as_object().unwrap().clone()).is_err());
    }
}
