//! Topics through HTTP: created, read, changed and deleted with their validation errors and
//! another project's isolation; a contact's choices set through every path (`POST` and `PATCH
//! /contacts`, `/v1/send` and `/v1/track` with the secret key; the public key's ignored), read
//! back on `GET /contacts/:id` with the topics' defaults, each change an event; `topic.<id>`
//! filters; the preference page changing topics with a plain form `POST`, each change an event
//! that starts workflows. Mail about a topic is `topic_sends.rs`.

use std::time::{Duration, Instant};

use mail_parser::MessageParser;
use serde_json::{Value, json};

use crate::http::executions::{Step, settled, workflow};
use crate::http::segments::members;
use crate::support::harness::{TestApp, TestProject};

/// Creates a topic and answers its id.
pub(crate) async fn topic(app: &TestApp, p: &TestProject, name: &str, default: &str) -> String {
    let r = app
        .post(
            "/topics",
            &p.secret_key,
            json!({ "name": name, "defaultSubscription": default, "visibility": "PUBLIC" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

/// A contact's state for each topic, by topic id, from `GET /contacts/:id`.
pub(crate) async fn states(app: &TestApp, p: &TestProject, contact: &str) -> Vec<(String, bool)> {
    let r = app
        .get(&format!("/contacts/{contact}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["subscribed"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The topic events of a contact, sorted: (name, topic id, source).
pub(crate) async fn topic_events(
    app: &TestApp,
    p: &TestProject,
    contact: &str,
) -> Vec<(String, String, String)> {
    let r = app
        .get(
            &format!("/events/contact/{contact}?limit=100"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut events: Vec<(String, String, String)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("contact.topic."))
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["data"]["topicId"].as_str().unwrap().to_string(),
                e["data"]["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    events.sort();
    events
}

/// Creates the contact `email` with topic choices `topics` (`[{ id, subscribed }]`); answers
/// its id.
pub(crate) async fn contact_with(
    app: &TestApp,
    p: &TestProject,
    email: &str,
    topics: Value,
) -> String {
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": email, "topics": topics }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

pub(crate) fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

pub(crate) fn state_of(states: &[(String, bool)], topic: &str) -> bool {
    states.iter().find(|(id, _)| id == topic).unwrap().1
}

#[tokio::test]
async fn topics_are_created_read_changed_and_deleted_per_project() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let other = app.project().await;

    // Every broken rule at once, each at its field.
    let r = app
        .post(
            "/topics",
            &p.secret_key,
            json!({ "name": " ", "defaultSubscription": "MAYBE", "visibility": "HIDDEN" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(
        r.error_fields(),
        ["name", "defaultSubscription", "visibility"]
    );
    let r = app
        .post("/topics", &p.secret_key, json!({ "name": "News" }))
        .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    let r = app
        .post(
            "/topics",
            &p.secret_key,
            json!({ "name": "x".repeat(201), "defaultSubscription": "OPT_IN" }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["name"]);

    // Created (values read in any case; PRIVATE by default), read, listed.
    let r = app
        .post(
            "/topics",
            &p.secret_key,
            json!({ "name": " Weekly news ", "description": "Every Monday", "defaultSubscription": "opt_in" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("top_"), "{id}");
    assert_eq!(r.body["name"], "Weekly news");
    assert_eq!(r.body["description"], "Every Monday");
    assert_eq!(r.body["defaultSubscription"], "OPT_IN");
    assert_eq!(r.body["visibility"], "PRIVATE");
    let r = app.get(&format!("/topics/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "Weekly news");
    let r = app.get("/topics", &p.secret_key).await;
    assert_eq!(r.body.as_array().unwrap().len(), 1, "{}", r.body);

    // Another project sees none of it: 404 for each operation, an empty list.
    assert!(app.get("/topics", &other.secret_key).await.body == json!([]));
    app.get(&format!("/topics/{id}"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.patch(
        &format!("/topics/{id}"),
        &other.secret_key,
        json!({ "name": "Mine" }),
    )
    .await
    .assert_error(404, "NOT_FOUND");
    app.delete(&format!("/topics/{id}"), &other.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/topics/top_nope", &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    // The public key is refused.
    let r = app.get("/topics", &p.public_key).await;
    assert!(r.status == 401 || r.status == 403, "{}", r.body);

    // Changed: only what is sent; the default is fixed; null is not a name.
    let r = app
        .patch(
            &format!("/topics/{id}"),
            &p.secret_key,
            json!({ "visibility": "public", "description": null }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["visibility"], "PUBLIC");
    assert_eq!(r.body["description"], Value::Null);
    assert_eq!(r.body["name"], "Weekly news");
    let r = app
        .patch(
            &format!("/topics/{id}"),
            &p.secret_key,
            json!({ "defaultSubscription": "OPT_OUT", "name": null }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["name", "defaultSubscription"]);

    // Deleted: gone for good.
    let r = app.delete(&format!("/topics/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 204, "{}", r.body);
    app.get(&format!("/topics/{id}"), &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.delete(&format!("/topics/{id}"), &p.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn a_contacts_topics_are_set_through_every_path_and_each_change_is_an_event() {
    let app = TestApp::spawn_with(|s| s.domains.allow_unverified = true).await;
    let p = app.project().await;
    let other = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let offers = topic(&app, &p, "Offers", "OPT_OUT").await;
    let foreign = topic(&app, &other, "Theirs", "OPT_IN").await;

    // No choice: each topic's default.
    let ann = p.contact(&app, "ann@example.com", json!({})).await;
    let s = states(&app, &p, &ann).await;
    assert_eq!(s.len(), 2);
    assert!(state_of(&s, &news));
    assert!(!state_of(&s, &offers));
    let r = app.get(&format!("/contacts/{ann}"), &p.secret_key).await;
    assert_eq!(r.body["topics"][0]["name"], "News");

    // POST /contacts: a new contact with choices; only those off the default are events.
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "bob@example.com", "topics": [
                { "id": news, "subscribed": true }, { "id": offers, "subscribed": true }
            ] }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let bob = r.body["id"].as_str().unwrap().to_string();
    assert!(
        r.body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["subscribed"] == true)
    );
    assert_eq!(
        topic_events(&app, &p, &bob).await,
        [(
            "contact.topic.subscribed".to_string(),
            offers.clone(),
            "api".to_string()
        )]
    );

    // Unknown, foreign and malformed topic ids: 422 at each, nothing written.
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "cy@example.com", "topics": [
                { "id": news, "subscribed": true },
                { "id": foreign, "subscribed": true },
                { "id": "nope", "subscribed": false }
            ] }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["topics[1].id", "topics[2].id"]);
    assert_eq!(
        app.get("/contacts?search=cy%40", &p.secret_key).await.body["data"],
        json!([])
    );
    let r = app
        .patch(
            &format!("/contacts/{ann}"),
            &p.secret_key,
            json!({ "topics": [{ "id": foreign, "subscribed": false }] }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["topics[0].id"]);

    // PATCH /contacts/:id: leaves a topic; the same choice again changes nothing.
    for _ in 0..2 {
        let r = app
            .patch(
                &format!("/contacts/{ann}"),
                &p.secret_key,
                json!({ "topics": [{ "id": news, "subscribed": false }] }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let t = r.body["topics"].as_array().unwrap();
        assert!(
            t.iter()
                .any(|t| t["id"] == news.as_str() && t["subscribed"] == false)
        );
    }
    assert_eq!(
        topic_events(&app, &p, &ann).await,
        [(
            "contact.topic.unsubscribed".to_string(),
            news.clone(),
            "api".to_string()
        )]
    );
    // The global flag is its own: still subscribed.
    let r = app.get(&format!("/contacts/{ann}"), &p.secret_key).await;
    assert_eq!(r.body["subscribed"], true);

    // /v1/track with the secret key: joins a topic.
    let r = app
        .post(
            "/v1/track",
            &p.secret_key,
            json!({ "email": "ann@example.com", "event": "signed-up",
                    "topics": [{ "id": offers, "subscribed": true }] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(state_of(&states(&app, &p, &ann).await, &offers));
    // With the public key, `topics` is ignored (the event is still recorded).
    let r = app
        .post(
            "/v1/track",
            &p.public_key,
            json!({ "email": "ann@example.com", "event": "clicked",
                    "topics": [{ "id": offers, "subscribed": false }, { "id": "nope", "subscribed": true }] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(state_of(&states(&app, &p, &ann).await, &offers));
    // Unknown with the secret key: 422.
    let r = app
        .post(
            "/v1/track",
            &p.secret_key,
            json!({ "email": "ann@example.com", "event": "clicked",
                    "topics": [{ "id": foreign, "subscribed": true }] }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["topics[0].id"]);

    // /v1/send: every recipient's contact, new or not.
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": ["ann@example.com", "dee@example.com"], "from": "shop@example.com",
                    "subject": "Hi", "body": "<p>Hi</p>",
                    "topics": [{ "id": offers, "subscribed": false }, { "id": news, "subscribed": true }] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let dee = r.body["data"]["emails"][1]["contact"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let s = states(&app, &p, &ann).await;
    assert!(state_of(&s, &news) && !state_of(&s, &offers));
    let s = states(&app, &p, &dee).await;
    assert!(state_of(&s, &news) && !state_of(&s, &offers));
    assert!(
        topic_events(&app, &p, &dee).await.is_empty(),
        "dee kept the defaults"
    );
    assert_eq!(
        topic_events(&app, &p, &ann).await,
        sorted(vec![
            (
                "contact.topic.unsubscribed".to_string(),
                news.clone(),
                "api".to_string()
            ),
            (
                "contact.topic.subscribed".to_string(),
                offers.clone(),
                "track".to_string()
            ),
            (
                "contact.topic.unsubscribed".to_string(),
                offers.clone(),
                "send".to_string()
            ),
            (
                "contact.topic.subscribed".to_string(),
                news.clone(),
                "send".to_string()
            ),
        ])
    );
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "ann@example.com", "from": "shop@example.com",
                    "subject": "Hi", "body": "<p>Hi</p>",
                    "topics": [{ "id": "top_0000", "subscribed": false }] }),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);

    // Callers may not track the service's own topic events.
    let r = app
        .post(
            "/v1/track",
            &p.secret_key,
            json!({ "email": "ann@example.com", "event": "contact.topic.subscribed" }),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);

    // A deleted topic leaves the contacts' lists; its choices are ignored.
    app.delete(&format!("/topics/{offers}"), &p.secret_key)
        .await;
    let s = states(&app, &p, &ann).await;
    assert_eq!(s, [(news.clone(), true)]);
}

#[tokio::test]
async fn the_preference_page_changes_topics_with_a_plain_form_post_and_workflows_see_the_events() {
    let app = TestApp::spawn_with(|s| {
        s.domains.allow_unverified = true;
        s.jobs_poll_interval_ms = 20;
    })
    .await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let offers = topic(&app, &p, "Offers & <deals>", "OPT_OUT").await;
    let r = app
        .post(
            "/topics",
            &p.secret_key,
            json!({ "name": "Internal", "defaultSubscription": "OPT_IN", "visibility": "PRIVATE" }),
        )
        .await;
    let internal = r.body["id"].as_str().unwrap().to_string();
    // A workflow started by each topic subscription.
    let (wf, _) = workflow(
        &app,
        &p,
        "contact.topic.subscribed",
        vec![Step("EXIT", json!({}))],
        &[],
        json!({}),
    )
    .await;

    // Ann reads French; her preference link comes in an email.
    let ann = p
        .contact(&app, "ann@example.com", json!({ "locale": "fr-FR" }))
        .await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "ann@example.com", "from": "shop@example.com", "subject": "Hi",
                    "body": "<p><a href=\"{{manageUrl}}\">Preferences</a></p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let raw = loop {
        if let Some(raw) = app
            .outbox_messages()
            .into_iter()
            .find(|m| m.contains("ann@example.com"))
        {
            break raw;
        }
        assert!(Instant::now() < deadline, "no email");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let message = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let html = message.body_html(0).unwrap().to_string();
    let manage = html
        .split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .find(|l| l.contains("/manage/"))
        .expect("the preferences link");

    // The page: the public topics with Ann's state, in French, no script, and a GET changes
    // nothing.
    let body = app
        .client
        .get(&manage)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("<html lang=\"fr\">"), "{body}");
    assert!(body.contains("Choisissez ce que vous recevez"), "{body}");
    assert!(body.contains("Offers &amp; &lt;deals&gt;"), "{body}");
    assert!(!body.contains("Internal"), "{body}");
    assert!(!body.contains("<script"), "{body}");
    assert!(
        body.contains(&format!("name=\"topic.{news}\" value=\"on\" checked")),
        "{body}"
    );
    assert!(
        body.contains(&format!("name=\"topic.{offers}\" value=\"on\">")),
        "{body}"
    );
    assert!(
        body.contains("name=\"unsubscribeAll\" value=\"on\">"),
        "{body}"
    );
    assert!(topic_events(&app, &p, &ann).await.is_empty());

    // The form posted as a browser does without JavaScript: News unchecked, Offers checked.
    let form = format!("shown.{news}=1&shown.{offers}=1&topic.{offers}=on");
    let r = app
        .client
        .post(&manage)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert!(body.contains("Vos préférences sont enregistrées"), "{body}");
    assert!(
        body.contains(&format!("name=\"topic.{offers}\" value=\"on\" checked")),
        "{body}"
    );
    let s = states(&app, &p, &ann).await;
    assert!(!state_of(&s, &news) && state_of(&s, &offers) && state_of(&s, &internal));
    assert_eq!(
        topic_events(&app, &p, &ann).await,
        sorted(vec![
            (
                "contact.topic.subscribed".to_string(),
                offers.clone(),
                "link".to_string()
            ),
            (
                "contact.topic.unsubscribed".to_string(),
                news.clone(),
                "link".to_string()
            ),
        ])
    );
    let r = app.get(&format!("/contacts/{ann}"), &p.secret_key).await;
    assert_eq!(r.body["subscribed"], true);
    // The same form again changes nothing.
    app.client
        .post(&manage)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(topic_events(&app, &p, &ann).await.len(), 2);
    // The workflow started once, for the subscription to Offers.
    let done = settled(&app, &p, &wf, 1, &["EXITED"]).await;
    assert_eq!(done.len(), 1);

    // The global unsubscribe.
    let r = app
        .client
        .post(&manage)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "shown.{offers}=1&topic.{offers}=on&unsubscribeAll=on"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app.get(&format!("/contacts/{ann}"), &p.secret_key).await;
    assert_eq!(r.body["subscribed"], false);
    assert!(state_of(&states(&app, &p, &ann).await, &offers));

    // A forged token changes nothing.
    let forged = manage.replace("/manage/", "/manage/x");
    let r = app
        .client
        .post(&forged)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("unsubscribeAll=on")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// A filter of one condition on `topic.<id>`.
fn on_topic(topic: &str, operator: &str) -> Value {
    json!({ "logic": "AND", "groups": [
        { "filters": [ { "field": format!("topic.{topic}"), "operator": operator } ] } ] })
}

#[tokio::test]
async fn filters_select_by_topic_in_sql_and_in_live_membership() {
    let app = TestApp::spawn_with(|s| s.jobs_poll_interval_ms = 20).await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let offers = topic(&app, &p, "Offers", "OPT_OUT").await;
    p.contact(&app, "a@example.com", json!({})).await;
    let c = p.contact(&app, "c@example.com", json!({})).await;
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "b@example.com", "topics": [
                { "id": news, "subscribed": false }, { "id": offers, "subscribed": true }] }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    // Wrong operators and a missing id are refused at their paths.
    for (field, operator, path) in [
        (format!("topic.{news}"), "equals", "operator"),
        ("topic.".to_string(), "subscribed", "field"),
        ("email".to_string(), "subscribed", "operator"),
    ] {
        let r = app
            .post(
                "/segments",
                &p.secret_key,
                json!({ "name": "Bad", "type": "DYNAMIC", "condition": { "logic": "AND", "groups": [
                    { "filters": [ { "field": field, "operator": operator, "value": "x" } ] } ] } }),
            )
            .await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(
            r.error_fields(),
            [format!("condition.groups[0].filters[0].{path}")]
        );
    }

    // In SQL: the members of each filter, defaults and choices alike; a topic of no one's
    // (unknown) selects nobody, and its negation everyone.
    let segment = |name: &str, condition: Value, track: bool| {
        let (app, p, name) = (&app, &p, name.to_string());
        async move {
            let r = app
                .post(
                    "/segments",
                    &p.secret_key,
                    json!({ "name": name, "type": "DYNAMIC", "condition": condition,
                            "trackMembership": track }),
                )
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            r.body["id"].as_str().unwrap().to_string()
        }
    };
    let in_news = segment("In news", on_topic(&news, "subscribed"), true).await;
    let out_news = segment("Out of news", on_topic(&news, "notSubscribed"), false).await;
    let in_offers = segment("In offers", on_topic(&offers, "subscribed"), false).await;
    let unknown = "top_00000000000000000000000000000000";
    let nowhere = segment("Nowhere", on_topic(unknown, "subscribed"), false).await;
    let everyone = segment("Everyone", on_topic(unknown, "notSubscribed"), false).await;
    assert_eq!(
        members(&app, &p, &in_news).await,
        ["a@example.com", "c@example.com"]
    );
    assert_eq!(members(&app, &p, &out_news).await, ["b@example.com"]);
    assert_eq!(members(&app, &p, &in_offers).await, ["b@example.com"]);
    assert!(members(&app, &p, &nowhere).await.is_empty());
    assert_eq!(members(&app, &p, &everyone).await.len(), 3);

    // Tracked membership, evaluated in memory on each change: c leaves the topic and exits.
    let r = app
        .post(
            &format!("/segments/{in_news}/compute"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], 2);
    let r = app
        .patch(
            &format!("/contacts/{c}"),
            &p.secret_key,
            json!({ "topics": [{ "id": news, "subscribed": false }] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = app
            .get(&format!("/events/contact/{c}?limit=100"), &p.secret_key)
            .await;
        let names: Vec<&str> = r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        if names.contains(&"segment.in-news.exit") {
            break;
        }
        assert!(Instant::now() < deadline, "no exit: {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(members(&app, &p, &in_news).await, ["a@example.com"]);
}
