//! Host-side values of the `transport` world and their conversion to and from the WIT types.

use crate::plugins::bindings::transport::exports::herald::plugin::mail_transport as wit;

/// A rendered message ready to deliver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Herald's id of the message (also its `Message-ID` local part).
    pub id: String,
    /// The envelope sender.
    pub sender: String,
    /// The envelope recipients.
    pub recipients: Vec<String>,
    /// The complete RFC 5322 message.
    pub raw: Vec<u8>,
}

/// Proof that the transport accepted a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The provider's id for the message.
    pub provider_id: String,
    /// Free-form detail, e.g. the SMTP reply.
    pub detail: Option<String>,
}

/// Why delivery failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryError {
    /// Retry later.
    Transient(String),
    /// Do not retry.
    Permanent(String),
}

/// Kinds of delivery events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryEventKind {
    /// Accepted by the recipient's server.
    Delivered,
    /// Permanently undeliverable.
    BouncedHard,
    /// Temporarily undeliverable.
    BouncedSoft,
    /// Marked as spam by the recipient.
    Complained,
    /// Opened.
    Opened,
    /// A link was clicked.
    Clicked,
    /// A reply or other inbound message.
    Inbound,
}

/// One event parsed from a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryEvent {
    /// What happened.
    pub kind: DeliveryEventKind,
    /// Herald's message id, when known.
    pub message_id: Option<String>,
    /// The recipient (or sender, for inbound mail).
    pub email: String,
    /// When it happened (Unix milliseconds).
    pub at: i64,
    /// Detail: the bounce reason, the clicked URL, the inbound subject.
    pub detail: Option<String>,
}

impl From<&OutgoingMessage> for wit::OutgoingMessage {
    fn from(message: &OutgoingMessage) -> wit::OutgoingMessage {
        wit::OutgoingMessage {
            id: message.id.clone(),
            sender: message.sender.clone(),
            recipients: message.recipients.clone(),
            raw: message.raw.clone(),
        }
    }
}

impl From<OutgoingMessage> for wit::OutgoingMessage {
    fn from(message: OutgoingMessage) -> wit::OutgoingMessage {
        wit::OutgoingMessage {
            id: message.id,
            sender: message.sender,
            recipients: message.recipients,
            raw: message.raw,
        }
    }
}

impl From<wit::Receipt> for Receipt {
    fn from(receipt: wit::Receipt) -> Receipt {
        Receipt {
            provider_id: receipt.provider_id,
            detail: receipt.detail,
        }
    }
}

impl From<wit::DeliveryError> for DeliveryError {
    fn from(err: wit::DeliveryError) -> DeliveryError {
        match err {
            wit::DeliveryError::Transient(m) => DeliveryError::Transient(m),
            wit::DeliveryError::Permanent(m) => DeliveryError::Permanent(m),
        }
    }
}

impl From<wit::DeliveryEventKind> for DeliveryEventKind {
    fn from(kind: wit::DeliveryEventKind) -> DeliveryEventKind {
        match kind {
            wit::DeliveryEventKind::Delivered => DeliveryEventKind::Delivered,
            wit::DeliveryEventKind::BouncedHard => DeliveryEventKind::BouncedHard,
            wit::DeliveryEventKind::BouncedSoft => DeliveryEventKind::BouncedSoft,
            wit::DeliveryEventKind::Complained => DeliveryEventKind::Complained,
            wit::DeliveryEventKind::Opened => DeliveryEventKind::Opened,
            wit::DeliveryEventKind::Clicked => DeliveryEventKind::Clicked,
            wit::DeliveryEventKind::Inbound => DeliveryEventKind::Inbound,
        }
    }
}

impl From<wit::DeliveryEvent> for DeliveryEvent {
    fn from(event: wit::DeliveryEvent) -> DeliveryEvent {
        DeliveryEvent {
            kind: event.kind.into(),
            message_id: event.message_id,
            email: event.email,
            at: event.at,
            detail: event.detail,
        }
    }
}
