//! `/contacts/:id/emails` and `/contacts/:id/executions`: what happened to one contact, for its
//! page in the dashboard: the emails sent to it and its executions of every workflow.

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::ApiTags;
use super::emails::EmailSummaryBody;
use super::error::ApiError;
use super::executions::ExecutionPage;
use super::extract::SecretKeyAuth;
use super::state::AppState;
use crate::domain::ids::{ContactId, EmailId, ExecutionId, ProjectId};
use crate::domain::pagination::PageRequest;

/// A page of a contact's emails.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ContactEmailPage {
    /// The emails, newest first.
    pub data: Vec<EmailSummaryBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// The contact's emails in all; filled on the first page only, 0 on later pages.
    pub total: i64,
}

/// The contact of the project `id` names (404 otherwise) and the page asked of its list, whose
/// cursor must name an id `valid` accepts.
async fn contact_page(
    state: &AppState,
    project: &ProjectId,
    id: &str,
    limit: Option<u32>,
    cursor: Option<&str>,
    valid: impl Fn(&str) -> bool,
) -> Result<(ContactId, PageRequest), ApiError> {
    let page = PageRequest::new(limit, cursor, valid)?;
    let id = ContactId::parse(id).ok_or_else(|| ApiError::not_found("contact"))?;
    state
        .store()
        .contact(project, &id)
        .await
        .map_err(|e| ApiError::from_store(e, "contact"))?;
    Ok((id, page))
}

/// A contact's history endpoints.
#[derive(Default)]
pub struct ContactHistoryApi;

#[OpenApi(tag = "ApiTags::Contacts")]
impl ContactHistoryApi {
    /// List a contact's emails
    ///
    /// The emails sent (or queued, or suppressed) to the contact, by any path (`/v1/send`,
    /// campaigns, workflows, test sends of its address), cursor-paginated, newest first. Each
    /// without its history: `GET /emails/:id` has it.
    #[oai(
        path = "/contacts/:id/emails",
        method = "get",
        operation_id = "listContactEmails"
    )]
    async fn emails(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        id: Path<String>,
        /// Page size, 1 to 100 (default 20).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<ContactEmailPage>, ApiError> {
        let project = auth.0.project_id();
        let (contact, page) =
            contact_page(&state, project, &id, limit.0, cursor.0.as_deref(), |id| {
                EmailId::parse(id).is_some()
            })
            .await?;
        let page = state
            .store()
            .contact_emails(project, &contact, &page)
            .await?;
        Ok(Json(ContactEmailPage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// List a contact's workflow executions
    ///
    /// The contact's executions of every workflow of the project, cursor-paginated, newest
    /// first, without their step runs (`GET /workflows/:id/executions/:executionId` has them).
    #[oai(
        path = "/contacts/:id/executions",
        method = "get",
        operation_id = "listContactExecutions"
    )]
    async fn executions(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The contact's id.
        id: Path<String>,
        /// Page size, 1 to 100 (default 20).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<ExecutionPage>, ApiError> {
        let project = auth.0.project_id();
        let (contact, page) =
            contact_page(&state, project, &id, limit.0, cursor.0.as_deref(), |id| {
                ExecutionId::parse(id).is_some()
            })
            .await?;
        let page = state
            .store()
            .contact_executions(project, &contact, &page)
            .await?;
        Ok(Json(page.into()))
    }
}
