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
//!
//! Their poem-openapi impls come from `string_type!`, which [`super::timestamp::Timestamp`]
//! uses too; `own_raw_value!` holds what every type declared by hand shares (also the `to` and
//! `from` shapes of `addresses.rs`).

use std::fmt;
use std::marker::PhantomData;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Implements poem-openapi's `Type`, `ParseFromJSON` and `ToJSON` for a type sent and answered
/// as a JSON string: `text` gives a value's string, `read` reads a string sent (any other JSON
/// value is refused as the wrong type). The type is declared `{ type: string, format: … }`
/// (`format "email"`), or as its type parameter is (`as E`).
macro_rules! string_type {
    (@impl [$($generics:tt)*] $ty:ty, { $($declared:tt)* }, $text:expr, $read:expr) => {
        impl<$($generics)*> ::poem_openapi::types::Type for $ty {
            $crate::api::formats::own_raw_value!();

            $($declared)*
        }

        impl<$($generics)*> ::poem_openapi::types::ParseFromJSON for $ty {
            fn parse_from_json(
                value: Option<::serde_json::Value>,
            ) -> ::poem_openapi::types::ParseResult<Self> {
                let read: fn(String) -> ::poem_openapi::types::ParseResult<Self> = $read;
                match value.unwrap_or_default() {
                    ::serde_json::Value::String(s) => read(s),
                    other => Err(::poem_openapi::types::ParseError::expected_type(other)),
                }
            }
        }

        impl<$($generics)*> ::poem_openapi::types::ToJSON for $ty {
            fn to_json(&self) -> Option<::serde_json::Value> {
                let text: fn(&Self) -> String = $text;
                Some(::serde_json::Value::String(text(self)))
            }
        }
    };
    ($ty:ty, format $format:literal, text $text:expr, read $read:expr $(,)?) => {
        string_type!(@impl [] $ty, {
            fn name() -> ::std::borrow::Cow<'static, str> {
                concat!("string_", $format).into()
            }

            fn schema_ref() -> ::poem_openapi::registry::MetaSchemaRef {
                ::poem_openapi::registry::MetaSchemaRef::Inline(Box::new(
                    ::poem_openapi::registry::MetaSchema::new_with_format("string", $format),
                ))
            }
        }, $text, $read);
    };
    ($ty:ty, as $e:ident, text $text:expr, read $read:expr $(,)?) => {
        string_type!(@impl [$e: ::poem_openapi::types::Type] $ty, {
            fn name() -> ::std::borrow::Cow<'static, str> {
                <$e as ::poem_openapi::types::Type>::name()
            }

            fn schema_ref() -> ::poem_openapi::registry::MetaSchemaRef {
                <$e as ::poem_openapi::types::Type>::schema_ref()
            }

            fn register(registry: &mut ::poem_openapi::registry::Registry) {
                <$e as ::poem_openapi::types::Type>::register(registry);
            }
        }, $text, $read);
    };
}

/// The items of poem-openapi's `Type` that the types declared by hand share: required, and
/// their own raw value (not a container of others).
macro_rules! own_raw_value {
    () => {
        const IS_REQUIRED: bool = true;

        type RawValueType = Self;

        type RawElementValueType = Self;

        fn as_raw_value(&self) -> Option<&Self::RawValueType> {
            Some(self)
        }

        fn raw_element_iter<'a>(
            &'a self,
        ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
            Box::new(self.as_raw_value().into_iter())
        }
    };
}

pub(crate) use {own_raw_value, string_type};

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

string_type!(EmailText, format "email", text |e| e.0.clone(), read |s| Ok(EmailText(s)));

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

string_type!(OneOf<E>, as E, text |o| o.text.clone(), read |s| Ok(s.as_str().into()));

#[cfg(test)]
mod tests {
    use poem_openapi::registry::MetaSchemaRef;
    use poem_openapi::types::Type;
    use serde_json::Value;

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
