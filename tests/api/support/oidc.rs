//! A small OAuth 2.0 / OpenID provider on loopback for the sign-in tests: an authorization
//! endpoint that redirects back with a code, a token endpoint that checks the client's Basic
//! credentials, the redirect URI and the PKCE S256 verifier (RFC 7636), Google's userinfo shape
//! (`sub`, `email`, `email_verified`) and GitHub's (`/user`, `/user/emails`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use poem::http::StatusCode;
use poem::web::{Data, Form, Query};
use poem::{EndpointExt, Request, Response, Route, handler};
use serde_json::{Value, json};
use sha2::Digest;

pub const CLIENT_ID: &str = "herald-client";
pub const CLIENT_SECRET: &str = "herald-secret";

/// Who the provider says signs in next.
#[derive(Clone, Debug)]
pub struct Person {
    pub subject: String,
    pub email: String,
    pub verified: bool,
}

struct Grant {
    challenge: String,
    redirect_uri: String,
    person: Person,
}

#[derive(Default)]
struct Provider {
    next: Option<Person>,
    grants: HashMap<String, Grant>,
    tokens: HashMap<String, Person>,
    /// Every authorization request's query.
    pub authorizations: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Provider>>;

/// A running provider.
pub struct FakeProvider {
    pub addr: SocketAddr,
    state: Shared,
}

impl FakeProvider {
    pub async fn start() -> FakeProvider {
        let state: Shared = Arc::default();
        let app = Route::new()
            .at("/authorize", poem::get(authorize))
            .at("/token", poem::post(token))
            .at("/userinfo", poem::get(userinfo))
            .at("/user", poem::get(github_user))
            .at("/user/emails", poem::get(github_emails))
            .at("/dashboard/", poem::get(dashboard))
            .data(state.clone());
        let addr = super::httpd::serve(app).await;
        FakeProvider { addr, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The person the next authorization signs in.
    pub fn will_sign_in(&self, subject: &str, email: &str, verified: bool) {
        self.state.lock().unwrap().next = Some(Person {
            subject: subject.into(),
            email: email.into(),
            verified,
        });
    }

    /// The query of the last authorization request.
    pub fn last_authorization(&self) -> HashMap<String, String> {
        self.state
            .lock()
            .unwrap()
            .authorizations
            .last()
            .cloned()
            .unwrap()
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(body.to_string())
}

#[handler]
fn authorize(Query(q): Query<HashMap<String, String>>, state: Data<&Shared>) -> Response {
    let mut provider = state.lock().unwrap();
    provider.authorizations.push(q.clone());
    let redirect = q.get("redirect_uri").cloned().unwrap_or_default();
    let ok = q.get("response_type").map(String::as_str) == Some("code")
        && q.get("client_id").map(String::as_str) == Some(CLIENT_ID)
        && q.get("code_challenge_method").map(String::as_str) == Some("S256")
        && q.contains_key("code_challenge")
        && q.contains_key("state");
    let Some(person) = provider.next.clone().filter(|_| ok) else {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body("bad authorization request");
    };
    let code = format!("code-{}", provider.grants.len() + 1);
    provider.grants.insert(
        code.clone(),
        Grant {
            challenge: q["code_challenge"].clone(),
            redirect_uri: redirect.clone(),
            person,
        },
    );
    let location = format!("{redirect}?code={code}&state={}", q["state"]);
    Response::builder()
        .status(StatusCode::FOUND)
        .header("location", location)
        .finish()
}

#[handler]
fn token(
    req: &Request,
    Form(form): Form<HashMap<String, String>>,
    state: Data<&Shared>,
) -> Response {
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"));
    let client_ok = req
        .header("authorization")
        .is_some_and(|v| v == format!("Basic {basic}"));
    if !client_ok {
        return json_response(
            StatusCode::UNAUTHORIZED,
            json!({ "error": "invalid_client" }),
        );
    }
    let mut provider = state.lock().unwrap();
    let code = form.get("code").cloned().unwrap_or_default();
    // A code works once.
    let Some(grant) = provider.grants.remove(&code) else {
        return json_response(StatusCode::BAD_REQUEST, json!({ "error": "invalid_grant" }));
    };
    let verifier = form.get("code_verifier").cloned().unwrap_or_default();
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    if form.get("grant_type").map(String::as_str) != Some("authorization_code")
        || challenge != grant.challenge
        || form.get("redirect_uri") != Some(&grant.redirect_uri)
    {
        return json_response(StatusCode::BAD_REQUEST, json!({ "error": "invalid_grant" }));
    }
    let access = format!("at-{code}");
    provider.tokens.insert(access.clone(), grant.person);
    json_response(
        StatusCode::OK,
        json!({ "access_token": access, "token_type": "bearer", "expires_in": 3600 }),
    )
}

fn person_of(req: &Request, state: &Shared) -> Option<Person> {
    let access = req
        .header("authorization")?
        .strip_prefix("Bearer ")?
        .to_string();
    state.lock().unwrap().tokens.get(&access).cloned()
}

#[handler]
fn userinfo(req: &Request, state: Data<&Shared>) -> Response {
    match person_of(req, &state) {
        Some(p) => json_response(
            StatusCode::OK,
            json!({ "sub": p.subject, "email": p.email, "email_verified": p.verified }),
        ),
        None => json_response(
            StatusCode::UNAUTHORIZED,
            json!({ "error": "invalid_token" }),
        ),
    }
}

#[handler]
fn github_user(req: &Request, state: Data<&Shared>) -> Response {
    match person_of(req, &state) {
        Some(p) => json_response(
            StatusCode::OK,
            json!({ "id": p.subject.parse::<u64>().unwrap_or(1), "login": "octocat" }),
        ),
        None => json_response(
            StatusCode::UNAUTHORIZED,
            json!({ "message": "Bad credentials" }),
        ),
    }
}

#[handler]
fn github_emails(req: &Request, state: Data<&Shared>) -> Response {
    match person_of(req, &state) {
        Some(p) => json_response(
            StatusCode::OK,
            json!([
                { "email": "old@example.com", "primary": false, "verified": true },
                { "email": p.email, "primary": true, "verified": p.verified },
            ]),
        ),
        None => json_response(
            StatusCode::UNAUTHORIZED,
            json!({ "message": "Bad credentials" }),
        ),
    }
}

/// Where a finished sign-in lands (`accounts.dashboard_url` points here).
#[handler]
fn dashboard() -> &'static str {
    "dashboard"
}
