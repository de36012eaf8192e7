//! OAuth sign-in: the authorization-code flow with PKCE and `state` against GitHub and Google
//! (the `oauth2` crate builds the URLs and exchanges the code), and the identity each provider
//! vouches for: a stable subject and an email address with whether the provider verified it.
//! The flow keeps no state in the process: `state` and the PKCE verifier travel in a signed,
//! short-lived cookie (see `api/oauth.rs`), so any instance can finish a flow another began.

use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse, TokenUrl,
};
use serde::Deserialize;

/// The providers Herald knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// GitHub (OAuth app).
    GitHub,
    /// Google (OpenID Connect).
    Google,
}

impl ProviderKind {
    /// The id in URLs and settings (`github`, `google`).
    pub fn id(self) -> &'static str {
        match self {
            ProviderKind::GitHub => "github",
            ProviderKind::Google => "google",
        }
    }

    /// The name to show.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::GitHub => "GitHub",
            ProviderKind::Google => "Google",
        }
    }

    /// The provider of `id`.
    pub fn parse(id: &str) -> Option<ProviderKind> {
        [ProviderKind::GitHub, ProviderKind::Google]
            .into_iter()
            .find(|p| p.id() == id)
    }

    fn default_urls(self) -> (&'static str, &'static str, &'static str) {
        match self {
            ProviderKind::GitHub => (
                "https://github.com/login/oauth/authorize",
                "https://github.com/login/oauth/access_token",
                "https://api.github.com",
            ),
            ProviderKind::Google => (
                "https://accounts.google.com/o/oauth2/v2/auth",
                "https://oauth2.googleapis.com/token",
                "https://openidconnect.googleapis.com/v1/userinfo",
            ),
        }
    }

    fn scopes(self) -> &'static [&'static str] {
        match self {
            ProviderKind::GitHub => &["read:user", "user:email"],
            ProviderKind::Google => &["openid", "email"],
        }
    }
}

/// One configured provider.
#[derive(Clone, Debug)]
pub struct Provider {
    pub kind: ProviderKind,
    pub client_id: String,
    pub client_secret: String,
    /// Overrides of the provider's URLs (authorize, token, userinfo / API base).
    pub authorize_url: Option<String>,
    pub token_url: Option<String>,
    pub userinfo_url: Option<String>,
}

/// Why a flow failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A configured URL is not a URL.
    #[error("the {0} URL of the provider is invalid")]
    BadUrl(&'static str),
    /// The provider refused the authorization code (expired, reused, wrong verifier…).
    #[error("the provider refused the authorization code: {0}")]
    Refused(String),
    /// The provider could not be reached or answered nonsense.
    #[error("the provider failed: {0}")]
    Provider(String),
    /// The provider named no usable email address.
    #[error("the provider did not give an email address for this account")]
    NoEmail,
}

/// The start of a flow: where to send the browser, and what the callback must check.
pub struct Started {
    /// The provider's authorization URL.
    pub url: String,
    /// The `state` the callback must carry back.
    pub state: String,
    /// The PKCE verifier of the code challenge sent.
    pub verifier: String,
}

/// Who the provider says signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The provider's stable user id.
    pub subject: String,
    /// The account's email address.
    pub email: String,
    /// Whether the provider verified the address.
    pub email_verified: bool,
}

/// The configured providers and an HTTP client that never follows redirects (as `oauth2`
/// requires, against SSRF through the token endpoint).
#[derive(Clone)]
pub struct OAuth {
    providers: Vec<Provider>,
    http: reqwest::Client,
}

type Client = BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

impl OAuth {
    /// The service for `providers`.
    pub fn new(providers: Vec<Provider>) -> OAuth {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(15))
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        OAuth { providers, http }
    }

    /// The configured providers.
    pub fn providers(&self) -> impl Iterator<Item = ProviderKind> + '_ {
        self.providers.iter().map(|p| p.kind)
    }

    /// The provider `id`, when configured.
    pub fn provider(&self, id: &str) -> Option<&Provider> {
        let kind = ProviderKind::parse(id)?;
        self.providers.iter().find(|p| p.kind == kind)
    }

    fn client(provider: &Provider, redirect_uri: &str) -> Result<Client, OAuthError> {
        let (authorize, token, _) = provider.kind.default_urls();
        let authorize = provider.authorize_url.as_deref().unwrap_or(authorize);
        let token = provider.token_url.as_deref().unwrap_or(token);
        Ok(BasicClient::new(ClientId::new(provider.client_id.clone()))
            .set_client_secret(ClientSecret::new(provider.client_secret.clone()))
            .set_auth_uri(
                AuthUrl::new(authorize.to_string()).map_err(|_| OAuthError::BadUrl("authorize"))?,
            )
            .set_token_uri(
                TokenUrl::new(token.to_string()).map_err(|_| OAuthError::BadUrl("token"))?,
            )
            .set_redirect_uri(
                RedirectUrl::new(redirect_uri.to_string())
                    .map_err(|_| OAuthError::BadUrl("redirect"))?,
            ))
    }

    /// Starts a flow: a random `state`, a PKCE S256 challenge, and the authorization URL.
    pub fn start(&self, provider: &Provider, redirect_uri: &str) -> Result<Started, OAuthError> {
        let client = Self::client(provider, redirect_uri)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge);
        for scope in provider.kind.scopes() {
            request = request.add_scope(Scope::new(scope.to_string()));
        }
        let (url, state) = request.url();
        Ok(Started {
            url: url.to_string(),
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
        })
    }

    /// Finishes a flow: exchanges `code` (with the PKCE verifier) for a token and asks the
    /// provider who it belongs to.
    pub async fn finish(
        &self,
        provider: &Provider,
        redirect_uri: &str,
        code: &str,
        verifier: &str,
    ) -> Result<Identity, OAuthError> {
        let client = Self::client(provider, redirect_uri)?;
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_string()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                oauth2::RequestTokenError::ServerResponse(r) => {
                    OAuthError::Refused(r.error().to_string())
                }
                other => OAuthError::Provider(other.to_string()),
            })?;
        let access = token.access_token().secret();
        let (_, _, userinfo) = provider.kind.default_urls();
        let userinfo = provider
            .userinfo_url
            .as_deref()
            .unwrap_or(userinfo)
            .trim_end_matches('/');
        match provider.kind {
            ProviderKind::Google => self.google_identity(userinfo, access).await,
            ProviderKind::GitHub => self.github_identity(userinfo, access).await,
        }
    }

    async fn get<T: for<'de> Deserialize<'de>>(
        &self,
        url: &str,
        token: &str,
    ) -> Result<T, OAuthError> {
        let response = self
            .http
            .get(url)
            .bearer_auth(token)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| OAuthError::Provider(e.to_string()))?;
        if !response.status().is_success() {
            return Err(OAuthError::Provider(format!(
                "{url} answered {}",
                response.status()
            )));
        }
        response
            .json()
            .await
            .map_err(|e| OAuthError::Provider(format!("{url}: {e}")))
    }

    /// OpenID Connect userinfo: `sub`, `email`, `email_verified`.
    async fn google_identity(&self, url: &str, token: &str) -> Result<Identity, OAuthError> {
        #[derive(Deserialize)]
        struct UserInfo {
            sub: String,
            email: Option<String>,
            #[serde(default)]
            email_verified: bool,
        }
        let info: UserInfo = self.get(url, token).await?;
        Ok(Identity {
            subject: info.sub,
            email: info.email.ok_or(OAuthError::NoEmail)?,
            email_verified: info.email_verified,
        })
    }

    /// GitHub: the user's numeric id from `/user`, the primary address from `/user/emails`.
    async fn github_identity(&self, api: &str, token: &str) -> Result<Identity, OAuthError> {
        #[derive(Deserialize)]
        struct User {
            id: u64,
        }
        #[derive(Deserialize)]
        struct Email {
            email: String,
            #[serde(default)]
            primary: bool,
            #[serde(default)]
            verified: bool,
        }
        let user: User = self.get(&format!("{api}/user"), token).await?;
        let emails: Vec<Email> = self.get(&format!("{api}/user/emails"), token).await?;
        let email = emails
            .into_iter()
            .find(|e| e.primary)
            .ok_or(OAuthError::NoEmail)?;
        Ok(Identity {
            subject: user.id.to_string(),
            email: email.email,
            email_verified: email.verified,
        })
    }
}
