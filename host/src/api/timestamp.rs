//! [`Timestamp`]: a time in a response body, written as an RFC 3339 string with millisecond
//! precision in UTC (`2026-11-22T17:00:00.000Z`) and declared `format: date-time` in the
//! OpenAPI document, so that generated clients parse it as a date.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{
    ParseError, ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type,
};
use serde_json::Value;

use crate::domain::time::to_rfc3339;

/// Unix milliseconds, shown as an RFC 3339 date-time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The time of stored unix milliseconds.
    pub fn from_ms(ms: i64) -> Timestamp {
        Timestamp(ms)
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

impl ToJSON for Timestamp {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(to_rfc3339(self.0)))
    }
}

impl ParseFromJSON for Timestamp {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
                .map(|t| Timestamp(t.timestamp_millis()))
                .map_err(|_| ParseError::custom("expected an RFC 3339 date-time")),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ParseFromParameter for Timestamp {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        chrono::DateTime::parse_from_rfc3339(value.trim())
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(|_| {
                ParseError::custom("expected an RFC 3339 date-time, e.g. 2026-11-01T00:00:00Z")
            })
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_rfc3339(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_rfc3339() {
        let t = Timestamp(1_700_000_000_123);
        let json = t.to_json().unwrap();
        assert_eq!(json, Value::String("2023-11-14T22:13:20.123Z".into()));
        assert_eq!(Timestamp::parse_from_json(Some(json.clone())).unwrap(), t);
        assert!(Timestamp::parse_from_json(Some(Value::from(3))).is_err());
        assert_eq!(serde_json::to_value(t).unwrap(), json);
        assert_eq!(serde_json::from_value::<Timestamp>(json).unwrap(), t);
    }
}
