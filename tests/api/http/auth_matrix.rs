//! Who may call what: no key, unknown key, wrong kind, rotated key, dashboard sessions.

use reqwest::Method;
use serde_json::json;

use crate::support::harness::{Reply, TestApp, TestProject};

#[tokio::test]
async fn missing_unknown_and_malformed_credentials_are_401() {
    let app = TestApp::spawn().await;
    app.call(Method::GET, "/contacts", None, None)
        .await
        .assert_error(401, "MISSING_AUTH");
    app.get("/contacts", "sk_doesnotexist000000000000000000000000000000")
        .await
        .assert_error(401, "UNAUTHORIZED");
    app.get("/contacts", "pk_doesnotexist000000000000000000000000000000")
        .await
        .assert_error(401, "UNAUTHORIZED");
    app.get("/contacts", "not-a-herald-key")
        .await
        .assert_error(401, "UNAUTHORIZED");
    let r = app
        .call_with(
            &app.client,
            Method::GET,
            "/contacts",
            None,
            None,
            &[("Authorization", "Basic dXNlcjpwYXNz")],
        )
        .await;
    r.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn a_public_key_is_the_wrong_kind_outside_track() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    for (method, path) in [
        (Method::GET, "/contacts"),
        (Method::POST, "/contacts"),
        (Method::GET, "/contacts/fields"),
        (
            Method::GET,
            "/contacts/cnt_0123456789abcdef0123456789abcdef",
        ),
        (
            Method::DELETE,
            "/contacts/cnt_0123456789abcdef0123456789abcdef",
        ),
    ] {
        let body = (method == Method::POST).then(|| json!({ "email": "a@example.com" }));
        let r = app
            .call(method.clone(), path, Some(&p.public_key), body)
            .await;
        r.assert_error(401, "INVALID_API_KEY");
    }
    // The secret key works on the same endpoint.
    assert_eq!(app.get("/contacts", &p.secret_key).await.status, 200);
}

/// The owner regenerates the project's keys (asserted to succeed); the answer names the new ones.
async fn regenerate_keys(app: &TestApp, p: &TestProject) -> Reply {
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            &format!("/users/@me/projects/{}/regenerate-keys", p.id),
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test]
async fn rotated_keys_stop_working_at_once() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    assert_eq!(app.get("/contacts", &p.secret_key).await.status, 200);
    let r = regenerate_keys(&app, &p).await;
    let new_secret = r.body["secretKey"].as_str().unwrap();
    let new_public = r.body["publicKey"].as_str().unwrap();
    assert!(new_secret.starts_with("sk_") && new_public.starts_with("pk_"));
    assert_ne!(new_secret, p.secret_key);
    app.get("/contacts", &p.secret_key)
        .await
        .assert_error(401, "UNAUTHORIZED");
    app.get("/contacts", &p.public_key)
        .await
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(app.get("/contacts", new_secret).await.status, 200);
    app.get("/contacts", new_public)
        .await
        .assert_error(401, "INVALID_API_KEY");
}

/// Requests that present one key at the same time share reads of its project, and nothing is
/// kept between reads: every request sent after the key was rotated is refused, while requests of
/// the old key keep arriving. (That a request never joins a read that started before it is
/// `store::rounds`'s own test.)
#[tokio::test]
async fn a_rotated_key_stops_at_once_under_concurrent_requests_of_it() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let served = std::sync::atomic::AtomicUsize::new(0);
    // Requests of the old key in flight all along, so that its reads are shared.
    let load = async {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let calls = (0..16).map(|_| app.get("/contacts", &p.secret_key));
            for r in futures::future::join_all(calls).await {
                if r.status == 200 {
                    served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    };
    let rotate = async {
        while served.load(std::sync::atomic::Ordering::SeqCst) < 64 {
            tokio::task::yield_now().await;
        }
        regenerate_keys(&app, &p).await;
        for _ in 0..5 {
            let calls = (0..16).map(|_| app.get("/contacts", &p.secret_key));
            for r in futures::future::join_all(calls).await {
                r.assert_error(401, "UNAUTHORIZED");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    futures::join!(load, rotate);
}

#[tokio::test]
async fn dashboard_sessions_need_membership_and_the_project_header() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let contact = p.contact(&app, "member@example.com", json!({})).await;

    // The owner's cookie with X-Project-Id works like the secret key.
    let r = app
        .call_with(
            &p.owner,
            Method::GET,
            "/contacts",
            None,
            None,
            &[("X-Project-Id", &p.id)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 1);

    // Without the header the call cannot name a project.
    let r = app
        .call_with(&p.owner, Method::GET, "/contacts", None, None, &[])
        .await;
    r.assert_error(400, "BAD_REQUEST");

    // Another user (no membership) sees nothing: 404 for the project, never 403.
    let stranger = app.user("stranger@example.com").await;
    let r = app
        .call_with(
            &stranger,
            Method::GET,
            "/contacts",
            None,
            None,
            &[("X-Project-Id", &p.id)],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    let path = format!("/contacts/{contact}");
    let r = app
        .call_with(
            &stranger,
            Method::GET,
            &path,
            None,
            None,
            &[("X-Project-Id", &p.id)],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    let r = app
        .call_with(
            &stranger,
            Method::GET,
            "/contacts",
            None,
            None,
            &[("X-Project-Id", "prj_garbage")],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");

    // A forged cookie is no session.
    let r = app
        .call_with(
            &app.client,
            Method::GET,
            "/contacts",
            None,
            None,
            &[
                ("Cookie", "herald_token=abc.def.ghi"),
                ("X-Project-Id", &p.id),
            ],
        )
        .await;
    r.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn api_keys_do_not_open_dashboard_endpoints() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let r = app.get("/users/@me", &p.secret_key).await;
    r.assert_error(401, "MISSING_AUTH");
    let r = app.get("/users/@me/projects", &p.secret_key).await;
    r.assert_error(401, "MISSING_AUTH");
}
