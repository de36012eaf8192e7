//! Dashboard accounts: signup, login, logout, the current user and project management.

use reqwest::Method;
use serde_json::json;

use crate::support::harness::{Reply, TestApp};

#[tokio::test]
async fn signup_login_logout() {
    let app = TestApp::spawn().await;
    let jar = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let r = app
        .call_with(
            &jar,
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "Owner@Example.com", "password": "s3cret-pass" })),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["user"]["email"], "owner@example.com");
    assert!(r.body["user"]["id"].as_str().unwrap().starts_with("usr_"));
    let cookie = r.header("set-cookie").unwrap().to_string();
    assert!(cookie.starts_with("herald_token="));
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/")
    );
    assert!(
        !cookie.contains("Secure"),
        "plain-HTTP deployments cannot use Secure cookies"
    );

    let me = app
        .call_with(&jar, Method::GET, "/users/@me", None, None, &[])
        .await;
    assert_eq!(me.status, 200);
    assert_eq!(me.body["email"], "owner@example.com");

    // The same address again: 409.
    let r = app
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "owner@example.com", "password": "another-pass" })),
        )
        .await;
    r.assert_error(409, "CONFLICT");

    // Logout clears the cookie and ends the session server-side.
    let stolen = cookie.split(';').next().unwrap().to_string();
    let r = app
        .call_with(&jar, Method::GET, "/auth/logout", None, None, &[])
        .await;
    assert_eq!(r.status, 204);
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    app.call_with(&jar, Method::GET, "/users/@me", None, None, &[])
        .await
        .assert_error(401, "MISSING_AUTH");
    let r = app
        .call_with(
            &app.client,
            Method::GET,
            "/users/@me",
            None,
            None,
            &[("Cookie", &stolen)],
        )
        .await;
    r.assert_error(401, "UNAUTHORIZED");

    // Login: right password works; wrong password and unknown email look the same.
    let r = app
        .call_with(
            &jar,
            Method::POST,
            "/auth/login",
            None,
            Some(json!({ "email": "OWNER@example.com", "password": "s3cret-pass" })),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["user"]["email"], "owner@example.com");
    assert_eq!(
        app.call_with(&jar, Method::GET, "/users/@me", None, None, &[])
            .await
            .status,
        200
    );
    let wrong = app
        .call(
            Method::POST,
            "/auth/login",
            None,
            Some(json!({ "email": "owner@example.com", "password": "wrong-pass" })),
        )
        .await;
    wrong.assert_error(401, "INVALID_CREDENTIALS");
    let unknown = app
        .call(
            Method::POST,
            "/auth/login",
            None,
            Some(json!({ "email": "nobody@example.com", "password": "wrong-pass" })),
        )
        .await;
    unknown.assert_error(401, "INVALID_CREDENTIALS");
    assert_eq!(
        wrong.body["error"]["message"],
        unknown.body["error"]["message"]
    );
    let r = app
        .call(
            Method::POST,
            "/auth/login",
            None,
            Some(json!({ "email": "not an email", "password": "x" })),
        )
        .await;
    r.assert_error(401, "INVALID_CREDENTIALS");
}

#[tokio::test]
async fn signup_validation_and_the_disable_setting() {
    let app = TestApp::spawn().await;
    let r = app
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "a@example.com", "password": "short" })),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["password"]);
    let r = app
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "bad", "password": "long enough" })),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["email"]);
    let r = app
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "a@example.com" })),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["password"]);

    let closed = TestApp::spawn_with(|s| s.signup_enabled = false).await;
    let r = closed
        .call(
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "a@example.com", "password": "long enough" })),
        )
        .await;
    r.assert_error(403, "FORBIDDEN");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disabled")
    );
}

#[tokio::test]
async fn projects_create_list_rename_delete() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    assert!(p.id.starts_with("prj_"));
    assert!(p.public_key.starts_with("pk_") && p.secret_key.starts_with("sk_"));

    let r = app
        .call_with(
            &p.owner,
            Method::GET,
            "/users/@me/projects",
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    let list = r.body.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], p.id.as_str());
    assert_eq!(list[0]["role"], "OWNER");
    // Keys are shown whole only on creation and rotation.
    assert!(!r.body.to_string().contains(&p.secret_key));
    assert!(
        p.secret_key.starts_with(
            list[0]["secretKeyHint"]
                .as_str()
                .unwrap()
                .trim_end_matches('…')
        )
    );

    let path = format!("/users/@me/projects/{}", p.id);
    let r = app
        .call_with(
            &p.owner,
            Method::PATCH,
            &path,
            None,
            Some(json!({ "name": "  Renamed  " })),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "Renamed");
    let r = app
        .call_with(
            &p.owner,
            Method::PATCH,
            &path,
            None,
            Some(json!({ "name": "" })),
            &[],
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            "/users/@me/projects",
            None,
            Some(json!({ "name": " " })),
            &[],
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");

    p.contact(&app, "gone@example.com", json!({ "a": 1 })).await;
    let r = app
        .call_with(&p.owner, Method::DELETE, &path, None, None, &[])
        .await;
    assert_eq!(r.status, 204);
    app.get("/contacts", &p.secret_key)
        .await
        .assert_error(401, "UNAUTHORIZED");
    let r = app
        .call_with(
            &p.owner,
            Method::GET,
            "/users/@me/projects",
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(r.body, json!([]));
    let r = app
        .call_with(&p.owner, Method::DELETE, &path, None, None, &[])
        .await;
    r.assert_error(404, "NOT_FOUND");
}

/// Waits (up to 10 s) for an account mail to `to`, written by the `outbox` transport, whose
/// link's `token` or `invitation` (read from the decoded text part) is not among `known`, and answers it.
pub async fn mailed_token(app: &TestApp, to: &str, known: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let fresh = app
            .outbox_messages()
            .into_iter()
            .filter(|m| m.contains(&format!("To: {to}")))
            .map(|m| {
                let parsed = mail_parser::MessageParser::default()
                    .parse(m.as_bytes())
                    .expect("a parsable mail");
                let text = parsed.body_text(0).expect("a text part").to_string();
                let (at, param) = ["token=", "invitation="]
                    .iter()
                    .find_map(|p| text.find(p).map(|at| (at, p.len())))
                    .expect("a link with a token");
                let at = at + param;
                text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                    .collect::<String>()
            })
            .find(|t| !known.contains(&t.as_str()));
        if let Some(token) = fresh {
            return token;
        }
        assert!(std::time::Instant::now() < deadline, "no new mail to {to}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

pub fn jar() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_required_verification_is_done_by_the_mailed_link_once() {
    let app = TestApp::spawn_with(|s| s.accounts.require_email_verification = true).await;
    let client = jar();
    let creds = json!({ "email": "new@example.com", "password": "correct horse battery" });
    let r = app
        .call_with(
            &client,
            Method::POST,
            "/auth/signup",
            None,
            Some(creds.clone()),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.headers.get("set-cookie").is_none(),
        "no session before verification"
    );
    app.call_with(
        &client,
        Method::POST,
        "/auth/login",
        None,
        Some(creds.clone()),
        &[],
    )
    .await
    .assert_error(403, "EMAIL_VERIFICATION_REQUIRED");

    let first = mailed_token(&app, "new@example.com", &[]).await;
    // Asking again mails a new link; only the latest works.
    let r = app
        .call_with(
            &client,
            Method::POST,
            "/auth/request-verification",
            None,
            Some(json!({ "email": "new@example.com" })),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "success": true }));
    let token = mailed_token(&app, "new@example.com", &[&first]).await;
    assert_ne!(first, token);
    let verify = |token: String| {
        let app = &app;
        let client = client.clone();
        async move {
            app.call_with(
                &client,
                Method::POST,
                "/auth/verify-email",
                None,
                Some(json!({ "token": token })),
                &[],
            )
            .await
        }
    };
    let r = verify(first).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["token"]);
    let r = verify(token.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["user"]["email"], "new@example.com");
    let me = app
        .call_with(&client, Method::GET, "/users/@me", None, None, &[])
        .await;
    assert_eq!(me.status, 200, "verifying logs in: {}", me.body);
    verify(token).await.assert_error(422, "VALIDATION_ERROR");
    let r = app
        .call_with(&jar(), Method::POST, "/auth/login", None, Some(creds), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `POST /auth/request-password-reset` for `email`, without a session.
async fn request_reset(app: &TestApp, email: &str) -> Reply {
    app.call_with(
        &jar(),
        Method::POST,
        "/auth/request-password-reset",
        None,
        Some(json!({ "email": email })),
        &[],
    )
    .await
}

#[tokio::test]
async fn a_password_reset_works_once_and_ends_every_session() {
    let app = TestApp::spawn().await;
    let old_session = app.user("ada@example.com").await;
    let ask = |email: &'static str| request_reset(&app, email);
    // The same answer for an address without an account, and no mail.
    let r = ask("nobody@example.com").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "success": true }));
    let r = ask("ada@example.com").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let token = mailed_token(&app, "ada@example.com", &[]).await;
    assert!(
        app.outbox_messages()
            .iter()
            .all(|m| !m.contains("nobody@example.com"))
    );

    let reset = |token: &str, password: &str| {
        let app = &app;
        let body = json!({ "token": token, "password": password });
        async move {
            app.call_with(
                &jar(),
                Method::POST,
                "/auth/reset-password",
                None,
                Some(body),
                &[],
            )
            .await
        }
    };
    let r = reset(&token, "short").await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["password"]);
    let r = reset(&token, "a brand new passphrase").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["user"]["email"], "ada@example.com");
    reset(&token, "yet another passphrase")
        .await
        .assert_error(422, "VALIDATION_ERROR");
    reset("not-a-token", "yet another passphrase")
        .await
        .assert_error(422, "VALIDATION_ERROR");

    // The session opened before the reset is over; only the new password logs in.
    app.call_with(&old_session, Method::GET, "/users/@me", None, None, &[])
        .await
        .assert_error(401, "UNAUTHORIZED");
    let login = |password: &'static str| {
        let app = &app;
        let body = json!({ "email": "ada@example.com", "password": password });
        async move {
            app.call_with(&jar(), Method::POST, "/auth/login", None, Some(body), &[])
                .await
        }
    };
    login("correct horse battery")
        .await
        .assert_error(401, "INVALID_CREDENTIALS");
    assert_eq!(login("a brand new passphrase").await.status, 200);

    // Mail to one address is limited per minute (2 by default), whoever asks. The minutes are
    // fixed windows, and the one of the first ask above may have ended meanwhile, so quick asks
    // meet the limit within five (at most two a window, and five quick asks span at most two).
    let mut refused = None;
    for _ in 0..5 {
        let r = ask("ada@example.com").await;
        if r.status == 200 {
            continue;
        }
        refused = Some(r);
        break;
    }
    let r = refused.expect("a quick ask beyond two a minute is refused");
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert!(r.headers.get("retry-after").is_some());
}

/// The decoded subject, text and HTML of the latest account mail to `to`.
async fn latest_mail(app: &TestApp, to: &str) -> (String, String, String) {
    mailed_token(app, to, &[]).await;
    let raw = app
        .outbox_messages()
        .into_iter()
        .rfind(|m| m.contains(&format!("To: {to}")))
        .unwrap();
    let parsed = mail_parser::MessageParser::default()
        .parse(raw.as_bytes())
        .unwrap();
    (
        parsed.subject().unwrap().to_string(),
        parsed.body_text(0).unwrap().into_owned(),
        parsed.body_html(0).unwrap().into_owned(),
    )
}

#[tokio::test]
async fn account_mail_is_in_the_language_of_the_request() {
    let app = TestApp::spawn().await;
    for user in ["de@example.com", "pt@example.com", "en@example.com"] {
        app.user(user).await;
    }
    let ask = |email: &'static str, language: Option<&'static str>| {
        let app = &app;
        async move {
            let headers: Vec<(&str, &str)> = language
                .map(|l| ("accept-language", l))
                .into_iter()
                .collect();
            let r = app
                .call_with(
                    &jar(),
                    Method::POST,
                    "/auth/request-password-reset",
                    None,
                    Some(json!({ "email": email })),
                    &headers,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    // German (the preferred language Herald has), in every part of the mail.
    ask("de@example.com", Some("pt-BR, de;q=0.9, en;q=0.8")).await;
    let (subject, text, html) = latest_mail(&app, "de@example.com").await;
    assert_eq!(subject, "Setzen Sie Ihr Passwort zurück");
    assert!(text.starts_with("Hallo,"), "{text}");
    assert!(
        text.contains("das Passwort des Kontos de@example.com zurückzusetzen"),
        "{text}"
    );
    assert!(html.contains(">Neues Passwort wählen</a>"), "{html}");
    // A language Herald lacks, and no header at all: English.
    ask("pt@example.com", Some("pt-BR")).await;
    let (subject, text, _) = latest_mail(&app, "pt@example.com").await;
    assert_eq!(subject, "Reset your password");
    assert!(text.starts_with("Hello,"), "{text}");
    ask("en@example.com", None).await;
    let (subject, _, _) = latest_mail(&app, "en@example.com").await;
    assert_eq!(subject, "Reset your password");
}

#[tokio::test]
async fn account_mail_waits_out_a_transports_429_without_spending_an_attempt() {
    use crate::http::send::count;
    use crate::support::ses::{FakeSes, FakeSns, SECRET_ACCESS_KEY};
    use std::time::{Duration, Instant};

    let (ses, sns) = (FakeSes::start().await, FakeSns::start().await);
    let with_ses = crate::http::transport_ses::with_ses(&ses, &sns, SECRET_ACCESS_KEY, &[]);
    // One attempt per job: a 429 counted as a failed attempt would fail the mail for good.
    let app = TestApp::spawn_with(move |s| {
        with_ses(s);
        s.jobs_max_attempts = 1;
    })
    .await;
    app.user("ada@example.com").await;
    // SES answers the first call 429 with `Retry-After: 2`, then accepts.
    ses.script(429, "TooManyRequestsException", Some(2));
    let r = request_reset(&app, "ada@example.com").await;
    assert_eq!(r.status, 200, "{}", r.body);

    let deadline = Instant::now() + Duration::from_secs(20);
    let ses = &ses;
    let wait_for = |calls: usize| async move {
        while ses.calls() < calls {
            assert!(Instant::now() < deadline, "SES saw {} calls", ses.calls());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Instant::now()
    };
    let refused = wait_for(1).await;
    let accepted = wait_for(2).await;
    // Not before the 2 s asked (the queue's backoff after a first attempt is under 1 s).
    assert!(
        accepted - refused >= Duration::from_millis(1_800),
        "retried after {:?}",
        accepted - refused
    );
    let sent = ses.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, ["ada@example.com"]);
    // The job completed on its one counted attempt, the wait recorded as its last error.
    let sql = "SELECT COUNT(*) FROM jobs WHERE kind = 'accounts.mail' AND state = 'completed' \
               AND attempts = 1 AND last_error LIKE '%retry after 2 s%'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&app, sql).await != 1 {
        assert!(
            Instant::now() < deadline,
            "the job never completed as expected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
