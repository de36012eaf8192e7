//! `/suppressions`: a project's suppression list, the addresses none of its email goes to (hard
//! bounces and complaints add themselves; an operator adds and removes addresses here).

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::EmailText;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::email::EmailAddress;
use crate::domain::pagination::PageRequest;
use crate::domain::suppression::SuppressionReason;
use crate::store::suppressions::{NewSuppression, Suppression, parse_list_key};

/// The most addresses one `POST /suppressions` takes.
pub const MAX_SUPPRESSION_EMAILS: usize = 1000;

/// Why an address is on the list.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReasonBody {
    /// A receiving server refused the address for good (a `5.x.x` bounce), or it soft-bounced
    /// `sending.soft_bounce_limit` times within `sending.soft_bounce_days` with no delivery
    /// between.
    HardBounce,
    /// The recipient marked an email as spam.
    Complaint,
    /// Added through the API.
    Manual,
}

impl From<ReasonBody> for SuppressionReason {
    fn from(r: ReasonBody) -> SuppressionReason {
        match r {
            ReasonBody::HardBounce => SuppressionReason::HardBounce,
            ReasonBody::Complaint => SuppressionReason::Complaint,
            ReasonBody::Manual => SuppressionReason::Manual,
        }
    }
}

impl From<SuppressionReason> for ReasonBody {
    fn from(r: SuppressionReason) -> ReasonBody {
        match r {
            SuppressionReason::HardBounce => ReasonBody::HardBounce,
            SuppressionReason::Complaint => ReasonBody::Complaint,
            SuppressionReason::Manual => ReasonBody::Manual,
        }
    }
}

/// An address on the list.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SuppressionBody {
    /// The address (lower-case).
    pub email: EmailText,
    /// Why it is listed.
    pub reason: ReasonBody,
    /// What the bounce or complaint said (for the soft-bounce rule, how many soft bounces in how
    /// many days); null when added through the API.
    #[oai(nullable)]
    pub detail: Option<String>,
    /// The email whose bounce or complaint listed it; null when added through the API.
    #[oai(nullable)]
    pub email_id: Option<String>,
    /// When it was listed.
    pub created_at: Timestamp,
}

impl TryFrom<Suppression> for SuppressionBody {
    type Error = ApiError;

    fn try_from(s: Suppression) -> Result<SuppressionBody, ApiError> {
        let reason = SuppressionReason::parse(&s.reason).ok_or_else(|| {
            ApiError::from(crate::store::StoreError::Corrupt(format!(
                "suppression reason `{}`",
                s.reason
            )))
        })?;
        Ok(SuppressionBody {
            email: EmailText(s.email),
            reason: reason.into(),
            detail: s.detail,
            email_id: s.email_id,
            created_at: Timestamp(s.created_at),
        })
    }
}

/// One page of the list.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SuppressionPage {
    /// The entries, newest first.
    pub data: Vec<SuppressionBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Entries in all; filled on the first page only, 0 on later pages.
    pub total: i64,
}

/// Addresses to add.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
pub struct AddSuppressions {
    /// 1 to 1,000 addresses (repeats count once).
    pub emails: Vec<String>,
    /// Why they are listed; `MANUAL` when absent. (A plain optional enum: a nullable one is an
    /// `allOf` that openapi-python-client refuses.)
    #[oai(skip_serializing_if_is_none)]
    pub reason: Option<ReasonBody>,
}

/// What an addition did.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SuppressionsAdded {
    /// Addresses listed by this request.
    pub added: u64,
    /// Addresses of the request listed already (their entries are kept as they were).
    pub already_listed: u64,
}

#[derive(ApiResponse)]
enum Deleted {
    /// Removed: the address may be mailed again.
    #[oai(status = 204)]
    NoContent,
}

/// Parses 1 to [`MAX_SUPPRESSION_EMAILS`] addresses, deduplicated; every bad one is reported at
/// `emails[i]`.
fn parse_emails(emails: &[String]) -> Result<Vec<EmailAddress>, ApiError> {
    if emails.is_empty() || emails.len() > MAX_SUPPRESSION_EMAILS {
        return Err(ApiError::invalid_field(
            "emails",
            if emails.is_empty() {
                "empty"
            } else {
                "too_many"
            },
            format!(
                "{} addresses sent; send 1 to {MAX_SUPPRESSION_EMAILS} per request",
                emails.len()
            ),
        ));
    }
    let mut errors = Vec::new();
    let mut parsed: Vec<EmailAddress> = Vec::with_capacity(emails.len());
    let mut seen = std::collections::HashSet::with_capacity(emails.len());
    for (i, e) in emails.iter().enumerate() {
        match EmailAddress::parse(e) {
            Ok(a) => {
                if seen.insert(a.as_str().to_string()) {
                    parsed.push(a);
                }
            }
            Err(err) => errors.push(FieldError::new(
                format!("emails[{i}]"),
                "invalid_email",
                format!("`{e}` is not a valid address: {err}"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(ApiError::validation(errors))
    }
}

/// The suppression list endpoints.
#[derive(Default)]
pub struct SuppressionsApi;

#[OpenApi(tag = "ApiTags::Sending")]
impl SuppressionsApi {
    /// List suppressed addresses
    ///
    /// The project's suppression list, cursor-paginated, newest first, optionally only the
    /// addresses containing `search`: the addresses no email
    /// of the project is sent to (`/v1/send`, campaigns, workflows and test sends alike; such an
    /// email is recorded `suppressed` with the reason and never handed to the transport).
    #[oai(
        path = "/suppressions",
        method = "get",
        operation_id = "listSuppressions"
    )]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page (of the same `search`).
        cursor: Query<Option<String>>,
        /// Only addresses containing this text (case-insensitive); `total` then counts those.
        search: Query<Option<String>>,
    ) -> Result<Json<SuppressionPage>, ApiError> {
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |key| {
            parse_list_key(key).is_some()
        })?;
        let search = search.0.filter(|s| !s.trim().is_empty());
        let page = state
            .store()
            .list_suppressions(auth.0.project_id(), &page, search.as_deref())
            .await?;
        Ok(Json(SuppressionPage {
            data: page
                .items
                .into_iter()
                .map(SuppressionBody::try_from)
                .collect::<Result<_, _>>()?,
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Suppress addresses
    ///
    /// Adds up to 1,000 addresses to the project's suppression list (`reason` defaults to
    /// `MANUAL`); an address listed already keeps its entry. Every invalid address is reported
    /// at its index (`emails[i]`) and nothing is added.
    #[oai(
        path = "/suppressions",
        method = "post",
        operation_id = "addSuppressions"
    )]
    async fn add(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<AddSuppressions>,
    ) -> Result<Json<SuppressionsAdded>, ApiError> {
        let emails = parse_emails(&body.0.emails)?;
        let reason: SuppressionReason = body.0.reason.unwrap_or(ReasonBody::Manual).into();
        let entries: Vec<NewSuppression> = emails
            .iter()
            .map(|e| NewSuppression {
                email: e.as_str(),
                reason,
                detail: None,
                email_id: None,
            })
            .collect();
        let added = state
            .store()
            .add_suppressions(auth.0.project_id(), &entries)
            .await?;
        Ok(Json(SuppressionsAdded {
            added,
            already_listed: entries.len() as u64 - added,
        }))
    }

    /// Remove a suppressed address
    ///
    /// Takes the address off the list (with the soft bounces counted for it): the project's
    /// email may go to it again. 404 when it is not listed.
    #[oai(
        path = "/suppressions/:email",
        method = "delete",
        operation_id = "deleteSuppression"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The address (any case).
        email: Path<String>,
    ) -> Result<Deleted, ApiError> {
        let email =
            EmailAddress::parse(&email.0).map_err(|_| ApiError::not_found("suppressed address"))?;
        if state
            .store()
            .delete_suppression(auth.0.project_id(), email.as_str())
            .await?
        {
            Ok(Deleted::NoContent)
        } else {
            Err(ApiError::not_found("suppressed address"))
        }
    }
}
