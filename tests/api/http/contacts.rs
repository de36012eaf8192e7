//! The contacts API and every custom data rule.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::harness::TestApp;

#[tokio::test]
async fn create_get_upsert_and_delete() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;

    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "Ann.Lee@Example.COM", "data": { "plan": "pro" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["_meta"], json!({ "isNew": true, "isUpdate": false }));
    assert_eq!(r.body["email"], "ann.lee@example.com");
    assert_eq!(
        r.body["subscribed"], true,
        "POST /contacts defaults to subscribed"
    );
    assert_eq!(r.body["data"], json!({ "plan": "pro" }));
    let id = r.body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("cnt_"));
    assert!(r.body["createdAt"].as_str().unwrap().ends_with('Z'));

    // Upsert by email, case-insensitively: same contact, patched.
    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "ann.lee@example.com", "data": { "seats": 3 } }),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["id"], id.as_str());
    assert_eq!(r.body["_meta"], json!({ "isNew": false, "isUpdate": true }));
    assert_eq!(r.body["data"], json!({ "plan": "pro", "seats": 3 }));

    // Nothing to change: matched, not updated; subscription kept when omitted.
    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "ann.lee@example.com", "data": { "seats": 3 } }),
        )
        .await;
    assert_eq!(
        r.body["_meta"],
        json!({ "isNew": false, "isUpdate": false })
    );
    assert_eq!(r.body["subscribed"], true);

    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "ann.lee@example.com", "subscribed": false }),
        )
        .await;
    assert_eq!(r.body["subscribed"], false);
    assert_eq!(r.body["_meta"]["isUpdate"], true);

    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "new@example.com", "subscribed": false }),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["subscribed"], false);

    let r = app.get(&format!("/contacts/{id}"), key).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["email"], "ann.lee@example.com");
    assert!(r.body.get("_meta").is_none());

    let r = app.delete(&format!("/contacts/{id}"), key).await;
    assert_eq!(r.status, 204);
    app.get(&format!("/contacts/{id}"), key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete(&format!("/contacts/{id}"), key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/contacts/not-an-id", key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn custom_data_rules() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    let r = app
        .post(
            "/contacts",
            key,
            json!({
                "email": "rules@example.com",
                "data": {
                    "plan": "pro", "age": 41, "vip": true, "signup": "2024-05-01",
                    "profile": { "tier": "gold" },
                    "blank": "", "nothing": null,
                    "once": { "value": "welcome", "persistent": false },
                    "kept": { "value": "yes", "persistent": true },
                    "id": "x", "svc_id": "x", "svc_email": "x", "email": "x@y.z",
                    "unsubscribeUrl": "u", "subscribeUrl": "u", "manageUrl": "u",
                    "locale": "de"
                }
            }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(
        r.body["data"],
        json!({ "plan": "pro", "age": 41, "vip": true, "signup": "2024-05-01", "profile": { "tier": "gold" }, "kept": "yes", "locale": "de" })
    );
    // Reserved keys never change the core fields either.
    assert_eq!(r.body["email"], "rules@example.com");

    // Patch: only sent keys change; null deletes; empty string is ignored.
    let path = format!("/contacts/{id}");
    let r = app
        .patch(
            &path,
            key,
            json!({ "data": { "plan": "", "age": null, "team": "core" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"],
        json!({ "plan": "pro", "vip": true, "signup": "2024-05-01", "profile": { "tier": "gold" }, "kept": "yes", "locale": "de", "team": "core" })
    );
    // Core fields are changed only through their own request fields.
    let r = app
        .patch(
            &path,
            key,
            json!({ "data": { "subscribed": false, "createdAt": "x" } }),
        )
        .await;
    assert_eq!(r.body["subscribed"], true);
    assert_eq!(
        r.body["data"]["subscribed"], false,
        "a data key named like a core field is plain data"
    );

    // Types are inferred on the first non-null value and kept.
    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "other@example.com", "data": { "age": "forty", "vip": "no" } }),
        )
        .await;
    assert_eq!(
        r.body["data"]["age"], "forty",
        "mixed types are still stored as sent"
    );
    let fields = app.get("/contacts/fields", key).await;
    assert_eq!(fields.status, 200);
    let types: Vec<(String, String, bool)> = fields.body["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().into(),
                f["type"].as_str().unwrap().into(),
                f["isCustom"].as_bool().unwrap(),
            )
        })
        .collect();
    let type_of = |name: &str| types.iter().find(|t| t.0 == name).map(|t| t.1.clone());
    assert_eq!(type_of("email").as_deref(), Some("string"));
    assert_eq!(type_of("data.plan").as_deref(), Some("string"));
    assert_eq!(
        type_of("data.age").as_deref(),
        Some("number"),
        "first type seen is kept"
    );
    assert_eq!(type_of("data.vip").as_deref(), Some("boolean"));
    assert_eq!(type_of("data.signup").as_deref(), Some("date"));
    assert_eq!(
        type_of("data.once"),
        None,
        "transient values are not fields"
    );
    assert_eq!(type_of("data.id"), None);
    assert!(types.iter().all(|t| t.2 == t.0.starts_with("data.")));
    let coverage = |name: &str| {
        fields.body["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == name)
            .unwrap()["coverage"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(coverage("email"), 1.0);
    assert_eq!(coverage("data.team"), 0.5);
    assert_eq!(coverage("data.age"), 0.5);
}

#[tokio::test]
async fn patch_email_and_conflicts() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    let a = p.contact(&app, "a@example.com", json!({})).await;
    p.contact(&app, "b@example.com", json!({})).await;

    let r = app
        .patch(
            &format!("/contacts/{a}"),
            key,
            json!({ "email": "B@example.com" }),
        )
        .await;
    r.assert_error(409, "CONFLICT");
    let r = app
        .patch(
            &format!("/contacts/{a}"),
            key,
            json!({ "email": "c@example.com", "subscribed": false }),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["email"], "c@example.com");
    assert_eq!(r.body["subscribed"], false);
    let created = r.body["createdAt"].clone();
    assert!(r.body["updatedAt"].as_str().unwrap() >= created.as_str().unwrap());

    // An empty patch is a no-op that still answers the contact.
    let r = app.patch(&format!("/contacts/{a}"), key, json!({})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["email"], "c@example.com");
}

#[tokio::test]
async fn invalid_input_is_4xx_with_errors() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    let id = p.contact(&app, "valid@example.com", json!({})).await;

    for bad in [
        "not-an-email",
        "a@b",
        "a b@example.com",
        "@example.com",
        "a@",
        "",
    ] {
        let r = app.post("/contacts", key, json!({ "email": bad })).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), vec!["email"], "{bad}");
    }
    let r = app.post("/contacts", key, json!({ "data": {} })).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["email"]);

    for data in [json!(5), json!("x"), json!([1, 2]), json!(true)] {
        let r = app
            .post(
                "/contacts",
                key,
                json!({ "email": "x@example.com", "data": data }),
            )
            .await;
        r.assert_error(400, "INVALID_REQUEST_BODY");
        assert_eq!(r.error_fields(), vec!["data"]);
    }
    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "x@example.com", "subscribed": "yes" }),
        )
        .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    assert_eq!(r.error_fields(), vec!["subscribed"]);
    let r = app
        .post(
            "/contacts",
            key,
            json!({ "email": "x@example.com", "data": { "": 1 } }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    let r = app
        .post("/contacts", key, json!(["not", "an", "object"]))
        .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");

    let r = app
        .patch(&format!("/contacts/{id}"), key, json!({ "email": "nope" }))
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    let r = app
        .patch(&format!("/contacts/{id}"), key, json!({ "data": 3 }))
        .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    // Nothing was half-written by the failed calls.
    let r = app.get(&format!("/contacts/{id}"), key).await;
    assert_eq!(r.body["email"], "valid@example.com");
    assert_eq!(app.get("/contacts", key).await.body["total"], 1);
}

#[tokio::test]
async fn cursor_pagination_and_search() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    for i in 0..25 {
        let email = if i % 5 == 0 {
            format!("Team{i}@Acme.io")
        } else {
            format!("user{i}@example.com")
        };
        p.contact(&app, &email, json!({ "i": i })).await;
    }

    let first = app.get("/contacts?limit=10", key).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body["data"].as_array().unwrap().len(), 10);
    assert_eq!(first.body["hasMore"], true);
    assert_eq!(first.body["total"], 25);
    // Newest first.
    assert_eq!(first.body["data"][0]["data"]["i"], 24);

    let mut seen = HashSet::new();
    let mut cursor = first.body["cursor"].as_str().unwrap().to_string();
    for item in first.body["data"].as_array().unwrap() {
        seen.insert(item["id"].as_str().unwrap().to_string());
    }
    let mut pages = 1;
    loop {
        let page = app
            .get(&format!("/contacts?limit=10&cursor={cursor}"), key)
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(page.body["total"], 0, "total only on the first page");
        pages += 1;
        for item in page.body["data"].as_array().unwrap() {
            assert!(
                seen.insert(item["id"].as_str().unwrap().to_string()),
                "no duplicates across pages"
            );
        }
        if page.body["hasMore"] == false {
            assert_eq!(page.body["cursor"], Value::Null);
            break;
        }
        cursor = page.body["cursor"].as_str().unwrap().to_string();
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);

    // Default page size is 20.
    let r = app.get("/contacts", key).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 20);

    // Case-insensitive substring search on email, with its own total.
    let r = app.get("/contacts?search=ACME", key).await;
    assert_eq!(r.body["total"], 5);
    assert!(
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["email"].as_str().unwrap().contains("acme"))
    );
    let r = app.get("/contacts?search=%25", key).await;
    assert_eq!(r.body["total"], 0, "LIKE wildcards are matched literally");

    for bad in ["limit=0", "limit=101", "limit=abc", "limit=-1"] {
        let r = app.get(&format!("/contacts?{bad}"), key).await;
        r.assert_error(400, "BAD_REQUEST");
        assert_eq!(r.error_fields(), vec!["limit"], "{bad}");
    }
    for bad in ["garbage!", "Y250X2Fi", "ZXZ0XzAxMjM"] {
        let r = app.get(&format!("/contacts?cursor={bad}"), key).await;
        r.assert_error(400, "BAD_REQUEST");
        assert_eq!(r.error_fields(), vec!["cursor"]);
    }
    let r = app.get("/contacts?limit=100", key).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn concurrent_upserts_of_one_address_make_one_contact() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let mut tasks = Vec::new();
    for i in 0..12 {
        let client = app.client.clone();
        let url = app.url("/contacts");
        let key = p.secret_key.clone();
        tasks.push(tokio::spawn(async move {
            let resp = client
                .post(url)
                .bearer_auth(key)
                .json(&json!({ "email": "race@example.com", "data": { format!("k{i}"): i } }))
                .send()
                .await
                .unwrap();
            crate::support::harness::read(resp).await
        }));
    }
    let mut created = 0;
    let mut ids = HashSet::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.status.is_success(), "{}", r.body);
        if r.body["_meta"]["isNew"] == true {
            created += 1;
        }
        ids.insert(r.body["id"].as_str().unwrap().to_string());
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
    let list = app.get("/contacts", &p.secret_key).await;
    assert_eq!(list.body["total"], 1);
    // Every concurrent patch landed: none was lost.
    assert_eq!(list.body["data"][0]["data"].as_object().unwrap().len(), 12);
}

#[tokio::test]
async fn search_finds_any_substring_of_the_address_as_it_changes() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    let ann = p.contact(&app, "ann.lee@acme.io", json!({})).await;
    let dan = p.contact(&app, "dan@acme.co.uk", json!({})).await;
    p.contact(&app, "bob_smith@example.com", json!({})).await;
    p.contact(&app, "carol+x@example.com", json!({})).await;
    let other = app.project().await;
    other.contact(&app, "acme@acme.io", json!({})).await;
    let found = async |search: &str| {
        let r = app.get(&format!("/contacts?search={search}"), key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let mut emails: Vec<String> = r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["email"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(r.body["total"], emails.len(), "{search}: {}", r.body);
        emails.sort();
        emails
    };
    assert_eq!(found("acme").await, ["ann.lee@acme.io", "dan@acme.co.uk"]);
    assert_eq!(found("ACME.IO").await, ["ann.lee@acme.io"]);
    assert_eq!(found("n@a").await, ["dan@acme.co.uk"]);
    assert_eq!(found("b_s").await, ["bob_smith@example.com"]);
    assert_eq!(found("b_").await, ["bob_smith@example.com"]);
    assert_eq!(found("l%2Bx").await, ["carol+x@example.com"]);
    assert_eq!(
        found("xample.co").await,
        ["bob_smith@example.com", "carol+x@example.com"]
    );
    assert_eq!(found("an").await, ["ann.lee@acme.io", "dan@acme.co.uk"]);
    assert!(found("a_e").await.is_empty(), "`_` is no wildcard");
    assert!(found("zzz").await.is_empty());

    // A changed address is found by its new text only; a deleted contact not at all.
    let r = app
        .patch(
            &format!("/contacts/{dan}"),
            key,
            json!({ "email": "dan@other.org" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(found("acme").await, ["ann.lee@acme.io"]);
    assert_eq!(found("other.o").await, ["dan@other.org"]);
    let r = app.delete(&format!("/contacts/{ann}"), key).await;
    assert!(r.status.is_success(), "{}", r.body);
    assert!(found("acme").await.is_empty());
}
