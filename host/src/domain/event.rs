//! Events: what callers track (`/v1/track`) and what the service emits itself
//! (`contact.subscribed`, `contact.unsubscribed`, later `email.*` and `segment.*`).

use serde_json::{Map, Value};

use super::ids::{ContactId, EventId, ProjectId};

/// Name of the event emitted when a contact's `subscribed` becomes true.
pub const CONTACT_SUBSCRIBED: &str = "contact.subscribed";
/// Name of the event emitted when a contact's `subscribed` becomes false.
pub const CONTACT_UNSUBSCRIBED: &str = "contact.unsubscribed";

/// Name of the event emitted when a contact becomes subscribed to a topic (data: `topicId`,
/// `source`).
pub const CONTACT_TOPIC_SUBSCRIBED: &str = "contact.topic.subscribed";
/// Name of the event emitted when a contact stops being subscribed to a topic (data: `topicId`,
/// `source`).
pub const CONTACT_TOPIC_UNSUBSCRIBED: &str = "contact.topic.unsubscribed";

/// Longest accepted event name.
pub const MAX_EVENT_NAME_LEN: usize = 255;

/// A valid event name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventName(String);

/// Why an event name cannot be tracked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventNameError {
    /// Empty or only spaces.
    #[error("the event name must not be empty")]
    Empty,
    /// Too long.
    #[error("the event name is at most 255 characters")]
    TooLong,
    /// Holds control characters.
    #[error("the event name must not contain control characters")]
    Control,
    /// A name the events endpoints use as a path segment (`/events/stats`…).
    #[error(
        "`{0}` cannot be an event name: `/events/{0}` is taken by another endpoint (track, names, stats and contact are refused)"
    )]
    Route(String),
    /// One of the service's own names.
    #[error(
        "`{0}` is reserved: contact.subscribed, contact.unsubscribed, contact.topic.*, email.* and segment.* are emitted by the service itself"
    )]
    Reserved(String),
}

impl EventName {
    /// Parses a name a caller wants to track.
    pub fn parse_tracked(s: &str) -> Result<EventName, EventNameError> {
        let name = EventName::parse_any(s)?;
        if is_reserved(&name.0) {
            return Err(EventNameError::Reserved(name.0));
        }
        if ROUTE_SEGMENTS.contains(&name.0.as_str()) {
            return Err(EventNameError::Route(name.0));
        }
        Ok(name)
    }

    /// Parses any syntactically valid name (including reserved ones, e.g. to delete them).
    pub fn parse_any(s: &str) -> Result<EventName, EventNameError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(EventNameError::Empty);
        }
        if s.chars().count() > MAX_EVENT_NAME_LEN {
            return Err(EventNameError::TooLong);
        }
        if s.chars().any(char::is_control) {
            return Err(EventNameError::Control);
        }
        Ok(EventName(s.to_string()))
    }

    /// A name the service emits.
    pub fn system(name: &str) -> EventName {
        EventName(name.to_string())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Names that `/events/<name>` would not reach, because an endpoint has that path.
pub const ROUTE_SEGMENTS: [&str; 4] = ["track", "names", "stats", "contact"];

/// Whether a name belongs to the service.
pub fn is_reserved(name: &str) -> bool {
    name == CONTACT_SUBSCRIBED
        || name == CONTACT_UNSUBSCRIBED
        || name.starts_with("contact.topic.")
        || name.starts_with("email.")
        || name.starts_with("segment.")
}

/// Where a change of `subscribed` came from (decisions.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubscriptionSource {
    /// The contacts API.
    #[default]
    Api,
    /// `/v1/send`.
    Send,
    /// `/v1/track`.
    Track,
    /// A workflow step.
    Workflow,
    /// An unsubscribe or subscribe link.
    Link,
    /// A hard bounce.
    Bounce,
    /// A complaint.
    Complaint,
    /// A CSV import.
    Import,
    /// A bulk action.
    Bulk,
    /// The contact's confirmation of a pending subscription (confirmed opt-in).
    Confirmation,
}

impl SubscriptionSource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionSource::Api => "api",
            SubscriptionSource::Send => "send",
            SubscriptionSource::Track => "track",
            SubscriptionSource::Workflow => "workflow",
            SubscriptionSource::Link => "link",
            SubscriptionSource::Bounce => "bounce",
            SubscriptionSource::Complaint => "complaint",
            SubscriptionSource::Import => "import",
            SubscriptionSource::Bulk => "bulk",
            SubscriptionSource::Confirmation => "confirmation",
        }
    }
}

/// An event to record.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub name: EventName,
    pub data: Map<String, Value>,
}

impl NewEvent {
    /// The subscription event for a change to `subscribed`.
    pub fn subscription(
        subscribed: bool,
        source: SubscriptionSource,
        reason: Option<&str>,
    ) -> NewEvent {
        let mut data = Map::new();
        data.insert("source".into(), Value::String(source.as_str().into()));
        if let Some(reason) = reason {
            data.insert("reason".into(), Value::String(reason.into()));
        }
        NewEvent {
            name: EventName::system(if subscribed {
                CONTACT_SUBSCRIBED
            } else {
                CONTACT_UNSUBSCRIBED
            }),
            data,
        }
    }
}

impl NewEvent {
    /// The event for a change of a contact's state for `topic` (`contact.topic.subscribed` or
    /// `contact.topic.unsubscribed`), with the topic's id and where the change came from.
    pub fn topic_subscription(
        topic: &super::ids::TopicId,
        subscribed: bool,
        source: SubscriptionSource,
    ) -> NewEvent {
        let mut data = Map::new();
        data.insert("topicId".into(), Value::String(topic.as_str().into()));
        data.insert("source".into(), Value::String(source.as_str().into()));
        NewEvent {
            name: EventName::system(if subscribed {
                CONTACT_TOPIC_SUBSCRIBED
            } else {
                CONTACT_TOPIC_UNSUBSCRIBED
            }),
            data,
        }
    }
}

/// A recorded event.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub id: EventId,
    pub project_id: ProjectId,
    /// The contact it is about.
    pub contact_id: Option<ContactId>,
    /// The contact's address (filled when read with the contact).
    pub contact_email: Option<String>,
    pub name: String,
    pub data: Map<String, Value>,
    /// When it happened, unix ms.
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names() {
        for name in [
            "contact.subscribed",
            "contact.unsubscribed",
            "email.sent",
            "segment.vip.entry",
        ] {
            assert!(matches!(
                EventName::parse_tracked(name),
                Err(EventNameError::Reserved(_))
            ));
            assert!(EventName::parse_any(name).is_ok());
        }
        for name in [
            "signup",
            "contact.created",
            "emails.sent",
            "Purchase Completed",
        ] {
            assert!(EventName::parse_tracked(name).is_ok(), "{name}");
        }
        assert_eq!(EventName::parse_tracked("  "), Err(EventNameError::Empty));
        assert_eq!(
            EventName::parse_tracked(&"x".repeat(256)),
            Err(EventNameError::TooLong)
        );
        assert_eq!(
            EventName::parse_tracked("a\nb"),
            Err(EventNameError::Control)
        );
    }
}
