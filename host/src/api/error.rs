//! The one error type of the HTTP layer and its mapping to the spec's error bodies.
//!
//! Handlers and extractors fail with [`ApiError`]. Everything else that can fail before a
//! handler runs (unknown route, wrong method, wrong content type, unreadable parameters, a body
//! over the limit, a panic) is turned into an `ApiError` by [`classify`], and the middleware in
//! `server.rs` renders it with the request id in one of the two shapes of decisions.md.

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, Registry};
use poem_openapi::types::Type;
use poem_openapi::{ApiResponse, Object};
use serde::Serialize;

use super::timestamp::Timestamp;
use crate::store::StoreError;

/// The machine-readable codes of decisions.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ErrorCode {
    Unauthorized,
    MissingAuth,
    InvalidApiKey,
    InvalidCredentials,
    Forbidden,
    ProjectDisabled,
    NotFound,
    Conflict,
    BadRequest,
    ValidationError,
    InvalidRequestBody,
    PayloadTooLarge,
    RateLimitExceeded,
    BillingLimitExceeded,
    IdempotencyKeyReused,
    ReservedEvent,
    DomainNotVerified,
    EmailVerificationRequired,
    PluginError,
    ServiceUnavailable,
    InternalError,
}

impl ErrorCode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::MissingAuth => "MISSING_AUTH",
            ErrorCode::InvalidApiKey => "INVALID_API_KEY",
            ErrorCode::InvalidCredentials => "INVALID_CREDENTIALS",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::ProjectDisabled => "PROJECT_DISABLED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::ValidationError => "VALIDATION_ERROR",
            ErrorCode::InvalidRequestBody => "INVALID_REQUEST_BODY",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RateLimitExceeded => "RATE_LIMIT_EXCEEDED",
            ErrorCode::BillingLimitExceeded => "BILLING_LIMIT_EXCEEDED",
            ErrorCode::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            ErrorCode::ReservedEvent => "RESERVED_EVENT",
            ErrorCode::DomainNotVerified => "DOMAIN_NOT_VERIFIED",
            ErrorCode::EmailVerificationRequired => "EMAIL_VERIFICATION_REQUIRED",
            ErrorCode::PluginError => "PLUGIN_ERROR",
            ErrorCode::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            ErrorCode::InternalError => "INTERNAL_ERROR",
        }
    }
}

/// One invalid field of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Object)]
pub struct FieldError {
    /// Path of the field, such as `email` or `data.plan`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
    /// Machine-readable reason: `required`, `invalid`, `invalid_type`, `too_long`, …
    pub code: String,
}

impl FieldError {
    /// Builds a field error.
    pub fn new(field: impl Into<String>, code: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
            code: code.to_string(),
        }
    }
}

impl From<crate::domain::segment::Violation> for FieldError {
    /// A broken domain rule, reported at its field.
    fn from(v: crate::domain::segment::Violation) -> FieldError {
        FieldError::new(v.field, v.code, v.message)
    }
}

impl From<crate::domain::send::Problem> for FieldError {
    /// An invalid part of a send request, reported at its field.
    fn from(p: crate::domain::send::Problem) -> FieldError {
        FieldError::new(p.field, p.code, p.message)
    }
}

/// An error answered to a client.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable message that says what to fix.
    pub message: String,
    /// Invalid fields, when applicable.
    pub errors: Vec<FieldError>,
    /// Guidance.
    pub suggestion: Option<String>,
    /// Seconds after which a rate-limited client may retry.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Builds an error.
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            errors: Vec::new(),
            suggestion: None,
            retry_after: None,
        }
    }

    /// Adds a suggestion.
    pub fn suggest(mut self, suggestion: impl Into<String>) -> ApiError {
        self.suggestion = Some(suggestion.into());
        self
    }

    /// Adds field errors.
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> ApiError {
        self.errors = errors;
        self
    }

    /// 422 `VALIDATION_ERROR` for the given fields.
    pub fn validation(errors: Vec<FieldError>) -> ApiError {
        let message = match errors.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            _ => format!("{} fields are invalid; see `errors`", errors.len()),
        };
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::ValidationError,
            message,
        )
        .with_errors(errors)
    }

    /// 422 `VALIDATION_ERROR` for one field.
    pub fn invalid_field(field: &str, code: &str, message: impl Into<String>) -> ApiError {
        ApiError::validation(vec![FieldError::new(field, code, message)])
    }

    /// 404 `NOT_FOUND` for a resource kind.
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("{what} not found"),
        )
    }

    /// 409 `CONFLICT`.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, ErrorCode::Conflict, message)
    }

    /// 400 `BAD_REQUEST`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }

    /// 400 `BAD_REQUEST` for a path or query parameter, named in `errors[0].field`.
    pub fn invalid_parameter(name: &str, reason: &str) -> ApiError {
        ApiError::bad_request(format!("parameter `{name}` is invalid: {reason}"))
            .with_errors(vec![FieldError::new(name, "invalid", reason)])
    }

    /// 403 `FORBIDDEN`.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
    }

    /// 500 `INTERNAL_ERROR`; the cause is logged, never shown.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            "an unexpected error occurred",
        )
        .suggest("retry later; if it persists, report the request id")
    }

    /// 503 `SERVICE_UNAVAILABLE`: the database is unreachable or cannot take the work now
    /// ([`StoreError::Unavailable`]); logged with its cause, answered with `Retry-After`.
    pub fn unavailable(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "database unavailable");
        ApiError::service_unavailable(
            "the database is unavailable for a moment (restarting, unreachable or out of \
             connections)",
            "retry the request after `Retry-After`; a request with an `Idempotency-Key` cannot \
             be applied twice, one without it may have been written if the connection was lost \
             at its commit",
        )
    }

    /// 503 `SERVICE_UNAVAILABLE`: a statement ran past `database_statement_timeout_ms` and
    /// PostgreSQL cancelled it ([`StoreError::StatementTimeout`]); nothing of it was written.
    pub fn statement_timeout(cause: impl std::fmt::Display) -> ApiError {
        tracing::warn!(error = %cause, "statement cancelled by the statement timeout");
        ApiError::service_unavailable(
            "the request's database work took longer than the server allows \
             (`database_statement_timeout_ms`) and was cancelled; nothing was written",
            "retry after `Retry-After` when the database is less busy, or ask for less at once \
             (a narrower filter or search, a smaller page)",
        )
    }

    /// 503 `SERVICE_UNAVAILABLE`: the upload storage (the uploads folder or the S3 bucket)
    /// failed or cannot be reached; logged with its cause, answered with `Retry-After`.
    pub fn storage_unavailable(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "upload storage unavailable");
        ApiError::service_unavailable(
            "the upload storage is unavailable (unreachable, or refusing to store the file)",
            "retry the request after `Retry-After`; if it persists, the server's operator must \
             check the uploads folder or bucket (the cause is in the server's log)",
        )
    }

    /// The 503 shape both of the above answer: `SERVICE_UNAVAILABLE` with `Retry-After`.
    fn service_unavailable(message: &str, suggestion: &str) -> ApiError {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            message,
        )
        .suggest(suggestion);
        err.retry_after = Some(UNAVAILABLE_RETRY_AFTER_SECONDS);
        err
    }

    /// 422 `VALIDATION_ERROR` for a write that would take the project past a cap on what it may
    /// hold, naming the limit (its setting) at the field it comes from: `data` (the contact's
    /// data, `contact_data_too_large`; a new custom field, `contact_fields_limit`) or `event`
    /// (a new event name, `event_names_limit`). Nothing of the write was stored.
    pub fn cap_reached(cap: &crate::store::CapReached) -> ApiError {
        use crate::store::CapReached;
        let (field, code, suggestion) = match cap {
            CapReached::ContactData { .. } => (
                "data".to_string(),
                "contact_data_too_large",
                "store less data on the contact (unset fields with null), or keep large \
                 documents elsewhere and store a reference",
            ),
            CapReached::ContactFields { field, .. } => (
                format!("data.{field}"),
                "contact_fields_limit",
                "reuse an existing field, or delete unused ones with DELETE /contacts/fields/:field",
            ),
            CapReached::EventNames { .. } => (
                "event".to_string(),
                "event_names_limit",
                "reuse an existing event name (put the detail in data), or delete unused names \
                 with DELETE /events/:name",
            ),
        };
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::ValidationError,
            cap.to_string(),
        )
        .with_errors(vec![FieldError::new(field, code, cap.to_string())])
        .suggest(suggestion)
    }

    /// 429 `BILLING_LIMIT_EXCEEDED`: the project's cap of `category` for this period is reached;
    /// `Retry-After` is the time until the next period.
    pub fn billing_limit(category: crate::domain::billing::UsageCategory) -> ApiError {
        let period = crate::domain::billing::Period::containing(chrono::Utc::now());
        let retry_after = (period.end - chrono::Utc::now()).num_seconds().max(1) as u64;
        let mut err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::BillingLimitExceeded,
            format!(
                "the project's {} cap for this billing period is reached; nothing was written",
                category.name()
            ),
        )
        .suggest(
            "an OWNER can raise or remove the cap with PUT /users/@me/projects/{id}/billing-limits, \
             or wait for the next period",
        );
        err.retry_after = Some(retry_after);
        err
    }

    /// Maps a store error, naming the resource kind for 404s.
    pub fn from_store(err: StoreError, what: &str) -> ApiError {
        match err {
            StoreError::NotFound => ApiError::not_found(what),
            StoreError::Conflict(c) => ApiError::conflict(format!("{what} conflict: {c}")),
            StoreError::BillingLimit(category) => ApiError::billing_limit(category),
            StoreError::Cap(cap) => ApiError::cap_reached(&cap),
            e @ StoreError::Unavailable(_) => ApiError::unavailable(e),
            e @ StoreError::StatementTimeout(_) => ApiError::statement_timeout(e),
            other => ApiError::internal(other),
        }
    }
}

impl From<crate::plugins::PluginError> for ApiError {
    /// A plugin that failed (trapped, timed out, misbehaved) is the deployment's problem, not
    /// the caller's: 502 `PLUGIN_ERROR`, with the plugin's message logged and shown.
    fn from(err: crate::plugins::PluginError) -> ApiError {
        tracing::warn!(error = %err, "plugin call failed");
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::PluginError,
            format!("a plugin failed: {err}"),
        )
        .suggest("retry later; if it persists, the operator should check the plugin's logs")
    }
}

impl From<crate::services::sending_domains::SenderError> for ApiError {
    fn from(err: crate::services::sending_domains::SenderError) -> ApiError {
        match err {
            crate::services::sending_domains::SenderError::NotVerified(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::DomainNotVerified,
                err.to_string(),
            ),
            crate::services::sending_domains::SenderError::Store(e) => e.into(),
        }
    }
}

impl From<crate::services::render_budget::RenderBudgetError> for ApiError {
    /// 413 `PAYLOAD_TOO_LARGE` for a request whose rendered messages take more than the server
    /// holds at once (`sending.render_memory_mb`); 503 with `Retry-After` when it found no room
    /// in time.
    fn from(err: crate::services::render_budget::RenderBudgetError) -> ApiError {
        use crate::services::render_budget::RenderBudgetError;
        match err {
            RenderBudgetError::OverBudget { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                err.to_string(),
            )
            .suggest(
                "send to fewer recipients per request, or make the rendered content smaller; \
                 the server's operator can raise `sending.render_memory_mb`",
            ),
            RenderBudgetError::NoRoom | RenderBudgetError::Busy => {
                tracing::warn!(error = %err, "no room in the render budget");
                ApiError::service_unavailable(
                    &err.to_string(),
                    "retry the request after `Retry-After`, when the server renders less at once",
                )
            }
        }
    }
}

impl From<crate::services::send_plan::SendPlanError> for ApiError {
    /// Every problem of a send request as 422 at its field; a sender whose domain is not
    /// verified as 422 `DOMAIN_NOT_VERIFIED` at `from`.
    fn from(err: crate::services::send_plan::SendPlanError) -> ApiError {
        use crate::services::send_plan::SendPlanError;
        match err {
            SendPlanError::Invalid(problems) => {
                ApiError::validation(problems.into_iter().map(Into::into).collect())
            }
            SendPlanError::NotVerified(message) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::DomainNotVerified,
                message.clone(),
            )
            .with_errors(vec![FieldError::new(
                "from",
                "domain_not_verified",
                message,
            )])
            .suggest(
                "verify the domain with GET /domains/:id/verify once its DNS records are published",
            ),
            e @ SendPlanError::Incomplete => ApiError::internal(e),
            SendPlanError::Store(e) => e.into(),
        }
    }
}

impl From<crate::services::account_mail::AccountMailError> for ApiError {
    /// A store failure as the store's (503 when the database is unavailable); a template or
    /// message that cannot be built is the operator's configuration: 500.
    fn from(err: crate::services::account_mail::AccountMailError) -> ApiError {
        match err {
            crate::services::account_mail::AccountMailError::Store(e) => e.into(),
            other => ApiError::internal(other),
        }
    }
}

impl From<crate::domain::pagination::CursorError> for ApiError {
    /// 400 `BAD_REQUEST` on the field `cursor`.
    fn from(err: crate::domain::pagination::CursorError) -> ApiError {
        ApiError::bad_request(err.to_string()).with_errors(vec![FieldError::new(
            "cursor",
            "invalid",
            err.to_string(),
        )])
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        ApiError::from_store(err, "resource")
    }
}

/// The two error shapes of decisions.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorStyle {
    /// `{ success: false, error: { … }, timestamp }` — every endpoint but the two below.
    Standard,
    /// `{ code, error, message, time, requestId, errors? }` — `/v1/send` and `/v1/verify`.
    Public,
}

impl ErrorStyle {
    /// The style of a request path.
    pub fn for_path(path: &str) -> ErrorStyle {
        if path == "/v1/send" || path == "/v1/verify" {
            ErrorStyle::Public
        } else {
            ErrorStyle::Standard
        }
    }
}

/// Body of the standard error shape.
#[derive(Debug, Serialize, Object)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// Machine-readable code, e.g. `VALIDATION_ERROR`.
    pub code: String,
    /// What went wrong and what to fix.
    pub message: String,
    /// The HTTP status.
    pub status_code: u16,
    /// The request id (also in `X-Request-Id`).
    pub request_id: String,
    /// Invalid fields, when applicable.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
    /// Guidance.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// The standard error shape.
#[derive(Debug, Serialize, Object)]
pub struct ErrorBody {
    /// Always `false`.
    pub success: bool,
    /// The error.
    pub error: ErrorDetail,
    /// When it happened (RFC 3339).
    pub timestamp: Timestamp,
}

/// The error shape of `/v1/send` and `/v1/verify`.
#[derive(Debug, Serialize, Object)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct PublicErrorBody {
    /// The HTTP status.
    pub code: u16,
    /// Machine-readable code.
    pub error: String,
    /// What went wrong and what to fix.
    pub message: String,
    /// When it happened, unix milliseconds.
    pub time: i64,
    /// The request id.
    pub request_id: String,
    /// Invalid fields, when applicable.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
}

impl ApiError {
    /// Renders the error for a client.
    pub fn render(&self, style: ErrorStyle, request_id: &str) -> Response {
        let errors = (!self.errors.is_empty()).then(|| self.errors.clone());
        let now = chrono::Utc::now();
        let body = match style {
            ErrorStyle::Standard => serde_json::to_vec(&ErrorBody {
                success: false,
                error: ErrorDetail {
                    code: self.code.as_str().to_string(),
                    message: self.message.clone(),
                    status_code: self.status.as_u16(),
                    request_id: request_id.to_string(),
                    errors,
                    suggestion: self.suggestion.clone(),
                },
                timestamp: Timestamp(now.timestamp_millis()),
            }),
            ErrorStyle::Public => serde_json::to_vec(&PublicErrorBody {
                code: self.status.as_u16(),
                error: self.code.as_str().to_string(),
                message: self.message.clone(),
                time: now.timestamp_millis(),
                request_id: request_id.to_string(),
                errors,
            }),
        }
        .unwrap_or_default();
        let mut resp = Response::builder()
            .status(self.status)
            .content_type("application/json; charset=utf-8")
            .body(body);
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert("Retry-After", secs.into());
        }
        resp
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        self.status
    }

    fn as_response(&self) -> Response {
        // Normally the request middleware renders errors; this path only runs outside it.
        self.render(ErrorStyle::Standard, "").into_response()
    }
}

/// The `Retry-After` of a 503: a restart of PostgreSQL or a reconnection takes about a second.
const UNAVAILABLE_RETRY_AFTER_SECONDS: u64 = 1;

const DOCUMENTED: [(u16, &str); 9] = [
    (
        400,
        "Malformed request: the body is not JSON, a value has the wrong type, or a parameter is invalid.",
    ),
    (
        401,
        "Missing (`MISSING_AUTH`), unknown (`UNAUTHORIZED`) or wrong-kind (`INVALID_API_KEY`) credentials.",
    ),
    (
        403,
        "Not allowed for this role, or the project is disabled.",
    ),
    (404, "No such resource in this project."),
    (409, "Conflict with the current state."),
    (422, "Validation failed; see `errors`."),
    (429, "Rate limit exceeded; see `Retry-After`."),
    (500, "Unexpected error; report the request id."),
    (503, UNAVAILABLE_DESCRIPTION),
];

/// The document's description of the error shape's 503, by which `api::with_transport_statuses`
/// tells it from `/ready`'s own to give it `Retry-After`.
pub(crate) const UNAVAILABLE_DESCRIPTION: &str = "The database (or, for uploads, the upload \
     storage) is unavailable for a moment (`SERVICE_UNAVAILABLE`); retry after `Retry-After`.";

impl ApiResponse for ApiError {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: DOCUMENTED
                .iter()
                .map(|(status, description)| MetaResponse {
                    description,
                    status: Some(*status),
                    status_range: None,
                    content: vec![MetaMediaType {
                        content_type: "application/json; charset=utf-8",
                        schema: ErrorBody::schema_ref(),
                    }],
                    headers: vec![],
                })
                .collect(),
        }
    }

    fn register(registry: &mut Registry) {
        ErrorBody::register(registry);
        PublicErrorBody::register(registry);
    }
}

/// The error of an operation whose only failure is the server's own (a database error): the
/// signed-link pages and redirects, which answer their own 404 page. Documented as 500 and 503
/// only.
#[derive(Debug)]
pub struct ServerError(pub ApiError);

impl From<ApiError> for ServerError {
    fn from(err: ApiError) -> ServerError {
        ServerError(err)
    }
}

impl From<crate::store::StoreError> for ServerError {
    fn from(err: crate::store::StoreError) -> ServerError {
        ServerError(err.into())
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ServerError {}

impl poem::error::ResponseError for ServerError {
    fn status(&self) -> StatusCode {
        self.0.status
    }

    fn as_response(&self) -> Response {
        poem::error::ResponseError::as_response(&self.0)
    }
}

impl ApiResponse for ServerError {
    fn meta() -> MetaResponses {
        let mut meta = ApiError::meta();
        meta.responses
            .retain(|r| matches!(r.status, Some(500 | 503)));
        meta
    }

    fn register(registry: &mut Registry) {
        ApiError::register(registry);
    }
}

/// The error of a signed page that reads a form (the preference center's save): the server's
/// own (500, 503) and a body that is not a form (400; with it, 413 and 415 are documented).
#[derive(Debug)]
pub struct FormPageError(pub ApiError);

impl From<ApiError> for FormPageError {
    fn from(err: ApiError) -> FormPageError {
        FormPageError(err)
    }
}

impl std::fmt::Display for FormPageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for FormPageError {}

impl poem::error::ResponseError for FormPageError {
    fn status(&self) -> StatusCode {
        self.0.status
    }

    fn as_response(&self) -> Response {
        poem::error::ResponseError::as_response(&self.0)
    }
}

impl ApiResponse for FormPageError {
    fn meta() -> MetaResponses {
        let mut meta = ApiError::meta();
        meta.responses
            .retain(|r| matches!(r.status, Some(400 | 500 | 503)));
        meta
    }

    fn register(registry: &mut Registry) {
        ApiError::register(registry);
    }
}

/// An error of `/v1/send` and `/v1/verify`. The middleware renders every error of those paths in
/// their body (`PublicErrorBody`); this wrapper makes the OpenAPI document say so.
#[derive(Debug)]
pub struct PublicApiError(pub ApiError);

impl From<ApiError> for PublicApiError {
    fn from(err: ApiError) -> PublicApiError {
        PublicApiError(err)
    }
}

impl std::fmt::Display for PublicApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for PublicApiError {}

impl poem::error::ResponseError for PublicApiError {
    fn status(&self) -> StatusCode {
        self.0.status
    }

    fn as_response(&self) -> Response {
        self.0.render(ErrorStyle::Public, "").into_response()
    }
}

impl ApiResponse for PublicApiError {
    fn meta() -> MetaResponses {
        let mut meta = ApiError::meta();
        for response in &mut meta.responses {
            for content in &mut response.content {
                content.schema = PublicErrorBody::schema_ref();
            }
        }
        meta
    }

    fn register(registry: &mut Registry) {
        ApiError::register(registry);
    }
}

/// Turns any error that reached the middleware into an [`ApiError`].
pub fn classify(err: poem::Error) -> ApiError {
    use poem::error::{MethodNotAllowedError, NotFoundError, ReadBodyError};
    use poem_openapi::error::{
        AuthorizationError, ContentTypeError, ParseMultipartError, ParseParamError,
        ParseRequestPayloadError,
    };

    if err.is::<ApiError>() {
        return err
            .downcast::<ApiError>()
            .unwrap_or_else(ApiError::internal);
    }
    if err.is::<PublicApiError>() {
        return err
            .downcast::<PublicApiError>()
            .map(|e| e.0)
            .unwrap_or_else(ApiError::internal);
    }
    if err.is::<ServerError>() {
        return err
            .downcast::<ServerError>()
            .map(|e| e.0)
            .unwrap_or_else(ApiError::internal);
    }
    if err.is::<NotFoundError>() {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "no such endpoint",
        )
        .suggest("check the path against /openapi.json");
    }
    if err.is::<MethodNotAllowedError>() {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::BadRequest,
            "this endpoint does not accept that HTTP method",
        )
        .suggest("check the method against /openapi.json");
    }
    if let Some(e) = err.downcast_ref::<ContentTypeError>() {
        let message = match e {
            ContentTypeError::ExpectContentType => {
                "the request has a body but no Content-Type; send `Content-Type: application/json`"
                    .to_string()
            }
            ContentTypeError::NotSupported { content_type } => {
                format!(
                    "Content-Type `{content_type}` is not accepted here; send `application/json`"
                )
            }
        };
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::InvalidRequestBody,
            message,
        );
    }
    if let Some(e) = err.downcast_ref::<ParseParamError>() {
        return ApiError::invalid_parameter(e.name, &readable_reason(&e.reason));
    }
    if let Some(e) = err.downcast_ref::<ParseRequestPayloadError>() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequestBody,
            format!("the request body is invalid: {}", e.reason),
        );
    }
    if let Some(e) = err.downcast_ref::<ParseMultipartError>() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequestBody,
            format!("the multipart form is invalid: {}", e.reason),
        );
    }
    if err.is::<AuthorizationError>() {
        return missing_auth();
    }
    if let Some(e) = err.downcast_ref::<ReadBodyError>() {
        return match e {
            ReadBodyError::PayloadTooLarge => payload_too_large(),
            ReadBodyError::Io(io) if is_body_too_large(io) => payload_too_large(),
            other => ApiError::bad_request(format!("the request body could not be read: {other}")),
        };
    }
    let status = err.status();
    if status.is_server_error() {
        return ApiError::internal(err);
    }
    let code = match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::CONFLICT => ErrorCode::Conflict,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimitExceeded,
        StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::ValidationError,
        _ => ErrorCode::BadRequest,
    };
    ApiError::new(status, code, err.to_string())
}

/// Rewrites poem-openapi's validator wording ("verification failed. minimum(1, exclusive:
/// false)") into a sentence.
fn readable_reason(reason: &str) -> String {
    let bound = |prefix: &str| {
        reason
            .strip_prefix(prefix)
            .and_then(|r| r.split(',').next())
            .map(str::trim)
            .map(str::to_string)
    };
    if let Some(n) = bound("verification failed. minimum(") {
        format!("must be at least {n}")
    } else if let Some(n) = bound("verification failed. maximum(") {
        format!("must be at most {n}")
    } else {
        reason.to_string()
    }
}

/// 401 `MISSING_AUTH`.
pub fn missing_auth() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ErrorCode::MissingAuth,
        "no credentials were sent",
    )
    .suggest("send `Authorization: Bearer <API key>` (or log in to the dashboard)")
}

/// 413 `PAYLOAD_TOO_LARGE`.
pub fn payload_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        "the request body is larger than this endpoint accepts",
    )
}

/// Whether an I/O error was caused, possibly through layers of wrapping, by [`BodyTooLarge`].
fn is_body_too_large(err: &std::io::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = err.get_ref().map(|e| e as _);
    while let Some(e) = current {
        if e.is::<BodyTooLarge>() {
            return true;
        }
        current = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|e| e as _),
            None => e.source(),
        };
    }
    false
}

/// Marker error of a body that grew past its limit while being read.
#[derive(Debug, thiserror::Error)]
#[error("request body over the limit")]
pub struct BodyTooLarge;
