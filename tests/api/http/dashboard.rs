//! The dashboard the binary serves at `/app/` (its cache headers and policy, the fallback to
//! `index.html`, `/` for a browser), and cross-site requests with the session cookie refused.

use reqwest::Method;
use reqwest::header::{ACCEPT, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION};
use serde_json::json;

use super::accounts::jar;
use crate::support::harness::{Reply, TestApp};

async fn fetch(app: &TestApp, path: &str, accept: &str) -> reqwest::Response {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    client
        .get(app.url(path))
        .header(ACCEPT, accept)
        .send()
        .await
        .unwrap()
}

fn header(r: &reqwest::Response, name: reqwest::header::HeaderName) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_dashboard_is_served_with_its_cache_headers_and_policy() {
    let app = TestApp::spawn().await;

    // A browser at / goes to the dashboard; other clients get the 404 they always got.
    let r = fetch(&app, "/", "text/html,application/xhtml+xml,*/*;q=0.8").await;
    assert_eq!(r.status(), 302);
    assert_eq!(header(&r, LOCATION), "/app/");
    let r = app.call(Method::GET, "/", None, None).await;
    r.assert_error(404, "NOT_FOUND");

    let r = fetch(&app, "/app/", "text/html").await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, CONTENT_TYPE).starts_with("text/html"));
    assert_eq!(header(&r, CACHE_CONTROL), "no-cache");
    let policy = header(&r, CONTENT_SECURITY_POLICY);
    for directive in [
        "default-src 'self'",
        "script-src 'self';",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "connect-src 'self'",
    ] {
        assert!(policy.contains(directive), "{directive} missing: {policy}");
    }
    let index = r.text().await.unwrap();
    assert!(index.contains("<div id=\"root\">"), "{index}");
    assert!(!index.contains("<script>"), "no inline script: {index}");

    // The app's own pages answer index.html too.
    for page in ["/app", "/app/contacts/cnt_123", "/app/verify-email?token=x"] {
        let r = fetch(&app, page, "text/html").await;
        assert_eq!(r.status(), 200, "{page}");
        assert_eq!(r.text().await.unwrap(), index, "{page}");
    }

    // The hashed script: a year, immutable.
    let script = index
        .split('"')
        .find(|s| s.starts_with("/app/assets/") && s.ends_with(".js"))
        .expect("the index names its script")
        .to_string();
    let r = fetch(&app, &script, "*/*").await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, CONTENT_TYPE).contains("javascript"));
    assert_eq!(
        header(&r, CACHE_CONTROL),
        "public, max-age=31536000, immutable"
    );
    assert!(!header(&r, CONTENT_SECURITY_POLICY).is_empty());

    // A hashed file that is not there (an older build's) is a 404, not the index.
    let r = fetch(&app, "/app/assets/index-gone.js", "*/*").await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn with_dashboard_dir_the_app_is_read_from_that_folder_on_each_request() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("assets")).unwrap();
    std::fs::write(dir.path().join("index.html"), "<p>first build</p>").unwrap();
    std::fs::write(dir.path().join("assets/app-1.js"), "console.log(1)").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "beside").unwrap();
    let folder = dir.path().to_path_buf();
    let app = TestApp::spawn_with(move |s| s.accounts.dashboard_dir = Some(folder)).await;

    let r = fetch(&app, "/app/contacts", "text/html").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, CACHE_CONTROL), "no-cache");
    assert!(!header(&r, CONTENT_SECURITY_POLICY).is_empty());
    assert_eq!(r.text().await.unwrap(), "<p>first build</p>");
    let r = fetch(&app, "/app/assets/app-1.js", "*/*").await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, CONTENT_TYPE).contains("javascript"));
    assert_eq!(r.text().await.unwrap(), "console.log(1)");
    assert_eq!(
        fetch(&app, "/app/assets/app-2.js", "*/*").await.status(),
        404
    );

    // A new build is served at once, without a restart.
    std::fs::write(dir.path().join("index.html"), "<p>second build</p>").unwrap();
    let r = fetch(&app, "/app/", "text/html").await;
    assert_eq!(r.text().await.unwrap(), "<p>second build</p>");

    // Nothing outside the folder: an escaped `..` is no file of the app (the index answers).
    let r = fetch(&app, "/app/assets/%2e%2e/%2e%2e/etc/passwd", "*/*").await;
    assert_ne!(r.status(), 200, "{:?}", r.text().await);
    let r = fetch(&app, "/app/..%2f..%2fetc%2fpasswd", "text/html").await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("root:"), "{text}");
}

async fn create_project(app: &TestApp, jar: &reqwest::Client, headers: &[(&str, &str)]) -> Reply {
    app.call_with(
        jar,
        Method::POST,
        "/users/@me/projects",
        None,
        Some(json!({ "name": "Newsletter" })),
        headers,
    )
    .await
}

#[tokio::test]
async fn cookie_requests_from_another_site_are_refused() {
    let app = TestApp::spawn().await;
    let jar = jar();
    let r = app
        .call_with(
            &jar,
            Method::POST,
            "/auth/signup",
            None,
            Some(json!({ "email": "owner@example.com", "password": "s3cret-pass" })),
            &[],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for forged in [
        &[("Origin", "https://elsewhere.example")][..],
        &[("Sec-Fetch-Site", "cross-site")][..],
        &[
            ("Sec-Fetch-Site", "same-site"),
            ("Origin", "https://app.example"),
        ][..],
    ] {
        let r = create_project(&app, &jar, forged).await;
        r.assert_error(403, "FORBIDDEN");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Herald's own pages"),
            "{}",
            r.body
        );
    }

    // The dashboard's own page, and a program (no Origin, no Sec-Fetch-Site), pass.
    let own = app.url("");
    let r = create_project(&app, &jar, &[("Origin", own.as_str())]).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = create_project(&app, &jar, &[("Sec-Fetch-Site", "same-origin")]).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = create_project(&app, &jar, &[]).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["secretKey"].as_str().unwrap().to_string();

    // An API-key request is never refused for its origin (a page cannot add the key), even with
    // the cookie.
    let r = app
        .call_with(
            &jar,
            Method::POST,
            "/contacts",
            Some(&key),
            Some(json!({ "email": "ada@example.com" })),
            &[("Origin", "https://elsewhere.example")],
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);

    // Reads are not state-changing: a cross-site GET with the cookie is answered.
    let r = app
        .call_with(
            &jar,
            Method::GET,
            "/users/@me",
            None,
            None,
            &[("Sec-Fetch-Site", "cross-site")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}
