//! The reads the dashboard's pages need beside the spec's endpoints: a contact's emails and
//! workflow executions (paged, newest first, 404 for another project's contact), who an unsaved
//! filter selects (`POST /segments/preview`, 422 at the filter's paths), a search of the
//! suppression list, and where a workflow step is drawn on the canvas (`position`).

use serde_json::{Value, json};

use crate::http::executions::{Step, settled, workflow};
use crate::support::harness::{TestApp, TestProject};

/// An app whose senders need no verified domain (the `outbox` transport writes files).
async fn app() -> TestApp {
    TestApp::spawn_with(|s| {
        s.jobs_poll_interval_ms = 20;
        s.domains.allow_unverified = true;
    })
    .await
}

async fn send(app: &TestApp, p: &TestProject, to: &str, subject: &str) -> String {
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": to, "from": "hello@acme.test", "subject": subject, "body": "b" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string()
}

fn ids(page: &Value) -> Vec<&str> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_contacts_emails_are_paged_newest_first_and_only_its_own() {
    let app = app().await;
    let p = app.project().await;
    let ada = p.contact(&app, "ada@example.com", json!({})).await;
    let bob = p.contact(&app, "bob@example.com", json!({})).await;
    let mut sent = Vec::new();
    for i in 0..3 {
        sent.push(send(&app, &p, "ada@example.com", &format!("n{i}")).await);
    }
    send(&app, &p, "bob@example.com", "other").await;

    let first = app
        .get(&format!("/contacts/{ada}/emails?limit=2"), &p.secret_key)
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["total"], 3);
    assert_eq!(first.body["hasMore"], true);
    assert_eq!(ids(&first.body), vec![sent[2].as_str(), sent[1].as_str()]);
    assert_eq!(first.body["data"][0]["subject"], "n2");
    assert_eq!(first.body["data"][0]["to"], "ada@example.com");
    assert_eq!(first.body["data"][0]["contactId"], ada.as_str());
    assert!(first.body["data"][0].get("history").is_none());
    let cursor = first.body["cursor"].as_str().unwrap();
    let second = app
        .get(
            &format!("/contacts/{ada}/emails?limit=2&cursor={cursor}"),
            &p.secret_key,
        )
        .await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(ids(&second.body), vec![sent[0].as_str()]);
    assert_eq!(second.body["hasMore"], false);
    assert_eq!(second.body["total"], 0);

    let bobs = app
        .get(&format!("/contacts/{bob}/emails"), &p.secret_key)
        .await;
    assert_eq!(bobs.body["total"], 1, "{}", bobs.body);
    assert_eq!(bobs.body["data"][0]["subject"], "other");

    // The same email, whole, with its history.
    let one = app
        .get(&format!("/emails/{}", sent[0]), &p.secret_key)
        .await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body["subject"], "n0");
    assert!(one.body["history"].is_array());

    // Another project's contact, a malformed id and a cursor of another kind.
    let other = app.project().await;
    app.get(&format!("/contacts/{ada}/emails"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/contacts/nope/emails", &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get(
        &format!("/contacts/{ada}/emails?cursor=eHl6"),
        &p.secret_key,
    )
    .await
    .assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn a_contacts_executions_of_every_workflow_are_listed() {
    let app = app().await;
    let p = app.project().await;
    let ada = p.contact(&app, "ada@example.com", json!({})).await;
    p.contact(&app, "bob@example.com", json!({})).await;
    let (first_wf, _) = workflow(
        &app,
        &p,
        "first",
        vec![Step("EXIT", json!({}))],
        &[],
        json!({}),
    )
    .await;
    let (second_wf, _) = workflow(
        &app,
        &p,
        "second",
        vec![Step("EXIT", json!({}))],
        &[],
        json!({}),
    )
    .await;
    for (wf, email) in [
        (&first_wf, "ada@example.com"),
        (&second_wf, "ada@example.com"),
        (&second_wf, "bob@example.com"),
    ] {
        let r = app
            .post(
                &format!("/workflows/{wf}/executions"),
                &p.secret_key,
                json!({ "email": email }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    settled(&app, &p, &second_wf, 2, &["EXITED"]).await;
    settled(&app, &p, &first_wf, 1, &["EXITED"]).await;

    let r = app
        .get(&format!("/contacts/{ada}/executions"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 2);
    let list = r.body["data"].as_array().unwrap();
    assert_eq!(list[0]["workflowId"], second_wf.as_str(), "newest first");
    assert_eq!(list[1]["workflowId"], first_wf.as_str());
    assert!(list.iter().all(|e| e["contactId"] == ada.as_str()));
    assert!(list.iter().all(|e| e.get("stepRuns").is_none()));

    let page = app
        .get(
            &format!("/contacts/{ada}/executions?limit=1"),
            &p.secret_key,
        )
        .await;
    assert_eq!(page.body["hasMore"], true, "{}", page.body);
    let cursor = page.body["cursor"].as_str().unwrap();
    let next = app
        .get(
            &format!("/contacts/{ada}/executions?limit=1&cursor={cursor}"),
            &p.secret_key,
        )
        .await;
    assert_eq!(next.body["data"][0]["workflowId"], first_wf.as_str());
    assert_eq!(next.body["hasMore"], false);

    let other = app.project().await;
    app.get(&format!("/contacts/{ada}/executions"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn a_filter_is_counted_and_sampled_before_it_is_saved() {
    let app = app().await;
    let p = app.project().await;
    for (email, plan) in [
        ("a@example.com", "pro"),
        ("b@example.com", "free"),
        ("c@example.com", "pro"),
        ("d@example.com", "pro"),
    ] {
        p.contact(&app, email, json!({ "plan": plan })).await;
    }
    let pro = json!({ "logic": "AND", "groups": [
        { "logic": "AND", "filters": [
            { "field": "data.plan", "operator": "equals", "value": "pro" } ] } ] });
    let r = app
        .post(
            "/segments/preview",
            &p.secret_key,
            json!({ "condition": pro, "limit": 2 }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 3);
    let emails: Vec<&str> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["email"].as_str().unwrap())
        .collect();
    assert_eq!(
        emails,
        vec!["d@example.com", "c@example.com"],
        "newest first"
    );

    let r = app
        .post(
            "/segments/preview",
            &p.secret_key,
            json!({ "condition": pro, "limit": 0 }),
        )
        .await;
    assert_eq!(r.body["total"], 3, "{}", r.body);
    assert_eq!(r.body["data"], json!([]));

    // Nothing was stored: no segment, and another project counts its own contacts.
    let segments = app.get("/segments", &p.secret_key).await;
    assert_eq!(segments.body, json!([]));
    let other = app.project().await;
    let r = app
        .post(
            "/segments/preview",
            &other.secret_key,
            json!({ "condition": pro }),
        )
        .await;
    assert_eq!(r.body["total"], 0, "{}", r.body);

    // A malformed filter and a limit out of range are named at their paths.
    let r = app
        .post(
            "/segments/preview",
            &p.secret_key,
            json!({ "limit": 101, "condition": { "logic": "AND", "groups": [
                { "logic": "AND", "filters": [
                    { "field": "data.plan", "operator": "sortOf", "value": "pro" } ] } ] } }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    let fields = r.error_fields();
    assert!(fields.contains(&"limit".to_string()), "{fields:?}");
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("condition.groups[0].filters[0]")),
        "{fields:?}"
    );
}

#[tokio::test]
async fn the_suppression_list_is_searched_by_part_of_an_address() {
    let app = app().await;
    let p = app.project().await;
    let r = app
        .post(
            "/suppressions",
            &p.secret_key,
            json!({ "emails": ["ann@acme.test", "bob@acme.test", "ann@other.test", "x_y@z.test"] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let found = |body: &Value| -> Vec<String> {
        let mut v: Vec<String> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["email"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let r = app.get("/suppressions?search=ANN", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(found(&r.body), vec!["ann@acme.test", "ann@other.test"]);
    assert_eq!(r.body["total"], 2);
    let r = app.get("/suppressions?search=acme", &p.secret_key).await;
    assert_eq!(found(&r.body), vec!["ann@acme.test", "bob@acme.test"]);
    // `_` and `%` are plain characters, not wildcards.
    let r = app.get("/suppressions?search=_", &p.secret_key).await;
    assert_eq!(found(&r.body), vec!["x_y@z.test"]);
    let r = app.get("/suppressions?search=%25", &p.secret_key).await;
    assert_eq!(r.body["total"], 0, "{}", r.body);
    // Paged with the same search.
    let r = app
        .get("/suppressions?search=ann&limit=1", &p.secret_key)
        .await;
    assert_eq!(r.body["hasMore"], true, "{}", r.body);
    let cursor = r.body["cursor"].as_str().unwrap().to_string();
    let first = r.body["data"][0]["email"].as_str().unwrap().to_string();
    let r = app
        .get(
            &format!("/suppressions?search=ann&limit=1&cursor={cursor}"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.body["hasMore"], false, "{}", r.body);
    let second = r.body["data"][0]["email"].as_str().unwrap();
    assert_ne!(first, second);
    assert!(second.starts_with("ann@"));
    // Another project's list is its own.
    let other = app.project().await;
    let r = app.get("/suppressions?search=ann", &other.secret_key).await;
    assert_eq!(r.body["total"], 0, "{}", r.body);
}

#[tokio::test]
async fn a_step_keeps_its_place_on_the_canvas_even_while_enabled() {
    let app = app().await;
    let p = app.project().await;
    let r = app
        .post(
            "/workflows",
            &p.secret_key,
            json!({ "name": "placed", "eventName": "placed" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let wf = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{wf}/steps"),
            &p.secret_key,
            json!({ "type": "EXIT", "position": { "x": 120.5, "y": -40 } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["position"], json!({ "x": 120.5, "y": -40.0 }));
    let step = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{wf}/steps"),
            &p.secret_key,
            json!({ "type": "EXIT" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["position"], Value::Null, "never placed");
    let unplaced = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .delete(&format!("/workflows/{wf}/steps/{unplaced}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);

    // Out of range: named at its path, nothing changed.
    let r = app
        .patch(
            &format!("/workflows/{wf}/steps/{step}"),
            &p.secret_key,
            json!({ "position": { "x": 0, "y": 2e6 } }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["position.y"]);

    // Moved while the workflow is enabled, then removed.
    let r = app
        .patch(
            &format!("/workflows/{wf}"),
            &p.secret_key,
            json!({ "enabled": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = app
        .patch(
            &format!("/workflows/{wf}/steps/{step}"),
            &p.secret_key,
            json!({ "position": { "x": 300, "y": 200 } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["position"], json!({ "x": 300.0, "y": 200.0 }));
    let graph = app.get(&format!("/workflows/{wf}"), &p.secret_key).await;
    assert_eq!(graph.body["enabled"], true);
    assert_eq!(
        graph.body["steps"][0]["position"],
        json!({ "x": 300.0, "y": 200.0 }),
        "{}",
        graph.body
    );
    let r = app
        .patch(
            &format!("/workflows/{wf}/steps/{step}"),
            &p.secret_key,
            json!({ "position": null }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["position"], Value::Null);
}

/// Each custom field's coverage is `contacts having it / contacts`, from counts the database
/// keeps as contacts are created, imported through `/v1/track`, changed (a key added, a key
/// removed by `null`, a value changed), stripped of a field by `DELETE /contacts/fields/:f` and
/// deleted; another project's contacts never count.
#[tokio::test]
async fn field_coverage_follows_every_write_to_contacts() {
    let app = app().await;
    let p = app.project().await;
    let other = app.project().await;
    let key = &p.secret_key;
    let coverage = |body: &Value, name: &str| {
        body["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == name)
            .map(|f| f["coverage"].as_f64().unwrap())
    };
    async fn fields(app: &TestApp, key: String) -> Value {
        let r = app.get("/contacts/fields", &key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    let a = p
        .contact(&app, "a@x.test", json!({ "plan": "pro", "age": 30 }))
        .await;
    let b = p.contact(&app, "b@x.test", json!({ "plan": "free" })).await;
    p.contact(&app, "c@x.test", json!({})).await;
    let r = app
        .post(
            "/v1/track",
            &p.public_key,
            json!({ "email": "d@x.test", "event": "signup", "data": { "plan": "team" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    other
        .contact(
            &app,
            "a@x.test",
            json!({ "plan": "x", "age": 1, "city": "y" }),
        )
        .await;
    let f = fields(&app, key.clone()).await;
    assert_eq!(coverage(&f, "data.plan"), Some(0.75));
    assert_eq!(coverage(&f, "data.age"), Some(0.25));
    assert_eq!(coverage(&f, "data.city"), None, "another project's key");

    // b gains `age`, a loses it, a's plan changes value only.
    let r = app
        .patch(
            &format!("/contacts/{b}"),
            key,
            json!({ "data": { "age": 5 } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = app
        .patch(
            &format!("/contacts/{a}"),
            key,
            json!({ "data": { "age": null, "plan": "team" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let f = fields(&app, key.clone()).await;
    assert_eq!(coverage(&f, "data.plan"), Some(0.75));
    assert_eq!(coverage(&f, "data.age"), Some(0.25));
    // A change of values only (the keys as they were) counts nothing.
    let r = app
        .patch(
            &format!("/contacts/{b}"),
            key,
            json!({ "data": { "plan": "pro", "age": 6 } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let f = fields(&app, key.clone()).await;
    assert_eq!(coverage(&f, "data.plan"), Some(0.75));
    assert_eq!(coverage(&f, "data.age"), Some(0.25));

    // The field goes from every contact; then a contact goes.
    let r = app.delete("/contacts/fields/data.plan", key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = app.delete(&format!("/contacts/{b}"), key).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let f = fields(&app, key.clone()).await;
    assert_eq!(coverage(&f, "data.plan").unwrap_or(0.0), 0.0);
    assert_eq!(coverage(&f, "data.age").unwrap_or(0.0), 0.0);
    // Counted again from zero: one of the three contacts left.
    let r = app
        .patch(
            &format!("/contacts/{a}"),
            key,
            json!({ "data": { "plan": "pro" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let f = fields(&app, key.clone()).await;
    assert_eq!(coverage(&f, "data.plan"), Some(1.0 / 3.0));
    let f = fields(&app, other.secret_key.clone()).await;
    assert_eq!(coverage(&f, "data.age"), Some(1.0));
}
