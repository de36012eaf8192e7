//! [`Timestamp`]: a time in a response body, written as an RFC 3339 string with millisecond
//! precision in UTC (`2026-11-22T17:00:00.000Z`) and declared `format: date-time` in the
//! OpenAPI document, so that generated clients parse it as a date.

use poem_openapi::types::{ParseError, ParseFromParameter, ParseResult};

use super::formats::string_type;
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

string_type!(
    Timestamp,
    format "date-time",
    text |t| to_rfc3339(t.0),
    read |s| {
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(|_| ParseError::custom("expected an RFC 3339 date-time"))
    },
);

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
    use poem_openapi::types::{ParseFromJSON, ToJSON};
    use serde_json::Value;

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
