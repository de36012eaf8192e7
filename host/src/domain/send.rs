//! What a `/v1/send` request becomes once parsed: recipients, sender, content, headers and
//! attachments, each checked against the rules of the spec and `docs/decisions.md`. No I/O.

use serde_json::Value;

use super::email::EmailAddress;
use super::template::fields::{check_from_name, check_subject as template_check_subject};

/// Most recipients of one request (each gets its own email).
pub const MAX_RECIPIENTS: usize = 50;
/// Longest header value, in characters.
pub const MAX_HEADER_VALUE_CHARS: usize = 998;
/// Most custom headers.
pub const MAX_HEADERS: usize = 50;
/// Most attachments.
pub const MAX_ATTACHMENTS: usize = 10;
/// Largest sum of decoded attachment sizes, in bytes.
pub const MAX_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;
/// Largest complete message (MIME, after encoding), in bytes.
pub const MAX_MESSAGE_BYTES: usize = super::template::MAX_RENDERED_BYTES;

/// Headers the service writes itself; a request may not set them.
pub const RESERVED_HEADERS: [&str; 17] = [
    "from",
    "to",
    "cc",
    "bcc",
    "subject",
    "date",
    "message-id",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "dkim-signature",
    "return-path",
    "reply-to",
    "sender",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "x-herald-message-id",
];

/// A name and an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mailbox {
    /// Display name, if any.
    pub name: Option<String>,
    /// The address.
    pub email: EmailAddress,
}

/// One invalid part of a request: the field's path and what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Path of the field, e.g. `to[1].email`.
    pub field: String,
    /// Machine-readable reason.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Problem {
    fn new(field: impl Into<String>, code: &'static str, message: impl Into<String>) -> Problem {
        Problem {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

fn check_name(name: &str, field: &str, problems: &mut Vec<Problem>) -> Option<String> {
    if name.trim().is_empty() {
        return None;
    }
    match check_from_name(name) {
        Ok(name) => Some(name),
        Err((code, message)) => {
            problems.push(Problem::new(field, code, message));
            None
        }
    }
}

/// Parses `"ann@example.com"`, `"Ann <ann@example.com>"` or `{ "name": "Ann", "email": "…" }`.
pub fn parse_mailbox(value: &Value, field: &str, problems: &mut Vec<Problem>) -> Option<Mailbox> {
    let (name, email, email_field) = match value {
        Value::String(s) => {
            let s = s.trim();
            match (s.rfind('<'), s.ends_with('>')) {
                (Some(open), true) => (
                    Some(s[..open].trim().trim_matches('"').to_string()),
                    s[open + 1..s.len() - 1].to_string(),
                    field.to_string(),
                ),
                _ => (None, s.to_string(), field.to_string()),
            }
        }
        Value::Object(map) => {
            let name = match map.get("name") {
                None | Some(Value::Null) => None,
                Some(Value::String(n)) => Some(n.clone()),
                Some(_) => {
                    problems.push(Problem::new(
                        format!("{field}.name"),
                        "invalid_type",
                        "must be a string",
                    ));
                    return None;
                }
            };
            match map.get("email") {
                Some(Value::String(e)) => (name, e.clone(), format!("{field}.email")),
                None | Some(Value::Null) => {
                    problems.push(Problem::new(
                        format!("{field}.email"),
                        "required",
                        "`email` is required",
                    ));
                    return None;
                }
                Some(_) => {
                    problems.push(Problem::new(
                        format!("{field}.email"),
                        "invalid_type",
                        "must be a string",
                    ));
                    return None;
                }
            }
        }
        _ => {
            problems.push(Problem::new(
                field,
                "invalid_type",
                "must be an address string or an object { name, email }",
            ));
            return None;
        }
    };
    let name = name.and_then(|n| check_name(&n, &format!("{field}.name"), problems));
    match EmailAddress::parse(&email) {
        Ok(email) => Some(Mailbox { name, email }),
        Err(e) => {
            problems.push(Problem::new(email_field, "invalid_email", e.to_string()));
            None
        }
    }
}

/// Parses `to`: one recipient (string or object) or an array of 1 to 50 of them.
pub fn parse_recipients(value: &Value, problems: &mut Vec<Problem>) -> Vec<Mailbox> {
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                problems.push(Problem::new(
                    "to",
                    "required",
                    "`to` needs at least one recipient",
                ));
                return Vec::new();
            }
            if items.len() > MAX_RECIPIENTS {
                problems.push(Problem::new(
                    "to",
                    "too_many",
                    format!(
                        "at most {MAX_RECIPIENTS} recipients per request; send several requests"
                    ),
                ));
                return Vec::new();
            }
            items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| parse_mailbox(v, &format!("to[{i}]"), problems))
                .collect()
        }
        Value::Null => {
            problems.push(Problem::new("to", "required", "`to` is required"));
            Vec::new()
        }
        one => parse_mailbox(one, "to", problems).into_iter().collect(),
    }
}

/// Checks a subject: 1 to 998 characters, no line breaks (the rule templates follow too).
pub fn check_subject(subject: &str, field: &str, problems: &mut Vec<Problem>) {
    if let Err((code, message)) = template_check_subject(subject) {
        problems.push(Problem::new(field, code, message));
    }
}

/// Checks custom headers: RFC 5322 field names, values of at most 998 characters without CR or
/// LF (header injection), at most 50, none of the headers the service writes itself.
pub fn parse_headers<'a>(
    headers: impl Iterator<Item = (&'a String, &'a String)>,
    problems: &mut Vec<Problem>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let valid_name = !name.is_empty()
            && name.len() <= 76
            && name.bytes().all(|b| (33..=126).contains(&b) && b != b':');
        if !valid_name {
            problems.push(Problem::new(
                field,
                "invalid",
                "a header name is 1 to 76 printable ASCII characters without spaces or colons",
            ));
            continue;
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            problems.push(Problem::new(
                field,
                "reserved",
                format!(
                    "`{name}` is set by the service; use the request's own fields (from, to, subject, reply)"
                ),
            ));
            continue;
        }
        if value.contains(['\r', '\n']) {
            problems.push(Problem::new(
                field,
                "header_injection",
                "a header value may not contain CR or LF",
            ));
            continue;
        }
        if value.chars().count() > MAX_HEADER_VALUE_CHARS {
            problems.push(Problem::new(
                field,
                "too_long",
                format!("a header value may have at most {MAX_HEADER_VALUE_CHARS} characters"),
            ));
            continue;
        }
        out.push((name.clone(), value.clone()));
    }
    if out.len() > MAX_HEADERS {
        problems.push(Problem::new(
            "headers",
            "too_many",
            format!("at most {MAX_HEADERS} headers"),
        ));
    }
    out
}

/// How an attachment is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// A file to download.
    Attachment,
    /// Shown in the body, referenced as `cid:<content_id>`.
    Inline {
        /// The `Content-ID`.
        content_id: String,
    },
}

/// A decoded attachment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// File name.
    pub filename: String,
    /// Decoded content.
    pub content: Vec<u8>,
    /// MIME type, e.g. `application/pdf`.
    pub content_type: String,
    /// How it is shown.
    pub disposition: Disposition,
}

/// An attachment as the request sends it.
pub struct AttachmentInput<'a> {
    /// File name.
    pub filename: &'a str,
    /// Base64 content.
    pub content: &'a str,
    /// MIME type.
    pub content_type: &'a str,
    /// `attachment` or `inline`.
    pub disposition: Option<&'a str>,
    /// Content-ID for inline parts.
    pub content_id: Option<&'a str>,
}

fn valid_content_type(s: &str) -> bool {
    s.parse::<mime::Mime>().is_ok() && !s.contains(['\r', '\n'])
}

/// Decodes and checks attachments: at most 10, 10 MB decoded in all.
pub fn parse_attachments(
    items: &[AttachmentInput<'_>],
    problems: &mut Vec<Problem>,
) -> Vec<Attachment> {
    use base64::Engine as _;
    if items.len() > MAX_ATTACHMENTS {
        problems.push(Problem::new(
            "attachments",
            "too_many",
            format!("at most {MAX_ATTACHMENTS} attachments"),
        ));
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut total = 0usize;
    for (i, a) in items.iter().enumerate() {
        let field = |f: &str| format!("attachments[{i}].{f}");
        let before = problems.len();
        let filename = a.filename.trim();
        if filename.is_empty() || filename.chars().count() > 255 {
            problems.push(Problem::new(
                field("filename"),
                "invalid",
                "a file name has 1 to 255 characters",
            ));
        } else if filename.contains(['\r', '\n', '"', '/', '\\']) {
            problems.push(Problem::new(
                field("filename"),
                "invalid",
                "a file name may not contain line breaks, quotes or slashes",
            ));
        }
        if !valid_content_type(a.content_type) {
            problems.push(Problem::new(
                field("contentType"),
                "invalid",
                "a MIME type like application/pdf",
            ));
        }
        let disposition = match (a.disposition.unwrap_or("attachment"), a.content_id) {
            ("attachment", _) => Some(Disposition::Attachment),
            ("inline", Some(id))
                if !id.is_empty()
                    && id.len() <= 255
                    && id
                        .bytes()
                        .all(|b| (33..=126).contains(&b) && b != b'<' && b != b'>') =>
            {
                Some(Disposition::Inline {
                    content_id: id.to_string(),
                })
            }
            ("inline", Some(_)) => {
                problems.push(Problem::new(
                    field("contentId"),
                    "invalid",
                    "a content id is 1 to 255 printable ASCII characters without spaces or <>",
                ));
                None
            }
            ("inline", None) => {
                problems.push(Problem::new(
                    field("contentId"),
                    "required",
                    "an inline attachment needs a `contentId` (referenced as cid:<contentId>)",
                ));
                None
            }
            (_, _) => {
                problems.push(Problem::new(
                    field("disposition"),
                    "invalid",
                    "`attachment` or `inline`",
                ));
                None
            }
        };
        let cleaned: String = a.content.split_whitespace().collect();
        let content = match base64::engine::general_purpose::STANDARD.decode(cleaned.as_bytes()) {
            Ok(c) => Some(c),
            Err(_) => {
                problems.push(Problem::new(
                    field("content"),
                    "invalid",
                    "the content must be base64 (standard alphabet, with padding)",
                ));
                None
            }
        };
        if let (Some(content), Some(disposition), true) =
            (content, disposition, problems.len() == before)
        {
            total += content.len();
            out.push(Attachment {
                filename: filename.to_string(),
                content,
                content_type: a.content_type.to_string(),
                disposition,
            });
        }
    }
    if total > MAX_ATTACHMENT_BYTES {
        problems.push(Problem::new(
            "attachments",
            "too_large",
            format!(
                "attachments may total at most 10 MB decoded; these are {:.1} MB",
                total as f64 / 1_048_576.0
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(problems: &[Problem]) -> Vec<&str> {
        problems.iter().map(|p| p.field.as_str()).collect()
    }

    #[test]
    fn recipients_take_every_form() {
        let mut p = Vec::new();
        let to = parse_recipients(
            &json!(["a@x.io", { "name": "Bo", "email": "B@X.io" }, "Cy Z <cy@x.io>"]),
            &mut p,
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(to.len(), 3);
        assert_eq!(to[1].name.as_deref(), Some("Bo"));
        assert_eq!(to[1].email.as_str(), "b@x.io");
        assert_eq!(to[2].name.as_deref(), Some("Cy Z"));
        assert_eq!(to[2].email.as_str(), "cy@x.io");

        let mut p = Vec::new();
        parse_recipients(
            &json!(["bad", { "name": "N" }, 7, { "email": "ok@x.io", "name": "a\nb" }]),
            &mut p,
        );
        assert_eq!(fields(&p), ["to[0]", "to[1].email", "to[2]", "to[3].name"]);
        let mut p = Vec::new();
        parse_recipients(&json!([]), &mut p);
        assert_eq!(p[0].code, "required");
        let mut p = Vec::new();
        let many: Vec<String> = (0..51).map(|i| format!("u{i}@x.io")).collect();
        parse_recipients(&json!(many), &mut p);
        assert_eq!(p[0].code, "too_many");
    }

    #[test]
    fn subjects_and_headers_refuse_line_breaks() {
        let mut p = Vec::new();
        check_subject("Hi\r\nBcc: x@y.z", "subject", &mut p);
        check_subject("", "subject", &mut p);
        check_subject(&"x".repeat(999), "subject", &mut p);
        assert_eq!(
            p.iter().map(|p| p.code).collect::<Vec<_>>(),
            ["invalid", "required", "too_long"]
        );
        let headers: Vec<(String, String)> = vec![
            ("X-Ok".into(), "fine".into()),
            ("X-Evil".into(), "a\r\nBcc: victim@x.io".into()),
            ("Bad Name".into(), "v".into()),
            ("Subject".into(), "no".into()),
            ("X-Long".into(), "v".repeat(999)),
        ];
        let mut p = Vec::new();
        let ok = parse_headers(headers.iter().map(|(k, v)| (k, v)), &mut p);
        assert_eq!(ok, [("X-Ok".to_string(), "fine".to_string())]);
        assert_eq!(
            p.iter().map(|p| p.code).collect::<Vec<_>>(),
            ["header_injection", "invalid", "reserved", "too_long"]
        );
    }

    #[test]
    fn attachments_are_decoded_and_limited() {
        let input = |content: &'static str, disposition, content_id| AttachmentInput {
            filename: "a.txt",
            content,
            content_type: "text/plain",
            disposition,
            content_id,
        };
        let mut p = Vec::new();
        let ok = parse_attachments(
            &[
                input("aGVsbG8=", None, None),
                input("aGk=", Some("inline"), Some("logo")),
            ],
            &mut p,
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(ok[0].content, b"hello");
        assert_eq!(
            ok[1].disposition,
            Disposition::Inline {
                content_id: "logo".into()
            }
        );
        let mut p = Vec::new();
        parse_attachments(
            &[
                input("!!", None, None),
                input("aGk=", Some("inline"), None),
                input("aGk=", Some("sideways"), None),
            ],
            &mut p,
        );
        assert_eq!(
            fields(&p),
            [
                "attachments[0].content",
                "attachments[1].contentId",
                "attachments[2].disposition"
            ]
        );
    }
}
