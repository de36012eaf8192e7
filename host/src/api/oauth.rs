//! OAuth sign-in: `GET /auth/oauth-config` lists the configured providers;
//! `GET /auth/oauth/:provider` sends the browser to the provider (authorization code with PKCE
//! S256 and `state`); `GET /auth/oauth/:provider/callback` checks `state`, exchanges the code
//! and signs the person in: by a linked identity, else by linking to the account of the same
//! address when the provider verified it, else by creating an account (unless signup is off).
//! An account whose own address was never verified (anyone may sign up with any address) is
//! not linked beside its password: the provider's proof takes it over, and its password,
//! sessions and other identities are dropped.
//! `state` and the PKCE verifier travel in a signed cookie scoped to `/auth/oauth` that lives
//! ten minutes, so no instance keeps the flow in memory.

use jsonwebtoken::{Header, Validation};
use poem::http::StatusCode;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::{Deserialize, Serialize};

use super::ApiTags;
use super::auth::open_session;
use super::error::{ApiError, ErrorCode};
use super::extract::{constant_time_eq, cookie_value};
use super::state::AppState;
use crate::domain::email::EmailAddress;
use crate::services::oauth::{OAuthError, Provider};
use crate::store::StoreError;
use crate::store::accounts::Linked;

/// The cookie carrying a flow's `state` and PKCE verifier.
const FLOW_COOKIE: &str = "herald_oauth";
/// How long a flow may take, in seconds.
const FLOW_SECONDS: i64 = 600;

/// One sign-in provider.
#[derive(Object)]
pub struct OAuthProviderBody {
    /// `github` or `google`.
    pub id: String,
    /// The name to show on the button.
    pub name: String,
    /// Where the button leads (this server's path that starts the flow).
    pub url: String,
}

/// The configured sign-in providers.
#[derive(Object)]
pub struct OAuthConfigBody {
    /// The providers, possibly none.
    pub providers: Vec<OAuthProviderBody>,
}

#[derive(ApiResponse)]
enum StartResponse {
    /// Off to the provider; the flow cookie is set.
    #[oai(status = 302)]
    Found(
        #[oai(header = "Location")] String,
        #[oai(header = "Set-Cookie")] String,
    ),
}

#[derive(ApiResponse)]
enum CallbackResponse {
    /// Signed in: the session cookie is set and the browser goes to the dashboard.
    #[oai(status = 302)]
    Found(
        #[oai(header = "Location")] String,
        #[oai(header = "Set-Cookie")] String,
    ),
}

/// What the flow cookie holds (a JWT under the deployment's secret).
#[derive(Serialize, Deserialize)]
struct FlowClaims {
    /// Always `oauth`, so no other token of the deployment passes for one.
    typ: String,
    /// The provider id.
    prv: String,
    /// The `state` sent to the provider.
    st: String,
    /// The PKCE verifier.
    pv: String,
    /// Expiry, unix seconds.
    exp: i64,
}

fn secure(state: &AppState) -> &'static str {
    if state.settings().public_url().starts_with("https://") {
        "; Secure"
    } else {
        ""
    }
}

fn configured<'s>(state: &'s AppState, id: &str) -> Result<&'s Provider, ApiError> {
    state.oauth().provider(id).ok_or_else(|| {
        ApiError::not_found("sign-in provider")
            .suggest("GET /auth/oauth-config lists the providers this deployment offers")
    })
}

fn redirect_uri(state: &AppState, provider: &str) -> String {
    format!("{}/auth/oauth/{provider}/callback", state.links().base())
}

fn flow_failed(message: &str) -> ApiError {
    ApiError::bad_request(format!("{message}; start the sign-in again"))
}

fn upstream(err: OAuthError) -> ApiError {
    match err {
        OAuthError::Refused(_) | OAuthError::NoEmail => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            err.to_string(),
        ),
        other => ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::PluginError,
            format!("signing in failed upstream: {other}"),
        )
        .suggest("retry later; if it persists, the operator should check the oauth settings"),
    }
}

/// The OAuth sign-in endpoints.
#[derive(Default)]
pub struct OAuthApi;

#[OpenApi(tag = "ApiTags::Auth")]
impl OAuthApi {
    /// Sign-in providers
    ///
    /// Public. The OAuth providers this deployment offers and where each one's button leads.
    #[oai(
        path = "/auth/oauth-config",
        method = "get",
        operation_id = "getOAuthConfig"
    )]
    async fn config(&self, state: poem::web::Data<&AppState>) -> Json<OAuthConfigBody> {
        Json(OAuthConfigBody {
            providers: state
                .oauth()
                .providers()
                .map(|kind| OAuthProviderBody {
                    id: kind.id().into(),
                    name: kind.name().into(),
                    url: format!("/auth/oauth/{}", kind.id()),
                })
                .collect(),
        })
    }

    /// Start signing in with a provider
    ///
    /// Public. Redirects the browser to the provider's consent page (authorization code with
    /// PKCE S256 and `state`), with a flow cookie that lasts ten minutes. 404 for a provider
    /// this deployment does not offer.
    #[oai(
        path = "/auth/oauth/:provider",
        method = "get",
        operation_id = "startOAuth"
    )]
    async fn start(
        &self,
        state: poem::web::Data<&AppState>,
        /// `github` or `google`.
        provider: Path<String>,
    ) -> Result<StartResponse, ApiError> {
        let configured = configured(&state, &provider)?;
        let started = state
            .oauth()
            .start(configured, &redirect_uri(&state, &provider))
            .map_err(upstream)?;
        let claims = FlowClaims {
            typ: "oauth".into(),
            prv: provider.0.clone(),
            st: started.state,
            pv: started.verifier,
            exp: chrono::Utc::now().timestamp() + FLOW_SECONDS,
        };
        let token = jsonwebtoken::encode(&Header::default(), &claims, state.jwt_encoding())
            .map_err(ApiError::internal)?;
        let cookie = format!(
            "{FLOW_COOKIE}={token}; Path=/auth/oauth; HttpOnly; SameSite=Lax; Max-Age={FLOW_SECONDS}{}",
            secure(&state)
        );
        Ok(StartResponse::Found(started.url, cookie))
    }

    /// Finish signing in with a provider
    ///
    /// Public; the provider sends the browser here. Checks `state` against the flow cookie,
    /// exchanges the code, and signs in the account linked to the provider's identity, else
    /// the account of the same address when the provider verified it (linking the two; when
    /// the account's address was not verified, its password and sessions end and only the
    /// provider signs in, until a password reset sets a new password), else a new account with
    /// that address verified (403 when signup is off). Redirects to the
    /// dashboard with the session cookie set. 400 when the flow cookie is missing, expired or
    /// does not match; 401 when the provider refused; 409 when an account has the address but
    /// the provider did not verify it.
    #[oai(
        path = "/auth/oauth/:provider/callback",
        method = "get",
        operation_id = "finishOAuth"
    )]
    async fn callback(
        &self,
        state: poem::web::Data<&AppState>,
        req: &poem::Request,
        /// `github` or `google`.
        provider: Path<String>,
        /// The authorization code.
        code: Query<Option<String>>,
        /// The `state` sent to the provider.
        #[oai(name = "state")]
        flow_state: Query<Option<String>>,
        /// Set by the provider when the person declined.
        error: Query<Option<String>>,
    ) -> Result<CallbackResponse, ApiError> {
        let configured = configured(&state, &provider)?;
        if let Some(error) = error.0 {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                format!("the provider did not authorize the sign-in: {error}"),
            ));
        }
        let cookie = cookie_value(req, FLOW_COOKIE)
            .ok_or_else(|| flow_failed("the sign-in flow cookie is missing or expired"))?;
        let mut validation = Validation::default();
        validation.leeway = 0;
        let claims = jsonwebtoken::decode::<FlowClaims>(cookie, state.jwt_decoding(), &validation)
            .map_err(|_| flow_failed("the sign-in flow cookie is invalid or expired"))?
            .claims;
        let state_ok = flow_state.0.as_deref().is_some_and(|s| {
            claims.typ == "oauth" && constant_time_eq(s.as_bytes(), claims.st.as_bytes())
        });
        if !state_ok || claims.prv != provider.0 {
            return Err(flow_failed(
                "the sign-in `state` does not match this browser's flow",
            ));
        }
        let code = code
            .0
            .filter(|c| !c.is_empty() && c.len() <= 2048)
            .ok_or_else(|| flow_failed("the provider sent no authorization code"))?;
        let identity = state
            .oauth()
            .finish(
                configured,
                &redirect_uri(&state, &provider),
                &code,
                &claims.pv,
            )
            .await
            .map_err(upstream)?;
        let user = sign_in(&state, &provider, identity).await?;
        let session = open_session(&state, &user.id).await?;
        tracing::info!(user_id = %user.id, provider = %provider.0, "signed in with OAuth");
        Ok(CallbackResponse::Found(
            state.settings().dashboard_url() + "/",
            session,
        ))
    }
}

/// The account of `identity`: linked, linked now, or created.
async fn sign_in(
    state: &AppState,
    provider: &str,
    identity: crate::services::oauth::Identity,
) -> Result<crate::domain::project::User, ApiError> {
    let store = state.store();
    if let Some(user) = store.user_by_identity(provider, &identity.subject).await? {
        return Ok(user);
    }
    let email = EmailAddress::parse(&identity.email).map_err(|_| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "the provider's email address for this account is not usable",
        )
    })?;
    if let Some(user) = store.user_by_email(&email).await? {
        if !identity.email_verified {
            return Err(ApiError::conflict(
                "an account with this address exists, and the provider has not verified the \
                 address, so they cannot be linked",
            )
            .suggest("verify the address with the provider, or log in with the password"));
        }
        let linked = store
            .link_identity(provider, &identity.subject, &user)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ApiError::conflict("the account was deleted meanwhile")
                    .suggest("start the sign-in again"),
                other => other.into(),
            })?;
        if linked == Linked::TookOver {
            tracing::info!(
                user_id = %user.id, provider,
                "an account with an unverified address was taken over by the provider's proof"
            );
        }
        return Ok(crate::domain::project::User {
            email_verified: true,
            ..user
        });
    }
    if !state.settings().signup_enabled {
        return Err(ApiError::forbidden(
            "signup is disabled on this deployment; an existing account can sign in",
        ));
    }
    if !identity.email_verified {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "the provider has not verified this account's email address",
        ));
    }
    match store
        .create_user_with_identity(&email, provider, &identity.subject)
        .await
    {
        Ok(user) => Ok(user),
        // Created by a concurrent sign-in of the same person.
        Err(StoreError::Conflict(crate::store::Conflict::Email)) => store
            .user_by_identity(provider, &identity.subject)
            .await?
            .ok_or_else(|| ApiError::conflict("the account is being created; retry")),
        Err(other) => Err(other.into()),
    }
}
