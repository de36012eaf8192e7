//! A send as `services::sending` takes it and answers it: the checked plan of a request
//! ([`SendPlan`], with the content each recipient gets), what it queued ([`QueuedEmail`]), why it
//! failed ([`SendError`]), and the variables a template sees for one contact ([`variables`]).
//! `services::sending` re-exports them.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::domain::contact::Contact;
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::ids::EmailId;
use crate::domain::locale;
use crate::domain::send::{Attachment, Mailbox};
use crate::domain::template::CompiledTemplate;
use crate::domain::topic::{Topic, TopicChoice};
use crate::mail::links::ContactUrls;
use crate::mail::mime;
use crate::services::render_budget::RenderBudgetError;
use crate::services::sending_domains::Sender;
use crate::store::StoreError;

/// A checked send request, ready to go out.
#[derive(Clone)]
pub struct SendPlan {
    /// Recipients, in order.
    pub recipients: Vec<Mailbox>,
    /// The sender.
    pub from: Mailbox,
    /// Who signs for the sender.
    pub sender: Sender,
    /// Reply-To.
    pub reply_to: Option<EmailAddress>,
    /// Subject and body, compiled (shared with the other sends of the same text).
    pub content: Arc<CompiledTemplate>,
    /// Subject and body by language tag, compiled: a recipient whose `locale` matches one gets
    /// it instead of `content` ([`SendPlan::content_for`]).
    pub localized: Vec<(String, Arc<CompiledTemplate>)>,
    /// The template it came from.
    pub template_id: Option<String>,
    /// Marketing mail carries `List-Unsubscribe`.
    pub marketing: bool,
    /// Subscription state asked for.
    pub subscribed: Option<bool>,
    /// The `data` patch.
    pub data: DataPatch,
    /// Topic choices for every recipient's contact (`/v1/send`'s `topics`).
    pub topics: Vec<TopicChoice>,
    /// The topic the mail is about (a campaign's, a template's): marketing mail that only
    /// contacts subscribed to it receive, whose unsubscribe link leaves that topic only.
    pub topic: Option<Topic>,
    /// The caller's headers.
    pub headers: Vec<(String, String)>,
    /// Attachments.
    pub attachments: Vec<Attachment>,
}

impl SendPlan {
    /// The content a contact gets: the variant of its language (`locale` of this send's one-off
    /// data, else of its stored data; `domain::locale`), else the plan's own.
    pub fn content_for(&self, contact: &Contact) -> &Arc<CompiledTemplate> {
        if self.localized.is_empty() {
            return &self.content;
        }
        locale::of_contact(&self.data.transient, &contact.data)
            .and_then(|tag| locale::pick(tag, self.localized.iter().map(|(t, _)| t.as_str())))
            .map_or(&self.content, |i| &self.localized[i].1)
    }
}

/// One queued email.
#[derive(Clone, Debug)]
pub struct QueuedEmail {
    pub contact: Contact,
    /// The email's id.
    pub email_id: EmailId,
    /// Recorded as `suppressed` and never sent (marketing mail to an unsubscribed contact).
    pub suppressed: bool,
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// A recipient's message is over the size limit.
    #[error(
        "the message to {to} would be {size} bytes; a message may be at most 40 MB with its attachments"
    )]
    TooLarge {
        /// The recipient.
        to: String,
        size: usize,
    },
    /// The content could not be rendered for a recipient.
    #[error(transparent)]
    Render(#[from] crate::domain::template::TemplateError),
    /// The message could not be built.
    #[error(transparent)]
    Mime(#[from] mime::MimeError),
    /// The DKIM key could not be used.
    #[error(transparent)]
    Dkim(#[from] crate::mail::dkim::DkimError),
    /// The store failed (including an idempotency conflict).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The project's sending is suspended (its bounce or complaint rate); the reason says why.
    #[error("{0}")]
    Suspended(String),
    /// The rendered messages cannot be held in the render budget (`services::render_budget`).
    #[error(transparent)]
    RenderBudget(#[from] RenderBudgetError),
}

/// The variables a template sees for one contact: its stored data, this request's one-off
/// values, then the service's own (`email`, `id`, `svc_id`, `svc_email` and the three signed
/// links; an email's `viewInBrowserUrl` is added where the email's id is known).
pub fn variables(contact: &Contact, transient: &Map<String, Value>, urls: &ContactUrls) -> Value {
    let mut vars = contact.data.clone();
    for (k, v) in transient {
        vars.insert(k.clone(), v.clone());
    }
    let id = contact.id.as_str();
    let email = contact.email.as_str();
    for (k, v) in [
        ("email", email.to_string()),
        ("id", id.to_string()),
        ("svc_id", id.to_string()),
        ("svc_email", email.to_string()),
        ("unsubscribeUrl", urls.unsubscribe.clone()),
        ("subscribeUrl", urls.subscribe.clone()),
        ("manageUrl", urls.manage.clone()),
    ] {
        vars.insert(k.to_string(), Value::String(v));
    }
    Value::Object(vars)
}
