//! Mail about a topic through HTTP, delivered through the `smtp` transport into a loopback SMTP
//! sink: a campaign about a topic mails only its subscribers (the audience preview's counts equal
//! to what is sent) and its one-click unsubscribe leaves that topic only; a template about a
//! topic, sent by `/v1/send` and by a workflow's `SEND_EMAIL` step, likewise; a step naming its own
//! topic in place of its template's.

use std::time::{Duration, Instant};

use mail_parser::MessageParser;
use serde_json::{Value, json};

use crate::http::campaigns::{campaign_body, campaign_with_status, contact, create, send, stats};
use crate::http::executions::{Step, settled, workflow};
use crate::http::send::email_with_status;
use crate::http::topics::{contact_with, state_of, states, topic, topic_events};
use crate::support::harness::{TestApp, TestProject};
use crate::support::smtpd::SmtpServer;

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
        json!({ "recipients": 3, "excluded": { "unsubscribed": 1, "pending": 0, "notInTopic": 1, "suppressed": 1 } })
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

/// A workflow of one `SEND_EMAIL` step (`config`) started for Ann (on the topic's default, in)
/// and Bob (who left the topic): only Ann's mail is delivered; answers it.
async fn send_to_ann_and_bob(
    app: &TestApp,
    p: &TestProject,
    sink: &SmtpServer,
    news: &str,
    config: Value,
) -> Vec<(String, String)> {
    let (wf, _) = workflow(
        app,
        p,
        "joined",
        vec![Step("SEND_EMAIL", config), Step("EXIT", json!({}))],
        &[(0, 1, None)],
        json!({}),
    )
    .await;
    contact_with(
        app,
        p,
        "bob@example.com",
        json!([{ "id": news, "subscribed": false }]),
    )
    .await;
    for email in ["ann@example.com", "bob@example.com"] {
        let r = app
            .post(
                "/v1/track",
                &p.secret_key,
                json!({ "email": email, "event": "joined" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    settled(app, p, &wf, 2, &["EXITED"]).await;
    let mails = delivered(sink, 1).await;
    let to: Vec<&str> = mails.iter().map(|(to, _)| to.as_str()).collect();
    assert_eq!(to, ["ann@example.com"]);
    mails
}

/// A transactional template from `news@acme.test` about `topic` (null: none), with an
/// unsubscribe link; answers its id.
async fn welcome(app: &TestApp, p: &TestProject, topic: Value) -> String {
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "Welcome", "subject": "Welcome", "type": "TRANSACTIONAL",
                    "body": "<p>Hi</p><a href=\"{{unsubscribeUrl}}\">Leave</a>",
                    "from": "news@acme.test", "topicId": topic }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_workflow_send_of_a_topics_template_reaches_only_the_topics_subscribers() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port())).await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    let tpl = welcome(&app, &p, json!(news)).await;
    let mails = send_to_ann_and_bob(&app, &p, &sink, &news, json!({ "templateId": tpl })).await;
    assert!(list_unsubscribe(&mails[0].1).contains("/unsubscribe/"));
}

#[tokio::test]
async fn a_workflow_step_names_its_own_topic_in_place_of_its_templates() {
    let sink = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| through(s, sink.addr.port())).await;
    let p = app.project().await;
    let news = topic(&app, &p, "News", "OPT_IN").await;
    // A template about no topic: the step's topic makes its mail about News.
    let tpl = welcome(&app, &p, Value::Null).await;

    // Refused: a `topicId` that is no topic id (the step's validation), and, when enabling, a
    // topic the project does not have.
    let r = app
        .post(
            "/workflows",
            &p.secret_key,
            json!({ "name": "draft", "triggerConfig": { "eventName": "signed-up" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let draft = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{draft}/steps"),
            &p.secret_key,
            json!({ "type": "SEND_EMAIL", "config": { "templateId": tpl, "topicId": "news" } }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["config.topicId"]);
    let r = app
        .post(
            &format!("/workflows/{draft}/steps"),
            &p.secret_key,
            json!({ "type": "SEND_EMAIL",
                    "config": { "templateId": tpl, "topicId": "top_00000000000000000000000000000000" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = app
        .patch(
            &format!("/workflows/{draft}"),
            &p.secret_key,
            json!({ "enabled": true }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert!(
        r.error_fields()
            .iter()
            .any(|f| f == "steps[0].config.topicId"),
        "{}",
        r.body
    );

    let step = json!({ "templateId": tpl, "topicId": news });
    let mails = send_to_ann_and_bob(&app, &p, &sink, &news, step).await;
    // Its one-click unsubscribe leaves News only.
    one_click(&app, &list_unsubscribe(&mails[0].1)).await;
    let ann = contact_id(&app, &p, "ann%40").await;
    assert!(!state_of(&states(&app, &p, &ann).await, &news));
    assert_eq!(
        app.get(&format!("/contacts/{ann}"), &p.secret_key)
            .await
            .body["subscribed"],
        true
    );
}
