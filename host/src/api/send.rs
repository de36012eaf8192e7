//! `POST /v1/send`: transactional email. The request is checked whole before anything is
//! written (every invalid field is reported at once; `services::send_plan`); then each
//! recipient is processed in order and every email is queued in one transaction.

use std::collections::BTreeMap;

use poem::http::StatusCode;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ApiTags;
use super::addresses::{Recipients, Sender};
use super::error::{ApiError, ErrorCode, FieldError, PublicApiError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::EmailText;
use super::state::AppState;
use super::timestamp::Timestamp;
use super::topics::{TopicSetting, parse_choices};
use super::track::{IdempotencyKeyHeader, idempotency_key, replayed, request_hash};
use crate::domain::send::AttachmentInput;
use crate::domain::time::now_ms;
use crate::services::send_plan::SendInput;
use crate::services::sending::{Idempotency, QueuedEmail, SendError};
use crate::store::{Conflict, StoreError};

/// Largest `/v1/send` request body: 10 MB of attachments in base64 plus the rest.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

const ENDPOINT: &str = "/v1/send";

/// An attachment.
#[derive(Object, Deserialize, Serialize, Clone)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct AttachmentBody {
    /// File name, 1 to 255 characters.
    pub filename: String,
    /// The content, base64.
    pub content: String,
    /// MIME type, e.g. `application/pdf`.
    pub content_type: String,
    /// `attachment` (default) or `inline` (shown in the body as `cid:<contentId>`).
    #[oai(nullable)]
    pub disposition: Option<String>,
    /// The Content-ID of an inline attachment (required for `inline`).
    #[oai(nullable)]
    pub content_id: Option<String>,
}

/// Send a transactional email.
#[derive(Object, Deserialize, Serialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct SendRequest {
    /// Recipients: `"ann@example.com"`, `"Ann <ann@example.com>"`, `{ "name", "email" }`, or an
    /// array of up to 50 of these. Each gets their own email, contact upsert and rendering.
    pub to: Recipients,
    /// Subject, 1 to 998 characters, no line breaks. Required unless `template` is given
    /// (then it overrides the template's).
    #[oai(nullable)]
    pub subject: Option<String>,
    /// HTML body. Required unless `template` is given (then it overrides the template's).
    #[oai(nullable)]
    pub body: Option<String>,
    /// A template id (`tpl_…`): its subject, body, from and reply-to are used unless given here.
    #[oai(nullable)]
    pub template: Option<String>,
    /// Sender: an address on a verified domain, `"Name <address>"` or `{ "name", "email" }`.
    /// Required unless the template has one.
    #[oai(nullable)]
    pub from: Option<Sender>,
    /// Deprecated: the sender's name, used only when `from` is an address without a name.
    #[oai(deprecated)]
    #[oai(nullable)]
    pub name: Option<String>,
    /// Subscription state: new contacts default to `false`; existing ones keep theirs when
    /// omitted. A change emits `contact.subscribed` or `contact.unsubscribed`.
    #[oai(nullable)]
    pub subscribed: Option<bool>,
    /// Template variables and contact data, by the custom data rules.
    #[oai(nullable)]
    pub data: Option<BTreeMap<String, Value>>,
    /// Topic choices for every recipient's contact (`[{ "id": "top_…", "subscribed": true }]`);
    /// an unknown topic is 422 at `topics[i].id`. A change emits `contact.topic.subscribed` or
    /// `contact.topic.unsubscribed`.
    #[oai(nullable)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<TopicSetting>>,
    /// Extra headers; values at most 998 characters, no CR or LF.
    #[oai(nullable)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Reply-To address.
    #[oai(nullable)]
    pub reply: Option<EmailText>,
    /// Up to 10 attachments, 10 MB decoded in all.
    #[oai(nullable)]
    pub attachments: Option<Vec<AttachmentBody>>,
}

/// A recipient's contact.
#[derive(Object, Deserialize, Serialize)]
pub struct SentContact {
    /// The contact's id.
    pub id: String,
    /// The contact's address.
    pub email: String,
}

/// One queued email.
#[derive(Object, Deserialize, Serialize)]
pub struct SentEmail {
    /// The recipient's contact.
    pub contact: SentContact,
    /// The email's id (`eml_…`).
    pub email: String,
}

/// What was queued.
#[derive(Object, Deserialize, Serialize)]
pub struct SendData {
    /// One entry per recipient, in order.
    pub emails: Vec<SentEmail>,
    /// When the request was accepted.
    pub timestamp: Timestamp,
}

/// `{ success: true, data }`.
#[derive(Object, Deserialize, Serialize)]
pub struct SendResponse {
    /// Always `true`.
    pub success: bool,
    /// What was queued.
    pub data: SendData,
}

#[derive(ApiResponse)]
enum SendResult {
    /// Queued for delivery (or, with a reused `Idempotency-Key`, the first response replayed).
    #[oai(status = 200)]
    Ok(
        Json<SendResponse>,
        /// `true` when this is the replay of an earlier request with the same key.
        #[oai(header = "Idempotent-Replayed")]
        Option<String>,
    ),
}

fn respond(queued: &[QueuedEmail], at: i64) -> SendResponse {
    SendResponse {
        success: true,
        data: SendData {
            emails: queued
                .iter()
                .map(|q| SentEmail {
                    contact: SentContact {
                        id: q.contact.id.to_string(),
                        email: q.contact.email.to_string(),
                    },
                    email: q.email_id.to_string(),
                })
                .collect(),
            timestamp: Timestamp(at),
        },
    }
}

/// The request's fields as the send planner reads them.
fn send_input(body: &SendRequest) -> SendInput<'_> {
    SendInput {
        to: &body.to.0,
        subject: body.subject.as_deref(),
        body: body.body.as_deref(),
        template: body.template.as_deref(),
        from: body.from.as_ref().map(|f| &f.0),
        name: body.name.as_deref(),
        subscribed: body.subscribed,
        data: body.data.as_ref(),
        headers: body.headers.as_ref(),
        reply: body.reply.as_ref().map(EmailText::as_str),
        attachments: body
            .attachments
            .iter()
            .flatten()
            .map(|a| AttachmentInput {
                filename: &a.filename,
                content: &a.content,
                content_type: &a.content_type,
                disposition: a.disposition.as_deref(),
                content_id: a.content_id.as_deref(),
            })
            .collect(),
    }
}

/// The sending endpoint.
#[derive(Default)]
pub struct SendApi;

#[OpenApi(tag = "ApiTags::Sending")]
impl SendApi {
    /// Send an email
    ///
    /// Queues one email per recipient, in order: each recipient's contact is created or updated
    /// (new contacts are unsubscribed unless `subscribed` says otherwise), the content is rendered
    /// with the contact's variables, and the message is DKIM-signed with the sending domain's key.
    /// Either a `template` or both `subject` and `body` are required. With `Idempotency-Key`, the
    /// same request within 24 hours returns the first response and sends nothing again.
    #[oai(path = "/v1/send", method = "post", operation_id = "send")]
    async fn send(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Makes the call safe to retry: 1 to 255 printable characters, kept 24 hours per
        /// project. A repeat with the same body answers the first response with
        /// `Idempotent-Replayed: true` and sends nothing; with another body, 409
        /// `IDEMPOTENCY_KEY_REUSED`.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: IdempotencyKeyHeader,
        body: JsonBody<SendRequest>,
    ) -> Result<SendResult, PublicApiError> {
        send(&state, &auth, &idempotency_key, body.0)
            .await
            .map_err(PublicApiError)
    }
}

async fn send(
    state: &AppState,
    auth: &SecretKeyAuth,
    key_header: &IdempotencyKeyHeader,
    body: SendRequest,
) -> Result<SendResult, ApiError> {
    let project = &auth.0.project;
    let key = idempotency_key(key_header)?;
    let hash = request_hash(&body);
    if let Some(key) = &key
        && let Some(stored) = state.store().idempotent_response(&project.id, key).await?
    {
        let body: SendResponse = replayed(stored, ENDPOINT, &hash)?;
        return Ok(SendResult::Ok(Json(body), Some("true".into())));
    }
    let topics = parse_choices(state, &project.id, "topics", body.topics.as_deref()).await?;
    let mut plan = state
        .send_planner()
        .plan(project, &send_input(&body))
        .await?;
    plan.topics = topics;
    let at = now_ms();
    let respond_json =
        |queued: &[QueuedEmail]| serde_json::to_value(respond(queued, at)).unwrap_or(Value::Null);
    let idempotency = key.as_deref().map(|k| Idempotency {
        key: k,
        endpoint: ENDPOINT,
        request_hash: &hash,
        respond: &respond_json,
    });
    match state.sending().send(project, &plan, idempotency).await {
        Ok(queued) => Ok(SendResult::Ok(Json(respond(&queued, at)), None)),
        Err(SendError::Store(StoreError::Conflict(Conflict::IdempotencyKey))) => {
            let key = key.unwrap_or_default();
            match state.store().idempotent_response(&project.id, &key).await? {
                Some(stored) => {
                    let body: SendResponse = replayed(stored, ENDPOINT, &hash)?;
                    Ok(SendResult::Ok(Json(body), Some("true".into())))
                }
                None => Err(ApiError::conflict(
                    "a request with this Idempotency-Key is in progress; retry",
                )),
            }
        }
        Err(e @ SendError::TooLarge { .. }) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            e.to_string(),
        )
        .suggest("send large files as links")),
        Err(SendError::Render(e)) => Err(ApiError::validation(vec![FieldError::new(
            e.field,
            "template_render",
            e.to_string(),
        )])),
        Err(SendError::Mime(e)) => Err(ApiError::validation(vec![FieldError::new(
            "body",
            "invalid",
            e.to_string(),
        )])),
        Err(SendError::Store(e)) => Err(e.into()),
        Err(SendError::Suspended(reason)) => Err(suspended(reason)),
        Err(SendError::RenderBudget(e)) => Err(e.into()),
        Err(e @ SendError::Dkim(_)) => Err(ApiError::internal(e)),
    }
}

/// 403 for a project whose sending is suspended.
pub(super) fn suspended(reason: String) -> ApiError {
    ApiError::forbidden(reason).suggest(
        "clean the project's lists, then ask the deployment's operator to lift the suspension \
         (GET /projects/:id/security shows the figures)",
    )
}
