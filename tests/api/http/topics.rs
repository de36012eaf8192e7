//! Topics through HTTP: created, read, changed and deleted with their validation errors and
//! another project's isolation; a contact's choices set through every path (`POST` and `PATCH
//! /contacts`, `/v1/send` and `/v1/track` with the secret key; the public key's ignored), read
//! back on `GET /contacts/:id` with the topics' defaults, each change an event; a campaign about
//! a topic mailing only its subscribers (the audience preview's counts equal to what is sent),
//! its one-click unsubscribe leaving that topic only; the preference page changing topics with
//! a plain form `POST`, each change an event that starts workflows; a template about a topic,
//! sent by `/v1/send` and by a workflow's `SEND_EMAIL` step.

use std::time::{Duration, Instant};

use mail_parser::MessageParser;
use serde_json::{Value, json};

use crate::http::campaigns::{campaign_body, campaign_with_status, contact, create, send, stats};
use crate::http::executions::{Step, settled, workflow};
use crate::http::segments::members;
use crate::http::send::email_with_status;
use crate::support::harness::{TestApp, TestProject};
use crate::support::smtpd::SmtpServer;

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
async fn contact_with(app: &TestApp, p: &TestProject, email: &str, topics: Value) -> String {
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

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn state_of(states: &[(String, bool)], topic: &str) -> bool {
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

/// Fast polling, unverified senders, the `smtp` transport pointed at the sink on `port`.
fn through(s: &mut herald::config::Settings, port: u16) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
    s.plugins.smtp_host = Some("127.0.0.1".into());
    s.plugins.smtp_port = port;
    s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
    s.plugins.transport = "smtp".into();
}

/// The messages the sink accepted, by recipient address.
fn messages(sink: &SmtpServer) -> Vec<(String, String)> {
    let log = sink.log.lock().unwrap().clone();
    log.data
        .iter()
        .map(|raw| {
            let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
            let to = m
                .to()
                .and_then(|to| to.first())
                .and_then(|a| a.address())
                .unwrap_or_default()
                .to_ascii_lowercase();
            (to, raw.clone())
        })
        .collect()
}

/// Waits (up to 30 s) until the sink holds `n` messages, then a little for any extra one.
async fn delivered(sink: &SmtpServer, n: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages(sink).len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} arrived",
            messages(sink).len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    messages(sink)
}

/// The one-click unsubscribe URL of a raw message (its `List-Unsubscribe` header).
fn list_unsubscribe(raw: &str) -> String {
    let message = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let list = message
        .header_raw("List-Unsubscribe")
        .unwrap()
        .trim()
        .to_string();
    let url = list
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string();
    assert!(url.contains("/unsubscribe/"), "{list}");
    url
}

/// The one-click unsubscribe of RFC 8058: a form `POST` of `List-Unsubscribe=One-Click`.
async fn one_click(app: &TestApp, url: &str) {
    let r = app
        .client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The id of the contact an address search (`ann%40`) finds first.
async fn contact_id(app: &TestApp, p: &TestProject, search: &str) -> String {
    let r = app
        .get(&format!("/contacts?search={search}"), &p.secret_key)
        .await;
    r.body["data"][0]["id"].as_str().unwrap().to_string()
}

/// `POST /campaigns/:id/audience`.
async fn preview(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app
        .post(
            &format!("/campaigns/{id}/audience"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn a_topic_campaign_mails_only_the_topics_subscribers_and_its_one_click_leaves_the_topic() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port())).await;
    let p = app.project().await;
    let other = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let offers = topic(&app, &p, "Offers", "OPT_OUT").await;
    let foreign = topic(&app, &other, "Theirs", "OPT_IN").await;

    // In the topic by default (a0, a1), by choice of an OPT_OUT topic (a2, for offers), out by
    // choice (b), globally unsubscribed (c), in but on the suppression list (d).
    for email in ["a0@example.com", "a1@example.com", "d@example.com"] {
        contact(&app, &p, email, true, json!({})).await;
    }
    contact_with(
        &app,
        &p,
        "a2@example.com",
        json!([{ "id": offers, "subscribed": true }]),
    )
    .await;
    contact_with(
        &app,
        &p,
        "b@example.com",
        json!([{ "id": news, "subscribed": false }]),
    )
    .await;
    contact(&app, &p, "c@example.com", false, json!({})).await;
    app.post(
        "/suppressions",
        &p.secret_key,
        json!({ "emails": ["d@example.com"] }),
    )
    .await;

    // A topic of another project, or none, is 422 at `topicId`; the topic is answered.
    for bad in [foreign.as_str(), "top_nope"] {
        let mut body = campaign_body("News", json!({ "audienceType": "ALL" }));
        body["topicId"] = json!(bad);
        let r = app.post("/campaigns", &p.secret_key, body).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), ["topicId"]);
    }
    let mut body = campaign_body("News", json!({ "audienceType": "ALL" }));
    body["topicId"] = json!(news);
    let campaign = create(&app, &p, body).await;
    let r = app
        .get(&format!("/campaigns/{campaign}"), &p.secret_key)
        .await;
    assert_eq!(r.body["topicId"], news.as_str());
    let mut body = campaign_body("Offers", json!({ "audienceType": "ALL" }));
    body["topicId"] = json!(offers);
    let offers_campaign = create(&app, &p, body).await;

    // A topic a campaign names cannot be deleted.
    app.delete(&format!("/topics/{news}"), &p.secret_key)
        .await
        .assert_error(409, "CONFLICT");

    // The preview: a0, a1, a2 mailed; b not in the topic; c unsubscribed; d suppressed.
    let counted = preview(&app, &p, &campaign).await;
    assert_eq!(
        counted,
        json!({ "recipients": 3, "excluded": { "unsubscribed": 1, "notInTopic": 1, "suppressed": 1 } })
    );
    assert_eq!(
        preview(&app, &p, &offers_campaign).await["recipients"],
        1,
        "only a2 opted in to offers"
    );

    // The send mails what the preview said, no one else.
    let r = send(&app, &p, &campaign, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    campaign_with_status(&app, &p, &campaign, "SENT", 60).await;
    let mails = delivered(&sink, 3).await;
    let mut to: Vec<&str> = mails.iter().map(|(to, _)| to.as_str()).collect();
    to.sort();
    assert_eq!(to, ["a0@example.com", "a1@example.com", "a2@example.com"]);
    assert_eq!(
        stats(&app, &p, &campaign).await["sent"],
        counted["recipients"]
    );

    // a0's one-click unsubscribe (RFC 8058) leaves the topic only.
    let raw = &mails
        .iter()
        .find(|(to, _)| to == "a0@example.com")
        .unwrap()
        .1;
    let url = list_unsubscribe(raw);
    let page = app.client.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("News"));
    one_click(&app, &url).await;
    let a0 = contact_id(&app, &p, "a0%40").await;
    let r = app.get(&format!("/contacts/{a0}"), &p.secret_key).await;
    assert_eq!(r.body["subscribed"], true, "still subscribed to the rest");
    let s = states(&app, &p, &a0).await;
    assert!(!state_of(&s, &news));
    assert_eq!(
        topic_events(&app, &p, &a0).await,
        [(
            "contact.topic.unsubscribed".to_string(),
            news.clone(),
            "link".to_string()
        )]
    );
    // The next preview counts a0 out of the topic.
    assert_eq!(
        preview(&app, &p, &campaign).await["excluded"]["notInTopic"],
        2
    );
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

#[tokio::test]
async fn a_template_about_a_topic_is_sent_only_to_the_topics_subscribers() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port())).await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_OUT").await;
    let template = |topic: Value| {
        json!({ "name": "Digest", "subject": "Digest", "type": "TRANSACTIONAL",
                "body": "<p>Hi</p><a href=\"{{unsubscribeUrl}}\">Leave</a>",
                "from": "news@acme.test", "topicId": topic })
    };
    let r = app
        .post("/templates", &p.secret_key, template(json!("top_nope")))
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["topicId"]);
    let r = app
        .post("/templates", &p.secret_key, template(json!(news)))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["topicId"], news.as_str());
    let tpl = r.body["id"].as_str().unwrap().to_string();
    app.delete(&format!("/topics/{news}"), &p.secret_key)
        .await
        .assert_error(409, "CONFLICT");

    // Ann opted in; Bob did not (OPT_OUT): his email is recorded suppressed, never sent.
    contact_with(
        &app,
        &p,
        "ann@example.com",
        json!([{ "id": news, "subscribed": true }]),
    )
    .await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": ["ann@example.com", "bob@example.com"], "template": tpl }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let bob_email = r.body["data"]["emails"][1]["email"]
        .as_str()
        .unwrap()
        .to_string();
    let ann_email = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    email_with_status(&app, &p, &bob_email, "suppressed").await;
    email_with_status(&app, &p, &ann_email, "sent").await;
    let mails = delivered(&sink, 1).await;
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].0, "ann@example.com");
    // Its one-click unsubscribe leaves the topic only.
    one_click(&app, &list_unsubscribe(&mails[0].1)).await;
    let ann = contact_id(&app, &p, "ann%40").await;
    assert!(!state_of(&states(&app, &p, &ann).await, &news));
    assert_eq!(
        app.get(&format!("/contacts/{ann}"), &p.secret_key)
            .await
            .body["subscribed"],
        true
    );

    // Without its topic (null), the template can go and the topic be deleted.
    let r = app
        .patch(
            &format!("/templates/{tpl}"),
            &p.secret_key,
            json!({ "topicId": null }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["topicId"], Value::Null);
    let r = app.delete(&format!("/topics/{news}"), &p.secret_key).await;
    assert_eq!(r.status, 204, "{}", r.body);
}

#[tokio::test]
async fn a_workflow_send_of_a_topics_template_reaches_only_the_topics_subscribers() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port())).await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "Welcome", "subject": "Welcome", "type": "TRANSACTIONAL",
                    "body": "<p>Hi</p>", "from": "news@acme.test", "topicId": news }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let tpl = r.body["id"].as_str().unwrap().to_string();
    let (wf, _) = workflow(
        &app,
        &p,
        "signed-up",
        vec![
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
            Step("EXIT", json!({})),
        ],
        &[(0, 1, None)],
        json!({}),
    )
    .await;
    // Ann keeps the default (in); Bob left the topic.
    contact_with(
        &app,
        &p,
        "bob@example.com",
        json!([{ "id": news, "subscribed": false }]),
    )
    .await;
    for email in ["ann@example.com", "bob@example.com"] {
        let r = app
            .post(
                "/v1/track",
                &p.secret_key,
                json!({ "email": email, "event": "signed-up" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    settled(&app, &p, &wf, 2, &["EXITED"]).await;
    let mails = delivered(&sink, 1).await;
    let to: Vec<&str> = mails.iter().map(|(to, _)| to.as_str()).collect();
    assert_eq!(to, ["ann@example.com"]);
    assert!(list_unsubscribe(&mails[0].1).contains("/unsubscribe/"));
}
