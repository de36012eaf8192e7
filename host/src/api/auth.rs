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
use crate::store::accounts::TokenPurpose;

/// Email and password.
#[derive(Object, Deserialize)]
pub struct Credentials {
    /// The account's address.
    pub email: String,
    /// At least 8 characters.
    pub password: String,
}

/// Email and password, and the invitation the account is created through, if any.
#[derive(Object, Deserialize)]
pub struct Signup {
    /// The account's address.
    pub email: String,
    /// At least 8 characters.
    pub password: String,
    /// The `invitation` parameter of a mailed invitation link: the account joins that project
    /// with the invited role, and its address counts as verified. The address must be the
    /// invited one.
    #[oai(nullable)]
    #[serde(default)]
    pub invitation: Option<String>,
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
    /// The account was created and, unless the deployment requires a verified address first
    /// (then a verification link is mailed), the session cookie set.
    #[oai(status = 201)]
    Created(
        Json<UserEnvelope>,
        #[oai(header = "Set-Cookie")] Option<String>,
    ),
}

/// `{ email }`.
#[derive(Object, Deserialize)]
pub struct AccountEmail {
    /// The account's address.
    pub email: String,
}

/// `{ email? }`: the address to verify; without it, the logged-in user's.
#[derive(Object, Deserialize)]
pub struct VerificationRequest {
    /// The account's address; optional with a session cookie.
    #[oai(nullable)]
    #[serde(default)]
    pub email: Option<String>,
}

/// `{ token }` from a mailed link.
#[derive(Object, Deserialize)]
pub struct TokenBody {
    /// The `token` parameter of the link.
    pub token: String,
}

/// `{ token, password }`.
#[derive(Object, Deserialize)]
pub struct PasswordReset {
    /// The `token` parameter of the mailed link.
    pub token: String,
    /// The new password, at least 8 characters.
    pub password: String,
}

/// `{ success: true }`: the request was accepted (the same answer whether or not the account
/// exists).
#[derive(Object)]
pub struct Accepted {
    /// Always true.
    pub success: bool,
}

#[derive(ApiResponse)]
enum AcceptedResponse {
    /// Accepted; a mail is on its way if the account exists and needs one.
    #[oai(status = 200)]
    Ok(Json<Accepted>),
}

#[derive(ApiResponse)]
enum VerifiedResponse {
    /// The address is verified; the session cookie is set.
    #[oai(status = 200)]
    Ok(Json<UserEnvelope>, #[oai(header = "Set-Cookie")] String),
}

#[derive(ApiResponse)]
enum ResetResponse {
    /// The password is changed and every session of the account has ended; log in again.
    #[oai(status = 200)]
    Ok(Json<UserEnvelope>),
}

/// A fresh single-use token for a mailed link and the hash that is stored.
pub(super) fn new_token() -> (String, String) {
    use base64::Engine as _;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let hash = token_hash(&token);
    (token, hash)
}

pub(super) fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn invalid_token() -> ApiError {
    ApiError::invalid_field(
        "token",
        "invalid_token",
        "the link is invalid, already used or expired",
    )
    .suggest("request a new link")
}

/// Mails `user` a link that verifies their address, in the language of the request `req`.
async fn mail_verification(
    state: &AppState,
    req: &poem::Request,
    user: &User,
) -> Result<(), ApiError> {
    let settings = state.settings();
    let hours = settings.accounts.verify_token_hours.max(1);
    let (token, hash) = new_token();
    state
        .store()
        .create_account_token(
            &user.id,
            TokenPurpose::VerifyEmail,
            &hash,
            &user.email,
            (hours * 3_600_000) as i64,
        )
        .await?;
    let link = format!("{}/verify-email?token={token}", settings.dashboard_url());
    let vars = serde_json::json!({ "email": user.email.as_str(), "link": link, "hours": hours });
    state
        .account_mail()
        .send(
            "verify-email",
            user.email.as_str(),
            crate::i18n::for_request(req),
            &vars,
        )
        .await
        .map_err(ApiError::from)
}

/// Counts one account mail to `email` against its per-address limit (429 beyond).
async fn count_account_mail(state: &AppState, email: &EmailAddress) -> Result<(), ApiError> {
    let limit = state.settings().accounts.mail_per_address_per_minute;
    let decision = state
        .rate_limiter()
        .hit(&format!("auth:mail:{}", email.as_str()), limit)
        .await;
    if decision.allowed {
        Ok(())
    } else {
        Err(too_many_attempts(
            format!("too many account mails to this address (at most {limit} a minute)"),
            decision.reset_secs,
        ))
    }
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

pub(super) async fn open_session(state: &AppState, user: &UserId) -> Result<String, ApiError> {
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

pub(super) fn too_many_attempts(message: String, retry_after: u64) -> ApiError {
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
        body: JsonBody<Signup>,
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
        let taken = |e| match e {
            StoreError::Conflict(crate::store::Conflict::Email) => {
                ApiError::conflict("an account with this email already exists")
                    .suggest("log in with POST /auth/login")
            }
            other => other.into(),
        };
        if let Some(invitation) = &body.0.invitation {
            let (user, _project) = state
                .store()
                .create_invited_user(&email, &hash, &token_hash(invitation))
                .await
                .map_err(|e| match e {
                    StoreError::Conflict(crate::store::Conflict::Email) => {
                        ApiError::conflict("an account with this email already exists").suggest(
                            "log in with POST /auth/login, then accept the invitation with \
                             POST /users/@me/invitations/accept and its token",
                        )
                    }
                    other => other.into(),
                })?
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "invitation",
                        "invalid_invitation",
                        "the invitation is invalid, expired, or was sent to another address",
                    )
                    .suggest("sign up with the invited address, or ask for a new invitation")
                })?;
            let cookie = open_session(&state, &user.id).await?;
            return Ok(SignupResponse::Created(Json((&user).into()), Some(cookie)));
        }
        let user = state
            .store()
            .create_user(&email, &hash)
            .await
            .map_err(taken)?;
        if state.settings().accounts.require_email_verification {
            mail_verification(&state, req, &user).await?;
            return Ok(SignupResponse::Created(Json((&user).into()), None));
        }
        let cookie = open_session(&state, &user.id).await?;
        Ok(SignupResponse::Created(Json((&user).into()), Some(cookie)))
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
        if state.settings().accounts.require_email_verification && !user.email_verified {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::EmailVerificationRequired,
                "this account's email address is not verified yet",
            )
            .suggest("open the link mailed at signup, or ask for a new one with POST /auth/request-verification"));
        }
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

    /// Request an email verification link
    ///
    /// Mails a link that verifies the account's address (`<dashboard_url>/verify-email?token=…`,
    /// single-use, valid `accounts.verify_token_hours`). The address is the body's `email`, or
    /// the logged-in user's. Answers the same whether or not the account exists or is already
    /// verified. Limited per client address and per recipient (429 with `Retry-After`).
    #[oai(
        path = "/auth/request-verification",
        method = "post",
        operation_id = "requestVerification"
    )]
    async fn request_verification(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<VerificationRequest>,
    ) -> Result<AcceptedResponse, ApiError> {
        count_attempt(&state, req, None).await?;
        let user = match body.0.email {
            Some(email) => {
                let email = EmailAddress::parse(&email).map_err(|e| {
                    ApiError::invalid_field("email", "invalid_email", e.to_string())
                })?;
                count_account_mail(&state, &email).await?;
                state.store().user_by_email(&email).await?
            }
            None => match session_of(&state, req).await? {
                Some((user, _)) => {
                    count_account_mail(&state, &user.email).await?;
                    Some(user)
                }
                None => {
                    return Err(ApiError::invalid_field(
                        "email",
                        "required",
                        "the account's email is required without a session",
                    ));
                }
            },
        };
        if let Some(user) = user.filter(|u| !u.email_verified) {
            mail_verification(&state, req, &user).await?;
        }
        Ok(AcceptedResponse::Ok(Json(Accepted { success: true })))
    }

    /// Verify an email address
    ///
    /// Uses the token of a verification link: the address it was mailed to is verified (if it is
    /// still the account's) and the session cookie is set. A token works once; an unknown, used
    /// or expired one is 422 on `token`.
    #[oai(
        path = "/auth/verify-email",
        method = "post",
        operation_id = "verifyAccountEmail"
    )]
    async fn verify_email(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<TokenBody>,
    ) -> Result<VerifiedResponse, ApiError> {
        count_attempt(&state, req, None).await?;
        let user = state
            .store()
            .verify_email_with_token(&token_hash(&body.0.token))
            .await?
            .ok_or_else(invalid_token)?;
        let cookie = open_session(&state, &user.id).await?;
        Ok(VerifiedResponse::Ok(Json((&user).into()), cookie))
    }

    /// Request a password reset
    ///
    /// Mails a link to choose a new password (`<dashboard_url>/reset-password?token=…`,
    /// single-use, valid `accounts.reset_token_minutes`), if an account has this address.
    /// Answers the same whether or not it exists. Limited per client address and per recipient
    /// (429 with `Retry-After`).
    #[oai(
        path = "/auth/request-password-reset",
        method = "post",
        operation_id = "requestPasswordReset"
    )]
    async fn request_password_reset(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<AccountEmail>,
    ) -> Result<AcceptedResponse, ApiError> {
        count_attempt(&state, req, None).await?;
        let email = EmailAddress::parse(&body.0.email)
            .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
        count_account_mail(&state, &email).await?;
        if let Some(user) = state.store().user_by_email(&email).await? {
            let settings = state.settings();
            let minutes = settings.accounts.reset_token_minutes.max(1);
            let (token, hash) = new_token();
            state
                .store()
                .create_account_token(
                    &user.id,
                    TokenPurpose::ResetPassword,
                    &hash,
                    &user.email,
                    (minutes * 60_000) as i64,
                )
                .await?;
            let link = format!("{}/reset-password?token={token}", settings.dashboard_url());
            let vars = serde_json::json!({ "email": user.email.as_str(), "link": link, "minutes": minutes });
            state
                .account_mail()
                .send(
                    "reset-password",
                    user.email.as_str(),
                    crate::i18n::for_request(req),
                    &vars,
                )
                .await?;
        }
        Ok(AcceptedResponse::Ok(Json(Accepted { success: true })))
    }

    /// Reset a password
    ///
    /// Uses the token of a reset link to set a new password (at least 8 characters). Every
    /// session of the account ends; log in again with the new password. A token works once; an
    /// unknown, used or expired one is 422 on `token`.
    #[oai(
        path = "/auth/reset-password",
        method = "post",
        operation_id = "resetPassword"
    )]
    async fn reset_password(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        body: JsonBody<PasswordReset>,
    ) -> Result<ResetResponse, ApiError> {
        count_attempt(&state, req, None).await?;
        let PasswordReset { token, password } = body.0;
        let password = Password::parse(password)
            .map_err(|m| ApiError::invalid_field("password", "too_short", m))?;
        let hash = password::hash(password).await.map_err(ApiError::internal)?;
        let user = state
            .store()
            .reset_password_with_token(&token_hash(&token), &hash)
            .await?
            .ok_or_else(invalid_token)?;
        Ok(ResetResponse::Ok(Json((&user).into())))
    }
}
