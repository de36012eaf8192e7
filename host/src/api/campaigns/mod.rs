//! `/campaigns`: one message to an audience (every subscribed contact, a segment's members or
//! the contacts a filter selects), written as a draft, its audience previewed, then sent now or
//! scheduled, paused and resumed, cancelled, tested and measured. Sending itself is the
//! engine's (`engine/campaigns.rs`); the bodies are in `bodies.rs`.

use poem_openapi::OpenApi;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, OptionalJsonBody, SecretKeyAuth};
use super::formats::EmailText;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::campaign::{Audience, CampaignContent, ContentRequest, check_content};
use crate::domain::campaign_ab::MAX_AHEAD_MS;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{CampaignId, ProjectId};
use crate::domain::pagination::PageRequest;
use crate::domain::template::fields::copy_name;
use crate::domain::time::now_ms;
use crate::engine::campaigns::CampaignError;
use crate::services::sending::SendError;
use crate::store::StoreError;
use crate::store::campaigns::Campaign;

mod ab;
mod bodies;

pub use ab::{AbTestBody, AbTestStatus, AbWinnerMetric, CampaignVariant, VariantStats};
use bodies::audience_type;
pub use bodies::{
    AudienceExclusions, AudiencePreview, AudienceType, CampaignBody, CampaignPage, CampaignRequest,
    CampaignState, CampaignStats, CampaignSummary, CreatedCampaign, CreatedCampaignBody,
    DeletedCampaign, DuplicatedCampaign, SendCampaign, TestCampaign, TestSent,
};

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

/// The answer to a status move the store was asked for (`moved`): the campaign as it is now,
/// 409 naming the status that refused it (see [`refused`]), or 404.
async fn answer_move(
    state: &AppState,
    project: &ProjectId,
    id: &CampaignId,
    moved: Result<Option<Campaign>, StoreError>,
    what: &str,
    allowed: &str,
) -> Result<Json<CampaignBody>, ApiError> {
    match moved.map_err(not_found)? {
        Some(c) => Ok(Json(c.into())),
        None => Err(refused(state, project, id, what, allowed).await),
    }
}

/// The template syntax errors of `contents` (each a field prefix, a subject and a body: `""`
/// for the campaign's own, `variants[1].` for an A/B variant), compiled on the CPU pool, as
/// field errors (`variants[1].body`, with line and column).
async fn syntax_errors(
    state: &AppState,
    contents: Vec<(String, String, String)>,
) -> Vec<FieldError> {
    let errors = state
        .sending()
        .cpu()
        .run(move || {
            contents
                .iter()
                .flat_map(|(prefix, subject, body)| {
                    crate::domain::template::check(Some(subject.as_str()), Some(body.as_str()))
                        .into_iter()
                        .map(move |e| (format!("{prefix}{}", e.field), e.describe()))
                })
                .collect::<Vec<_>>()
        })
        .await;
    errors
        .into_iter()
        .map(|(field, message)| FieldError::new(field, "invalid_template", message))
        .collect()
}

/// Checks a create or replace body whole: fields, template syntax (on the CPU pool), the
/// segment, and the sender's domain.
async fn check_request(
    state: &AppState,
    project: &ProjectId,
    req: &CampaignRequest,
) -> Result<CampaignContent, ApiError> {
    let locale_variants = req
        .locale_variants
        .clone()
        .map(super::templates::locale_variants);
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
        locale_variants: locale_variants.as_ref(),
        topic_id: req.topic_id.as_deref(),
    });
    let mut errors: Vec<FieldError> = match &checked {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .iter()
            .map(|p| FieldError::new(&p.field, p.code, p.message.clone()))
            .collect(),
    };
    // The content's syntax, with its languages' once their other rules pass.
    let mut contents = vec![(String::new(), req.subject.clone(), req.body.clone())];
    if let Ok(c) = &checked {
        contents.extend(c.locale_variants.0.iter().map(|(tag, v)| {
            (
                format!("localeVariants.{tag}."),
                v.subject.clone(),
                v.body.clone(),
            )
        }));
    }
    errors.extend(syntax_errors(state, contents).await);
    let (test, ab_errors) = ab::check_ab_request(state, req).await;
    errors.extend(ab_errors);
    if req.variants.is_some() && req.locale_variants.as_ref().is_some_and(|v| !v.is_empty()) {
        errors.push(FieldError::new(
            "localeVariants",
            "conflict",
            "a campaign with an A/B test (`variants`) cannot also have `localeVariants`: the \
             test compares contents, not languages; remove one of them",
        ));
    }
    let mut content = match checked {
        Ok(content) if errors.is_empty() => content,
        _ => return Err(ApiError::validation(errors)),
    };
    content.ab = test;
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
    if let Some(topic) = &content.topic {
        super::topics::require_topic(state, project, topic, "topicId").await?;
    }
    super::templates::authorize_from(state, project, &content.from_email, "from").await?;
    Ok(content)
}

/// 422 for a campaign whose audience's segment was deleted since it was saved.
fn segment_gone(c: &Campaign) -> ApiError {
    let segment = match &c.content.audience {
        Audience::Segment(segment) => segment.as_str(),
        _ => "",
    };
    ApiError::invalid_field(
        "segmentId",
        "not_found",
        format!(
            "the campaign's segment `{segment}` no longer exists; choose another audience with PUT /campaigns/:id"
        ),
    )
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
    /// part). An A/B test is `variants` (2 to 4) with `testFraction`, `winnerMetric` and
    /// `testDuration` (422 naming each bad field, e.g. `variants[1].body`). The answer is
    /// wrapped: `{ success, data: { id, name, subject, type, status, scheduledAt } }`.
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
        let current = state
            .store()
            .campaign(project, &id)
            .await
            .map_err(not_found)?;
        let content = check_request(&state, project, &body.0).await?;
        ab::not_at_local_time(&current, &content)?;
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
    /// 409 while it is `SENDING` or `PAUSED` (cancel it first). Its emails stay in the activity
    /// feed.
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
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        let deleted = state
            .store()
            .delete_campaign(project, &id)
            .await
            .map_err(not_found)?;
        if deleted {
            return Ok(DeletedCampaign::Deleted);
        }
        let status = match state.store().campaign(project, &id).await {
            Ok(c) => c.status.as_str(),
            Err(e) => return Err(not_found(e)),
        };
        Err(ApiError::conflict(format!(
            "the campaign is {status}; it cannot be deleted until it is stopped"
        ))
        .suggest("cancel it with POST /campaigns/:id/cancel, then delete it"))
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
    ///
    /// With `inContactTimeZone: true`, the date and time of `scheduledFor` (as written in UTC)
    /// is read as each contact's local time (`data.timezone`, IANA; UTC for a contact without a
    /// valid one): the campaign starts when UTC+14 reaches it (`scheduledAt`), and each email
    /// is due at its contact's time (at once when that time has passed). 422 without
    /// `scheduledFor`, or for a campaign with an A/B test.
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
        let (scheduled_for, local) = body
            .0
            .map(|b| (b.scheduled_for.map(|t| t.0), b.in_contact_time_zone))
            .unwrap_or_default();
        if let Some(at) = scheduled_for
            && at < now_ms()
        {
            return Err(ApiError::invalid_field(
                "scheduledFor",
                "in_the_past",
                "`scheduledFor` is in the past; send a future time, or null to send now",
            ));
        }
        let local_send_at = ab::local_send_at(&c, scheduled_for, local.unwrap_or(false))?;
        // A send at local time starts when the first time zone (UTC+14) reaches it.
        let scheduled_for = match local_send_at {
            Some(wall) => Some((wall - MAX_AHEAD_MS).max(now_ms())),
            None => scheduled_for,
        };
        if let Audience::Segment(segment) = &c.content.audience
            && let Err(StoreError::NotFound) = state.store().segment(project, segment).await
        {
            return Err(segment_gone(&c));
        }
        super::templates::authorize_from(&state, project, &c.content.from_email, "from").await?;
        if let Some(suspension) = state.store().active_suspension(project).await? {
            return Err(super::send::suspended(suspension.reason));
        }
        let max_attempts = state.jobs().config().max_attempts;
        let moved = state
            .store()
            .send_campaign(project, &id, scheduled_for, local_send_at, max_attempts)
            .await;
        if let Ok(Some(_)) = &moved {
            state.jobs().wake();
        }
        let allowed = "DRAFT or SCHEDULED";
        answer_move(&state, project, &id, moved, "you can send", allowed).await
    }

    /// Cancel a campaign
    ///
    /// `SCHEDULED`, `SENDING` or `PAUSED` to `CANCELLED`: a scheduled send never starts; a
    /// running one stops within one batch, and mail already handed to the transport stays
    /// sent; a paused one's held emails are never sent. 409 in any other status.
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
        let moved = state.store().cancel_campaign(project, &id).await;
        let allowed = "SCHEDULED, SENDING or PAUSED";
        answer_move(&state, project, &id, moved, "you can cancel", allowed).await
    }

    /// Pause a campaign
    ///
    /// `SENDING` or `SCHEDULED` to `PAUSED`. A sending campaign takes no new batch of
    /// recipients, and its emails not yet handed to the transport are held; an email being
    /// handed off at that moment, and (on PostgreSQL) a group of at most 200 being written
    /// then, still go. A scheduled one does not start at its time while paused. Nothing is
    /// lost: `POST /campaigns/:id/resume` goes on where it stopped, and every recipient gets
    /// the campaign once across pauses, restarts and instances. 409 in any other status.
    #[oai(
        path = "/campaigns/:id/pause",
        method = "post",
        operation_id = "pauseCampaign"
    )]
    async fn pause(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        let moved = state.store().pause_campaign(project, &id).await;
        let allowed = "SCHEDULED or SENDING";
        answer_move(&state, project, &id, moved, "you can pause", allowed).await
    }

    /// Resume a campaign
    ///
    /// `PAUSED` back to `SENDING`, where it stopped: the recipients not yet mailed are, once
    /// each, and the held emails go. A campaign paused before its scheduled time goes back to
    /// `SCHEDULED` if that time has not come, else it starts now. 409 in any other status.
    #[oai(
        path = "/campaigns/:id/resume",
        method = "post",
        operation_id = "resumeCampaign"
    )]
    async fn resume(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<CampaignBody>, ApiError> {
        let project = auth.0.project_id();
        let id = campaign_id(&id)?;
        let max_attempts = state.jobs().config().max_attempts;
        let moved = state
            .store()
            .resume_campaign(project, &id, max_attempts)
            .await;
        if let Ok(Some(_)) = &moved {
            state.jobs().wake();
        }
        answer_move(&state, project, &id, moved, "you can resume", "PAUSED").await
    }

    /// Preview a campaign's audience
    ///
    /// How many contacts a send of the campaign would mail now, and why the others of its
    /// audience would not be: `excluded.unsubscribed` (`subscribed: false`),
    /// `excluded.pending` (not subscribed, waiting for the confirmation of their subscription:
    /// confirmed opt-in), `excluded.notInTopic` (subscribed, but not to the campaign's topic)
    /// and `excluded.suppressed` (subscribed, but on the project's suppression list), each
    /// contact counted once, by the first of these rules. The same rules as the send, read now:
    /// a send mails `recipients` contacts if nothing changes before it.
    /// Allowed in any status. 422 when the campaign's segment no longer exists.
    #[oai(
        path = "/campaigns/:id/audience",
        method = "post",
        operation_id = "previewCampaignAudience"
    )]
    async fn audience(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The campaign's id.
        id: Path<String>,
    ) -> Result<Json<AudiencePreview>, ApiError> {
        let project = auth.0.project_id();
        let c = state
            .store()
            .campaign(project, &campaign_id(&id)?)
            .await
            .map_err(not_found)?;
        match state.store().audience_counts(&c).await? {
            Some(counts) => Ok(Json(counts.into())),
            None => Err(segment_gone(&c)),
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
    /// clicked emails; rates are per email sent, between 0 and 1. For an A/B test, `variants`
    /// has each variant's test group counts and rates, and which one won.
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
        let tallies = state.store().ab_variant_tallies(&c).await?;
        let mut stats = CampaignStats::new(c.id.to_string(), c.recipient_count, counts);
        stats.variants = ab::variant_stats(&c, &tallies);
        Ok(Json(stats))
    }
}
