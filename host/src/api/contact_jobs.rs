//! `/contacts/lookup`, CSV import, bulk actions and the polling of their jobs.

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::multipart::Upload;
use poem_openapi::{ApiResponse, Multipart, Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::error::{ApiError, ErrorCode, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::email::EmailAddress;
use crate::domain::ids::JobId;
use crate::jobs::{bulk, import};
use crate::store::jobs::{BulkPayload, ImportPayload, JobRecord};

/// Largest lookup batch.
pub const MAX_LOOKUP: usize = 500;
/// Largest bulk batch.
pub const MAX_BULK: usize = 1000;

/// Emails to look up.
#[derive(Object, Deserialize)]
pub struct LookupRequest {
    /// Up to 500 addresses.
    #[oai(validator(max_items = 500))]
    pub emails: Vec<String>,
}

/// A contact found by lookup.
#[derive(Object)]
pub struct FoundContact {
    /// The contact's id.
    pub id: String,
    /// The address as you sent it.
    pub email: String,
}

/// Which addresses are contacts of the project.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct LookupResult {
    /// Addresses that are contacts.
    pub found: Vec<FoundContact>,
    /// Addresses that are not (including invalid ones), as you sent them.
    pub not_found: Vec<String>,
}

/// Contacts to act on.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct BulkRequest {
    /// Up to 1,000 contact ids; ids not in the project are reported as not found.
    #[oai(validator(max_items = 1000))]
    pub contact_ids: Vec<String>,
}

/// A queued job.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct JobAccepted {
    /// Poll it at the job endpoint.
    pub job_id: String,
}

/// The state of a queued operation.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct JobStatus {
    /// The job's id.
    pub id: String,
    /// `contacts.import`, `contacts.bulk-subscribe`, `contacts.bulk-unsubscribe` or `contacts.bulk-delete`.
    pub kind: String,
    /// `queued`, `running`, `completed` or `failed`.
    pub state: String,
    /// 0 to 100.
    pub progress: i32,
    /// `{ total, succeeded, failed, created?, updated?, errors: [{ row?|contactId?, email?, error }] }`;
    /// the result so far while running, null before the job starts.
    #[oai(nullable)]
    pub result: Option<Value>,
    /// Why the job failed (or why the last attempt failed).
    #[oai(nullable)]
    pub error: Option<String>,
    /// Attempts so far.
    pub attempts: i32,
    /// When it was queued.
    pub created_at: Timestamp,
    /// When it finished.
    #[oai(nullable)]
    pub finished_at: Option<Timestamp>,
}

impl From<JobRecord> for JobStatus {
    fn from(j: JobRecord) -> JobStatus {
        let result = j
            .result
            .map(|r| r.0)
            .or_else(|| j.checkpoint.and_then(|c| c.0.get("result").cloned()));
        JobStatus {
            id: j.id,
            kind: j.kind,
            state: j.state,
            progress: j.progress,
            result,
            error: j.last_error,
            attempts: j.attempts,
            created_at: Timestamp(j.created_at),
            finished_at: j.finished_at.map(Timestamp),
        }
    }
}

/// A CSV file upload.
#[derive(Multipart)]
pub struct ImportForm {
    /// The CSV file (at most 5 MB): a header row with an `email` column, optional `subscribed`,
    /// and any other columns as custom data.
    pub file: Upload,
}

#[derive(ApiResponse)]
enum Accepted {
    /// Queued; poll the job.
    #[oai(status = 202)]
    Accepted(Json<JobAccepted>),
}

const CSV_TYPES: [&str; 6] = [
    "text/csv",
    "application/csv",
    "text/plain",
    "application/vnd.ms-excel",
    "application/octet-stream",
    "text/comma-separated-values",
];

async fn job_status(
    state: &AppState,
    auth: &SecretKeyAuth,
    id: &str,
    kinds: &[&str],
) -> Result<Json<JobStatus>, ApiError> {
    let id = JobId::parse(id).ok_or_else(|| ApiError::not_found("job"))?;
    let job = state
        .store()
        .job(auth.0.project_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if !kinds.contains(&job.kind.as_str()) {
        return Err(ApiError::not_found("job"));
    }
    Ok(Json(job.into()))
}

async fn enqueue_bulk(
    state: &AppState,
    auth: &SecretKeyAuth,
    kind: &str,
    body: BulkRequest,
) -> Result<Accepted, ApiError> {
    if body.contact_ids.is_empty() {
        return Err(ApiError::invalid_field(
            "contactIds",
            "required",
            "send at least one contact id",
        ));
    }
    if body.contact_ids.len() > MAX_BULK {
        return Err(ApiError::invalid_field(
            "contactIds",
            "too_many",
            format!(
                "at most {MAX_BULK} contact ids per call; you sent {}",
                body.contact_ids.len()
            ),
        ));
    }
    let mut ids = body.contact_ids;
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    let job = state
        .jobs()
        .enqueue(
            kind,
            auth.0.project_id(),
            BulkPayload { contact_ids: ids },
            None,
        )
        .await?;
    Ok(Accepted::Accepted(Json(JobAccepted {
        job_id: job.into_string(),
    })))
}

/// Lookup, import and bulk endpoints.
#[derive(Default)]
pub struct ContactJobsApi;

#[OpenApi(tag = "ApiTags::Contacts")]
impl ContactJobsApi {
    /// Look up contacts by email
    ///
    /// Which of up to 500 addresses are contacts of the project, matched case-insensitively.
    #[oai(
        path = "/contacts/lookup",
        method = "post",
        operation_id = "lookupContacts"
    )]
    async fn lookup(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<LookupRequest>,
    ) -> Result<Json<LookupResult>, ApiError> {
        let emails = body.0.emails;
        if emails.len() > MAX_LOOKUP {
            return Err(ApiError::invalid_field(
                "emails",
                "too_many",
                format!(
                    "at most {MAX_LOOKUP} emails per call; you sent {}",
                    emails.len()
                ),
            ));
        }
        let parsed: Vec<Option<EmailAddress>> =
            emails.iter().map(|e| EmailAddress::parse(e).ok()).collect();
        let valid: Vec<EmailAddress> = parsed.iter().flatten().cloned().collect();
        let rows = state
            .store()
            .contacts_by_emails(auth.0.project_id(), &valid)
            .await?;
        let by_email: std::collections::HashMap<String, String> =
            rows.into_iter().map(|(id, email)| (email, id)).collect();
        let mut found = Vec::new();
        let mut not_found = Vec::new();
        for (raw, parsed) in emails.into_iter().zip(parsed) {
            match parsed.and_then(|p| by_email.get(p.as_str()).cloned()) {
                Some(id) => found.push(FoundContact { id, email: raw }),
                None => not_found.push(raw),
            }
        }
        Ok(Json(LookupResult { found, not_found }))
    }

    /// Import contacts from CSV
    ///
    /// Multipart field `file`, at most 5 MB, with a header row (names case-insensitive), an
    /// `email` column, an optional `subscribed` column (true/false/1/0/yes/no) and any other
    /// columns as custom data. Queued: answers 202 with the job to poll at
    /// `GET /contacts/import/:jobId`. Bad rows are reported in the job's result; good rows go in.
    #[oai(
        path = "/contacts/import",
        method = "post",
        operation_id = "importContacts"
    )]
    async fn import(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        form: ImportForm,
    ) -> Result<Accepted, ApiError> {
        let file = form.file;
        if let Some(ct) = file.content_type() {
            let essence = ct
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if !CSV_TYPES.contains(&essence.as_str()) {
                return Err(ApiError::new(
                    poem::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    ErrorCode::InvalidRequestBody,
                    format!("the file is `{essence}`, not a CSV file"),
                )
                .with_errors(vec![FieldError::new(
                    "file",
                    "not_csv",
                    "upload a CSV file (text/csv)",
                )]));
            }
        }
        if file.size() > import::MAX_FILE_BYTES {
            return Err(super::error::payload_too_large()
                .suggest("the CSV file may be at most 5 MB; split it"));
        }
        let filename = file.file_name().map(str::to_string);
        let bytes = file
            .into_vec()
            .await
            .map_err(|e| ApiError::bad_request(format!("the upload could not be read: {e}")))?;
        if bytes.len() > import::MAX_FILE_BYTES {
            return Err(super::error::payload_too_large()
                .suggest("the CSV file may be at most 5 MB; split it"));
        }
        import::columns(&bytes)
            .map_err(|e| ApiError::invalid_field("file", "invalid_csv", e.to_string()))?;
        let job = state
            .jobs()
            .enqueue(
                import::KIND,
                auth.0.project_id(),
                ImportPayload { filename },
                Some(bytes),
            )
            .await?;
        Ok(Accepted::Accepted(Json(JobAccepted {
            job_id: job.into_string(),
        })))
    }

    /// Poll an import
    ///
    /// A finished job is kept for the server's `jobs_retention_hours` (a week by default); after
    /// that it is deleted and this answers 404.
    #[oai(
        path = "/contacts/import/:jobId",
        method = "get",
        operation_id = "getImportJob"
    )]
    async fn import_status(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The job's id.
        #[oai(name = "jobId")]
        job_id: Path<String>,
    ) -> Result<Json<JobStatus>, ApiError> {
        job_status(&state, &auth, &job_id, &[import::KIND]).await
    }

    /// Subscribe contacts in bulk
    ///
    /// Up to 1,000 ids; queued (202). Each change records `contact.subscribed` with source `bulk`.
    #[oai(
        path = "/contacts/bulk-subscribe",
        method = "post",
        operation_id = "bulkSubscribe"
    )]
    async fn bulk_subscribe(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<BulkRequest>,
    ) -> Result<Accepted, ApiError> {
        enqueue_bulk(&state, &auth, bulk::SUBSCRIBE, body.0).await
    }

    /// Unsubscribe contacts in bulk
    ///
    /// Up to 1,000 ids; queued (202). Each change records `contact.unsubscribed` with source `bulk`.
    #[oai(
        path = "/contacts/bulk-unsubscribe",
        method = "post",
        operation_id = "bulkUnsubscribe"
    )]
    async fn bulk_unsubscribe(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<BulkRequest>,
    ) -> Result<Accepted, ApiError> {
        enqueue_bulk(&state, &auth, bulk::UNSUBSCRIBE, body.0).await
    }

    /// Delete contacts in bulk
    ///
    /// Up to 1,000 ids; queued (202).
    #[oai(
        path = "/contacts/bulk-delete",
        method = "post",
        operation_id = "bulkDelete"
    )]
    async fn bulk_delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<BulkRequest>,
    ) -> Result<Accepted, ApiError> {
        enqueue_bulk(&state, &auth, bulk::DELETE, body.0).await
    }

    /// Poll a bulk action
    ///
    /// A finished job is kept for the server's `jobs_retention_hours` (a week by default); after
    /// that it is deleted and this answers 404.
    #[oai(
        path = "/contacts/bulk/:jobId",
        method = "get",
        operation_id = "getBulkJob"
    )]
    async fn bulk_status(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The job's id.
        #[oai(name = "jobId")]
        job_id: Path<String>,
    ) -> Result<Json<JobStatus>, ApiError> {
        job_status(
            &state,
            &auth,
            &job_id,
            &[bulk::SUBSCRIBE, bulk::UNSUBSCRIBE, bulk::DELETE],
        )
        .await
    }
}
