//! `GET /emails/:id`: one email with its status and history.

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::ApiTags;
use super::error::ApiError;
use super::extract::SecretKeyAuth;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::ids::EmailId;
use crate::store::emails::EmailRecord;

/// One entry of an email's history.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EmailHistoryBody {
    /// `queued`, `deferred` (a hand-off the transport could not take now, or that every
    /// transport of its failover chain failed transiently; retried later, one entry a try),
    /// `sent`, `delivered`, `opened`, `clicked`, `bounced`, `soft_bounced`, `complained`,
    /// `failed` or `suppressed`.
    #[oai(rename = "type")]
    pub kind: String,
    /// The provider's answer (of `deferred`, the transport's reason, after the failovers
    /// before it), the bounce reason or the clicked link.
    #[oai(nullable)]
    pub detail: Option<String>,
    /// When it happened.
    pub created_at: Timestamp,
}

/// An email without its history (as a contact's emails list it).
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EmailSummaryBody {
    /// Its id (`eml_…`).
    pub id: String,
    /// The furthest state reached: `queued`, `sent`, `delivered`, `opened`, `clicked`, or
    /// `bounced`, `complained`, `failed`; or `suppressed`: never sent, because the recipient is
    /// on the project's suppression list (`error`: "the address is on the project's suppression
    /// list (HARD_BOUNCE)", with the entry's reason `HARD_BOUNCE`, `COMPLAINT` or `MANUAL`), or
    /// because it is marketing mail to an unsubscribed contact (`error` says so).
    pub status: String,
    /// `transactional` or `marketing`.
    #[oai(rename = "type")]
    pub kind: String,
    /// The sender's address.
    pub from: String,
    /// The recipient's address.
    pub to: String,
    /// The rendered subject.
    pub subject: String,
    /// The recipient's contact.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// The template it was rendered from.
    #[oai(nullable)]
    pub template_id: Option<String>,
    /// Its `Message-ID`.
    pub message_id: String,
    /// The transport's id for it.
    #[oai(nullable)]
    pub provider_id: Option<String>,
    /// The transport that took it (after a failover, the fallback that did); null until one
    /// answered.
    #[oai(nullable)]
    pub transport: Option<String>,
    /// Why it failed or was suppressed (for a suppressed one, the suppression list's reason or
    /// the contact's unsubscription).
    #[oai(nullable)]
    pub error: Option<String>,
    /// Hand-offs to the transport so far.
    pub attempts: i32,
    /// When it was queued.
    pub created_at: Timestamp,
    /// When the transport accepted it.
    #[oai(nullable)]
    pub sent_at: Option<Timestamp>,
    /// How many times it was opened (the tracking pixel loaded); the first open is in the
    /// history, later ones are only counted.
    pub opens: i32,
    /// How many times its tracked links were followed; the first click is in the history.
    pub clicks: i32,
    /// The campaign it is part of; null for other mail (and campaign test sends).
    #[oai(nullable)]
    pub campaign_id: Option<String>,
    /// For an email of a campaign with an A/B test: the variant (0-based index of the
    /// campaign's `variants`) it was sent with, its test group's or, for the rest of the
    /// audience, the winner; null otherwise.
    #[oai(nullable)]
    pub variant: Option<i32>,
}

impl From<EmailRecord> for EmailSummaryBody {
    fn from(e: EmailRecord) -> EmailSummaryBody {
        EmailSummaryBody {
            id: e.id,
            status: e.status,
            kind: e.kind,
            from: e.from_address,
            to: e.to_address,
            subject: e.subject,
            contact_id: e.contact_id,
            template_id: e.template_id,
            message_id: e.message_id,
            provider_id: e.provider_id,
            transport: e.transport,
            error: e.error,
            attempts: e.attempts,
            created_at: Timestamp(e.created_at),
            sent_at: e.sent_at.map(Timestamp),
            opens: e.open_count,
            clicks: e.click_count,
            campaign_id: e.campaign_id,
            variant: e.campaign_variant,
        }
    }
}

/// An email: one message to one recipient.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct EmailBody {
    #[oai(flatten)]
    pub email: EmailSummaryBody,
    /// Everything that happened to it, oldest first.
    pub history: Vec<EmailHistoryBody>,
}

/// The emails endpoint.
#[derive(Default)]
pub struct EmailsApi;

#[OpenApi(tag = "ApiTags::Sending")]
impl EmailsApi {
    /// Get an email
    ///
    /// An email of the project with its status and history.
    #[oai(path = "/emails/:id", method = "get", operation_id = "getEmail")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The email's id (`eml_…`).
        id: Path<String>,
    ) -> Result<Json<EmailBody>, ApiError> {
        let id = EmailId::parse(&id).ok_or_else(|| ApiError::not_found("email"))?;
        let (e, history) = state
            .store()
            .email(auth.0.project_id(), &id)
            .await
            .map_err(|e| ApiError::from_store(e, "email"))?;
        Ok(Json(EmailBody {
            email: e.into(),
            history: history
                .into_iter()
                .map(|h| EmailHistoryBody {
                    kind: h.kind,
                    detail: h.detail,
                    created_at: Timestamp(h.created_at),
                })
                .collect(),
        }))
    }
}
