//! Confirmed opt-in through HTTP, with the `outbox` transport: a subscription asked with the
//! public key leaves the contact unsubscribed and pending, and a confirmation in the contact's
//! language reaches the outbox; a `GET` of its link confirms nothing, the `POST` subscribes
//! (`contact.subscribed`, source `confirmation`); a repeated subscribe mails no second
//! confirmation within the resend interval; an expired link confirms nothing; pending contacts
//! get no campaign mail and are counted as `pending` by the audience preview; the project's
//! own confirmation template, with `ALL` (the secret key's paths too).

use std::time::{Duration, Instant};

use herald::config::Settings;
use mail_parser::MessageParser;
use reqwest::Method;
use serde_json::{Value, json};

use crate::http::campaigns::{campaign_body, campaign_with_status, create, recipients_of, send};
use crate::http::engagement::html_of;
use crate::http::send::count;
use crate::support::harness::{Reply, TestApp, TestProject, execute_sql};

/// Fast polling and unverified senders (the `outbox` transport writes files).
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
}

/// `PATCH /users/@me/projects/:id` as the project's owner.
async fn settings(app: &TestApp, p: &TestProject, body: Value) -> Reply {
    app.call_with(
        &p.owner,
        Method::PATCH,
        &format!("/users/@me/projects/{}", p.id),
        None,
        Some(body),
        &[],
    )
    .await
}

/// Turns confirmed opt-in to `mode`, with a default sender.
async fn opt_in(app: &TestApp, p: &TestProject, mode: &str) {
    let r = settings(
        app,
        p,
        json!({ "doubleOptIn": mode, "defaultFrom": { "email": "news@acme.test", "name": "Acme" } }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["doubleOptIn"], mode, "{}", r.body);
}

async fn contact(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app.get(&format!("/contacts/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// Tracks `event` for `email` with `key`; answers the contact's id.
async fn track(app: &TestApp, key: &str, email: &str, extra: Value) -> String {
    let mut body = json!({ "email": email, "event": "signed-up" });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = app.post("/v1/track", key, body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["contact"].as_str().unwrap().to_string()
}

/// The project's `contact.subscribed` events.
async fn subscriptions(app: &TestApp, p: &TestProject) -> Vec<Value> {
    let r = app
        .get("/events?name=contact.subscribed", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

/// `"subscribed": true` for `email` with the public key.
async fn resubscribe(app: &TestApp, p: &TestProject, email: &str) {
    track(app, &p.public_key, email, json!({ "subscribed": true })).await;
}

/// The messages in the outbox to `to` whose subject is `subject`, once there are `n` (up to
/// 20 s).
async fn mails(app: &TestApp, to: &str, subject: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found: Vec<String> = app
            .outbox_messages()
            .into_iter()
            .filter(|m| {
                let parsed = MessageParser::default().parse(m.as_bytes()).unwrap();
                parsed.subject() == Some(subject)
                    && parsed
                        .to()
                        .and_then(|a| a.first())
                        .and_then(|a| a.address())
                        == Some(to)
            })
            .collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} mails `{subject}` to {to}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first link of `html` whose path starts with `path` (`/confirm/`).
pub fn link(html: &str, path: &str) -> String {
    html.split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .find(|href| href.contains(path))
        .unwrap_or_else(|| panic!("no {path} link in {html}"))
}

/// The number of emails the project queued to `to` (sent or not).
async fn emails_to(app: &TestApp, to: &str) -> i64 {
    count(
        app,
        &format!("SELECT COUNT(*) FROM emails WHERE to_address = '{to}'"),
    )
    .await
}

async fn page(method: Method, url: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .request(method, url)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_public_key_subscription_waits_for_the_confirmation_by_post() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;

    // Off by default; turning it on needs a sender for the confirmation.
    let r = settings(&app, &p, json!({})).await;
    assert_eq!(r.body["doubleOptIn"], "OFF", "{}", r.body);
    let r = settings(&app, &p, json!({ "doubleOptIn": "PUBLIC_KEY" })).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["doubleOptIn"]);
    let r = settings(&app, &p, json!({ "doubleOptIn": "SOMETIMES" })).await;
    assert!(r.status == 400 || r.status == 422, "{}", r.body);
    opt_in(&app, &p, "PUBLIC_KEY").await;

    // The public key's subscription: unsubscribed and pending, a confirmation in French.
    let id = track(
        &app,
        &p.public_key,
        "ann@example.com",
        json!({ "data": { "locale": "fr-CA" } }),
    )
    .await;
    let c = contact(&app, &p, &id).await;
    assert_eq!(c["subscribed"], false, "{c}");
    assert_eq!(c["subscriptionPending"], true, "{c}");
    assert!(c["pendingSince"].is_string(), "{c}");
    let mail = mails(&app, "ann@example.com", "Confirmez votre inscription", 1).await;
    let html = html_of(&mail[0]);
    assert!(html.contains("ann@example.com"), "{html}");
    let url = link(&html, "/confirm/");

    // Subscribing again within the resend interval mails nothing more.
    resubscribe(&app, &p, "ann@example.com").await;
    assert_eq!(emails_to(&app, "ann@example.com").await, 1);

    // A GET (a mail scanner following the link) shows the button and confirms nothing.
    let (status, body) = page(Method::GET, &url).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("method=\"post\""), "{body}");
    assert!(body.contains("Confirmer mon inscription"), "{body}");
    let c = contact(&app, &p, &id).await;
    assert_eq!(c["subscribed"], false, "{c}");
    assert_eq!(c["subscriptionPending"], true, "{c}");

    // The POST confirms: subscribed, `contact.subscribed` with source `confirmation`.
    let (status, body) = page(Method::POST, &url).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Inscription confirmée"), "{body}");
    let c = contact(&app, &p, &id).await;
    assert_eq!(c["subscribed"], true, "{c}");
    assert_eq!(c["subscriptionPending"], false, "{c}");
    assert!(c["pendingSince"].is_null(), "{c}");
    let events = subscriptions(&app, &p).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["source"], "confirmation");
    // Confirming twice answers the same page and records nothing more.
    let (status, _) = page(Method::POST, &url).await;
    assert_eq!(status, 200);
    assert_eq!(subscriptions(&app, &p).await.len(), 1);

    // The secret key is trusted with `PUBLIC_KEY`: its subscription takes effect at once.
    let id = track(&app, &p.secret_key, "bob@example.com", json!({})).await;
    let c = contact(&app, &p, &id).await;
    assert_eq!(c["subscribed"], true, "{c}");
    assert_eq!(c["subscriptionPending"], false, "{c}");
    assert_eq!(emails_to(&app, "bob@example.com").await, 0);

    // A forged or unknown token is a 404 page, for both methods.
    for method in [Method::GET, Method::POST] {
        let (status, _) = page(method, &app.url("/confirm/not-a-token")).await;
        assert_eq!(status, 404);
    }
    let (front, _) = url.rsplit_once('.').unwrap();
    let (status, _) = page(Method::POST, &format!("{front}.AAAAAAAAAAAAAAAAAAAAAA")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn an_expired_link_confirms_nothing_and_a_new_subscription_mails_a_new_one() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    opt_in(&app, &p, "PUBLIC_KEY").await;
    let id = track(&app, &p.public_key, "ann@example.com", json!({})).await;
    let mail = mails(&app, "ann@example.com", "Confirm your subscription", 1).await;
    let old = link(&html_of(&mail[0]), "/confirm/");

    // The wait's days are over (the clock of the row moved back).
    execute_sql(
        &app.database_url,
        &format!("UPDATE contact_confirmations SET expires_at = 1 WHERE contact_id = '{id}'"),
    )
    .await;
    for method in [Method::GET, Method::POST] {
        let (status, body) = page(method, &old).await;
        assert_eq!(status, 410, "{body}");
        assert!(body.contains("expired"), "{body}");
    }
    let c = contact(&app, &p, &id).await;
    assert_eq!(c["subscribed"], false, "{c}");
    assert_eq!(c["subscriptionPending"], false, "{c}");
    // The periodic maintenance clears the expired state.
    let cleared = app
        .state()
        .store()
        .prune_confirmations(herald::domain::time::now_ms())
        .await
        .unwrap();
    assert_eq!(cleared, 1);
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM contact_confirmations").await,
        0
    );

    // Subscribing again starts a new wait with a new link; the old one stays dead.
    resubscribe(&app, &p, "ann@example.com").await;
    let mail = mails(&app, "ann@example.com", "Confirm your subscription", 2).await;
    let new = mail
        .iter()
        .map(|m| link(&html_of(m), "/confirm/"))
        .find(|l| *l != old)
        .expect("a new link");
    let (status, _) = page(Method::POST, &old).await;
    assert_eq!(status, 410);
    let (status, _) = page(Method::POST, &new).await;
    assert_eq!(status, 200);
    assert_eq!(contact(&app, &p, &id).await["subscribed"], true);
}

#[tokio::test]
async fn pending_contacts_get_no_campaign_mail_and_are_counted_apart() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    opt_in(&app, &p, "PUBLIC_KEY").await;
    for (email, subscribed) in [("ann@example.com", true), ("bob@example.com", false)] {
        let r = app
            .post(
                "/contacts",
                &p.secret_key,
                json!({ "email": email, "subscribed": subscribed }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let cat = track(&app, &p.public_key, "cat@example.com", json!({})).await;
    assert_eq!(contact(&app, &p, &cat).await["subscriptionPending"], true);

    let id = create(
        &app,
        &p,
        campaign_body("All", json!({ "audienceType": "ALL" })),
    )
    .await;
    let r = app
        .post(
            &format!("/campaigns/{id}/audience"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["recipients"], 1, "{}", r.body);
    assert_eq!(r.body["excluded"]["unsubscribed"], 1, "{}", r.body);
    assert_eq!(r.body["excluded"]["pending"], 1, "{}", r.body);
    assert_eq!(r.body["excluded"]["suppressed"], 0, "{}", r.body);

    let r = send(&app, &p, &id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    campaign_with_status(&app, &p, &id, "SENT", 30).await;
    assert_eq!(recipients_of(&app, "All"), ["ann@example.com"]);
}

#[tokio::test]
async fn the_projects_own_template_confirms_every_path_with_all() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let template = |body: &str| {
        json!({
            "name": "Confirm",
            "subject": "Please confirm, {{email}}",
            "body": body,
            "type": "MARKETING",
        })
    };
    let r = app
        .post("/templates", &p.secret_key, template("<p>No link</p>"))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let linkless = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            template(
                "<p>Hi {{name ?? \"there\"}}</p><a href=\"{{confirmUrl}}\">Yes, sign me up</a>",
            ),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let own = r.body["id"].as_str().unwrap().to_string();

    // The template must be the project's and link to `{{confirmUrl}}`.
    for bad in [
        linkless.as_str(),
        "tpl_0123456789abcdef0123456789abcdef",
        "nope",
    ] {
        let r = settings(&app, &p, json!({ "confirmationTemplateId": bad })).await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), ["confirmationTemplateId"], "{}", r.body);
    }
    let r = settings(&app, &p, json!({ "confirmationTemplateId": own })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["confirmationTemplateId"], own.as_str());
    opt_in(&app, &p, "ALL").await;

    // With `ALL`, the secret key's `POST /contacts` waits too; the mail is the project's
    // template, sent as transactional mail although the contact is not subscribed.
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "dan@example.com", "data": { "name": "Dan" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["subscribed"], false, "{}", r.body);
    assert_eq!(r.body["subscriptionPending"], true, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let mail = mails(
        &app,
        "dan@example.com",
        "Please confirm, dan@example.com",
        1,
    )
    .await;
    let html = html_of(&mail[0]);
    assert!(html.contains("Hi Dan"), "{html}");
    let url = link(&html, "/confirm/");
    // `subscribed: false` ends the wait: the link confirms nothing any more.
    let r = app
        .patch(
            &format!("/contacts/{id}"),
            &p.secret_key,
            json!({ "subscribed": false }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["subscriptionPending"], false, "{}", r.body);
    let (status, _) = page(Method::POST, &url).await;
    assert_eq!(status, 410);
    // `PATCH … subscribed: true` waits again (a new wait, a new mail), and its link confirms.
    let r = app
        .patch(
            &format!("/contacts/{id}"),
            &p.secret_key,
            json!({ "subscribed": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["subscribed"], false, "{}", r.body);
    assert_eq!(r.body["subscriptionPending"], true, "{}", r.body);
    let mail = mails(
        &app,
        "dan@example.com",
        "Please confirm, dan@example.com",
        2,
    )
    .await;
    let url = mail
        .iter()
        .map(|m| link(&html_of(m), "/confirm/"))
        .find(|l| *l != url)
        .expect("a new link");
    let (status, _) = page(Method::POST, &url).await;
    assert_eq!(status, 200);
    assert_eq!(contact(&app, &p, &id).await["subscribed"], true);

    // `null` goes back to the built-in template.
    let r = settings(&app, &p, json!({ "confirmationTemplateId": null })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["confirmationTemplateId"].is_null(), "{}", r.body);
    track(&app, &p.secret_key, "eve@example.com", json!({})).await;
    mails(&app, "eve@example.com", "Confirm your subscription", 1).await;
}
