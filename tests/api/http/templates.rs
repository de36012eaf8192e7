//! `/templates`: create, read, change, list, duplicate, usage and delete; every validation error
//! with its field; template syntax errors with their position; the sender rule for `from`
//! against a real DNS server on loopback; tenant isolation and key kinds.

use reqwest::Method;
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject};

/// A well-formed template id that no project has.
const UNKNOWN: &str = "/templates/tpl_0123456789abcdef0123456789abcdef";

fn welcome() -> Value {
    json!({
        "name": "Welcome",
        "subject": "Welcome, {{firstName ?? \"friend\"}}!",
        "body": "<h1>Hi {{firstName}}</h1><p>Your plan: {{profile.tier ?? 'free'}}</p>",
        "type": "TRANSACTIONAL",
    })
}

/// [`welcome`] with the fields of `changes` replaced.
fn welcome_with(changes: Value) -> Value {
    let mut body = welcome();
    for (k, v) in changes.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn create(app: &TestApp, p: &TestProject, body: Value) -> Value {
    let r = app.post("/templates", &p.secret_key, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

fn id(body: &Value) -> &str {
    body["id"].as_str().expect("an id")
}

/// Duplicates a template; answers the reply (`{ id }`) and the copy as read back.
async fn duplicate(app: &TestApp, p: &TestProject, template: &Value) -> (Value, Value) {
    let r = app
        .post(
            &format!("/templates/{}/duplicate", id(template)),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let copy = app
        .get(&format!("/templates/{}", id(&r.body)), &p.secret_key)
        .await;
    assert_eq!(copy.status, 200, "{}", copy.body);
    (r.body, copy.body)
}

/// `(field, code)` of each entry of `errors`.
pub fn field_codes(r: &Reply) -> Vec<(String, String)> {
    r.body["error"]["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors in {}", r.body))
        .iter()
        .map(|e| {
            (
                e["field"].as_str().unwrap().to_string(),
                e["code"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(f, c)| (f.to_string(), c.to_string()))
        .collect()
}

async fn total(app: &TestApp, p: &TestProject) -> i64 {
    let r = app.get("/templates", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["total"].as_i64().unwrap()
}

#[tokio::test]
async fn a_template_is_created_read_changed_and_deleted() {
    let dns = crate::support::dnsd::DnsServer::start().await;
    let app = TestApp::spawn_with(crate::http::domains::with_dns(&dns)).await;
    let p = app.project().await;
    crate::http::domains::verified_domain(&app, &p, &dns, "acme.test").await;
    let created = create(&app, &p, welcome()).await;
    assert!(id(&created).starts_with("tpl_"), "{created}");
    assert_eq!(created["name"], "Welcome");
    assert_eq!(created["subject"], welcome()["subject"]);
    assert_eq!(created["body"], welcome()["body"]);
    assert_eq!(created["type"], "TRANSACTIONAL");
    for optional in ["from", "fromName", "replyTo"] {
        assert_eq!(created[optional], Value::Null, "{optional} in {created}");
    }
    assert_eq!(created["createdAt"], created["updatedAt"]);

    let path = format!("/templates/{}", id(&created));
    let read = app.get(&path, &p.secret_key).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body, created);

    // Only the fields sent change; the type is accepted in any case.
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "name": "  Welcome v2 ", "type": "marketing", "fromName": "Acme Team",
                    "replyTo": "Help@Acme.test" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "Welcome v2");
    assert_eq!(r.body["type"], "MARKETING");
    assert_eq!(r.body["fromName"], "Acme Team");
    assert_eq!(r.body["replyTo"], "help@acme.test");
    assert_eq!(r.body["subject"], created["subject"]);
    assert_eq!(r.body["body"], created["body"]);
    assert_eq!(r.body["createdAt"], created["createdAt"]);
    assert!(r.body["updatedAt"].as_str() >= created["updatedAt"].as_str());
    assert_eq!(app.get(&path, &p.secret_key).await.body, r.body);

    // `null` clears an optional field and leaves the others.
    let r = app
        .patch(&path, &p.secret_key, json!({ "replyTo": null }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["replyTo"], Value::Null);
    assert_eq!(r.body["fromName"], "Acme Team");
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "fromName": null, "subject": "New {{x}}" }),
        )
        .await;
    assert_eq!(r.body["fromName"], Value::Null);
    assert_eq!(r.body["subject"], "New {{x}}");
    // An empty change answers the template as it is.
    let same = app.patch(&path, &p.secret_key, json!({})).await;
    assert_eq!(same.status, 200);
    assert_eq!(same.body, r.body);

    let r = app.delete(&path, &p.secret_key).await;
    assert_eq!(r.status, 204);
    app.get(&path, &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete(&path, &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.patch(&path, &p.secret_key, json!({ "name": "x" }))
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/templates/tpl_nonsense", &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(total(&app, &p).await, 0);
}

#[tokio::test]
async fn the_list_pages_newest_first_and_filters_by_type() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let mut ids = Vec::new();
    for (i, kind) in [
        "TRANSACTIONAL",
        "MARKETING",
        "TRANSACTIONAL",
        "MARKETING",
        "TRANSACTIONAL",
    ]
    .iter()
    .enumerate()
    {
        let body = welcome_with(json!({ "name": format!("T{i}"), "type": kind }));
        ids.push(id(&create(&app, &p, body).await).to_string());
    }
    ids.reverse();

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            None => "/templates?limit=2".to_string(),
            Some(c) => format!("/templates?limit=2&cursor={c}"),
        };
        let r = app.get(&path, &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        pages += 1;
        let expected_total = if cursor.is_none() { 5 } else { 0 };
        assert_eq!(r.body["total"], expected_total, "{}", r.body);
        for t in r.body["data"].as_array().unwrap() {
            seen.push(id(t).to_string());
        }
        if r.body["hasMore"] == false {
            assert_eq!(r.body["cursor"], Value::Null);
            break;
        }
        cursor = Some(r.body["cursor"].as_str().unwrap().to_string());
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ids, "every template once, newest first");

    let r = app.get("/templates?type=MARKETING", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 2);
    let names: Vec<&str> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["T3", "T1"]);
    let r = app
        .get("/templates?type=TRANSACTIONAL&limit=1", &p.secret_key)
        .await;
    assert_eq!(
        (r.body["total"].as_i64(), r.body["hasMore"].as_bool()),
        (Some(3), Some(true))
    );

    let r = app.get("/templates?type=PROMO", &p.secret_key).await;
    r.assert_error(400, "BAD_REQUEST");
    assert_eq!(r.error_fields(), ["type"]);
    let r = app.get("/templates?cursor=nope", &p.secret_key).await;
    r.assert_error(400, "BAD_REQUEST");
    assert_eq!(r.error_fields(), ["cursor"]);
    app.get("/templates?limit=101", &p.secret_key)
        .await
        .assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn a_duplicate_copies_every_field_under_a_new_name() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    let original = create(
        &app,
        &p,
        welcome_with(json!({ "from": "hello@acme.test", "fromName": "Acme",
                             "replyTo": "help@acme.test" })),
    )
    .await;

    let (reply, copy) = duplicate(&app, &p, &original).await;
    let copy_id = id(&reply).to_string();
    assert_ne!(copy_id, id(&original));
    assert_eq!(reply, json!({ "id": copy_id }), "only the id");
    assert_eq!(copy["name"], "Welcome (copy)");
    for field in ["subject", "body", "type", "from", "fromName", "replyTo"] {
        assert_eq!(copy[field], original[field], "{field}");
    }
    assert_eq!(total(&app, &p).await, 2);
    // The original is untouched, and the copy is independent of it.
    app.patch(
        &format!("/templates/{copy_id}"),
        &p.secret_key,
        json!({ "subject": "Changed" }),
    )
    .await;
    let again = app
        .get(&format!("/templates/{}", id(&original)), &p.secret_key)
        .await;
    assert_eq!(again.body, original);

    // A copy of a name at the limit still fits it.
    let long = create(&app, &p, welcome_with(json!({ "name": "n".repeat(200) }))).await;
    let (_, copy) = duplicate(&app, &p, &long).await;
    let name = copy["name"].as_str().unwrap();
    assert_eq!(name.chars().count(), 200);
    assert!(name.ends_with(" (copy)"), "{name}");

    app.post(&format!("{UNKNOWN}/duplicate"), &p.secret_key, json!({}))
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn usage_answers_the_one_usage_shape() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let t = create(&app, &p, welcome()).await;
    let r = app
        .get(&format!("/templates/{}/usage", id(&t)), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({ "templateId": id(&t), "segments": [], "campaigns": [], "workflows": [] })
    );
    app.get(&format!("{UNKNOWN}/usage"), &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn every_invalid_field_is_named_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    let p = app.project().await;

    // Required fields.
    for missing in ["name", "subject", "body", "type"] {
        let mut body = welcome();
        body.as_object_mut().unwrap().remove(missing);
        let r = app.post("/templates", &p.secret_key, body).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(field_codes(&r), pairs(&[(missing, "required")]));
    }
    // A value of the wrong JSON type.
    let body = welcome_with(json!({ "name": 5 }));
    let r = app.post("/templates", &p.secret_key, body).await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    assert_eq!(r.error_fields(), ["name"]);

    // Every broken rule at once.
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({
                "name": "   ",
                "subject": "Hello\r\nBcc: victim@example.com",
                "body": "",
                "type": "PROMO",
                "from": "not-an-address",
                "fromName": "Acme\nBcc: x",
                "replyTo": "@acme.test",
            }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("name", "required"),
            ("type", "invalid"),
            ("subject", "invalid"),
            ("body", "required"),
            ("from", "invalid_email"),
            ("fromName", "invalid"),
            ("replyTo", "invalid_email"),
        ])
    );
    let type_error = &r.body["error"]["errors"][1]["message"];
    assert!(
        type_error
            .as_str()
            .unwrap()
            .contains("TRANSACTIONAL or MARKETING"),
        "{type_error}"
    );

    // Lengths.
    let body = welcome_with(json!({
        "name": "n".repeat(201), "subject": "s".repeat(999), "fromName": "f".repeat(201),
    }));
    let r = app.post("/templates", &p.secret_key, body).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("name", "too_long"),
            ("subject", "too_long"),
            ("fromName", "too_long")
        ])
    );
    let body = welcome_with(json!({ "name": "n".repeat(200), "subject": "é".repeat(998) }));
    create(&app, &p, body).await;
    assert_eq!(total(&app, &p).await, 1, "only the valid one was written");

    // The same rules on a change, and `null` for a required field; the template is unchanged.
    let t = create(&app, &p, welcome()).await;
    let path = format!("/templates/{}", id(&t));
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "name": null, "subject": "", "type": "promo", "from": "nope",
                    "replyTo": "also nope" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("name", "required"),
            ("subject", "required"),
            ("type", "invalid"),
            ("from", "invalid_email"),
            ("replyTo", "invalid_email"),
        ])
    );
    for null_field in ["body", "type"] {
        let r = app
            .patch(&path, &p.secret_key, json!({ null_field: null }))
            .await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(field_codes(&r), pairs(&[(null_field, "required")]));
    }
    assert_eq!(app.get(&path, &p.secret_key).await.body, t);
}

#[tokio::test]
async fn template_syntax_errors_are_422_with_their_position() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let body = welcome_with(json!({ "body": "<p>Hello</p>\n<p>Hi {{firstName</p>" }));
    let r = app.post("/templates", &p.secret_key, body).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(field_codes(&r), pairs(&[("body", "invalid_template")]));
    let detail = r.body["error"]["errors"][0]["message"].as_str().unwrap();
    assert_eq!(detail, "line 2, column 7: this `{{` is not closed by `}}`");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert_eq!(message, format!("body: {detail}"));

    // Both parts are checked; each error names its field.
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "x", "type": "MARKETING", "subject": "Hi {{#if vip}}",
                    "body": "<p>{{#each items}}{{/if}}</p>" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("subject", "invalid_template"),
            ("body", "invalid_template")
        ])
    );
    let errors = r.body["error"]["errors"].as_array().unwrap();
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 1, column 15: the template ends inside a block"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1]["message"]
            .as_str()
            .unwrap()
            .contains("`{{#each}}` is closed by `{{/if}}`"),
        "{}",
        errors[1]
    );

    // Misused fallbacks, unknown helpers and partials are caught when saving, with positions
    // in the text as written. (Bare words, `{{shout name}}`, are a key with a space, as in
    // Plunk; a call with a quoted argument is a helper call.)
    for (source, position, words) in [
        ("Hi {{name ?? }}", "line 1, column 11", "fallback after it"),
        (
            "Hi {{upper \"n\" ?? 'x'}}",
            "line 1, column 11",
            "parentheses",
        ),
        (
            "<p>\n  {{shout \"name\"}}</p>",
            "line 2, column 3",
            "unknown helper `shout`",
        ),
        ("{{a ?? 'b'}} {{> footer}}", "line 1, column 14", "partials"),
    ] {
        let body = welcome_with(json!({ "body": source }));
        let r = app.post("/templates", &p.secret_key, body).await;
        r.assert_error(422, "VALIDATION_ERROR");
        let detail = r.body["error"]["errors"][0]["message"].as_str().unwrap();
        assert!(detail.starts_with(position), "{source}: {detail}");
        assert!(detail.contains(words), "{source}: {detail}");
    }

    // Every fallback form saves.
    let body = welcome_with(json!({
        "subject": "{{ a ?? 'x' }} {{b??\"y\"}} {{c ?? 3}} {{d ?? e.f}}",
        "body": "{{{ html ?? \"<b>x</b>\" }}}",
    }));
    create(&app, &p, body).await;

    // A change with a broken body is refused and changes nothing.
    let t = create(&app, &p, welcome()).await;
    let path = format!("/templates/{}", id(&t));
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "name": "renamed", "body": "{{#if a}}" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(field_codes(&r), pairs(&[("body", "invalid_template")]));
    assert_eq!(app.get(&path, &p.secret_key).await.body, t);
}

#[tokio::test]
async fn a_from_address_needs_a_verified_domain_of_the_project() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    let with_from = |from: &str| welcome_with(json!({ "from": from }));
    let refused = |r: Reply, domain: &str| {
        r.assert_error(422, "DOMAIN_NOT_VERIFIED");
        assert_eq!(field_codes(&r), pairs(&[("from", "domain_not_verified")]));
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(domain), "{message}");
    };

    // No such domain, then a domain added but not verified.
    let r = app
        .post("/templates", &p.secret_key, with_from("hello@acme.test"))
        .await;
    refused(r, "acme.test");
    let r = app
        .post(
            "/domains",
            &p.secret_key,
            json!({ "domain": "pending.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = app
        .post("/templates", &p.secret_key, with_from("hello@pending.test"))
        .await;
    refused(r, "pending.test");
    assert_eq!(total(&app, &p).await, 0, "nothing is written");

    // Another project's verified domain does not count.
    let other = app.project().await;
    verified_domain(&app, &other, &dns, "theirs.test").await;
    let r = app
        .post("/templates", &p.secret_key, with_from("hello@theirs.test"))
        .await;
    refused(r, "theirs.test");

    // Once verified, the address is accepted (and stored lower-cased).
    let domain = verified_domain(&app, &p, &dns, "acme.test").await;
    let t = create(&app, &p, with_from("Hello@ACME.test")).await;
    assert_eq!(t["from"], "hello@acme.test");

    // A subdomain only with allowSubdomains on the verified domain.
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            with_from("news@mail.acme.test"),
        )
        .await;
    refused(r, "mail.acme.test");
    let r = app
        .patch(
            &format!("/domains/{}", id(&domain)),
            &p.secret_key,
            json!({ "allowSubdomains": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sub = create(&app, &p, with_from("news@mail.acme.test")).await;
    assert_eq!(sub["from"], "news@mail.acme.test");

    // The same rule on a change; `null` removes the sender.
    let path = format!("/templates/{}", id(&t));
    let r = app
        .patch(&path, &p.secret_key, json!({ "from": "hi@pending.test" }))
        .await;
    refused(r, "pending.test");
    assert_eq!(app.get(&path, &p.secret_key).await.body, t);
    let r = app
        .patch(&path, &p.secret_key, json!({ "from": "team@acme.test" }))
        .await;
    assert_eq!(r.body["from"], "team@acme.test", "{}", r.body);
    let r = app
        .patch(&path, &p.secret_key, json!({ "from": null }))
        .await;
    assert_eq!(r.body["from"], Value::Null, "{}", r.body);
    // The reply-to address follows the same rule.
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "replyTo": "someone@elsewhere.test" }),
        )
        .await;
    r.assert_error(422, "DOMAIN_NOT_VERIFIED");
    assert_eq!(r.error_fields(), ["replyTo"]);
    let r = app
        .patch(&path, &p.secret_key, json!({ "replyTo": "help@acme.test" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn another_projects_template_is_not_found() {
    let app = TestApp::spawn().await;
    let a = app.project().await;
    let b = app.project().await;
    let t = create(&app, &a, welcome()).await;
    let path = format!("/templates/{}", id(&t));
    app.get(&path, &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.patch(&path, &b.secret_key, json!({ "name": "mine" }))
        .await
        .assert_error(404, "NOT_FOUND");
    app.post(&format!("{path}/duplicate"), &b.secret_key, json!({}))
        .await
        .assert_error(404, "NOT_FOUND");
    app.get(&format!("{path}/usage"), &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete(&path, &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(total(&app, &b).await, 0);
    let r = app.get("/templates", &b.secret_key).await;
    assert_eq!(r.body["data"], json!([]));
    // A's template is untouched.
    assert_eq!(app.get(&path, &a.secret_key).await.body, t);
    assert_eq!(total(&app, &a).await, 1);
}

#[tokio::test]
async fn templates_need_the_secret_key() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let t = create(&app, &p, welcome()).await;
    let path = format!("/templates/{}", id(&t));
    for (method, path, body) in [
        (Method::GET, "/templates".to_string(), None),
        (Method::POST, "/templates".to_string(), Some(welcome())),
        (Method::GET, path.clone(), None),
        (Method::PATCH, path.clone(), Some(json!({ "name": "x" }))),
        (Method::DELETE, path.clone(), None),
        (Method::POST, format!("{path}/duplicate"), Some(json!({}))),
        (Method::GET, format!("{path}/usage"), None),
    ] {
        let r = app
            .call(method.clone(), &path, Some(&p.public_key), body.clone())
            .await;
        r.assert_error(401, "INVALID_API_KEY");
        let r = app.call(method, &path, None, body).await;
        r.assert_error(401, "MISSING_AUTH");
    }
    assert_eq!(app.get(&path, &p.secret_key).await.body, t);
}
