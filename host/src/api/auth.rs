//! `/auth`: dashboard signup, login and logout with the `herald_token` session cookie.

use poem::http::StatusCode;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::error::{ApiError, ErrorCode};
use super::extract::{JsonBody, RateSlot, SESSION_COOKIE, cookie_value, issue_token, session_of};
use super::state::AppState;
use crate::domain::email::EmailAddress;
use crate::domain::ids::UserId;
use crate::domain::password::{self, Password};
use crate::domain::project::User;
use crate::store::StoreError;

/// Email and password.
#[derive(Object, Deserialize)]
pub struct Credentials {
    /// The account's address.
    pub email: String,
    /// At least 8 characters.
    pub password: String,
}

/// A user as the auth endpoints show it.
#[derive(Object)]
pub struct UserRef {
    /// The user's id (`usr_…`).
    pub id: String,
    /// The user's address.
    pub email: String,
}

/// `{ user }`.
#[derive(Object)]
pub struct UserEnvelope {
    /// The user.
    pub user: UserRef,
}

impl From<&User> for UserEnvelope {
    fn from(u: &User) -> UserEnvelope {
        UserEnvelope {
            user: UserRef {
                id: u.id.to_string(),
                email: u.email.to_string(),
            },
        }
    }
}

#[derive(ApiResponse)]
enum SignupResponse {
    /// The account was created and the session cookie set.
    #[oai(status = 201)]
    Created(Json<UserEnvelope>, #[oai(header = "Set-Cookie")] String),
}

#[derive(ApiResponse)]
enum LoginResponse {
    /// Logged in; the session cookie is set.
    #[oai(status = 200)]
    Ok(Json<UserEnvelope>, #[oai(header = "Set-Cookie")] String),
}

#[derive(ApiResponse)]
enum LogoutResponse {
    /// Logged out; the session cookie is cleared.
    #[oai(status = 204)]
    NoContent(#[oai(header = "Set-Cookie")] String),
}

fn session_cookie(state: &AppState, token: &str, max_age: i64) -> String {
    let secure = if state.settings().public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}")
}

async fn open_session(state: &AppState, user: &UserId) -> Result<String, ApiError> {
    let ttl_secs = (state.settings().session_ttl_hours.max(1) * 3600) as i64;
    let session = state.store().create_session(user, ttl_secs * 1000).await?;
    let token = issue_token(state, user, &session, ttl_secs)?;
    Ok(session_cookie(state, &token, ttl_secs))
}

fn invalid_credentials() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ErrorCode::InvalidCredentials,
        "the email or password is wrong",
    )
}

/// The client address a request came from (the connection's peer).
fn client_ip(req: &poem::Request) -> String {
    req.remote_addr()
        .as_socket_addr()
        .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string())
}

/// Counts one login or signup attempt against the per-address limit and, for a login, the
/// per-account limit; 429 with `Retry-After` beyond either. Counted before the password is
/// checked, so a flood costs a counter, not an argon2 run.
async fn count_attempt(
    state: &AppState,
    req: &poem::Request,
    account: Option<&EmailAddress>,
) -> Result<(), ApiError> {
    let settings = state.settings();
    let per_ip = settings.auth_attempts_per_ip_per_minute;
    let by_address = state
        .rate_limiter()
        .hit(&format!("auth:ip:{}", client_ip(req)), per_ip)
        .await;
    // The `RateLimit-*` headers show the limit closest to refusing.
    let show = |decision| {
        if let Some(slot) = req.extensions().get::<RateSlot>() {
            slot.set(decision);
        }
    };
    show(by_address);
    if !by_address.allowed {
        return Err(too_many_attempts(
            format!(
                "too many login and signup attempts from this address (at most {per_ip} a minute)"
            ),
            by_address.reset_secs,
        ));
    }
    if let Some(email) = account {
        let per_account = settings.login_attempts_per_account_per_minute;
        let by_account = state
            .rate_limiter()
            .hit(&format!("auth:account:{}", email.as_str()), per_account)
            .await;
        if by_account.remaining < by_address.remaining || !by_account.allowed {
            show(by_account);
        }
        if !by_account.allowed {
            return Err(too_many_attempts(
                format!(
                    "too many login attempts for this account (at most {per_account} a minute)"
                ),
                by_account.reset_secs,
            ));
        }
    }
    Ok(())
}

fn too_many_attempts(message: String, retry_after: u64) -> ApiError {
    let mut err = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::RateLimitExceeded,
        message,
    )
    .suggest(format!("retry after {retry_after} seconds"));
    err.retry_after = Some(retry_after);
    err
}

/// The authentication endpoints.
#[derive(Default)]
pub struct AuthApi;

#[OpenApi(tag = "ApiTags::Auth")]
impl AuthApi {
    /// Sign up
    ///
    /// Creates a dashboard account and logs it in. A deployment can disable signup
    /// (`signup_enabled = false`), in which case this answers 403. Attempts are limited per
    /// client address (429 with `Retry-After`).
    #[oai(path = "/auth/signup", method = "post", operation_id = "signup")]
    async fn signup(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<Credentials>,
    ) -> Result<SignupResponse, ApiError> {
        count_attempt(&state, req, None).await?;
        if !state.settings().signup_enabled {
            return Err(
                ApiError::forbidden("signup is disabled on this deployment").suggest(
                    "ask the operator for an account, or run `herald init` on a new deployment",
                ),
            );
        }
        let email = EmailAddress::parse(&body.0.email)
            .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
        let password = Password::parse(body.0.password)
            .map_err(|m| ApiError::invalid_field("password", "too_short", m))?;
        let hash = password::hash(password).await.map_err(ApiError::internal)?;
        let user = state
            .store()
            .create_user(&email, &hash)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => {
                    ApiError::conflict("an account with this email already exists")
                        .suggest("log in with POST /auth/login")
                }
                other => ApiError::internal(other),
            })?;
        let cookie = open_session(&state, &user.id).await?;
        Ok(SignupResponse::Created(Json((&user).into()), cookie))
    }

    /// Log in
    ///
    /// Sets the `herald_token` cookie (HttpOnly, SameSite=Lax, Secure behind HTTPS). Wrong
    /// credentials answer 401 `INVALID_CREDENTIALS`, whether or not the email exists. Attempts
    /// are limited per client address and per account (429 with `Retry-After`).
    #[oai(path = "/auth/login", method = "post", operation_id = "login")]
    async fn login(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<Credentials>,
    ) -> Result<LoginResponse, ApiError> {
        let email = EmailAddress::parse(&body.0.email).ok();
        count_attempt(&state, req, email.as_ref()).await?;
        let Some(email) = email else {
            return Err(invalid_credentials());
        };
        let found = state.store().user_with_password(&email).await?;
        let (user, stored) = match found {
            Some((user, hash)) => (Some(user), Some(hash)),
            None => (None, None),
        };
        if !password::verify(body.0.password, stored).await {
            return Err(invalid_credentials());
        }
        let user = user.ok_or_else(invalid_credentials)?;
        let cookie = open_session(&state, &user.id).await?;
        Ok(LoginResponse::Ok(Json((&user).into()), cookie))
    }

    /// Log out
    ///
    /// Ends the session and clears the cookie. Answers 204 even without a session.
    #[oai(path = "/auth/logout", method = "get", operation_id = "logout")]
    async fn logout(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
    ) -> Result<LogoutResponse, ApiError> {
        if cookie_value(req, SESSION_COOKIE).is_some()
            && let Ok(Some((_, session))) = session_of(&state, req).await
        {
            state.store().delete_session(&session).await?;
        }
        Ok(LogoutResponse::NoContent(session_cookie(&state, "", 0)))
    }
}
