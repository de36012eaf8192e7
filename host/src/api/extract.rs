//! Extractors: the typed JSON body and the three ways a caller authenticates.
//!
//! - [`SecretKeyAuth`]: a project's `sk_` key, or a dashboard session cookie plus `X-Project-Id`.
//! - [`TrackAuth`]: the same, or the project's `pk_` key (only `POST /v1/track` takes this).
//! - [`DashboardAuth`]: a dashboard session cookie (account and project management).
//!
//! Project-scoped extractors also count the request against the project's rate limit (the public
//! key's requests against their own share of it).

use std::sync::{Arc, Mutex};

use jsonwebtoken::{Header, Validation};
use poem::http::{StatusCode, header};
use poem::{FromRequest, Request, RequestBody};
use poem_openapi::payload::{ParsePayload, Payload};
use poem_openapi::registry::{MetaSchemaRef, MetaSecurityScheme, Registry};
use poem_openapi::types::Type;
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ErrorCode, FieldError, missing_auth};
use super::state::AppState;
use crate::domain::ids::{ProjectId, SessionId, UserId};
use crate::domain::keys::KeyKind;
use crate::domain::project::{Project, Role, User};
use crate::services::ratelimit::{RateDecision, public_limit};

/// Name of the dashboard session cookie.
pub const SESSION_COOKIE: &str = "herald_token";
/// Header naming the project of a dashboard call.
pub const PROJECT_HEADER: &str = "X-Project-Id";

// ---------------------------------------------------------------------------------------------
// JSON bodies

/// A JSON request body parsed with serde, so that a failure names the exact field.
///
/// Malformed JSON and values of the wrong type are 400 `INVALID_REQUEST_BODY`; a missing
/// required field is 422 `VALIDATION_ERROR`. Both carry `errors[].field`.
pub struct JsonBody<T>(pub T);

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(content_type: &str) -> bool {
        matches!(content_type.parse::<mime::Mime>(), Ok(m) if m.type_() == "application"
            && (m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json")))
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: DeserializeOwned + Send> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let bytes = <Vec<u8> as FromRequest>::from_request(request, body).await?;
        parse_json(&bytes).map(JsonBody).map_err(Into::into)
    }
}

poem_openapi::impl_apirequest_for_payload!(JsonBody<T>, T: Type + DeserializeOwned + Send);

/// A JSON request body that may be left out: no body (with or without a JSON content type) is
/// `None`; a body is parsed as [`JsonBody`] parses it.
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<'a, T: Type + DeserializeOwned + Send> poem_openapi::ApiExtractor<'a> for OptionalJsonBody<T> {
    const TYPES: &'static [poem_openapi::ApiExtractorType] =
        &[poem_openapi::ApiExtractorType::RequestObject];

    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<poem_openapi::registry::MetaRequest> {
        Some(poem_openapi::registry::MetaRequest {
            description: None,
            content: vec![poem_openapi::registry::MetaMediaType {
                content_type: "application/json",
                schema: T::schema_ref(),
            }],
            required: false,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: poem_openapi::ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        let bytes = <Vec<u8> as FromRequest>::from_request(request, body).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(None));
        }
        if let Some(content_type) = request.content_type()
            && !<JsonBody<T> as Payload>::check_content_type(content_type)
        {
            return Err(poem_openapi::error::ContentTypeError::NotSupported {
                content_type: content_type.to_string(),
            }
            .into());
        }
        parse_json(&bytes)
            .map(|v| OptionalJsonBody(Some(v)))
            .map_err(Into::into)
    }
}

/// Parses a JSON body into `T`, mapping failures to field errors.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequestBody,
            "the request body is empty; send a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    let value = result.map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidRequestBody,
                format!("the request body is not valid JSON: {inner}"),
            );
        }
        let text = strip_location(&inner.to_string());
        if let Some(field) = text
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            let full = if path == "." {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            return ApiError::invalid_field(&full, "required", format!("`{full}` is required"));
        }
        let field = if path == "." { String::new() } else { path };
        let message = if field.is_empty() {
            format!("the request body is invalid: {text}")
        } else {
            format!("`{field}` is invalid: {text}")
        };
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequestBody,
            message,
        )
        .with_errors(vec![FieldError::new(
            if field.is_empty() {
                "body".into()
            } else {
                field
            },
            "invalid_type",
            text,
        )])
    })?;
    de.end().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequestBody,
            format!("the request body is not valid JSON: {e}"),
        )
    })?;
    Ok(value)
}

fn strip_location(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Rate-limit headers

/// A per-request slot where the project extractor leaves the rate-limit decision, so that the
/// request middleware can add the `RateLimit-*` headers to whatever response goes out.
#[derive(Clone, Default)]
pub struct RateSlot(Arc<Mutex<Option<RateDecision>>>);

impl RateSlot {
    /// Records a decision.
    pub fn set(&self, decision: RateDecision) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(decision);
    }

    /// The recorded decision, if any.
    pub fn get(&self) -> Option<RateDecision> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// ---------------------------------------------------------------------------------------------
// Sessions

/// Claims of a dashboard session token.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    /// The user id.
    pub sub: String,
    /// The session id (deleted on logout).
    pub sid: String,
    /// Issued at, unix seconds.
    pub iat: i64,
    /// Expires at, unix seconds.
    pub exp: i64,
}

/// Signs a session token.
pub fn issue_token(
    state: &AppState,
    user: &UserId,
    session: &SessionId,
    ttl_secs: i64,
) -> Result<String, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: user.to_string(),
        sid: session.to_string(),
        iat: now,
        exp: now + ttl_secs,
    };
    jsonwebtoken::encode(&Header::default(), &claims, state.jwt_encoding())
        .map_err(ApiError::internal)
}

/// The value of a cookie of the request.
pub fn cookie_value<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// The session of a request's cookie: `None` without a cookie, 401 for a dead session.
pub async fn session_of(
    state: &AppState,
    req: &Request,
) -> Result<Option<(User, SessionId)>, ApiError> {
    let Some(token) = cookie_value(req, SESSION_COOKIE).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let expired = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "the dashboard session is invalid or has expired",
        )
        .suggest("log in again with POST /auth/login")
    };
    let data = jsonwebtoken::decode::<Claims>(token, state.jwt_decoding(), &Validation::default())
        .map_err(|_| expired())?;
    let session = SessionId::parse(&data.claims.sid).ok_or_else(expired)?;
    let user = state
        .store()
        .session_user(&session)
        .await?
        .ok_or_else(expired)?;
    if user.id.as_str() != data.claims.sub {
        return Err(expired());
    }
    Ok(Some((user, session)))
}

fn state_of(req: &Request) -> Result<&AppState, ApiError> {
    req.data::<AppState>()
        .ok_or_else(|| ApiError::internal("application state missing"))
}

// ---------------------------------------------------------------------------------------------
// Security schemes

const SCHEME_SECRET: &str = "SecretKey";
const SCHEME_PUBLIC: &str = "PublicKey";
const SCHEME_DASHBOARD: &str = "DashboardSession";

fn register_schemes(registry: &mut Registry) {
    registry.create_security_scheme(
        SCHEME_SECRET,
        MetaSecurityScheme {
            ty: "http",
            description: Some("The project's secret key (`sk_…`) as `Authorization: Bearer sk_…`. It may call every endpoint."),
            name: None,
            key_in: None,
            scheme: Some("bearer"),
            bearer_format: Some("sk_…"),
            flows: None,
            openid_connect_url: None,
        },
    );
    registry.create_security_scheme(
        SCHEME_PUBLIC,
        MetaSecurityScheme {
            ty: "http",
            description: Some("The project's public key (`pk_…`) as `Authorization: Bearer pk_…`. It may call only `POST /v1/track`."),
            name: None,
            key_in: None,
            scheme: Some("bearer"),
            bearer_format: Some("pk_…"),
            flows: None,
            openid_connect_url: None,
        },
    );
    registry.create_security_scheme(
        SCHEME_DASHBOARD,
        MetaSecurityScheme {
            ty: "apiKey",
            description: Some(
                "The dashboard session cookie set by `POST /auth/login`. Calls to project endpoints also name the project in the `X-Project-Id` header; the user must be a member.",
            ),
            name: Some(SESSION_COOKIE),
            key_in: Some("cookie"),
            scheme: None,
            bearer_format: None,
            flows: None,
            openid_connect_url: None,
        },
    );
}

/// How the caller of a project endpoint authenticated.
#[derive(Clone, Debug)]
pub enum Caller {
    /// With the project's secret key.
    SecretKey,
    /// With the project's public key.
    PublicKey,
    /// With a dashboard session of a member.
    Member {
        /// The user.
        user: User,
        /// Their role in the project.
        role: Role,
    },
}

/// The project a request acts on, and who is acting.
#[derive(Clone, Debug)]
pub struct ProjectContext {
    /// The project.
    pub project: Project,
    /// The caller.
    pub caller: Caller,
}

impl ProjectContext {
    /// The project's id.
    pub fn project_id(&self) -> &ProjectId {
        &self.project.id
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
}

async fn project_context(req: &Request, allow_public: bool) -> Result<ProjectContext, ApiError> {
    let state = state_of(req)?;
    let settings = state.settings();
    let project_limit = settings.rate_limit_per_minute;
    // The secret key and the dashboard have the project's whole limit; the public key, which
    // anyone can use, its own share of it, counted apart (services::ratelimit).
    let mut limit = project_limit;
    // The request's count, when the key's lookup made it.
    let mut counted = None;
    let ctx = if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <API key>`"))?;
        let kind = KeyKind::of(token).ok_or_else(|| {
            unauthorized("this is not a Herald API key")
                .suggest("API keys start with `sk_` (secret) or `pk_` (public)")
        })?;
        let unknown = || {
            unauthorized("unknown API key")
                .suggest("keys stop working when they are regenerated; use the current ones")
        };
        let caller = match kind {
            KeyKind::Secret => Caller::SecretKey,
            KeyKind::Public if allow_public => Caller::PublicKey,
            KeyKind::Public => {
                // An unknown key is told so first; a known one is refused uncounted.
                state
                    .store()
                    .project_by_key(kind, token)
                    .await?
                    .ok_or_else(unknown)?;
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    ErrorCode::InvalidApiKey,
                    "a public key (pk_) may only call POST /v1/track",
                )
                .suggest("use the project's secret key (sk_) for this endpoint"));
            }
        };
        // The lookup counts the request against the rate limit as well (one statement on
        // PostgreSQL).
        if kind == KeyKind::Public {
            limit = public_limit(project_limit, settings.rate_limit_public_share);
        }
        let (project, decision) = state
            .rate_limiter()
            .project_by_key(state.store(), kind, token, limit)
            .await?
            .ok_or_else(unknown)?;
        counted = decision;
        ProjectContext { project, caller }
    } else if let Some((user, _)) = session_of(state, req).await? {
        let header = req
            .headers()
            .get(PROJECT_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request("dashboard calls to project endpoints must name the project")
                    .suggest("send the project's id in the X-Project-Id header")
            })?;
        let project_id = ProjectId::parse(header).ok_or_else(|| ApiError::not_found("project"))?;
        let (project, role) = state
            .store()
            .project_of_user(&user.id, &project_id)
            .await?
            .ok_or_else(|| ApiError::not_found("project"))?;
        ProjectContext {
            project,
            caller: Caller::Member { user, role },
        }
    } else {
        return Err(missing_auth());
    };
    if ctx.project.disabled {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::ProjectDisabled,
            "this project is disabled",
        ));
    }
    let decision = match counted {
        Some(decision) => decision,
        None => {
            state
                .rate_limiter()
                .hit(ctx.project.id.as_str(), limit)
                .await
        }
    };
    if let Some(slot) = req.extensions().get::<RateSlot>() {
        slot.set(decision);
    }
    if !decision.allowed {
        let message = match ctx.caller {
            Caller::PublicKey => format!(
                "this project's public key may make {limit} requests per minute \
                 (rate_limit_public_share of the project's {project_limit}); the secret key \
                 keeps its own budget"
            ),
            _ => format!("this project may make {limit} requests per minute"),
        };
        let mut err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimitExceeded,
            message,
        )
        .suggest(format!("retry after {} seconds", decision.reset_secs));
        err.retry_after = Some(decision.reset_secs);
        return Err(err);
    }
    Ok(ctx)
}

/// Implements the security-scheme extractor boilerplate.
macro_rules! security_extractor {
    ($ty:ident, [$($scheme:expr),+], |$req:ident| $body:expr) => {
        impl<'a> ApiExtractor<'a> for $ty {
            const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
            type ParamType = ();
            type ParamRawType = ();

            fn register(registry: &mut Registry) {
                register_schemes(registry);
            }

            fn security_schemes() -> Vec<&'static str> {
                vec![$($scheme),+]
            }

            async fn from_request(
                $req: &'a Request,
                _body: &mut RequestBody,
                _opts: ExtractParamOptions<()>,
            ) -> poem::Result<Self> {
                $body.map_err(Into::into)
            }
        }
    };
}

/// A project's secret key, or a member's dashboard session with `X-Project-Id`.
pub struct SecretKeyAuth(pub ProjectContext);
security_extractor!(SecretKeyAuth, [SCHEME_SECRET, SCHEME_DASHBOARD], |req| {
    project_context(req, false).await.map(SecretKeyAuth)
});

/// Any key of the project (public or secret), or a member's dashboard session.
pub struct TrackAuth(pub ProjectContext);
security_extractor!(
    TrackAuth,
    [SCHEME_PUBLIC, SCHEME_SECRET, SCHEME_DASHBOARD],
    |req| project_context(req, true).await.map(TrackAuth)
);

/// A logged-in dashboard user.
pub struct DashboardAuth {
    /// The user.
    pub user: User,
    /// Their session.
    pub session: SessionId,
}
security_extractor!(DashboardAuth, [SCHEME_DASHBOARD], |req| async {
    let state = state_of(req)?;
    match session_of(state, req).await? {
        Some((user, session)) => Ok(DashboardAuth { user, session }),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::MissingAuth,
            "log in first",
        )
        .suggest("POST /auth/login sets the session cookie")),
    }
}
.await);

/// Whether two secrets are equal, in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A request's headers as name/value pairs (names lower-cased; values that are not text left
/// out), as plugins receive them.
pub fn header_pairs(req: &Request) -> Vec<(String, String)> {
    req.headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}
