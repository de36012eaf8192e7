//! Opaque, prefixed identifiers: `cnt_…` for contacts, `evt_…` for events, one prefix per
//! resource. The body is a UUIDv7 in lower-case hex, so ids sort by creation time, which the
//! cursor pagination relies on.

use std::fmt;

/// Defines a newtype for the identifier of one resource kind.
macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The prefix, with its underscore.
            pub const PREFIX: &'static str = concat!($prefix, "_");

            /// A fresh, time-ordered identifier.
            pub fn generate() -> Self {
                Self(format!("{}{}", Self::PREFIX, uuid::Uuid::now_v7().simple()))
            }

            /// Accepts a string only when it has this kind's prefix and a well-formed body.
            pub fn parse(s: &str) -> Option<Self> {
                let body = s.strip_prefix(Self::PREFIX)?;
                (body.len() == 32 && body.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                    .then(|| Self(s.to_string()))
            }

            /// Wraps a value read back from the store, which only ever holds well-formed ids.
            #[allow(dead_code)]
            pub(crate) fn from_trusted(s: String) -> Self {
                Self(s)
            }

            /// The identifier as sent over the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The identifier as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A dashboard user.
    UserId, "usr"
);
prefixed_id!(
    /// A project: the tenant every API key belongs to.
    ProjectId, "prj"
);
prefixed_id!(
    /// A contact of a project.
    ContactId, "cnt"
);
prefixed_id!(
    /// An event: tracked by a caller or emitted by the service.
    EventId, "evt"
);
prefixed_id!(
    /// A job of the durable queue.
    JobId, "job"
);
prefixed_id!(
    /// A sending domain of a project.
    DomainId, "dom"
);
prefixed_id!(
    /// One email: a message to one recipient.
    EmailId, "eml"
);
prefixed_id!(
    /// What the emails of one send request share (their attachments), stored once.
    EmailContentId, "ect"
);
prefixed_id!(
    /// An entry of an email's history and of the activity feed.
    ActivityId, "act"
);
prefixed_id!(
    /// A template of a project.
    TemplateId, "tpl"
);
prefixed_id!(
    /// A topic a project's contacts subscribe to one by one.
    TopicId, "top"
);
prefixed_id!(
    /// A segment of a project's contacts.
    SegmentId, "seg"
);
prefixed_id!(
    /// A campaign: one message to an audience.
    CampaignId, "cmp"
);
prefixed_id!(
    /// A workflow of a project.
    WorkflowId, "wfl"
);
prefixed_id!(
    /// A step of a workflow.
    StepId, "stp"
);
prefixed_id!(
    /// A transition between two steps of a workflow.
    TransitionId, "trn"
);
prefixed_id!(
    /// One contact's execution of a workflow.
    ExecutionId, "exe"
);
prefixed_id!(
    /// One run of a step within an execution.
    StepRunId, "run"
);
prefixed_id!(
    /// A dashboard login session.
    SessionId, "ses"
);
prefixed_id!(
    /// A request, for logs and error bodies.
    RequestId, "req"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_other_kinds() {
        let id = ContactId::generate();
        assert!(id.as_str().starts_with("cnt_"));
        assert_eq!(ContactId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(ProjectId::parse(id.as_str()), None);
        assert_eq!(ContactId::parse("cnt_xyz"), None);
        assert_eq!(
            ContactId::parse("cnt_0192F00000000000000000000000000A"),
            None
        );
    }

    #[test]
    fn ids_sort_by_creation() {
        let a = ContactId::generate();
        let b = ContactId::generate();
        assert!(a < b);
    }
}
