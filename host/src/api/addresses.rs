//! `to` and `from` of `/v1/send` as the document declares them: each is one of an address
//! string (`"ann@example.com"` or `"Ann <ann@example.com>"`), a `{ name, email }` object or, for
//! `to`, an array of these. The server keeps them as JSON values, so that `domain::send` reports
//! every bad recipient at once (422 with each field's path) instead of failing on the first.

use std::borrow::Cow;

use poem_openapi::Object;
use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseFromJSON, ParseResult, ToJSON, Type};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::formats::{EmailText, own_raw_value};

/// A name and an address.
#[derive(Object, Serialize, Deserialize, Clone, Debug)]
pub struct MailboxBody {
    /// Display name.
    #[oai(nullable)]
    #[serde(default)]
    pub name: Option<String>,
    /// The address.
    pub email: EmailText,
}

/// An address string: `ann@example.com` or `Ann <ann@example.com>`.
fn address_string() -> MetaSchemaRef {
    let mut schema = MetaSchema::new("string");
    schema.description = Some("`ann@example.com` or `Ann <ann@example.com>`");
    MetaSchemaRef::Inline(Box::new(schema))
}

/// One mailbox: an address string or a `{ name, email }` object.
fn mailbox() -> MetaSchemaRef {
    let mut schema = MetaSchema::ANY;
    schema.one_of = vec![address_string(), MailboxBody::schema_ref()];
    MetaSchemaRef::Inline(Box::new(schema))
}

macro_rules! json_value_type {
    ($name:ident, $schema_name:literal, $schema:expr) => {
        impl Type for $name {
            own_raw_value!();

            fn name() -> Cow<'static, str> {
                $schema_name.into()
            }

            fn schema_ref() -> MetaSchemaRef {
                $schema
            }

            fn register(registry: &mut Registry) {
                MailboxBody::register(registry);
            }
        }

        impl ParseFromJSON for $name {
            fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
                Ok($name(value.unwrap_or_default()))
            }
        }

        impl ToJSON for $name {
            fn to_json(&self) -> Option<Value> {
                Some(self.0.clone())
            }
        }
    };
}

/// `to`: one mailbox or an array of 1 to 50.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Recipients(pub Value);

json_value_type!(Recipients, "Recipients", {
    let mut list = MetaSchema::new("array");
    list.items = Some(Box::new(mailbox()));
    list.min_items = Some(1);
    list.max_items = Some(crate::domain::send::MAX_RECIPIENTS);
    let mut schema = MetaSchema::ANY;
    schema.one_of = vec![
        address_string(),
        MailboxBody::schema_ref(),
        MetaSchemaRef::Inline(Box::new(list)),
    ];
    MetaSchemaRef::Inline(Box::new(schema))
});

/// `from`: one mailbox.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sender(pub Value);

json_value_type!(Sender, "Sender", mailbox());
