//! `/v1/track`, idempotency, the `/events` endpoints, subscription events from every path and
//! the outbox that hands every event to consumers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use herald::domain::event::StoredEvent;
use herald::outbox::{ConsumerError, EventConsumer};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::harness::{TestApp, TestProject, one_keyed_response, taken_and_refused};

async fn track(app: &TestApp, key: &str, body: Value) -> crate::support::harness::Reply {
    app.post("/v1/track", key, body).await
}

async fn events_named(app: &TestApp, p: &TestProject, name: &str) -> Vec<Value> {
    let r = app
        .get(&format!("/events?limit=100&name={name}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn track_upserts_the_contact_and_records_the_event() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let r = track(
        &app,
        &p.public_key,
        json!({ "email": "Ann@Example.com", "event": "signup", "data": { "plan": "pro", "coupon": { "value": "X1", "persistent": false }, "id": "dropped" } }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["success"], true);
    let contact = r.body["data"]["contact"].as_str().unwrap().to_string();
    let event = r.body["data"]["event"].as_str().unwrap().to_string();
    assert!(contact.starts_with("cnt_") && event.starts_with("evt_"));
    assert!(r.body["data"]["timestamp"].as_str().unwrap().ends_with('Z'));

    let c = app
        .get(&format!("/contacts/{contact}"), &p.secret_key)
        .await;
    assert_eq!(c.body["email"], "ann@example.com");
    assert_eq!(
        c.body["subscribed"], true,
        "track creates subscribed contacts"
    );
    assert_eq!(
        c.body["data"],
        json!({ "plan": "pro" }),
        "transient and reserved values are not stored"
    );

    let list = app.get("/events", &p.secret_key).await;
    assert_eq!(list.body["total"], 1);
    let e = &list.body["data"][0];
    assert_eq!(e["id"], event.as_str());
    assert_eq!(e["name"], "signup");
    assert_eq!(e["contactId"], contact.as_str());
    assert_eq!(e["email"], "ann@example.com");
    assert_eq!(
        e["data"],
        json!({ "plan": "pro", "coupon": "X1" }),
        "the event keeps per-send values"
    );

    // The secret key may track too; an existing contact is patched, not duplicated.
    let r = track(
        &app,
        &p.secret_key,
        json!({ "email": "ann@example.com", "event": "login", "data": { "seats": 2 } }),
    )
    .await;
    assert_eq!(r.body["data"]["contact"], contact.as_str());
    let c = app
        .get(&format!("/contacts/{contact}"), &p.secret_key)
        .await;
    assert_eq!(c.body["data"], json!({ "plan": "pro", "seats": 2 }));

    // New contacts created by track with subscribed=false.
    let r = track(
        &app,
        &p.public_key,
        json!({ "email": "quiet@example.com", "event": "visit", "subscribed": false }),
    )
    .await;
    let c = app
        .get(
            &format!("/contacts/{}", r.body["data"]["contact"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(c.body["subscribed"], false);
    assert!(
        events_named(&app, &p, "contact.unsubscribed")
            .await
            .is_empty(),
        "creation is not a change"
    );
}

#[tokio::test]
async fn track_rejects_reserved_names_and_bad_input() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    for name in [
        "contact.subscribed",
        "contact.unsubscribed",
        "email.opened",
        "segment.vip.entry",
        // `/events/<name>` could not reach these: the paths are other endpoints.
        "track",
        "names",
        "stats",
        "contact",
    ] {
        let r = track(
            &app,
            &p.public_key,
            json!({ "email": "a@example.com", "event": name }),
        )
        .await;
        r.assert_error(422, "RESERVED_EVENT");
        assert_eq!(r.error_fields(), vec!["event"]);
    }
    track(
        &app,
        &p.public_key,
        json!({ "email": "nope", "event": "x" }),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");
    track(
        &app,
        &p.public_key,
        json!({ "email": "a@example.com", "event": "  " }),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");
    let r = track(&app, &p.public_key, json!({ "email": "a@example.com" })).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["event"]);
    track(
        &app,
        &p.public_key,
        json!({ "email": "a@example.com", "event": "x", "data": 1 }),
    )
    .await
    .assert_error(400, "INVALID_REQUEST_BODY");
    // Errors of /v1/track use the standard body (only /v1/send and /v1/verify differ).
    let r = app
        .call(Method::POST, "/v1/track", None, Some(json!({})))
        .await;
    r.assert_error(401, "MISSING_AUTH");
    // Nothing was written by any of it.
    assert_eq!(app.get("/contacts", &p.secret_key).await.body["total"], 0);
    assert_eq!(app.get("/events", &p.secret_key).await.body["total"], 0);
}

#[tokio::test]
async fn idempotency_keys_replay_and_refuse_reuse() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let body =
        json!({ "email": "idem@example.com", "event": "purchase", "data": { "amount": 10 } });
    let send = |key: &'static str, body: Value| {
        let app = &app;
        let pk = p.public_key.clone();
        async move {
            app.call_with(
                &app.client,
                Method::POST,
                "/v1/track",
                Some(&pk),
                Some(body),
                &[("Idempotency-Key", key)],
            )
            .await
        }
    };
    let first = send("order-1", body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.header("idempotent-replayed").is_none());
    let again = send("order-1", body.clone()).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body, "the first response is returned");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        events_named(&app, &p, "purchase").await.len(),
        1,
        "nothing is done again"
    );

    let other = send(
        "order-1",
        json!({ "email": "idem@example.com", "event": "purchase", "data": { "amount": 11 } }),
    )
    .await;
    other.assert_error(409, "IDEMPOTENCY_KEY_REUSED");
    // The same key on the dashboard alias is another request.
    let r = app
        .call_with(
            &app.client,
            Method::POST,
            "/events/track",
            Some(&p.secret_key),
            Some(body.clone()),
            &[("Idempotency-Key", "order-1")],
        )
        .await;
    r.assert_error(409, "IDEMPOTENCY_KEY_REUSED");
    let r = send("", body.clone()).await;
    r.assert_error(422, "VALIDATION_ERROR");

    // Keys are per project.
    let q = app.project().await;
    let r = app
        .call_with(
            &app.client,
            Method::POST,
            "/v1/track",
            Some(&q.public_key),
            Some(body.clone()),
            &[("Idempotency-Key", "order-1")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.header("idempotent-replayed").is_none());

    // Racing requests with one key take effect once.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = app.client.clone();
        let url = app.url("/v1/track");
        let pk = p.public_key.clone();
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(pk)
                .header("Idempotency-Key", "race")
                .json(&json!({ "email": "race@example.com", "event": "raced" }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        let status = t.await.unwrap();
        assert!(status == 200 || status == 409, "{status}");
    }
    assert_eq!(events_named(&app, &p, "raced").await.len(), 1);
}

/// Concurrent tracks share write transactions (group commit): every request of one project is
/// written once with its own contact and event, racing requests with one key take effect once,
/// and another project's refusals (its events cap) fail only its own requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tracks_are_grouped_without_loss_and_refusals_stay_their_own() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let capped = app.project().await;
    capped.cap(&app, json!({ "events": 5 })).await;
    let post = |key: &str, body: Value, idem| app.spawn_post("/v1/track", key, body, idem);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut keyed = Vec::new();
    for round in 0..5 {
        for c in 0..20 {
            ours.push(post(
                &p.public_key,
                json!({ "email": format!("g{c}@example.com"), "event": "grouped",
                        "data": { "round": round, format!("r{round}"): true } }),
                None,
            ));
        }
        for c in 0..4 {
            theirs.push(post(
                &capped.public_key,
                json!({ "email": format!("cap{c}@example.com"), "event": "capped" }),
                None,
            ));
        }
        keyed.push(post(
            &p.public_key,
            json!({ "email": "keyed@example.com", "event": "keyed" }),
            Some("one-key"),
        ));
    }
    let mut event_ids = std::collections::HashSet::new();
    for t in ours {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(event_ids.insert(r.body["data"]["event"].as_str().unwrap().to_string()));
    }
    assert_eq!(
        taken_and_refused(theirs, |r| {
            r.assert_error(429, "BILLING_LIMIT_EXCEEDED");
        })
        .await,
        (5, 15),
        "the cap holds exactly under concurrency"
    );
    one_keyed_response(keyed).await;

    // Every event once, each contact once, with the data of its requests.
    let mut seen = 0;
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/events?limit=100&name=grouped&cursor={c}"),
            None => "/events?limit=100&name=grouped".to_string(),
        };
        let r = app.get(&path, &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        for e in r.body["data"].as_array().unwrap() {
            assert!(event_ids.contains(e["id"].as_str().unwrap()), "{e}");
            seen += 1;
        }
        match r.body["cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
            _ => break,
        }
    }
    assert_eq!(seen, 100);
    assert_eq!(events_named(&app, &p, "keyed").await.len(), 1);
    let contacts = app.get("/contacts?limit=100", &p.secret_key).await;
    assert_eq!(contacts.body["total"], 21, "{}", contacts.body);
    for c in contacts.body["data"].as_array().unwrap() {
        if c["email"] != "keyed@example.com" {
            assert!(c["data"]["round"].is_number(), "{c}");
            // A contact written by several requests of one group is written once, in its last
            // state: every request's key is in it.
            for round in 0..5 {
                assert_eq!(c["data"][format!("r{round}")], true, "{c}");
            }
        }
    }
    assert_eq!(events_named(&app, &capped, "capped").await.len(), 5);
}

#[tokio::test]
async fn event_endpoints() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    for i in 0..7 {
        let name = if i % 2 == 0 { "page_view" } else { "click" };
        track(&app, &p.public_key, json!({ "email": format!("u{}@example.com", i % 3), "event": name, "data": { "i": i } })).await;
    }
    let first = app.get("/events?limit=3", &p.secret_key).await;
    assert_eq!(first.body["total"], 7);
    assert_eq!(first.body["hasMore"], true);
    assert_eq!(first.body["data"][0]["data"]["i"], 6, "newest first");
    let cursor = first.body["cursor"].as_str().unwrap();
    let second = app
        .get(&format!("/events?limit=3&cursor={cursor}"), &p.secret_key)
        .await;
    assert_eq!(second.body["total"], 0);
    assert_eq!(second.body["data"].as_array().unwrap().len(), 3);
    app.get("/events?cursor=bogus", &p.secret_key)
        .await
        .assert_error(400, "BAD_REQUEST");
    assert_eq!(events_named(&app, &p, "click").await.len(), 3);

    let names = app.get("/events/names", &p.secret_key).await;
    assert_eq!(names.body["names"][0]["name"], "page_view");
    assert_eq!(names.body["names"][0]["count"], 4);
    assert_eq!(names.body["names"][1]["count"], 3);

    let stats = app.get("/events/stats", &p.secret_key).await;
    assert_eq!(stats.body["total"], 7);
    assert_eq!(stats.body["last24Hours"], 7);
    assert_eq!(stats.body["uniqueContacts"], 3);
    assert_eq!(stats.body["uniqueNames"], 2);

    let contact = app
        .post(
            "/contacts/lookup",
            &p.secret_key,
            json!({ "emails": ["u0@example.com"] }),
        )
        .await
        .body["found"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let of = app
        .get(&format!("/events/contact/{contact}"), &p.secret_key)
        .await;
    assert_eq!(of.body["total"], 3);
    assert!(
        of.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["contactId"] == contact.as_str())
    );

    let usage = app.get("/events/click/usage", &p.secret_key).await;
    assert_eq!(usage.status, 200);
    assert_eq!(usage.body["count"], 3);
    assert_eq!(usage.body["segments"], json!([]));

    // Events the workflow engine has not taken yet are kept; deleting again removes them.
    let deleted = delete_events_once_dispatched(&app, &p, "click").await;
    assert_eq!(deleted, 3);
    assert!(events_named(&app, &p, "click").await.is_empty());
    assert_eq!(app.get("/events", &p.secret_key).await.body["total"], 4);
    // The names' counts follow: a name with no event left is not listed, and a contact's
    // events leave the counts with it.
    let names = app.get("/events/names", &p.secret_key).await;
    assert_eq!(
        names.body["names"].as_array().unwrap().len(),
        1,
        "{}",
        names.body
    );
    assert_eq!(names.body["names"][0]["count"], 4);
    assert_eq!(
        app.get("/events/click/usage", &p.secret_key).await.body["count"],
        0
    );
    let r = app
        .delete(&format!("/contacts/{contact}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let left = events_named(&app, &p, "page_view").await.len();
    assert_eq!(left, 2, "u0's two page views went with it");
    let names = app.get("/events/names", &p.secret_key).await;
    let page_views = names.body["names"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "page_view")
        .cloned();
    assert_eq!(page_views.unwrap()["count"], left, "{}", names.body);
    assert_eq!(
        app.get("/events/page_view/usage", &p.secret_key).await.body["count"],
        left
    );

    // Another project sees none of it.
    let q = app.project().await;
    assert_eq!(app.get("/events", &q.secret_key).await.body["total"], 0);
    app.get(&format!("/events/contact/{contact}"), &q.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(
        app.delete("/events/page_view", &q.secret_key).await.body["deleted"],
        0
    );
    assert_eq!(events_named(&app, &p, "page_view").await.len(), left);
}

#[tokio::test]
async fn subscription_changes_record_events_from_every_path() {
    let app = TestApp::spawn_with(|s| s.jobs_poll_interval_ms = 50).await;
    let p = app.project().await;
    let key = &p.secret_key;
    let id = p.contact(&app, "sub@example.com", json!({})).await;

    // PATCH /contacts/:id
    app.patch(
        &format!("/contacts/{id}"),
        key,
        json!({ "subscribed": false }),
    )
    .await;
    app.patch(
        &format!("/contacts/{id}"),
        key,
        json!({ "subscribed": false }),
    )
    .await; // no change
    // POST /contacts
    app.post(
        "/contacts",
        key,
        json!({ "email": "sub@example.com", "subscribed": true }),
    )
    .await;
    // /v1/track
    track(
        &app,
        &p.public_key,
        json!({ "email": "sub@example.com", "event": "x", "subscribed": false }),
    )
    .await;
    track(
        &app,
        &p.public_key,
        json!({ "email": "sub@example.com", "event": "x", "subscribed": false }),
    )
    .await; // no change
    // bulk
    let job = app
        .post(
            "/contacts/bulk-subscribe",
            key,
            json!({ "contactIds": [id] }),
        )
        .await;
    crate::http::jobs::wait_job(&app, key, "bulk", job.body["jobId"].as_str().unwrap()).await;
    // import
    let csv = "email,subscribed\nsub@example.com,no\n";
    let job =
        crate::http::jobs::upload(&app, key, "people.csv", "text/csv", csv.as_bytes().to_vec())
            .await;
    crate::http::jobs::wait_job(&app, key, "import", job.body["jobId"].as_str().unwrap()).await;

    let mut seen: Vec<(String, String)> = Vec::new();
    let r = app.get(&format!("/events/contact/{id}"), key).await;
    for e in r.body["data"].as_array().unwrap().iter().rev() {
        if e["name"].as_str().unwrap().starts_with("contact.") {
            seen.push((
                e["name"].as_str().unwrap().into(),
                e["data"]["source"].as_str().unwrap().into(),
            ));
        }
    }
    let expected = [
        ("contact.unsubscribed", "api"),
        ("contact.subscribed", "api"),
        ("contact.unsubscribed", "track"),
        ("contact.subscribed", "bulk"),
        ("contact.unsubscribed", "import"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(seen, expected);
}

/// Records every event it is handed; fails the first `fail_first` deliveries.
struct Recorder {
    seen: Mutex<Vec<String>>,
    fail_first: Mutex<usize>,
}

impl EventConsumer for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>> {
        Box::pin(async move {
            let mut fail = self.fail_first.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(ConsumerError::Failed("not yet".into()));
            }
            self.seen.lock().unwrap().push(event.id.to_string());
            Ok(())
        })
    }
}

#[tokio::test]
async fn the_outbox_hands_every_event_to_consumers_after_restarts_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let settings = || herald::config::Settings {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_path_buf(),
        database_url: Some(url.clone()),
        jobs_poll_interval_ms: 50,
        ..Default::default()
    };
    // An account and a project to track with.
    let server = herald::app::spawn(settings()).await.unwrap();
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let signup = client
        .post(format!("{}/auth/signup", server.url()))
        .json(&json!({ "email": "o@example.com", "password": "long enough" }))
        .send()
        .await
        .unwrap();
    assert_eq!(signup.status(), 201);
    let project: Value = client
        .post(format!("{}/users/@me/projects", server.url()))
        .json(&json!({ "name": "p" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pk = project["publicKey"].as_str().unwrap().to_string();
    server.stop().await.unwrap();
    let store = herald::store::Store::new(herald::store::Db::connect(&url, 2).await.unwrap());
    let recorder = Arc::new(Recorder {
        seen: Mutex::new(Vec::new()),
        fail_first: Mutex::new(2),
    });

    // Record events through an instance whose dispatcher sleeps for an hour after its first
    // (empty) pass, then stop it: the events wait in the outbox, as after a crash.
    let writer = herald::app::spawn(herald::config::Settings {
        jobs_poll_interval_ms: 3_600_000,
        ..settings()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let r: Value = reqwest::Client::new()
            .post(format!("{}/v1/track", writer.url()))
            .bearer_auth(&pk)
            .json(&json!({ "email": format!("c{i}@example.com"), "event": "queued" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(r["data"]["event"].as_str().unwrap().to_string());
    }
    writer.stop().await.unwrap();
    assert!(
        store.outbox_len().await.unwrap() >= 5,
        "events wait in the outbox while no dispatcher runs"
    );

    // A new instance with a consumer gets every waiting event, also after failed deliveries.
    let reader = herald::app::App::builder(settings())
        .consumer(recorder.clone())
        .build()
        .await
        .unwrap()
        .spawn();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = recorder.seen.lock().unwrap().clone();
        if ids.iter().all(|id| seen.contains(id)) && store.outbox_len().await.unwrap() == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events not delivered: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reader.stop().await.unwrap();
    store.db().close().await;
}

/// Deletes the events named `name`, again until none is waiting for the workflow engine;
/// answers how many were deleted in all.
pub async fn delete_events_once_dispatched(app: &TestApp, p: &TestProject, name: &str) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut deleted = 0;
    loop {
        let r = app.delete(&format!("/events/{name}"), &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        deleted += r.body["deleted"].as_u64().unwrap();
        if r.body["pending"] == 0 {
            return deleted;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never dispatched: {}",
            r.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
