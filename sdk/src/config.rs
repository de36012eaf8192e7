//! Parsing JSON configs into typed values, with errors that name the bad field.

use serde::de::DeserializeOwned;

/// One problem with a configuration: where it is (a dotted path such as
/// `filter.groups[0].filters[1].operator`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the bad part.
    pub field: String,
    /// A sentence the API can show to the user.
    pub message: String,
}

impl FieldError {
    /// A new error at `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Joins a path and a key: `join("a", "b") == "a.b"`, `join("", "b") == "b"`.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Parses `json` into `T`; on failure, one [`FieldError`] naming the bad field.
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, FieldError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let message = err.inner().to_string();
        // serde reports a missing field at its parent: name the field itself.
        let message = message
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string();
        if let Some(rest) = message.strip_prefix("missing field `")
            && let Some(name) = rest.split('`').next()
        {
            return FieldError::new(join(&path, name), "is required");
        }
        FieldError::new(
            if path.is_empty() {
                "config".into()
            } else {
                path
            },
            message,
        )
    })
}
