//! Contacts: a project's people, keyed by email, with free-form custom data.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::custom_data::DataPatch;
use super::email::EmailAddress;
use super::ids::{ContactId, ProjectId};
use super::topic::TopicChoice;

/// A stored contact.
#[derive(Clone, Debug, PartialEq)]
pub struct Contact {
    pub id: ContactId,
    /// The project it belongs to.
    pub project_id: ProjectId,
    /// Its (normalised) address, unique in the project.
    pub email: EmailAddress,
    /// Whether it receives marketing mail.
    pub subscribed: bool,
    /// Custom data.
    pub data: Map<String, Value>,
    /// Optimistic-concurrency version, bumped on every write.
    pub version: i64,
    /// Creation time, unix ms.
    pub created_at: i64,
    /// Last change, unix ms.
    pub updated_at: i64,
    /// Its own topic choices, by topic id (`domain::topic`): a topic it never chose is absent
    /// and takes the topic's default.
    pub topics: BTreeMap<String, bool>,
}

/// An upsert by email (`POST /contacts`, later `/v1/track` and `/v1/send`).
#[derive(Clone, Debug)]
pub struct ContactUpsert {
    /// The address to create or update.
    pub email: EmailAddress,
    /// The subscription state asked for, if any.
    pub subscribed: Option<bool>,
    /// Subscription state of a contact this call creates when `subscribed` is absent.
    pub subscribed_default: bool,
    /// Whether `subscribed: true` may turn an unsubscribed contact (opted out, bounced,
    /// complained) into a subscribed one. `false` for the public key, which anyone can use: its
    /// `true` is then ignored for such a contact (decisions.md).
    pub resubscribe: bool,
    /// The data patch.
    pub data: DataPatch,
    /// Topic choices to make (checked against the project's topics).
    pub topics: Vec<TopicChoice>,
}

/// A change to one contact (`PATCH /contacts/:id`).
#[derive(Clone, Debug, Default)]
pub struct ContactChange {
    /// A new address.
    pub email: Option<EmailAddress>,
    /// A new subscription state.
    pub subscribed: Option<bool>,
    /// The data patch.
    pub data: DataPatch,
    /// Topic choices to make (checked against the project's topics).
    pub topics: Vec<TopicChoice>,
}

/// What an upsert or a change did.
#[derive(Clone, Debug)]
pub struct UpsertOutcome {
    /// The contact after the call.
    pub contact: Contact,
    /// Whether the call created it.
    pub created: bool,
    /// Whether the call changed an existing contact.
    pub updated: bool,
    /// The previous subscription state when it changed (for subscription events).
    pub subscription_changed_from: Option<bool>,
}
