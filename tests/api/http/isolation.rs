//! A key of one project never sees or changes another project's data: every contact endpoint
//! answers 404 for another project's ids.

use serde_json::json;

use crate::support::harness::TestApp;

#[tokio::test]
async fn every_contact_endpoint_is_404_across_projects() {
    let app = TestApp::spawn().await;
    let a = app.project().await;
    let b = app.project().await;
    let id = a
        .contact(&app, "shared@example.com", json!({ "plan": "pro" }))
        .await;
    let path = format!("/contacts/{id}");

    app.get(&path, &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.patch(&path, &b.secret_key, json!({ "data": { "plan": "free" } }))
        .await
        .assert_error(404, "NOT_FOUND");
    app.patch(&path, &b.secret_key, json!({ "subscribed": false }))
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete(&path, &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");

    // B's list and search do not show A's contact; B's fields do not show A's keys.
    let list = app.get("/contacts?search=shared", &b.secret_key).await;
    assert_eq!(list.body["total"], 0);
    assert_eq!(list.body["data"], json!([]));
    let fields = app.get("/contacts/fields", &b.secret_key).await;
    assert!(!fields.body.to_string().contains("data.plan"));

    // The same address in B is a separate contact.
    let r = app
        .post(
            "/contacts",
            &b.secret_key,
            json!({ "email": "shared@example.com" }),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_ne!(r.body["id"].as_str().unwrap(), id);

    // A's contact is untouched.
    let r = app.get(&path, &a.secret_key).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"], json!({ "plan": "pro" }));
    assert_eq!(r.body["subscribed"], true);

    // A dashboard member of B cannot reach A's contact through B's project header either.
    let r = app
        .call_with(
            &b.owner,
            reqwest::Method::GET,
            &path,
            None,
            None,
            &[("X-Project-Id", &b.id)],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    // Nor by naming A's project.
    let r = app
        .call_with(
            &b.owner,
            reqwest::Method::GET,
            &path,
            None,
            None,
            &[("X-Project-Id", &a.id)],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn project_management_is_404_for_non_members() {
    let app = TestApp::spawn().await;
    let a = app.project().await;
    let b = app.project().await;
    let base = format!("/users/@me/projects/{}", a.id);
    let r = app
        .call_with(
            &b.owner,
            reqwest::Method::PATCH,
            &base,
            None,
            Some(json!({ "name": "mine" })),
            &[],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    let r = app
        .call_with(&b.owner, reqwest::Method::DELETE, &base, None, None, &[])
        .await;
    r.assert_error(404, "NOT_FOUND");
    let r = app
        .call_with(
            &b.owner,
            reqwest::Method::POST,
            &format!("{base}/regenerate-keys"),
            None,
            None,
            &[],
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    // A's keys still work.
    assert_eq!(app.get("/contacts", &a.secret_key).await.status, 200);
}
