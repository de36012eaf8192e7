//! Mail a project receives (#76 item 4): the SMTP server routes a `RCPT` address to the project
//! whose domain receives it ([`InboundMail::route`]) and hands each message received there to
//! [`InboundMail::receive`], which records it as an `email.received` event on its sender's
//! contact, as `/v1/track` records a tracked event: the contact is upserted (created
//! unsubscribed, like a `/v1/send` recipient, and never subscribed again), and the event, written
//! with it in one transaction, reaches the event outbox, so it starts the workflows it triggers
//! and resumes the executions waiting for it (`WAIT_FOR_EVENT`) like any tracked event. The
//! activity feed shows it as `inbound`.
//!
//! A message is received once per project: the write is keyed on its `Message-ID` (an
//! idempotency key kept 24 hours), so a sender retrying after a lost answer, or a message to
//! several of the project's addresses, records one event. Its attachments are stored through the
//! uploads storage, within `uploads.inbound_attachments` and `uploads.inbound_attachment_bytes`;
//! those past the caps are listed without a URL. Attachments stored for a receipt whose event is
//! then not committed (refused, failed, or recorded meanwhile by a concurrent receipt of the
//! same message) are deleted again, so none is left that nothing
//! refers to.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::domain::contact::{Contact, ContactUpsert};
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::event::{EventName, NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ActivityId, ContactId, EventId, ProjectId};
use crate::mail::inbound::{Received, ReceivedAttachment};
use crate::services::delivery_events::email_id;
use crate::services::inbound_routes::{rcpt_domain, read_route};
use crate::services::uploads::{UploadError, Uploads};
use crate::store::group_commit::{GroupedUpsert, OwnedClaim};
use crate::store::{Conflict, Store, StoreError};

/// The name of the event a received message becomes.
pub const EMAIL_RECEIVED: &str = "email.received";

/// The "endpoint" the idempotency key of a received message is stored under.
const ENDPOINT: &str = "smtp:inbound";

/// The longest text kept in the event, in bytes (cut at a character boundary).
pub const MAX_TEXT_BYTES: usize = 20_000;
/// The longest subject, message id or file name kept, in bytes.
const MAX_HEADER_BYTES: usize = 998;
/// The most HTML converted to text when a message has no text part.
const MAX_HTML_BYTES: usize = 1_000_000;
/// The most `In-Reply-To`/`References` ids looked up.
const MAX_REFERENCES: usize = 32;

/// How many attachments of one message are stored, and how many bytes in all.
#[derive(Clone, Copy, Debug)]
pub struct AttachmentCaps {
    pub count: usize,
    pub bytes: usize,
}

/// Why a received message could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// The message's sender (`From`) is not an address a contact can have.
    #[error("the sender {0:?} is not a usable address: {1}")]
    Sender(String, String),
    /// The project cannot take another contact (its plan's cap or a store cap).
    #[error("{0}")]
    Refused(StoreError),
    /// The database failed; the same message may be received later.
    #[error("the message could not be recorded: {0}")]
    Store(StoreError),
    /// An attachment could not be stored; the same message may be received later.
    #[error("an attachment could not be stored: {0}")]
    Storage(#[from] UploadError),
    /// Another receipt of the same message is being recorded right now.
    #[error("the same message is being received on another connection")]
    InProgress,
}

impl InboundError {
    /// Whether the sender should not try again: a `5xx` answer (`false` is a `4xx`).
    pub fn is_permanent(&self) -> bool {
        matches!(self, InboundError::Sender(..) | InboundError::Refused(_))
    }

    /// The SMTP reply code and enhanced status code (RFC 3463) to answer with.
    pub fn smtp_status(&self) -> (u16, &'static str) {
        match self {
            InboundError::Sender(..) => (550, "5.1.7"),
            InboundError::Refused(_) => (550, "5.7.1"),
            InboundError::Store(_) | InboundError::Storage(_) | InboundError::InProgress => {
                (451, "4.3.0")
            }
        }
    }
}

impl From<StoreError> for InboundError {
    fn from(e: StoreError) -> InboundError {
        match e {
            StoreError::BillingLimit(_) | StoreError::Cap(_) => InboundError::Refused(e),
            other => InboundError::Store(other),
        }
    }
}

/// Received mail; cheap to clone.
#[derive(Clone)]
pub struct InboundMail {
    store: Store,
    uploads: Uploads,
    /// The public base URL attachments are served under.
    base_url: String,
    caps: AttachmentCaps,
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn capped(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The Herald email ids a message names as the one it replies to, most likely first:
/// `In-Reply-To`, then `References` from the last (the parent) to the first.
pub fn replied_ids(message: &Received) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let named = message
        .in_reply_to
        .iter()
        .chain(message.references.iter().rev());
    for id in named.filter_map(|m| email_id(m)) {
        if !ids.contains(&id) {
            ids.push(id);
        }
        if ids.len() == MAX_REFERENCES {
            break;
        }
    }
    ids
}

/// The text of a message: its text part, or its HTML part as text; capped.
pub fn message_text(message: &Received) -> Option<String> {
    let text = match (&message.text, &message.html) {
        (Some(text), _) => text.clone(),
        (None, Some(html)) => crate::domain::template::html_to_text(capped(html, MAX_HTML_BYTES)),
        (None, None) => return None,
    };
    Some(capped(&text, MAX_TEXT_BYTES).to_string())
}

/// The idempotency key of a message in a project: its `Message-ID`, hashed (any length, any
/// characters). `None` for a message without one.
fn receipt_key(message: &Received) -> Option<String> {
    let id = message.message_id.as_deref()?.trim();
    if id.is_empty() {
        return None;
    }
    Some(format!(
        "inbound:{}",
        hex::encode(Sha256::digest(id.as_bytes()))
    ))
}

/// The activity entry of an event: the same time-ordered id, so that a retried receipt writes
/// the same entry.
fn activity_id(event: &str) -> ActivityId {
    let body = event.strip_prefix(EventId::PREFIX).unwrap_or(event);
    ActivityId::from_trusted(format!("{}{body}", ActivityId::PREFIX))
}

/// What the idempotency key of a received message replays: the contact and event written.
fn receipt_response(contact: &Contact, event: Option<&StoredEvent>) -> Value {
    json!({
        "contact": contact.id.as_str(),
        "event": event.map(|e| e.id.as_str()),
        "createdAt": event.map(|e| e.created_at),
    })
}

/// The contact, event and time a stored receipt answers.
fn recorded_receipt(response: &Value) -> Option<(ContactId, String, i64)> {
    Some((
        ContactId::parse(response["contact"].as_str()?)?,
        response["event"].as_str()?.to_string(),
        response["createdAt"].as_i64()?,
    ))
}

/// The event's data but its attachments: `{ subject, text, to, from, fromName, inReplyTo,
/// messageId }`.
fn event_data(
    rcpt: &str,
    sender: &EmailAddress,
    message: &Received,
    in_reply_to: Option<&str>,
    subject: &str,
) -> Map<String, Value> {
    let header = |v: Option<&String>| v.map(|v| capped(v, MAX_HEADER_BYTES).to_string());
    let mut data = Map::new();
    data.insert("subject".into(), json!(subject));
    data.insert("text".into(), json!(message_text(message)));
    data.insert("to".into(), json!(rcpt.trim().to_ascii_lowercase()));
    data.insert("from".into(), json!(sender.as_str()));
    data.insert("fromName".into(), json!(header(message.from_name.as_ref())));
    data.insert("inReplyTo".into(), json!(in_reply_to));
    data.insert(
        "messageId".into(),
        json!(header(message.message_id.as_ref())),
    );
    data
}

impl InboundMail {
    /// Records into `store`, attachments into `uploads` (served under `base_url`), within
    /// `caps`.
    pub fn new(
        store: Store,
        uploads: Uploads,
        base_url: String,
        caps: AttachmentCaps,
    ) -> InboundMail {
        InboundMail {
            store,
            uploads,
            base_url: base_url.trim_end_matches('/').to_string(),
            caps,
        }
    }

    /// The project whose verified inbound domain receives `rcpt` (lowercased address), if any,
    /// read from the database now ([`crate::services::inbound_routes::read_route`]; the SMTP
    /// server asks [`crate::services::inbound_routes::InboundRoutes`], which keeps it a few
    /// seconds).
    pub async fn route(&self, rcpt: &str) -> Result<Option<ProjectId>, StoreError> {
        let Some(domain) = rcpt_domain(rcpt) else {
            return Ok(None);
        };
        read_route(&self.store, &domain).await
    }

    /// Records `message` received at `rcpt` as an `email.received` event on its sender's
    /// contact.
    pub async fn receive(
        &self,
        project: &ProjectId,
        rcpt: &str,
        mut message: Received,
    ) -> Result<(), InboundError> {
        let sender = EmailAddress::parse(&message.from)
            .map_err(|e| InboundError::Sender(message.from.clone(), e.to_string()))?;
        let replied = replied_ids(&message);
        let in_reply_to = if replied.is_empty() {
            None
        } else {
            let own = self.store.project_emails(project, &replied).await?;
            replied.into_iter().find(|id| own.contains(id))
        };
        let subject = capped(&message.subject, MAX_HEADER_BYTES).to_string();
        let key = receipt_key(&message);
        if let Some(key) = &key
            && let Some(stored) = self.store.idempotent_response(project, key).await?
        {
            // Received already (a retry, or another of the project's addresses): complete its
            // activity entry, which a crash may have left unwritten.
            return self
                .complete(project, &stored.response, in_reply_to.as_deref(), &subject)
                .await;
        }
        let attachments = std::mem::take(&mut message.attachments);
        let mut data = event_data(rcpt, &sender, &message, in_reply_to.as_deref(), &subject);
        // The names stored, deleted again unless the event that lists them is committed.
        let mut stored = Vec::new();
        let listed = self.store_attachments(attachments, &mut stored).await;
        let listed = match listed {
            Ok(listed) => listed,
            Err(e) => {
                self.discard(&stored).await;
                return Err(e);
            }
        };
        data.insert("attachments".into(), Value::Array(listed));
        let write = GroupedUpsert {
            project: project.clone(),
            upsert: ContactUpsert {
                email: sender,
                subscribed: None,
                // Writing to an address is no consent to marketing mail: a new contact is
                // unsubscribed, as a `/v1/send` recipient is, and an existing one keeps its state.
                subscribed_default: false,
                resubscribe: false,
                data: DataPatch::default(),
                topics: Vec::new(),
            },
            source: SubscriptionSource::Track,
            event: Some(NewEvent {
                name: EventName::system(EMAIL_RECEIVED),
                data,
            }),
            idempotency: key.clone().map(|key| OwnedClaim {
                key,
                endpoint: ENDPOINT,
                request_hash: String::new(),
                status: 200,
                response: receipt_response,
            }),
        };
        let written = self.store.upsert_contact_grouped(write).await;
        if !matches!(written, Ok((_, Some(_)))) {
            // Refused, failed, or recorded by a concurrent receipt with attachments of its own:
            // nothing refers to these.
            self.discard(&stored).await;
        }
        match written {
            Ok((outcome, Some(event))) => {
                self.store
                    .record_inbound(
                        project,
                        &activity_id(event.id.as_str()),
                        in_reply_to.as_deref(),
                        &outcome.contact.id,
                        &subject,
                        event.created_at,
                    )
                    .await?;
                Ok(())
            }
            Ok((_, None)) => Err(InboundError::Store(StoreError::Corrupt(
                "the received message's event was not recorded".into(),
            ))),
            Err(StoreError::Conflict(Conflict::IdempotencyKey)) => {
                let key = key.unwrap_or_default();
                match self.store.idempotent_response(project, &key).await? {
                    Some(stored) => {
                        self.complete(project, &stored.response, in_reply_to.as_deref(), &subject)
                            .await
                    }
                    None => Err(InboundError::InProgress),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the activity entry of a receipt recorded before, if it is missing.
    async fn complete(
        &self,
        project: &ProjectId,
        response: &Value,
        in_reply_to: Option<&str>,
        subject: &str,
    ) -> Result<(), InboundError> {
        let Some((contact, event, created_at)) = recorded_receipt(response) else {
            return Ok(());
        };
        self.store
            .record_inbound(
                project,
                &activity_id(&event),
                in_reply_to,
                &contact,
                subject,
                created_at,
            )
            .await?;
        Ok(())
    }

    /// Deletes the attachments stored as `names`, which no recorded message refers to (the
    /// receipt was refused or failed after they were stored), so that nothing is left behind. A
    /// deletion that fails is logged: the receipt's own outcome is what the sender is told.
    async fn discard(&self, names: &[String]) {
        for name in names {
            if let Err(err) = self.uploads.delete_attachment(name).await {
                tracing::warn!(attachment = %name, error = %err, "an unreferenced inbound attachment could not be deleted");
            }
        }
    }

    /// Stores the attachments within the caps, in order, each stored name added to `stored`
    /// as soon as it is stored; each is listed with its URL, or with a null one when it passed a
    /// cap.
    async fn store_attachments(
        &self,
        attachments: Vec<ReceivedAttachment>,
        stored_names: &mut Vec<String>,
    ) -> Result<Vec<Value>, InboundError> {
        let mut listed = Vec::with_capacity(attachments.len());
        let (mut stored, mut bytes) = (0usize, 0usize);
        for a in attachments {
            let mut listed_as = json!({
                "filename": a.filename.as_deref().map(|f| capped(f, MAX_HEADER_BYTES)),
                "contentType": capped(&a.content_type, MAX_HEADER_BYTES),
                "size": a.content.len(),
            });
            let size = a.content.len();
            let fits = stored < self.caps.count && bytes.saturating_add(size) <= self.caps.bytes;
            let url = if fits {
                stored += 1;
                bytes += size;
                let name = self.uploads.store_attachment(a.content).await?;
                let url = format!("{}/uploads/attachments/{name}", self.base_url);
                stored_names.push(name);
                Some(url)
            } else {
                None
            };
            listed_as["url"] = json!(url);
            listed.push(listed_as);
        }
        Ok(listed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Received {
        Received {
            from: "ada@example.net".into(),
            from_name: None,
            to: vec!["hello@in.acme.io".into()],
            subject: "Re: hello".into(),
            text: None,
            html: None,
            message_id: None,
            in_reply_to: Vec::new(),
            references: Vec::new(),
            attachments: Vec::new(),
        }
    }

    #[test]
    fn the_replied_email_is_looked_for_in_reply_to_first_then_references_from_the_last() {
        let a = "eml_0190a1b2c3d4e5f60718293a4b5c6d7e";
        let b = "eml_0190a1b2c3d4e5f60718293a4b5c6d7f";
        let c = "eml_0190a1b2c3d4e5f60718293a4b5c6d80";
        let mut m = message();
        m.in_reply_to = vec![format!("{b}@acme.io")];
        m.references = vec![
            format!("{a}@acme.io"),
            "CAF=abc@mail.gmail.com".into(),
            format!("<{c}@acme.io>"),
            format!("{b}@acme.io"),
        ];
        assert_eq!(replied_ids(&m), vec![b, c, a]);
        assert!(replied_ids(&message()).is_empty());
        let mut many = message();
        many.references = (0..100)
            .map(|i| format!("eml_0190a1b2c3d4e5f60718293a4b5c{i:04x}@x"))
            .collect();
        assert_eq!(replied_ids(&many).len(), MAX_REFERENCES);
    }

    #[test]
    fn the_text_is_the_text_part_or_the_html_as_text_and_capped() {
        let mut m = message();
        assert_eq!(message_text(&m), None);
        m.html = Some("<p>Yes, <b>please</b>.</p>".into());
        assert_eq!(message_text(&m).as_deref(), Some("Yes, please."));
        m.text = Some("é".repeat(MAX_TEXT_BYTES));
        let text = message_text(&m).unwrap();
        assert!(text.len() <= MAX_TEXT_BYTES && text.len() >= MAX_TEXT_BYTES - 1);
        assert!(text.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_receipt_is_keyed_on_its_message_id_and_its_activity_on_its_event() {
        let mut m = message();
        assert_eq!(receipt_key(&m), None);
        m.message_id = Some("  ".into());
        assert_eq!(receipt_key(&m), None);
        m.message_id = Some("CAF=abc@mail.gmail.com".into());
        let key = receipt_key(&m).unwrap();
        assert!(key.starts_with("inbound:") && key.len() == 8 + 64, "{key}");
        let event = EventId::generate();
        let act = activity_id(event.as_str());
        assert!(
            ActivityId::parse(act.as_str()).is_some(),
            "{}",
            act.as_str()
        );
        assert_eq!(act.as_str()[4..], event.as_str()[4..]);
        let response = json!({ "contact": ContactId::generate().as_str(), "event": event.as_str(), "createdAt": 5 });
        let (_, e, at) = recorded_receipt(&response).unwrap();
        assert_eq!((e.as_str(), at), (event.as_str(), 5));
        assert!(recorded_receipt(&json!({})).is_none());
    }

    #[test]
    fn refusals_are_permanent_and_failures_temporary() {
        let sender = InboundError::Sender("x".into(), "bad".into());
        assert!(sender.is_permanent());
        assert_eq!(sender.smtp_status(), (550, "5.1.7"));
        let down = InboundError::from(StoreError::Unavailable("down".into()));
        assert!(!down.is_permanent());
        assert_eq!(down.smtp_status().0, 451);
        assert_eq!(InboundError::InProgress.smtp_status().0, 451);
    }
}
