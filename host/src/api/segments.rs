//! `/segments`: named sets of a project's contacts. A `DYNAMIC` segment is a filter (the
//! `herald-filter` language) evaluated live; a `STATIC` one a stored list of members. A dynamic
//! segment with `trackMembership` also stores its members when computed, and each entry and exit
//! becomes an event (`segment.<slug>.entry` / `.exit`).

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::contacts::ContactBody;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::OneOf;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::contact::ContactUpsert;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, ProjectId, SegmentId};
use crate::domain::segment::{
    MAX_MEMBER_EMAILS, SegmentType, Violation, check_condition, check_description, check_name,
    check_new_condition, check_type, total_pages,
};
use crate::store::segments::{NewSegment, Segment, SegmentPatch};

/// How a segment's members are defined.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum SegmentKind {
    /// By a filter (`condition`), evaluated live.
    Dynamic,
    /// By a stored list of members.
    Static,
}

impl From<SegmentType> for SegmentKind {
    fn from(t: SegmentType) -> SegmentKind {
        match t {
            SegmentType::Dynamic => SegmentKind::Dynamic,
            SegmentType::Static => SegmentKind::Static,
        }
    }
}

/// A segment.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SegmentBody {
    /// Its id (`seg_…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it is for; null when none.
    #[oai(nullable)]
    pub description: Option<String>,
    /// `DYNAMIC` or `STATIC`.
    #[oai(rename = "type")]
    pub segment_type: SegmentKind,
    /// The filter of a dynamic segment; null for a static one.
    #[oai(nullable)]
    pub condition: Option<Value>,
    /// Whether `compute` stores the members of this dynamic segment and records entries and
    /// exits as events.
    pub track_membership: bool,
    /// The member count of the last compute, refresh or change of a static segment's members.
    pub member_count: i64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl From<Segment> for SegmentBody {
    fn from(s: Segment) -> SegmentBody {
        SegmentBody {
            id: s.id.into_string(),
            name: s.name,
            description: s.description,
            segment_type: s.segment_type.into(),
            condition: s.condition,
            track_membership: s.track_membership,
            member_count: s.member_count,
            created_at: Timestamp(s.created_at),
            updated_at: Timestamp(s.updated_at),
        }
    }
}

/// `POST /segments` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateSegment {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    pub description: Option<String>,
    /// `DYNAMIC` or `STATIC` (read in any case).
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub segment_type: OneOf<SegmentKind>,
    /// The filter: required for `DYNAMIC`, refused for `STATIC`.
    #[oai(nullable)]
    pub condition: Option<Value>,
    /// Store the members when computed and record entries and exits (dynamic segments;
    /// default false).
    #[oai(nullable)]
    pub track_membership: Option<bool>,
}

/// `PATCH /segments/:id` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateSegment {
    /// A new name.
    #[serde(default)]
    pub name: MaybeUndefined<String>,
    /// A new description, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    /// A new filter (dynamic segments only).
    #[serde(default)]
    pub condition: MaybeUndefined<Value>,
    /// Whether to track membership (turning it off forgets the stored members).
    #[serde(default)]
    pub track_membership: MaybeUndefined<bool>,
}

/// One page of a segment's members.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SegmentContactsPage {
    /// The members on this page, newest contacts first.
    pub data: Vec<ContactBody>,
    /// Members in all.
    pub total: i64,
    /// This page (from 1).
    pub page: u32,
    /// The page size.
    pub page_size: u32,
    /// Pages in all.
    pub total_pages: i64,
}

/// `POST /segments/:id/members` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct AddMembers {
    /// Addresses of the contacts to add (at most 1000).
    #[oai(validator(max_items = 1000))]
    pub emails: Vec<String>,
    /// Create a contact for each address that has none (default false).
    #[oai(nullable)]
    pub create_missing: Option<bool>,
    /// The subscription of contacts created by `createMissing` (default true).
    #[oai(nullable)]
    pub subscribed: Option<bool>,
}

/// What an add did.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct AddedMembers {
    /// Contacts that became members (those already members are not counted).
    pub added: i64,
    /// Addresses with no contact (always empty with `createMissing`).
    pub not_found: Vec<String>,
}

/// `DELETE /segments/:id/members` body.
#[derive(Object, Deserialize)]
pub struct RemoveMembers {
    /// Addresses of the contacts to remove (at most 1000).
    #[oai(validator(max_items = 1000))]
    pub emails: Vec<String>,
}

/// What a removal did.
#[derive(Object)]
pub struct RemovedMembers {
    /// Contacts that were members and are no longer.
    pub removed: i64,
}

/// What a compute did.
#[derive(Object)]
pub struct ComputedSegment {
    /// Contacts that entered (each recorded as `segment.<slug>.entry`).
    pub added: i64,
    /// Contacts that left (each recorded as `segment.<slug>.exit`).
    pub removed: i64,
    /// Members now.
    pub total: i64,
}

/// The refreshed count.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RefreshedSegment {
    /// Members now.
    pub member_count: i64,
}

/// Answer of `POST /segments`.
#[derive(ApiResponse)]
pub enum CreatedSegment {
    /// Created.
    #[oai(status = 201)]
    Created(Json<SegmentBody>),
}

/// Answer of `DELETE /segments/:id`.
#[derive(ApiResponse)]
pub enum DeletedSegment {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

fn segment_id(id: &str) -> Result<SegmentId, ApiError> {
    SegmentId::parse(id).ok_or_else(|| ApiError::not_found("segment"))
}

pub(super) fn field_errors(violations: Vec<Violation>) -> Vec<FieldError> {
    violations
        .into_iter()
        .map(|v| FieldError::new(v.field, v.code, v.message))
        .collect()
}

/// Collects the broken rules of a request, so that one answer names them all.
#[derive(Default)]
struct Invalid(Vec<Violation>);

impl Invalid {
    fn check<T>(&mut self, result: Result<T, Violation>) -> Option<T> {
        result.map_err(|v| self.0.push(v)).ok()
    }

    fn check_all<T>(&mut self, result: Result<T, Vec<Violation>>) -> Option<T> {
        result.map_err(|v| self.0.extend(v)).ok()
    }

    fn done(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(field_errors(self.0)))
        }
    }
}

async fn load(state: &AppState, project: &ProjectId, id: &str) -> Result<Segment, ApiError> {
    state
        .store()
        .segment(project, &segment_id(id)?)
        .await
        .map_err(|e| ApiError::from_store(e, "segment"))
}

/// 422 unless the segment is static: members are added and removed only by hand there.
fn require_static(segment: &Segment) -> Result<(), ApiError> {
    if segment.segment_type == SegmentType::Static {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            "type",
            "not_static",
            "the members of a DYNAMIC segment follow its condition; add or remove members only \
             in a STATIC segment",
        ))
    }
}

/// Parses up to 1000 addresses, deduplicated; every bad one is reported at `emails[i]`.
fn parse_emails(emails: &[String]) -> Result<Vec<EmailAddress>, ApiError> {
    if emails.len() > MAX_MEMBER_EMAILS {
        return Err(ApiError::invalid_field(
            "emails",
            "too_many",
            format!(
                "{} addresses sent; at most {MAX_MEMBER_EMAILS} per request",
                emails.len()
            ),
        ));
    }
    let mut errors = Vec::new();
    let mut parsed: Vec<EmailAddress> = Vec::new();
    for (i, e) in emails.iter().enumerate() {
        match EmailAddress::parse(e) {
            Ok(a) => {
                if !parsed.contains(&a) {
                    parsed.push(a);
                }
            }
            Err(err) => errors.push(FieldError::new(
                format!("emails[{i}]"),
                "invalid_email",
                err.to_string(),
            )),
        }
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(ApiError::validation(errors))
    }
}

/// The contacts of the project among `emails`: their ids and the addresses with none.
async fn find_contacts(
    state: &AppState,
    project: &ProjectId,
    emails: &[EmailAddress],
) -> Result<(Vec<ContactId>, Vec<String>), ApiError> {
    let found = state.store().contacts_by_emails(project, emails).await?;
    let ids = found
        .iter()
        .filter_map(|(id, _)| ContactId::parse(id))
        .collect();
    let not_found = emails
        .iter()
        .filter(|e| !found.iter().any(|(_, f)| f == e.as_str()))
        .map(|e| e.to_string())
        .collect();
    Ok((ids, not_found))
}

/// The segments endpoints.
#[derive(Default)]
pub struct SegmentsApi;

#[OpenApi(tag = "ApiTags::Segments")]
impl SegmentsApi {
    /// List segments
    ///
    /// Every segment of the project, newest first, each with its cached `memberCount`: the
    /// list itself, not paginated.
    #[oai(path = "/segments", method = "get", operation_id = "listSegments")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Vec<SegmentBody>>, ApiError> {
        let segments = state.store().list_segments(auth.0.project_id()).await?;
        Ok(Json(segments.into_iter().map(Into::into).collect()))
    }

    /// Create a segment
    ///
    /// A `DYNAMIC` segment requires a `condition` (a filter); a `STATIC` one refuses it. A
    /// malformed filter is 422 with the path of each mistake in `errors[].field`
    /// (`condition.groups[0].filters[1].operator`).
    #[oai(path = "/segments", method = "post", operation_id = "createSegment")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateSegment>,
    ) -> Result<CreatedSegment, ApiError> {
        let req = body.0;
        let mut invalid = Invalid::default();
        let name = invalid.check(check_name(&req.name));
        let description = req
            .description
            .as_deref()
            .map(|d| invalid.check(check_description(d)));
        let segment_type = invalid.check(check_type(req.segment_type.as_str()));
        let condition = segment_type
            .and_then(|t| invalid.check_all(check_new_condition(t, req.condition.as_ref())));
        invalid.done()?;
        let (Some(name), Some(segment_type), Some(condition)) = (name, segment_type, condition)
        else {
            return Err(ApiError::internal("a checked field has no value"));
        };
        let new = NewSegment {
            name,
            description: description.flatten().flatten(),
            segment_type,
            condition,
            track_membership: req.track_membership.unwrap_or(false),
        };
        let segment = state
            .store()
            .insert_segment(auth.0.project_id(), &new)
            .await?;
        Ok(CreatedSegment::Created(Json(segment.into())))
    }

    /// Get a segment
    #[oai(path = "/segments/:id", method = "get", operation_id = "getSegment")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
    ) -> Result<Json<SegmentBody>, ApiError> {
        Ok(Json(load(&state, auth.0.project_id(), &id).await?.into()))
    }

    /// Update a segment
    ///
    /// Changes only the fields sent: `name`, `description` (null removes it), `condition`
    /// (dynamic segments only) and `trackMembership`. A changed condition takes effect at once
    /// for the live members; stored members follow at the next compute.
    #[oai(
        path = "/segments/:id",
        method = "patch",
        operation_id = "updateSegment"
    )]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
        body: JsonBody<UpdateSegment>,
    ) -> Result<Json<SegmentBody>, ApiError> {
        let project = auth.0.project_id();
        let segment = load(&state, project, &id).await?;
        let req = body.0;
        let mut invalid = Invalid::default();
        let name = match req.name {
            MaybeUndefined::Value(n) => invalid.check(check_name(&n)),
            MaybeUndefined::Null => {
                invalid.0.push(not_null("name"));
                None
            }
            MaybeUndefined::Undefined => None,
        };
        let description = match req.description {
            MaybeUndefined::Value(d) => invalid.check(check_description(&d)),
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Undefined => None,
        };
        let condition = match (req.condition, segment.segment_type) {
            (MaybeUndefined::Undefined, _) => None,
            (_, SegmentType::Static) => {
                invalid.0.push(Violation {
                    field: "condition".into(),
                    code: "not_allowed",
                    message: "a STATIC segment has no `condition`".into(),
                });
                None
            }
            (MaybeUndefined::Null, SegmentType::Dynamic) => {
                invalid.0.push(not_null("condition"));
                None
            }
            (MaybeUndefined::Value(c), SegmentType::Dynamic) => {
                invalid.check_all(check_condition(&c)).map(|_| c)
            }
        };
        let track_membership = match req.track_membership {
            MaybeUndefined::Value(t) => Some(t),
            MaybeUndefined::Null => {
                invalid.0.push(not_null("trackMembership"));
                None
            }
            MaybeUndefined::Undefined => None,
        };
        invalid.done()?;
        let patch = SegmentPatch {
            name,
            description,
            condition,
            track_membership,
        };
        let segment = state
            .store()
            .update_segment(project, &segment.id, &patch)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(segment.into()))
    }

    /// Delete a segment
    ///
    /// 409 while an active campaign uses it as its audience.
    #[oai(
        path = "/segments/:id",
        method = "delete",
        operation_id = "deleteSegment"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
    ) -> Result<DeletedSegment, ApiError> {
        let project = auth.0.project_id();
        let segment = load(&state, project, &id).await?;
        let users = state
            .store()
            .active_campaigns_using_segment(project, &segment.id)
            .await?;
        if !users.is_empty() {
            let names: Vec<String> = users.into_iter().map(|(_, name)| name).collect();
            return Err(ApiError::conflict(format!(
                "the segment is the audience of active campaigns: {}",
                names.join(", ")
            ))
            .suggest("cancel those campaigns or let them finish first"));
        }
        state
            .store()
            .delete_segment(project, &segment.id)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(DeletedSegment::Deleted)
    }

    /// List a segment's members
    ///
    /// Page-based. Live for a dynamic segment (its condition evaluated now); the stored members
    /// for a static one. Newest contacts first.
    #[oai(
        path = "/segments/:id/contacts",
        method = "get",
        operation_id = "listSegmentContacts"
    )]
    async fn contacts(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
        /// The page, from 1 (default 1).
        #[oai(validator(minimum(value = "1")))]
        page: Query<Option<u32>>,
        /// Members per page, 1 to 100 (default 20).
        #[oai(
            name = "pageSize",
            validator(minimum(value = "1"), maximum(value = "100"))
        )]
        page_size: Query<Option<u32>>,
    ) -> Result<Json<SegmentContactsPage>, ApiError> {
        let segment = load(&state, auth.0.project_id(), &id).await?;
        let page = page.0.unwrap_or(1);
        let page_size = page_size.0.unwrap_or(20);
        let (contacts, total) = state
            .store()
            .segment_contacts(
                &segment,
                page,
                page_size,
                state.settings().segments.members_count_cache_ms(),
            )
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(SegmentContactsPage {
            data: super::contacts::bodies(&state, auth.0.project_id(), contacts).await?,
            total,
            page,
            page_size,
            total_pages: total_pages(total, page_size),
        }))
    }

    /// Add members to a static segment
    ///
    /// Adds the contacts of up to 1000 addresses. With `createMissing`, an address without a
    /// contact gets one (subscribed as `subscribed`, default true); otherwise it is listed in
    /// `notFound`. A dynamic segment is 422.
    #[oai(
        path = "/segments/:id/members",
        method = "post",
        operation_id = "addSegmentMembers"
    )]
    async fn add_members(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
        body: JsonBody<AddMembers>,
    ) -> Result<Json<AddedMembers>, ApiError> {
        let project = auth.0.project_id();
        let segment = load(&state, project, &id).await?;
        require_static(&segment)?;
        let req = body.0;
        let emails = parse_emails(&req.emails)?;
        let (mut ids, mut not_found) = find_contacts(&state, project, &emails).await?;
        if req.create_missing.unwrap_or(false) {
            for email in std::mem::take(&mut not_found) {
                let upsert = ContactUpsert {
                    email: EmailAddress::from_trusted(email),
                    subscribed: req.subscribed,
                    subscribed_default: true,
                    resubscribe: true,
                    data: Default::default(),
                    topics: Vec::new(),
                };
                let outcome = state
                    .store()
                    .upsert_contact(project, &upsert)
                    .await
                    .map_err(|e| ApiError::from_store(e, "contact"))?;
                ids.push(outcome.contact.id);
            }
        }
        let added = state
            .store()
            .add_segment_members(project, &segment.id, &ids)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(AddedMembers { added, not_found }))
    }

    /// Remove members from a static segment
    ///
    /// Removes the contacts of up to 1000 addresses; unknown addresses and non-members are
    /// ignored. A dynamic segment is 422.
    #[oai(
        path = "/segments/:id/members",
        method = "delete",
        operation_id = "removeSegmentMembers"
    )]
    async fn remove_members(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
        body: JsonBody<RemoveMembers>,
    ) -> Result<Json<RemovedMembers>, ApiError> {
        let project = auth.0.project_id();
        let segment = load(&state, project, &id).await?;
        require_static(&segment)?;
        let emails = parse_emails(&body.0.emails)?;
        let (ids, _) = find_contacts(&state, project, &emails).await?;
        let removed = state
            .store()
            .remove_segment_members(project, &segment.id, &ids)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(RemovedMembers { removed }))
    }

    /// Compute a segment
    ///
    /// For a dynamic segment with `trackMembership`: reconciles the stored members with the
    /// condition and records each entry as `segment.<slug>.entry` and each exit as
    /// `segment.<slug>.exit` (data `{ segmentId, segmentName }`; slug: the name lower-cased,
    /// non-alphanumerics to `-`). For any other segment it only counts: `added` and `removed`
    /// are 0 and no event is recorded. Stores the count as `memberCount`.
    #[oai(
        path = "/segments/:id/compute",
        method = "post",
        operation_id = "computeSegment"
    )]
    async fn compute(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
    ) -> Result<Json<ComputedSegment>, ApiError> {
        let segment = load(&state, auth.0.project_id(), &id).await?;
        if segment.segment_type == SegmentType::Dynamic && segment.track_membership {
            let outcome = state
                .store()
                .compute_segment(&segment)
                .await
                .map_err(|e| ApiError::from_store(e, "segment"))?;
            return Ok(Json(ComputedSegment {
                added: outcome.added,
                removed: outcome.removed,
                total: outcome.total,
            }));
        }
        let total = state
            .store()
            .refresh_segment(&segment)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(ComputedSegment {
            added: 0,
            removed: 0,
            total,
        }))
    }

    /// Refresh a segment's count
    ///
    /// Counts the members now (live for a dynamic segment) and stores the count as
    /// `memberCount`. Writes no membership and records no event.
    #[oai(
        path = "/segments/:id/refresh",
        method = "post",
        operation_id = "refreshSegment"
    )]
    async fn refresh(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The segment's id.
        id: Path<String>,
    ) -> Result<Json<RefreshedSegment>, ApiError> {
        let segment = load(&state, auth.0.project_id(), &id).await?;
        let member_count = state
            .store()
            .refresh_segment(&segment)
            .await
            .map_err(|e| ApiError::from_store(e, "segment"))?;
        Ok(Json(RefreshedSegment { member_count }))
    }
}

fn not_null(field: &str) -> Violation {
    Violation {
        field: field.into(),
        code: "required",
        message: format!("`{field}` cannot be removed; send a new value or leave it out"),
    }
}
