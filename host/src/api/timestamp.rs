//! [`Timestamp`]: a stored time shown as Herald shows every time (RFC 3339, UTC, milliseconds:
//! `2026-01-31T12:00:00.000Z`), declared in the OpenAPI document as `format: date-time`.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::Value;

use crate::domain::time::to_rfc3339;

/// A point in time in a response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timestamp(String);

impl Timestamp {
    /// The time of stored unix milliseconds.
    pub fn from_ms(ms: i64) -> Timestamp {
        Timestamp(to_rfc3339(ms))
    }

    /// The RFC 3339 text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Type for Timestamp {
    const IS_REQUIRED: bool = true;

    type RawValueType = Self;

    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string_date-time".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "date-time")))
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ParseFromJSON for Timestamp {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
                .map(|t| Timestamp::from_ms(t.timestamp_millis()))
                .map_err(ParseError::custom),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ToJSON for Timestamp {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_milliseconds_in_utc_and_reads_back() {
        let t = Timestamp::from_ms(1_769_860_800_123);
        assert_eq!(t.as_str(), "2026-01-31T12:00:00.123Z");
        assert_eq!(t.to_json(), Some(Value::String(t.as_str().into())));
        let parsed =
            Timestamp::parse_from_json(Some(Value::String("2026-01-31T13:00:00.123+01:00".into())))
                .unwrap();
        assert_eq!(parsed, t);
        assert!(Timestamp::parse_from_json(Some(Value::Bool(true))).is_err());
    }
}
