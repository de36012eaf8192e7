//! `/campaigns`: one message to an audience (every subscribed contact, a segment's members or
//! the contacts a filter selects), written as a draft, then sent now or scheduled, cancelled,
//! tested and measured. Sending itself is the engine's (`engine/campaigns.rs`).

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, OptionalJsonBody, SecretKeyAuth};
use super::formats::{EmailText, OneOf};
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::campaign::{
    Audience, CampaignContent, CampaignStatus, ContentRequest, check_content, rate,
};
use crate::domain::email::EmailAddress;
use crate::domain::ids::{CampaignId, ProjectId};
use crate::domain::pagination::PageRequest;
use crate::domain::template::fields::copy_name;
use crate::domain::time::now_ms;
use crate::engine::campaigns::CampaignError;
use crate::services::sending::SendError;
use crate::store::StoreError;
use crate::store::campaigns::{Campaign, CampaignCounts};

/// Where a campaign is in its life.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum CampaignState {
    /// Being written.
    Draft,
    /// Waiting for `scheduledAt`.
    Scheduled,
    /// Being sent.
    Sending,
    /// Every recipient's email is final.
    Sent,
    /// Stopped; mail already handed to the transport stays sent.
    Cancelled,
    /// Could not proceed; `failureReason` says why.
    Failed,
}

impl From<CampaignStatus> for CampaignState {
    fn from(s: CampaignStatus) -> CampaignState {
        match s {
            CampaignStatus::Draft => CampaignState::Draft,
            CampaignStatus::Scheduled => CampaignState::Scheduled,
            CampaignStatus::Sending => CampaignState::Sending,
            CampaignStatus::Sent => CampaignState::Sent,
            CampaignStatus::Cancelled => CampaignState::Cancelled,
            CampaignStatus::Failed => CampaignState::Failed,
        }
    }
}

impl From<CampaignState> for CampaignStatus {
    fn from(s: CampaignState) -> CampaignStatus {
        match s {
            CampaignState::Draft => CampaignStatus::Draft,
            CampaignState::Scheduled => CampaignStatus::Scheduled,
            CampaignState::Sending => CampaignStatus::Sending,
            CampaignState::Sent => CampaignStatus::Sent,
            CampaignState::Cancelled => CampaignStatus::Cancelled,
            CampaignState::Failed => CampaignStatus::Failed,
        }
    }
}

/// Who a campaign goes to.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum AudienceType {
    /// Every subscribed contact of the project.
    All,
    /// The subscribed members of `segmentId`.
    Segment,
    /// The subscribed contacts `audienceFilter` selects.
    Filtered,
}

fn audience_type(a: &Audience) -> AudienceType {
    match a {
        Audience::All => AudienceType::All,
        Audience::Segment(_) => AudienceType::Segment,
        Audience::Filtered(_) => AudienceType::Filtered,
    }
}

/// A campaign.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignBody {
    /// Its id (`cmp_…`).
    pub id: String,
    pub name: String,
    /// Null when none.
    #[oai(nullable)]
    pub description: Option<String>,
    /// The subject, a template rendered per recipient.
    pub subject: String,
    /// The HTML body, a template rendered per recipient.
    pub body: String,
    /// The sender address.
    pub from: EmailText,
    /// The sender's display name; null when none.
    #[oai(nullable)]
    pub from_name: Option<String>,
    /// The reply-to address; null when none.
    #[oai(nullable)]
    pub reply_to: Option<EmailText>,
    /// `ALL`, `SEGMENT` or `FILTERED`.
    pub audience_type: AudienceType,
    /// The audience's segment (`SEGMENT`); null otherwise.
    #[oai(nullable)]
    pub segment_id: Option<String>,
    /// The audience's filter (`FILTERED`); null otherwise.
    #[oai(nullable)]
    pub audience_filter: Option<Value>,
    /// `ALL`, `SEGMENT` or `FILTERED` (the audience type, as the create answer names it).
    #[oai(rename = "type")]
    pub campaign_type: AudienceType,
    pub status: CampaignState,
    /// When a scheduled send starts; null unless scheduled.
    #[oai(nullable)]
    pub scheduled_at: Option<Timestamp>,
    /// When sending started; null before.
    #[oai(nullable)]
    pub started_at: Option<Timestamp>,
    /// When it became `SENT`, `CANCELLED` or `FAILED`; null before.
    #[oai(nullable)]
    pub finished_at: Option<Timestamp>,
    /// Why it failed; null unless `FAILED`.
    #[oai(nullable)]
    pub failure_reason: Option<String>,
    /// Recipients snapshotted so far (the final count once sending is done).
    pub recipient_count: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<Campaign> for CampaignBody {
    fn from(c: Campaign) -> CampaignBody {
        let content = c.content;
        let kind = audience_type(&content.audience);
        let (segment_id, audience_filter) = match content.audience {
            Audience::All => (None, None),
            Audience::Segment(s) => (Some(s.into_string()), None),
            Audience::Filtered(f) => (None, Some(f)),
        };
        CampaignBody {
            id: c.id.into_string(),
            name: content.name,
            description: content.description,
            subject: content.subject,
            body: content.body,
            from: EmailText(content.from_email.to_string()),
            from_name: content.from_name,
            reply_to: content.reply_to.map(|r| EmailText(r.to_string())),
            audience_type: kind,
            segment_id,
            audience_filter,
            campaign_type: kind,
            status: c.status.into(),
            scheduled_at: c.scheduled_at.map(Timestamp),
            started_at: c.started_at.map(Timestamp),
            finished_at: c.finished_at.map(Timestamp),
            failure_reason: c.failure_reason,
            recipient_count: c.recipient_count,
            created_at: Timestamp(c.created_at),
            updated_at: Timestamp(c.updated_at),
        }
    }
}

/// The summary the create answer wraps.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignSummary {
    pub id: String,
    pub name: String,
    pub subject: String,
    /// The audience type.
    #[oai(rename = "type")]
    pub campaign_type: AudienceType,
    /// `DRAFT`.
    pub status: CampaignState,
    /// Null until the campaign is scheduled.
    #[oai(nullable)]
    pub scheduled_at: Option<Timestamp>,
}

/// `{ success: true, data }`: the create answer.
#[derive(Object)]
pub struct CreatedCampaignBody {
    /// Always true.
    pub success: bool,
    pub data: CampaignSummary,
}

/// `POST /campaigns` and `PUT /campaigns/:id` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CampaignRequest {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    #[serde(default)]
    pub description: Option<String>,
    /// 1 to 998 characters on one line; may use variables.
    pub subject: String,
    /// HTML with variables; not empty.
    pub body: String,
    /// A sender address on a verified domain of the project.
    pub from: EmailText,
    /// The sender's display name.
    #[oai(nullable)]
    #[serde(default)]
    pub from_name: Option<String>,
    /// A reply-to address.
    #[oai(nullable)]
    #[serde(default)]
    pub reply_to: Option<EmailText>,
    /// `ALL`, `SEGMENT` or `FILTERED` (read in any case).
    pub audience_type: OneOf<AudienceType>,
    /// Required when `audienceType` is `SEGMENT`: a segment of the project.
    #[oai(nullable)]
    #[serde(default)]
    pub segment_id: Option<String>,
    /// Required when `audienceType` is `FILTERED`: a filter (the segment filter language).
    #[oai(nullable)]
    #[serde(default)]
    pub audience_filter: Option<Value>,
}

/// `POST /campaigns/:id/send` body (optional).
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct SendCampaign {
    /// When to send; omitted or null sends now; a time in the past is 422.
    #[oai(nullable)]
    #[serde(default)]
    pub scheduled_for: Option<Timestamp>,
}

/// `POST /campaigns/:id/test` body.
#[derive(Object, Deserialize)]
pub struct TestCampaign {
    /// The address to send the test to.
    pub email: String,
}

/// What a test send queued.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TestSent {
    /// Always true.
    pub success: bool,
    /// The test email (see `GET /emails/:id`).
    pub email_id: String,
    /// Where it goes.
    pub to: String,
}

/// One page of campaigns.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignPage {
    /// Newest first.
    pub data: Vec<CampaignBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    pub has_more: bool,
    /// Matching campaigns in all (first page only; 0 on later pages).
    pub total: i64,
}

/// A campaign's counts: distinct emails, test sends excluded; a click also counts as an open;
/// rates are per email sent, between 0 and 1.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignStats {
    pub campaign_id: String,
    /// Contacts in the recipients ledger.
    pub recipients: i64,
    /// Emails handed to the transport.
    pub sent: i64,
    /// Emails the recipient's server accepted (as the transport reports it).
    pub delivered: i64,
    pub opened: i64,
    pub clicked: i64,
    pub bounced: i64,
    pub complained: i64,
    /// Recipients who unsubscribed after their email was sent.
    pub unsubscribed: i64,
    /// Emails never handed to the transport: the contact unsubscribed between the snapshot and
    /// the hand-off, or the campaign was cancelled first.
    pub suppressed: i64,
    /// Emails that could not be delivered.
    pub failed: i64,
    /// Emails still waiting for the transport.
    pub queued: i64,
    pub open_rate: f64,
    pub click_rate: f64,
    pub bounce_rate: f64,
}

impl CampaignStats {
    /// The stats of a campaign from its ledger size and email counts.
    pub fn new(campaign_id: String, recipients: i64, c: CampaignCounts) -> CampaignStats {
        CampaignStats {
            campaign_id,
            recipients,
            sent: c.sent,
            delivered: c.delivered,
            opened: c.opened,
            clicked: c.clicked,
            bounced: c.bounced,
            complained: c.complained,
            unsubscribed: c.unsubscribed,
            suppressed: c.suppressed,
            failed: c.failed,
            queued: c.queued,
            open_rate: rate(c.opened, c.sent),
            click_rate: rate(c.clicked, c.sent),
            bounce_rate: rate(c.bounced, c.sent),
        }
    }
}

/// Answer of `POST /campaigns`.
#[derive(ApiResponse)]
pub enum CreatedCampaign {
    /// Created in `DRAFT`.
    #[oai(status = 201)]
    Created(Json<CreatedCampaignBody>),
}

/// Answer of `POST /campaigns/:id/duplicate`.
#[derive(ApiResponse)]
pub enum DuplicatedCampaign {
    /// The copy, in `DRAFT`.
    #[oai(status = 201)]
    Created(Json<CampaignBody>),
}

/// Answer of `DELETE /campaigns/:id`.
#[derive(ApiResponse)]
pub enum DeletedCampaign {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

fn campaign_id(id: &str) -> Result<CampaignId, ApiError> {
    CampaignId::parse(id).ok_or_else(|| ApiError::not_found("campaign"))
}

fn not_found(e: StoreError) -> ApiError {
    ApiError::from_store(e, "campaign")
}

/// 409 for a move the campaign's status does not allow.
fn wrong_status(c: &Campaign, what: &str, allowed: &str) -> ApiError {
    ApiError::conflict(format!(
        "the campaign is {}; {what} only a campaign that is {allowed}",
        c.status.as_str()
    ))
}

/// The answer to a status move the store refused: 409 naming the status the campaign has now
/// (read again, since a concurrent request may have moved it), or 404 when it is gone.
async fn refused(
    state: &AppState,
    project: &ProjectId,
    id: &CampaignId,
    what: &str,
    allowed: &str,
) -> ApiError {
    match state.store().campaign(project, id).await {
        Ok(now) => wrong_status(&now, what, allowed),
        Err(e) => not_found(e),
    }
}

/// Checks a create or replace body whole: fields, template syntax (on the CPU pool), the
/// segment, and the sender's domain.
async fn check_request(
    state: &AppState,
    project: &ProjectId,
    req: &CampaignRequest,
) -> Result<CampaignContent, ApiError> {
    let checked = check_content(&ContentRequest {
        name: &req.name,
        description: req.description.as_deref(),
        subject: &req.subject,
        body: &req.body,
        from: req.from.as_str(),
        from_name: req.from_name.as_deref(),
        reply_to: req.reply_to.as_ref().map(EmailText::as_str),
        audience_type: req.audience_type.as_str(),
        segment_id: req.segment_id.as_deref(),
        audience_filter: req.audience_filter.as_ref(),
    });
    let mut errors: Vec<FieldError> = match &checked {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .iter()
            .map(|p| FieldError::new(&p.field, p.code, p.message.clone()))
            .collect(),
    };
    let (subject, body) = (req.subject.clone(), req.body.clone());
    let syntax = state
        .sending()
        .cpu()
        .run(move || crate::domain::template::check(Some(subject.as_str()), Some(body.as_str())))
        .await;
    errors.extend(
        syntax
            .into_iter()
            .map(|e| FieldError::new(e.field, "invalid_template", e.describe())),
    );
    let content = match checked {
        Ok(content) if errors.is_empty() => content,
        _ => return Err(ApiError::validation(errors)),
    };
    if let Audience::Segment(id) = &content.audience {
        match state.store().segment(project, id).await {
            Ok(_) => {}
            Err(StoreError::NotFound) => {
                return Err(ApiError::invalid_field(
                    "segmentId",
                    "not_found",
                    format!("there is no segment `{id}` in this project"),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    super::templates::authorize_from(state, project, &content.from_email, "from").await?;
    Ok(content)
}

fn campaign_error(e: CampaignError) -> ApiError {
    match e {
        CampaignError::Sender(e) => {
            let error = ApiError::from(e);
            let field = FieldError::new("from", "domain_not_verified", error.message.clone());
            error.with_errors(vec![field])
        }
        CampaignError::Send(SendError::Render(e)) => {
            ApiError::invalid_field("body", "invalid_template", e.to_string())
        }
        CampaignError::Send(SendError::TooLarge { to, size }) => ApiError::invalid_field(
            "body",
            "too_large",
            format!("the message to {to} would be {size} bytes; make the body smaller"),
        ),
        CampaignError::Send(SendError::Mime(e)) => {
            ApiError::invalid_field("body", "invalid", e.to_string())
        }
        CampaignError::Send(SendError::Suspended(reason)) => super::send::suspended(reason),
        CampaignError::Send(SendError::Store(e)) => e.into(),
        CampaignError::Send(SendError::RenderBudget(e)) => e.into(),
        CampaignError::Send(e) => ApiError::internal(e),
        CampaignError::Store(e) => e.into(),
    }
}

/// The campaigns endpoints.
#[derive(Default)]
pub struct CampaignsApi;

#[OpenApi(tag = "ApiTags::Campaigns")]
impl CampaignsApi {
    /// List campaigns
    ///
    /// Cursor-paginated, newest first, optionally of one status.
    #[oai(path = "/campaigns", method = "get", operation_id = "listCampaigns")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Only campaigns in this status.
        status: Query<Option<CampaignState>>,
    ) -> Result<Json<CampaignPage>, ApiError> {
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            CampaignId::parse(id).is_some()
        })?;
        let page = state
            .store()
            .list_campaigns(auth.0.project_id(), status.0.map(Into::into), &page)
            .await?;
        Ok(Json(CampaignPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Create a campaign
    ///
    /// Created in `DRAFT`. The subject and body are templates checked when saved; `from` must
    /// be on a verified domain of the project (422 `DOMAIN_NOT_VERIFIED`); a `SEGMENT` audience
    /// names a segment of the project, a `FILTERED` one a filter (422 with the path of a bad
    /// part). The answer is wrapped: `{ success, data: { id, name, subject, type, status,
    /// scheduledAt } }`.
    #[oai(path = "/campaigns", method = "post", operation_id = "createCampaign")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CampaignRequest>,
    ) -> Result<CreatedCampaign, ApiError> {
        let project = auth.0.project_id();
        let content = check_request(&state, project, &body.0).await?;
        let c = state.store().insert_campaign(project, &content).await?;
        Ok(CreatedCampaign::Created(Json(CreatedCampaignBody {
            success: true,
            data: CampaignSummary {
                id: c.id.into_string(),
                campaign_type: audience_type(&c.content.audience),
                name: c.content.name,
                subject: c.content.subject,
                status: c.status.into(),
                scheduled_at: c.scheduled_at.map(Timestamp),
            },
        })))
    }

    /// Get a campaign
    #[oai(path = "/campaigns/:id", method = "get", operation_id = "getCampaign")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let c = state
            .store()
            .campaign(auth.0.project_id(), &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        Ok(Json(c.into()))
    }

    /// Replace a campaign
    ///
    /// Replaces the content and audience (the create body, with the same checks) while the
    /// campaign is `DRAFT` or `SCHEDULED`; 409 in any other status. A scheduled campaign keeps
    /// its schedule.
    #[oai(
        path = "/campaigns/:id",
        method = "put",
        operation_id = "replaceCampaign"
    )]
    async fn replace(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
        body: JsonBody<CampaignRequest>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        // 404 before the body's problems.
        state
            .store()
            .campaign(project, &id)
            .await
            .map_err(not_found)?;
        let content = check_request(&state, project, &body.0).await?;
        match state
            .store()
            .replace_campaign(project, &id, &content)
            .await
            .map_err(not_found)?
        {
            Some(c) => Ok(Json(c.into())),
            // Refused for the status it has now (a send or a delete may have raced the checks).
            None => {
                Err(refused(&state, project, &id, "you can change", "DRAFT or SCHEDULED").await)
            }
        }
    }

    /// Delete a campaign
    ///
    /// 409 while it is `SENDING` (cancel it first). Its emails stay in the activity feed.
    #[oai(
        path = "/campaigns/:id",
        method = "delete",
        operation_id = "deleteCampaign"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<DeletedCampaign, ApiError> {
        let deleted = state
            .store()
            .delete_campaign(auth.0.project_id(), &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        if deleted {
            Ok(DeletedCampaign::Deleted)
        } else {
            Err(
                ApiError::conflict("the campaign is SENDING; it cannot be deleted while it sends")
                    .suggest("cancel it with POST /campaigns/:id/cancel, then delete it"),
            )
        }
    }

    /// Duplicate a campaign
    ///
    /// A new `DRAFT` with the same content and audience, named "<name> (copy)", from a
    /// campaign in any status.
    #[oai(
        path = "/campaigns/:id/duplicate",
        method = "post",
        operation_id = "duplicateCampaign"
    )]
    async fn duplicate(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<DuplicatedCampaign, ApiError> {
        let project = auth.0.project_id();
        let c = state
            .store()
            .campaign(project, &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        let mut content = c.content;
        content.name = copy_name(&content.name);
        let copy = state.store().insert_campaign(project, &content).await?;
        Ok(DuplicatedCampaign::Created(Json(copy.into())))
    }

    /// Send or schedule a campaign
    ///
    /// Without `scheduledFor` (or with null) the campaign moves to `SENDING` at once, then to
    /// `SENT` once every recipient's email is final; with a future `scheduledFor` it becomes
    /// `SCHEDULED` and starts then on whichever instance claims it. A past `scheduledFor` is
    /// 422. Allowed from `DRAFT` and `SCHEDULED` (to send now or move the schedule); 409
    /// otherwise. The sender's domain must still be verified (422 `DOMAIN_NOT_VERIFIED`), a
    /// `SEGMENT` audience's segment must still exist, and the project's sending must not be
    /// suspended (403).
    #[oai(
        path = "/campaigns/:id/send",
        method = "post",
        operation_id = "sendCampaign"
    )]
    async fn send(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
        body: OptionalJsonBody<SendCampaign>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        let c = state
            .store()
            .campaign(project, &id)
            .await
            .map_err(not_found)?;
        if !c.status.editable() {
            return Err(wrong_status(&c, "you can send", "DRAFT or SCHEDULED"));
        }
        let scheduled_for = body.0.and_then(|b| b.scheduled_for).map(|t| t.0);
        if let Some(at) = scheduled_for
            && at < now_ms()
        {
            return Err(ApiError::invalid_field(
                "scheduledFor",
                "in_the_past",
                "`scheduledFor` is in the past; send a future time, or null to send now",
            ));
        }
        if let Audience::Segment(segment) = &c.content.audience
            && let Err(StoreError::NotFound) = state.store().segment(project, segment).await
        {
            return Err(ApiError::invalid_field(
                "segmentId",
                "not_found",
                format!(
                    "the campaign's segment `{segment}` no longer exists; choose another audience with PUT /campaigns/:id"
                ),
            ));
        }
        super::templates::authorize_from(&state, project, &c.content.from_email, "from").await?;
        if let Some(suspension) = state.store().active_suspension(project).await? {
            return Err(super::send::suspended(suspension.reason));
        }
        let max_attempts = state.jobs().config().max_attempts;
        match state
            .store()
            .send_campaign(project, &id, scheduled_for, max_attempts)
            .await
            .map_err(not_found)?
        {
            Some(sent) => {
                state.jobs().wake();
                Ok(Json(sent.into()))
            }
            None => Err(refused(&state, project, &id, "you can send", "DRAFT or SCHEDULED").await),
        }
    }

    /// Cancel a campaign
    ///
    /// `SCHEDULED` or `SENDING` to `CANCELLED`: a scheduled send never starts; a running one
    /// stops within one batch, and mail already handed to the transport stays sent. 409 in
    /// any other status.
    #[oai(
        path = "/campaigns/:id/cancel",
        method = "post",
        operation_id = "cancelCampaign"
    )]
    async fn cancel(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        match state
            .store()
            .cancel_campaign(project, &id)
            .await
            .map_err(not_found)?
        {
            Some(c) => Ok(Json(c.into())),
            None => Err(refused(
                &state,
                project,
                &id,
                "you can cancel",
                "SCHEDULED or SENDING",
            )
            .await),
        }
    }

    /// Send a test of a campaign
    ///
    /// One email to `email`, rendered with that contact's variables when the address is a
    /// contact of the project, its subject marked `[Test]`, through the same queue and
    /// transport. Allowed in any status; never counted in stats or analytics.
    #[oai(
        path = "/campaigns/:id/test",
        method = "post",
        operation_id = "testCampaign"
    )]
    async fn test(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
        body: JsonBody<TestCampaign>,
    ) -> Result<Json<TestSent>, ApiError> {
        let project = auth.0.project_id();
        let c = state
            .store()
            .campaign(project, &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        let to = EmailAddress::parse(&body.0.email)
            .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
        let email_id = state
            .campaigns()
            .send_test(&c, &to)
            .await
            .map_err(campaign_error)?;
        Ok(Json(TestSent {
            success: true,
            email_id: email_id.into_string(),
            to: to.to_string(),
        }))
    }

    /// Campaign stats
    ///
    /// Counts of distinct emails of the campaign (test sends excluded): `opened` includes
    /// clicked emails; rates are per email sent, between 0 and 1.
    #[oai(
        path = "/campaigns/:id/stats",
        method = "get",
        operation_id = "campaignStats"
    )]
    async fn stats(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<CampaignStats>, ApiError> {
        let project = auth.0.project_id();
        let c = state
            .store()
            .campaign(project, &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        let counts = state
            .store()
            .campaign_counts(project, &[c.id.as_str()])
            .await?
            .remove(c.id.as_str())
            .unwrap_or_default();
        Ok(Json(CampaignStats::new(
            c.id.into_string(),
            c.recipient_count,
            counts,
        )))
    }
}
