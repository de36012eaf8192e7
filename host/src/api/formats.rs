//! Strings the document declares more precisely than "a string", while the server still reads
//! them as strings and checks them itself:
//!
//! - [`EmailText`]: `format: email`, where the spec says "email format";
//! - [`OneOf`]: one of the values of a response enum (`AudienceType`, `SegmentKind`,
//!   `TemplateKind`), for the request fields that name one.
//!
//! Request bodies are read with serde ([`super::extract::JsonBody`]), and the handlers turn these
//! strings into domain types, so a bad address or an unknown value still gets the spec's 422
//! `VALIDATION_ERROR` naming the field and saying what to send, never a parse error. The enum
//! values are read in any case (`dynamic` is `DYNAMIC`), as they always were.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// An email address, declared `format: email`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EmailText(pub String);

impl EmailText {
    /// The address as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for EmailText {
    fn from(s: String) -> EmailText {
        EmailText(s)
    }
}

impl fmt::Display for EmailText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Type for EmailText {
    const IS_REQUIRED: bool = true;

    type RawValueType = Self;

    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string_email".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "email")))
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

impl ParseFromJSON for EmailText {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(s) => Ok(EmailText(s)),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ToJSON for EmailText {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.0.clone()))
    }
}

/// A string sent for one of the values of the enum `E`: declared as `E` in the document, read
/// as text and checked by the handler.
pub struct OneOf<E> {
    text: String,
    enum_type: PhantomData<fn() -> E>,
}

impl<E> OneOf<E> {
    /// The text as sent.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl<E> From<&str> for OneOf<E> {
    fn from(s: &str) -> OneOf<E> {
        OneOf {
            text: s.to_string(),
            enum_type: PhantomData,
        }
    }
}

impl<E> Clone for OneOf<E> {
    fn clone(&self) -> Self {
        self.as_str().into()
    }
}

impl<E> fmt::Debug for OneOf<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl<E> Serialize for OneOf<E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de, E> Deserialize<'de> for OneOf<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OneOf<E>, D::Error> {
        String::deserialize(d).map(|text| OneOf {
            text,
            enum_type: PhantomData,
        })
    }
}

impl<E: Type> Type for OneOf<E> {
    const IS_REQUIRED: bool = true;

    type RawValueType = Self;

    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        E::name()
    }

    fn schema_ref() -> MetaSchemaRef {
        E::schema_ref()
    }

    fn register(registry: &mut Registry) {
        E::register(registry);
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

impl<E: Type> ParseFromJSON for OneOf<E> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(s) => Ok(s.as_str().into()),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl<E: Type> ToJSON for OneOf<E> {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.text.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response enum as the API declares them (`campaigns::AudienceType`'s shape: the test
    /// names no sibling module, which would make an import circle with the handlers using these
    /// formats).
    #[derive(poem_openapi::Enum, Clone, Copy, Debug, PartialEq, Eq)]
    #[oai(rename_all = "UPPERCASE")]
    enum AudienceType {
        All,
        Segment,
        Filtered,
    }

    #[test]
    fn email_text_is_declared_with_its_format_and_read_as_sent() {
        let MetaSchemaRef::Inline(schema) = EmailText::schema_ref() else {
            panic!("inline schema")
        };
        assert_eq!((schema.ty, schema.format), ("string", Some("email")));
        let read: EmailText = serde_json::from_value(Value::from("not an address")).unwrap();
        assert_eq!(read.as_str(), "not an address");
    }

    #[test]
    fn one_of_is_declared_as_its_enum_and_read_as_text() {
        assert_eq!(
            OneOf::<AudienceType>::schema_ref(),
            AudienceType::schema_ref()
        );
        let read: OneOf<AudienceType> = serde_json::from_value(Value::from("segment")).unwrap();
        assert_eq!(read.as_str(), "segment");
        assert!(serde_json::from_value::<OneOf<AudienceType>>(Value::from(3)).is_err());
    }
}
