//! The rules of segments (`docs/decisions.md`, "Segments"): a name, an optional description, a
//! type, and for a `DYNAMIC` segment a filter (`condition`, the `herald-filter` language); the
//! names of the entry and exit events of tracked membership.

use serde_json::{Map, Value};

/// Longest segment name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 2000;
/// Most addresses one `POST`/`DELETE /segments/:id/members` may name.
pub const MAX_MEMBER_EMAILS: usize = 1000;

/// A broken rule: the field (`name`, `condition.groups[0].filters[1].operator`), a
/// machine-readable code (`required`, `too_long`, `invalid`) and what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub code: &'static str,
    pub message: String,
}

impl Violation {
    /// A violation of `field`.
    pub fn new(
        field: impl Into<String>,
        code: &'static str,
        message: impl Into<String>,
    ) -> Violation {
        Violation {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

/// How a segment's members are defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentType {
    /// By a filter, evaluated live.
    Dynamic,
    /// By a stored list of contacts.
    Static,
}

impl SegmentType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentType::Dynamic => "DYNAMIC",
            SegmentType::Static => "STATIC",
        }
    }

    /// Accepts the wire names in any case.
    pub fn parse(s: &str) -> Option<SegmentType> {
        [SegmentType::Dynamic, SegmentType::Static]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
    }
}

/// A segment name, trimmed: 1 to 200 characters.
pub fn check_name(name: &str) -> Result<String, Violation> {
    let name = name.trim();
    match name.chars().count() {
        0 => Err(Violation::new("name", "required", "the name is empty")),
        n if n > MAX_NAME_CHARS => Err(Violation::new(
            "name",
            "too_long",
            format!("the name has {n} characters; at most {MAX_NAME_CHARS} are allowed"),
        )),
        _ => Ok(name.to_string()),
    }
}

/// A description, trimmed: at most 2000 characters; an empty one is no description.
pub fn check_description(description: &str) -> Result<Option<String>, Violation> {
    let d = description.trim();
    match d.chars().count() {
        0 => Ok(None),
        n if n > MAX_DESCRIPTION_CHARS => Err(Violation::new(
            "description",
            "too_long",
            format!(
                "the description has {n} characters; at most {MAX_DESCRIPTION_CHARS} are allowed"
            ),
        )),
        _ => Ok(Some(d.to_string())),
    }
}

/// A segment type from its wire name.
pub fn check_type(s: &str) -> Result<SegmentType, Violation> {
    SegmentType::parse(s).ok_or_else(|| {
        Violation::new(
            "type",
            "invalid",
            format!("`{s}` is not a segment type; use DYNAMIC or STATIC"),
        )
    })
}

/// A segment's filter: valid in the contacts scope, every mistake reported under `condition`
/// (`condition.groups[0].filters[1].operator`).
pub fn check_condition(condition: &Value) -> Result<herald_filter::Filter, Vec<Violation>> {
    herald_filter::parse(condition, herald_filter::Scope::Contacts).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| Violation::new(e.path_under("condition"), "invalid_filter", e.message))
            .collect()
    })
}

/// The condition of a new segment of type `segment_type`: a `DYNAMIC` segment requires a valid
/// one, a `STATIC` segment takes none.
pub fn check_new_condition(
    segment_type: SegmentType,
    condition: Option<&Value>,
) -> Result<Option<Value>, Vec<Violation>> {
    match (segment_type, condition) {
        (SegmentType::Dynamic, None | Some(Value::Null)) => Err(vec![Violation::new(
            "condition",
            "required",
            "a DYNAMIC segment needs a `condition` (a filter)",
        )]),
        (SegmentType::Dynamic, Some(c)) => check_condition(c).map(|_| Some(c.clone())),
        (SegmentType::Static, None | Some(Value::Null)) => Ok(None),
        (SegmentType::Static, Some(_)) => Err(vec![Violation::new(
            "condition",
            "not_allowed",
            "a STATIC segment has no `condition`: its members are added with \
             POST /segments/:id/members",
        )]),
    }
}

/// The slug of a segment name in its event names: lower-cased, every character that is not a
/// letter or digit replaced by `-` (`"VIP Users"` → `vip-users`).
pub fn slug(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '-' })
        .collect()
}

/// The event a contact's entry into a tracked segment records: `segment.<slug>.entry`.
pub fn entry_event_name(segment_name: &str) -> String {
    format!("segment.{}.entry", slug(segment_name))
}

/// The event a contact's exit from a tracked segment records: `segment.<slug>.exit`.
pub fn exit_event_name(segment_name: &str) -> String {
    format!("segment.{}.exit", slug(segment_name))
}

/// The data of an entry or exit event: `{ segmentId, segmentName }`.
pub fn membership_event_data(segment_id: &str, segment_name: &str) -> Map<String, Value> {
    let mut data = Map::new();
    data.insert("segmentId".into(), Value::String(segment_id.into()));
    data.insert("segmentName".into(), Value::String(segment_name.into()));
    data
}

/// How many pages of `page_size` hold `total` items.
pub fn total_pages(total: i64, page_size: u32) -> i64 {
    let size = i64::from(page_size.max(1));
    (total + size - 1) / size
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn slugs_and_event_names() {
        assert_eq!(slug("VIP Users"), "vip-users");
        assert_eq!(slug("Plan: Pro!"), "plan--pro-");
        assert_eq!(entry_event_name("Trial"), "segment.trial.entry");
        assert_eq!(exit_event_name("Big spenders"), "segment.big-spenders.exit");
    }

    #[test]
    fn conditions_follow_the_type() {
        let filter = json!({ "logic": "AND", "groups": [ { "filters": [
            { "field": "email", "operator": "contains", "value": "@acme.test" } ] } ] });
        assert!(check_new_condition(SegmentType::Dynamic, Some(&filter)).is_ok());
        assert_eq!(
            check_new_condition(SegmentType::Dynamic, None).unwrap_err()[0].field,
            "condition"
        );
        assert_eq!(
            check_new_condition(SegmentType::Static, Some(&filter)).unwrap_err()[0].code,
            "not_allowed"
        );
        let bad = json!({ "logic": "AND", "groups": [ { "filters": [
            { "field": "email", "operator": "equals", "value": "a" },
            { "field": "email", "operator": "bogus", "value": "a" } ] } ] });
        let errors = check_new_condition(SegmentType::Dynamic, Some(&bad)).unwrap_err();
        assert_eq!(errors[0].field, "condition.groups[0].filters[1].operator");
    }

    #[test]
    fn names_and_pages() {
        assert_eq!(check_name("  VIP ").unwrap(), "VIP");
        assert_eq!(check_name(" ").unwrap_err().code, "required");
        assert_eq!(check_name(&"x".repeat(201)).unwrap_err().code, "too_long");
        assert_eq!(check_description("  ").unwrap(), None);
        assert_eq!(total_pages(5, 2), 3);
        assert_eq!(total_pages(0, 20), 0);
        assert_eq!(total_pages(4, 2), 2);
    }
}
