//! OAuth sign-in end to end: a browser (a reqwest client with cookies) follows the redirects from
//! Herald to a loopback OpenID provider and back, with PKCE and `state` checked on both sides.

use reqwest::Method;
use reqwest::redirect::Policy;
use serde_json::Value;

use crate::support::harness::{Reply, TestApp, read};
use crate::support::oidc::{CLIENT_ID, CLIENT_SECRET, FakeProvider};
use herald::config::{OAuthProviderSettings, Settings};

fn with_providers(idp: &FakeProvider) -> impl FnOnce(&mut Settings) + '_ {
    move |s: &mut Settings| {
        let provider = |userinfo: &str| OAuthProviderSettings {
            client_id: CLIENT_ID.into(),
            client_secret: CLIENT_SECRET.into(),
            authorize_url: Some(idp.url("/authorize")),
            token_url: Some(idp.url("/token")),
            userinfo_url: Some(idp.url(userinfo)),
        };
        s.oauth.google = Some(provider("/userinfo"));
        s.oauth.github = Some(provider(""));
        s.accounts.dashboard_url = Some(idp.url("/dashboard"));
    }
}

fn browser(follow: bool) -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(if follow {
            Policy::limited(5)
        } else {
            Policy::none()
        })
        .build()
        .unwrap()
}

/// Follows the whole flow for `provider` in `client`; answers where the browser ended.
async fn sign_in(app: &TestApp, client: &reqwest::Client, provider: &str) -> (u16, String, Value) {
    let resp = client
        .get(app.url(&format!("/auth/oauth/{provider}")))
        .send()
        .await
        .unwrap();
    let url = resp.url().to_string();
    let status = resp.status().as_u16();
    let body = read(resp).await.body;
    (status, url, body)
}

async fn me(app: &TestApp, client: &reqwest::Client) -> Reply {
    app.call_with(client, Method::GET, "/users/@me", None, None, &[])
        .await
}

#[tokio::test]
async fn signing_in_with_google_creates_a_verified_account_once_and_signs_it_in_again() {
    let idp = FakeProvider::start().await;
    let app = TestApp::spawn_with(with_providers(&idp)).await;

    let config = app
        .call(Method::GET, "/auth/oauth-config", None, None)
        .await;
    assert_eq!(config.body["providers"][0]["id"], "github");
    assert_eq!(config.body["providers"][1]["id"], "google");
    assert_eq!(config.body["providers"][1]["url"], "/auth/oauth/google");
    let flags = app.call(Method::GET, "/config", None, None).await;
    assert_eq!(
        flags.body["oauthProviders"],
        serde_json::json!(["github", "google"])
    );

    idp.will_sign_in("g-1", "ada@example.com", true);
    let browser1 = browser(true);
    let (status, landed, _) = sign_in(&app, &browser1, "google").await;
    assert_eq!(status, 200);
    assert_eq!(landed, idp.url("/dashboard/"));
    let asked = idp.last_authorization();
    assert_eq!(asked["scope"], "openid email");
    assert_eq!(asked["code_challenge_method"], "S256");
    assert_eq!(
        asked["redirect_uri"],
        app.url("/auth/oauth/google/callback")
    );
    let first = me(&app, &browser1).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["email"], "ada@example.com");
    assert_eq!(first.body["emailVerified"], true);

    // The same identity in another browser is the same account.
    idp.will_sign_in("g-1", "ada@example.com", true);
    let browser2 = browser(true);
    sign_in(&app, &browser2, "google").await;
    assert_eq!(me(&app, &browser2).await.body["id"], first.body["id"]);

    // An account made this way has no password.
    let r = app
        .call(
            Method::POST,
            "/auth/login",
            None,
            Some(serde_json::json!({ "email": "ada@example.com", "password": "!oauth" })),
        )
        .await;
    r.assert_error(401, "INVALID_CREDENTIALS");
}

#[tokio::test]
async fn a_verified_address_links_to_the_existing_account_and_an_unverified_one_does_not() {
    let idp = FakeProvider::start().await;
    let app = TestApp::spawn_with(with_providers(&idp)).await;
    let owner = app.verified_user("grace@example.com").await;
    let id = me(&app, &owner).await.body["id"].clone();

    idp.will_sign_in("g-2", "grace@example.com", false);
    let (status, _, body) = sign_in(&app, &browser(true), "google").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "CONFLICT");

    // GitHub names several addresses: the primary one counts.
    idp.will_sign_in("4242", "grace@example.com", true);
    let linked = browser(true);
    let (status, _, _) = sign_in(&app, &linked, "github").await;
    assert_eq!(status, 200);
    assert_eq!(me(&app, &linked).await.body["id"], id);
    assert_eq!(
        idp.last_authorization()["scope"],
        "read:user user:email",
        "GitHub's scopes"
    );
    // The account's own address was verified: its password and sessions stay.
    assert_eq!(me(&app, &owner).await.status, 200);
    assert_eq!(login(&app, "grace@example.com").await.status, 200);
}

async fn login(app: &TestApp, email: &str) -> Reply {
    let creds = serde_json::json!({ "email": email, "password": "correct horse battery" });
    app.call(Method::POST, "/auth/login", None, Some(creds))
        .await
}

/// The pre-claimed account: someone signs up with the victim's address and a password (nothing
/// verifies it), and the victim later signs in with Google. The provider's proof wins: the
/// squatter's password and session stop working, and the account is the victim's alone.
#[tokio::test]
async fn a_provider_takes_over_an_account_whose_address_was_never_verified() {
    let idp = FakeProvider::start().await;
    let app = TestApp::spawn_with(with_providers(&idp)).await;
    let squatter = app.user("victim@example.com").await;
    let before = me(&app, &squatter).await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert_eq!(before.body["emailVerified"], false);
    assert_eq!(login(&app, "victim@example.com").await.status, 200);

    idp.will_sign_in("g-9", "victim@example.com", true);
    let victim = browser(true);
    let (status, landed, body) = sign_in(&app, &victim, "google").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(landed, idp.url("/dashboard/"));
    let now = me(&app, &victim).await;
    assert_eq!(now.status, 200, "{}", now.body);
    assert_eq!(now.body["id"], before.body["id"]);
    assert_eq!(now.body["emailVerified"], true);

    me(&app, &squatter).await.assert_error(401, "UNAUTHORIZED");
    login(&app, "victim@example.com")
        .await
        .assert_error(401, "INVALID_CREDENTIALS");
    // Signing in with the provider again keeps working, and the victim's session stays.
    idp.will_sign_in("g-9", "victim@example.com", true);
    let again = browser(true);
    sign_in(&app, &again, "google").await;
    assert_eq!(me(&app, &again).await.body["id"], before.body["id"]);
    assert_eq!(me(&app, &victim).await.status, 200);
}

#[tokio::test]
async fn a_flow_without_its_cookie_with_another_state_or_a_reused_code_signs_nobody_in() {
    let idp = FakeProvider::start().await;
    let app = TestApp::spawn_with(with_providers(&idp)).await;
    idp.will_sign_in("g-3", "mallory@example.com", true);

    // Start in one browser without following redirects: the provider's URL and its `state`.
    let victim = browser(false);
    let resp = victim
        .get(app.url("/auth/oauth/google"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 302);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with("herald_oauth=") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    assert!(cookie.contains("Path=/auth/oauth"), "{cookie}");
    let authorize = resp.headers()["location"].to_str().unwrap().to_string();
    let resp = victim.get(&authorize).send().await.unwrap();
    let callback = resp.headers()["location"].to_str().unwrap().to_string();

    // The callback in a browser that never started the flow: no cookie.
    let other = browser(false);
    let r = read(other.get(&callback).send().await.unwrap()).await;
    r.assert_error(400, "BAD_REQUEST");
    // The right browser with a forged state.
    let forged = callback.replace("state=", "state=x");
    let r = read(victim.get(&forged).send().await.unwrap()).await;
    r.assert_error(400, "BAD_REQUEST");
    // The right one once: signed in; the same code again is refused by the provider.
    let r = victim.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert!(
        r.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .starts_with("herald_token=")
    );
    let r = read(victim.get(&callback).send().await.unwrap()).await;
    r.assert_error(401, "UNAUTHORIZED");

    // Declined at the provider; a provider this deployment does not offer.
    let declined = app.url("/auth/oauth/google/callback?error=access_denied&state=x");
    read(victim.get(&declined).send().await.unwrap())
        .await
        .assert_error(401, "UNAUTHORIZED");
    read(
        victim
            .get(app.url("/auth/oauth/gitlab"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn with_signup_off_only_existing_accounts_sign_in() {
    let idp = FakeProvider::start().await;
    let app = TestApp::spawn_with(|s| {
        with_providers(&idp)(s);
        s.signup_enabled = false;
    })
    .await;
    idp.will_sign_in("g-4", "new@example.com", true);
    let (status, _, body) = sign_in(&app, &browser(true), "google").await;
    assert_eq!(status, 403, "{body}");
}
