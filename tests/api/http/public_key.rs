//! The public key (`pk_…`) is embedded in web pages, so anything it can do anyone can do
//! (issue #74, items 4 to 6): it never subscribes again a contact who opted out, bounced or
//! complained; its traffic has its own share of the project's rate limit and never makes a
//! secret-key call 429; and what writes can add to a project is capped (a contact's data, the
//! distinct custom fields, the distinct event names), each a 422 naming the limit.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::events::delete_events_once_dispatched;
use crate::support::harness::{TestApp, TestProject, fresh_minute};

async fn track(app: &TestApp, key: &str, body: Value) -> crate::support::harness::Reply {
    app.post("/v1/track", key, body).await
}

async fn subscribed(app: &TestApp, p: &TestProject, id: &str) -> bool {
    let r = app.get(&format!("/contacts/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["subscribed"].as_bool().unwrap()
}

/// The `contact.subscribed` events of a contact.
async fn resubscriptions(app: &TestApp, p: &TestProject, id: &str) -> usize {
    let r = app
        .get(&format!("/events/contact/{id}?limit=100"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = r.body["data"]
        .as_array()
        .or_else(|| r.body.as_array())
        .cloned()
        .unwrap_or_default();
    events
        .iter()
        .filter(|e| e["name"] == "contact.subscribed" || e["event"] == "contact.subscribed")
        .count()
}

/// Unsubscribes a contact as a bounce or a complaint does (the transport's notification).
async fn unsubscribe_as(
    app: &TestApp,
    p: &TestProject,
    id: &str,
    source: herald::domain::event::SubscriptionSource,
) {
    let project = herald::domain::ids::ProjectId::parse(&p.id).unwrap();
    let contact = herald::domain::ids::ContactId::parse(id).unwrap();
    let outcome = app
        .state()
        .store()
        .unsubscribe_contact(&project, &contact, source, Some("test"))
        .await
        .unwrap();
    assert!(!outcome.contact.subscribed);
}

#[tokio::test]
async fn the_public_key_never_resubscribes_an_unsubscribed_contact() {
    use herald::domain::event::SubscriptionSource;
    let app = TestApp::spawn().await;
    let p = app.project().await;

    // Opted out (by the API, as the unsubscribe link does), bounced, complained.
    let opted_out = p.contact(&app, "opted-out@example.com", json!({})).await;
    let r = app
        .patch(
            &format!("/contacts/{opted_out}"),
            &p.secret_key,
            json!({"subscribed": false}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let bounced = p.contact(&app, "bounced@example.com", json!({})).await;
    unsubscribe_as(&app, &p, &bounced, SubscriptionSource::Bounce).await;
    let complained = p.contact(&app, "complained@example.com", json!({})).await;
    unsubscribe_as(&app, &p, &complained, SubscriptionSource::Complaint).await;

    for (id, email) in [
        (&opted_out, "opted-out@example.com"),
        (&bounced, "bounced@example.com"),
        (&complained, "complained@example.com"),
    ] {
        let before = resubscriptions(&app, &p, id).await;
        // Answered as usual: the event and the data are recorded, `subscribed` is ignored.
        let r = track(
            &app,
            &p.public_key,
            json!({"email": email, "event": "visited", "subscribed": true, "data": {"plan": "pro"}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["contact"], id.as_str());
        assert!(!subscribed(&app, &p, id).await, "{email} was resubscribed");
        assert_eq!(resubscriptions(&app, &p, id).await, before, "{email}");
        let c = app.get(&format!("/contacts/{id}"), &p.secret_key).await;
        assert_eq!(c.body["data"]["plan"], "pro");
    }

    // What the public key may still do: create a contact subscribed, keep a subscribed one
    // subscribed, unsubscribe.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "new@example.com", "event": "signed-up", "subscribed": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let new = r.body["data"]["contact"].as_str().unwrap().to_string();
    assert!(subscribed(&app, &p, &new).await);
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "new@example.com", "event": "visited", "subscribed": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(subscribed(&app, &p, &new).await);
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "new@example.com", "event": "left", "subscribed": false}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!subscribed(&app, &p, &new).await);
    // ... and it cannot undo that either.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "new@example.com", "event": "back", "subscribed": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!subscribed(&app, &p, &new).await);

    // The secret key and the dashboard still can.
    let r = track(
        &app,
        &p.secret_key,
        json!({"email": "opted-out@example.com", "event": "confirmed", "subscribed": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(subscribed(&app, &p, &opted_out).await);
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            "/events/track",
            None,
            Some(json!({"email": "bounced@example.com", "event": "confirmed", "subscribed": true})),
            &[("X-Project-Id", p.id.as_str())],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(subscribed(&app, &p, &bounced).await);
    // The complained contact is still unsubscribed.
    assert!(!subscribed(&app, &p, &complained).await);
}

#[tokio::test]
async fn public_key_traffic_never_makes_a_secret_key_call_429() {
    // 4 a minute for the project; the public key has 50 %: 2.
    let app = TestApp::spawn_with(|s| s.rate_limit_per_minute = 4).await;
    let p = app.project().await;
    fresh_minute(Duration::from_secs(10)).await;
    let body = json!({"email": "visitor@example.com", "event": "page-view"});
    for i in 0..2u32 {
        let r = track(&app, &p.public_key, body.clone()).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.header("ratelimit-limit"), Some("2"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some((1 - i).to_string().as_str())
        );
    }
    for _ in 0..5 {
        let r = track(&app, &p.public_key, body.clone()).await;
        r.assert_error(429, "RATE_LIMIT_EXCEEDED");
        assert!(r.header("retry-after").is_some());
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("public key"), "{message}");
    }
    // The secret key has the project's whole limit, untouched by the public key's requests.
    for i in 0..4u32 {
        let r = app.get("/contacts", &p.secret_key).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.header("ratelimit-limit"), Some("4"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some((3 - i).to_string().as_str())
        );
    }
    app.get("/contacts", &p.secret_key)
        .await
        .assert_error(429, "RATE_LIMIT_EXCEEDED");
    // Neither did the secret key's use up the public key's share (still spent).
    track(&app, &p.public_key, body)
        .await
        .assert_error(429, "RATE_LIMIT_EXCEEDED");
}

#[tokio::test]
async fn the_public_share_is_a_setting() {
    let app = TestApp::spawn_with(|s| {
        s.rate_limit_per_minute = 10;
        s.rate_limit_public_share = 30;
    })
    .await;
    let p = app.project().await;
    fresh_minute(Duration::from_secs(10)).await;
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "a@example.com", "event": "page-view"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("ratelimit-limit"), Some("3"));
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.header("ratelimit-limit"), Some("10"));
    assert_eq!(r.header("ratelimit-remaining"), Some("9"));
}

/// Asserts a 422 `VALIDATION_ERROR` for a cap, with `errors[0]` at `field` with `code`, its
/// message naming `setting`.
#[track_caller]
fn assert_cap(r: &crate::support::harness::Reply, field: &str, code: &str, setting: &str) {
    r.assert_error(422, "VALIDATION_ERROR");
    let errors = &r.body["error"]["errors"];
    assert_eq!(errors[0]["field"], field, "{}", r.body);
    assert_eq!(errors[0]["code"], code, "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(setting), "{message}");
    assert!(r.body["error"]["suggestion"].as_str().is_some());
}

#[tokio::test]
async fn a_contacts_data_is_capped_in_size() {
    let app = TestApp::spawn_with(|s| s.contact_data_max_bytes = 1024).await;
    let p = app.project().await;
    let big = "x".repeat(1100);
    let half = "y".repeat(600);

    // A new contact, by the public key and by the secret key: nothing is written.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "big@example.com", "event": "e", "data": {"blob": big}}),
    )
    .await;
    assert_cap(
        &r,
        "data",
        "contact_data_too_large",
        "contact_data_max_bytes",
    );
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({"email": "big@example.com", "data": {"blob": big}}),
        )
        .await;
    assert_cap(
        &r,
        "data",
        "contact_data_too_large",
        "contact_data_max_bytes",
    );
    assert_eq!(app.get("/contacts", &p.secret_key).await.body["total"], 0);
    assert_eq!(app.get("/events", &p.secret_key).await.body["total"], 0);

    // Grown in steps: each write alone is small, the total is capped.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "ann@example.com", "event": "e", "data": {"a": half}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ann = r.body["data"]["contact"].as_str().unwrap().to_string();
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "ann@example.com", "event": "e", "data": {"b": half}}),
    )
    .await;
    assert_cap(
        &r,
        "data",
        "contact_data_too_large",
        "contact_data_max_bytes",
    );
    let r = app
        .patch(
            &format!("/contacts/{ann}"),
            &p.secret_key,
            json!({"data": {"b": half}}),
        )
        .await;
    assert_cap(
        &r,
        "data",
        "contact_data_too_large",
        "contact_data_max_bytes",
    );
    let c = app.get(&format!("/contacts/{ann}"), &p.secret_key).await;
    assert_eq!(c.body["data"], json!({"a": half}));
    // Replacing a value within the cap passes.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "ann@example.com", "event": "e", "data": {"a": "short", "b": half}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_projects_custom_fields_are_capped() {
    let app = TestApp::spawn_with(|s| s.contact_fields_max_per_project = 3).await;
    let p = app.project().await;
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "a@example.com", "event": "e", "data": {"f1": 1, "f2": "x"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    p.contact(&app, "b@example.com", json!({"f3": true})).await;

    // A fourth field, from any path, is refused and writes nothing.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "c@example.com", "event": "e", "data": {"f4": 1}}),
    )
    .await;
    assert_cap(
        &r,
        "data.f4",
        "contact_fields_limit",
        "contact_fields_max_per_project",
    );
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({"email": "a@example.com", "data": {"f1": 2, "f4": 1}}),
        )
        .await;
    assert_cap(
        &r,
        "data.f4",
        "contact_fields_limit",
        "contact_fields_max_per_project",
    );
    assert_eq!(app.get("/contacts", &p.secret_key).await.body["total"], 2);
    let fields = app.get("/contacts/fields", &p.secret_key).await;
    assert_eq!(fields.status, 200, "{}", fields.body);
    assert!(!fields.body.to_string().contains("f4"), "{}", fields.body);

    // The known fields stay writable.
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "c@example.com", "event": "e", "data": {"f1": 5, "f3": false}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Deleting a field makes room.
    let r = app.delete("/contacts/fields/data.f2", &p.secret_key).await;
    assert!(r.status.is_success(), "{}", r.body);
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "c@example.com", "event": "e", "data": {"f4": 1}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_projects_event_names_are_capped() {
    let app = TestApp::spawn_with(|s| {
        s.event_names_max_per_project = 2;
        s.jobs_poll_interval_ms = 50;
    })
    .await;
    let p = app.project().await;
    let q = app.project().await;
    for name in ["one", "two", "one"] {
        let r = track(
            &app,
            &p.public_key,
            json!({"email": "a@example.com", "event": name}),
        )
        .await;
        assert_eq!(r.status, 200, "{name}: {}", r.body);
    }
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "a@example.com", "event": "three", "data": {"x": 1}}),
    )
    .await;
    assert_cap(
        &r,
        "event",
        "event_names_limit",
        "event_names_max_per_project",
    );
    // Nothing of the refused call was written.
    assert_eq!(app.get("/events", &p.secret_key).await.body["total"], 3);
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.body["data"][0]["data"], json!({}), "{}", r.body);
    // Another project has its own names.
    for name in ["three", "four"] {
        let r = track(
            &app,
            &q.public_key,
            json!({"email": "a@example.com", "event": name}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The service's own names do not count: the contact's subscription events are recorded.
    let r = track(
        &app,
        &p.secret_key,
        json!({"email": "a@example.com", "event": "two", "subscribed": false}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Deleting a name's events makes room.
    assert_eq!(delete_events_once_dispatched(&app, &p, "one").await, 2);
    let r = track(
        &app,
        &p.public_key,
        json!({"email": "a@example.com", "event": "three"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    track(
        &app,
        &p.public_key,
        json!({"email": "a@example.com", "event": "one"}),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");

    // So does a reset of the project.
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            &format!("/users/@me/projects/{}/reset", p.id),
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for name in ["five", "six"] {
        let r = track(
            &app,
            &p.public_key,
            json!({"email": "a@example.com", "event": name}),
        )
        .await;
        assert_eq!(r.status, 200, "{name}: {}", r.body);
    }
}

/// A second instance on the same database, which has not seen the names recorded, counts them
/// from the table (PostgreSQL; on SQLite a second process on one file is the same check).
#[tokio::test]
async fn the_event_name_cap_holds_for_an_instance_that_did_not_record_the_names() {
    let one = TestApp::spawn_with(|s| s.event_names_max_per_project = 1).await;
    let p = one.project().await;
    let r = track(
        &one,
        &p.public_key,
        json!({"email": "a@example.com", "event": "one"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let two = one
        .spawn_sharing(|s| s.event_names_max_per_project = 1)
        .await;
    let r = track(
        &two,
        &p.public_key,
        json!({"email": "a@example.com", "event": "one"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    track(
        &two,
        &p.public_key,
        json!({"email": "a@example.com", "event": "two"}),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");
}

/// An import that would take the project past a cap fails at once, saying which, and writes
/// nothing of the chunk that met it.
#[tokio::test]
async fn an_import_past_a_cap_fails_naming_it() {
    use super::jobs::{upload, wait_job};
    let app = TestApp::spawn_with(|s| {
        s.contact_fields_max_per_project = 2;
        s.jobs_poll_interval_ms = 50;
    })
    .await;
    let p = app.project().await;
    let csv = "email,a,b,c\nann@example.com,1,2,3\n";
    let r = upload(
        &app,
        &p.secret_key,
        "people.csv",
        "text/csv",
        csv.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job = wait_job(
        &app,
        &p.secret_key,
        "import",
        r.body["jobId"].as_str().unwrap(),
    )
    .await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job.to_string().contains("contact_fields_max_per_project"),
        "{job}"
    );
    assert_eq!(app.get("/contacts", &p.secret_key).await.body["total"], 0);
}

/// The new settings are checked: a public share outside 1 to 100, or a cap of 0, stops the
/// server before it starts, naming the setting.
#[test]
fn the_public_key_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    for (var, setting, says) in [
        (
            "HERALD_RATE_LIMIT_PUBLIC_SHARE",
            "rate_limit_public_share",
            "between 1 and 100",
        ),
        (
            "HERALD_CONTACT_FIELDS_MAX_PER_PROJECT",
            "contact_fields_max_per_project",
            "at least 1",
        ),
        (
            "HERALD_EVENT_NAMES_MAX_PER_PROJECT",
            "event_names_max_per_project",
            "at least 1",
        ),
        (
            "HERALD_CONTACT_DATA_MAX_BYTES",
            "contact_data_max_bytes",
            "at least 1024",
        ),
    ] {
        let value = if var.ends_with("SHARE") { "101" } else { "0" };
        let (code, _, err) =
            super::cli::herald_env(&["serve", "--data-dir", "."], dir.path(), &[(var, value)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("setting `{setting}`")), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
