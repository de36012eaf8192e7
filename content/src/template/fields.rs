//! The rules of a stored template's plain fields (`docs/decisions.md`, "Templates").

/// Longest template name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// Longest subject, in characters (the spec's limit for `/v1/send`, RFC 5322's line length).
pub const MAX_SUBJECT_CHARS: usize = 998;
/// Longest sender display name, in characters.
pub const MAX_FROM_NAME_CHARS: usize = 200;
/// What a copy's name ends with.
const COPY_SUFFIX: &str = " (copy)";

/// A broken rule: a machine-readable code (`required`, `too_long`, `invalid`) and a message.
pub type Violation = (&'static str, String);

/// What a template is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateType {
    /// Mail a recipient's action causes (receipts, password resets).
    Transactional,
    /// Campaign and newsletter mail.
    Marketing,
}

impl TemplateType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateType::Transactional => "TRANSACTIONAL",
            TemplateType::Marketing => "MARKETING",
        }
    }

    /// Accepts the wire names in any case.
    pub fn parse(s: &str) -> Option<TemplateType> {
        [TemplateType::Transactional, TemplateType::Marketing]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
    }
}

/// A template name, trimmed: 1 to 200 characters.
pub fn check_name(name: &str) -> Result<String, Violation> {
    let name = name.trim();
    check_length(name, "name", MAX_NAME_CHARS)?;
    Ok(name.to_string())
}

/// A subject (before rendering): 1 to 998 characters and no line break.
pub fn check_subject(subject: &str) -> Result<(), Violation> {
    if subject.contains(['\r', '\n']) {
        return Err((
            "invalid",
            "the subject must be one line: remove the CR/LF characters".into(),
        ));
    }
    check_length(subject, "subject", MAX_SUBJECT_CHARS)
}

/// A sender display name, trimmed: 1 to 200 characters, no control characters (they would
/// break the `From` header).
pub fn check_from_name(name: &str) -> Result<String, Violation> {
    let name = name.trim();
    if name.chars().any(char::is_control) {
        return Err((
            "invalid",
            "the name must not contain line breaks or other control characters".into(),
        ));
    }
    check_length(name, "sender name", MAX_FROM_NAME_CHARS)?;
    Ok(name.to_string())
}

/// At least one character and at most `max`.
fn check_length(value: &str, what: &str, max: usize) -> Result<(), Violation> {
    match value.chars().count() {
        0 => Err(("required", format!("the {what} is empty"))),
        n if n > max => Err((
            "too_long",
            format!("the {what} has {n} characters; at most {max} are allowed"),
        )),
        _ => Ok(()),
    }
}

/// The name of a copy: `<name> (copy)`, the original shortened so that it fits the limit.
pub fn copy_name(name: &str) -> String {
    let room = MAX_NAME_CHARS - COPY_SUFFIX.chars().count();
    let kept: String = name.chars().take(room).collect();
    format!("{}{COPY_SUFFIX}", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_in_any_case() {
        assert_eq!(
            TemplateType::parse("marketing"),
            Some(TemplateType::Marketing)
        );
        assert_eq!(
            TemplateType::parse("TRANSACTIONAL"),
            Some(TemplateType::Transactional)
        );
        assert_eq!(TemplateType::parse("promo"), None);
    }

    #[test]
    fn field_rules() {
        let code = |r: Result<(), Violation>| r.err().map(|(code, _)| code);
        assert_eq!(check_name("  Welcome "), Ok("Welcome".to_string()));
        assert_eq!(code(check_name(" ").map(drop)), Some("required"));
        assert!(check_name(&"n".repeat(200)).is_ok());
        assert_eq!(
            code(check_name(&"n".repeat(201)).map(drop)),
            Some("too_long")
        );
        assert_eq!(code(check_subject("Hi {{name}}")), None);
        assert_eq!(code(check_subject("")), Some("required"));
        assert_eq!(code(check_subject("a\r\nBcc: x@y.test")), Some("invalid"));
        assert_eq!(code(check_subject(&"é".repeat(998))), None);
        assert_eq!(code(check_subject(&"é".repeat(999))), Some("too_long"));
        assert_eq!(check_from_name(" Acme "), Ok("Acme".to_string()));
        assert_eq!(
            code(check_from_name("Acme\r\nBcc: x").map(drop)),
            Some("invalid")
        );
        assert_eq!(code(check_from_name("").map(drop)), Some("required"));
    }

    #[test]
    fn a_copy_name_fits_the_limit() {
        assert_eq!(copy_name("Welcome"), "Welcome (copy)");
        let long = copy_name(&"n".repeat(200));
        assert_eq!(long.chars().count(), MAX_NAME_CHARS);
        assert!(long.ends_with(" (copy)"));
    }
}
