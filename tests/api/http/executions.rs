//! The workflow engine end to end, through HTTP: executions triggered by `/v1/track` and
//! started by hand, each step run as a durable job, `CONDITION` branches, `SEND_EMAIL` into the
//! `outbox` transport's `.eml` files, `UPDATE_CONTACT`, `EXIT`, `DELAY` (with the queue's
//! clock moved forward), `WAIT_FOR_EVENT` resumed by an event and by its timeout, `WEBHOOK` to
//! a loopback server, re-entry on and off, cancel one and all, delete refused while active, a
//! step plugin that traps, a `PLUGIN` step built from the SDK example, and tenant isolation.

use std::time::{Duration, Instant};

use herald::config::Settings;
use serde_json::{Value, json};

use crate::support::harness::{TestApp, TestProject};
use crate::support::httpd::http_server;

/// Fast polling, unverified senders allowed (the `outbox` transport writes files).
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
}

/// A step to create: type and config.
pub struct Step(pub &'static str, pub Value);

/// Creates a workflow triggered by `event` with `steps` joined by `links` (from index, to
/// index, branch), enables it, and answers its id and step ids.
pub async fn workflow(
    app: &TestApp,
    p: &TestProject,
    event: &str,
    steps: Vec<Step>,
    links: &[(usize, usize, Option<&str>)],
    extra: Value,
) -> (String, Vec<String>) {
    let mut body =
        json!({ "name": format!("on {event}"), "triggerConfig": { "eventName": event } });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let r = app.post("/workflows", &p.secret_key, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["enabled"], false);
    let id = r.body["id"].as_str().unwrap().to_string();
    let mut ids = Vec::new();
    for Step(t, config) in steps {
        let r = app
            .post(
                &format!("/workflows/{id}/steps"),
                &p.secret_key,
                json!({ "type": t, "config": config }),
            )
            .await;
        assert_eq!(r.status, 201, "{t}: {}", r.body);
        ids.push(r.body["id"].as_str().unwrap().to_string());
    }
    for (from, to, branch) in links {
        let r = app
            .post(
                &format!("/workflows/{id}/transitions"),
                &p.secret_key,
                json!({ "fromStepId": ids[*from], "toStepId": ids[*to], "branch": branch }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = app
        .patch(
            &format!("/workflows/{id}"),
            &p.secret_key,
            json!({ "enabled": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    (id, ids)
}

async fn template(app: &TestApp, p: &TestProject, kind: &str) -> String {
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({
                "name": "welcome",
                "type": kind,
                "subject": "Welcome {{firstName}}",
                "body": "<p>Hi {{firstName}}, your plan is {{plan}}. Code {{code ?? \"none\"}}.</p>",
                "from": "hello@acme.test",
                "fromName": "Acme",
            }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

/// A workflow triggered by `event` that waits for `reply`, then exits; re-entry allowed.
async fn waits_for_reply(app: &TestApp, p: &TestProject, event: &str) -> String {
    let (wf, _) = workflow(
        app,
        p,
        event,
        vec![
            Step("WAIT_FOR_EVENT", json!({ "eventName": "reply" })),
            Step("EXIT", json!({})),
        ],
        &[(0, 1, Some("event"))],
        json!({ "allowReentry": true }),
    )
    .await;
    wf
}

async fn track(app: &TestApp, p: &TestProject, email: &str, event: &str, data: Value) {
    let r = app
        .post(
            "/v1/track",
            &p.secret_key,
            json!({ "email": email, "event": event, "data": data }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Every execution of a workflow (newest first).
async fn executions(app: &TestApp, p: &TestProject, wf: &str) -> Vec<Value> {
    let r = app
        .get(
            &format!("/workflows/{wf}/executions?limit=100"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

/// Waits (up to 20 s) until the workflow has `n` executions, all in one of `statuses`, and
/// answers them with their step runs, oldest first.
pub async fn settled(
    app: &TestApp,
    p: &TestProject,
    wf: &str,
    n: usize,
    statuses: &[&str],
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = executions(app, p, wf).await;
        if list.len() == n
            && list
                .iter()
                .all(|e| statuses.contains(&e["status"].as_str().unwrap()))
        {
            let mut out = Vec::new();
            for e in list.iter().rev() {
                out.push(execution(app, p, wf, e["id"].as_str().unwrap()).await);
            }
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} executions in {statuses:?}: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn execution(app: &TestApp, p: &TestProject, wf: &str, id: &str) -> Value {
    let r = app
        .get(&format!("/workflows/{wf}/executions/{id}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// The types and statuses of an execution's step runs, in order.
pub fn runs(e: &Value) -> Vec<(String, String, Option<String>)> {
    e["stepRuns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["stepType"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
                r["branch"].as_str().map(str::to_string),
            )
        })
        .collect()
}

pub fn run(t: &str, status: &str, branch: Option<&str>) -> (String, String, Option<String>) {
    (
        t.to_string(),
        status.to_string(),
        branch.map(str::to_string),
    )
}

async fn contact_by_email(app: &TestApp, p: &TestProject, email: &str) -> Value {
    let r = app
        .get(&format!("/contacts?search={email}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"][0].clone()
}

/// Waits until the outbox holds `n` messages.
async fn delivered(app: &TestApp, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = app.outbox_messages();
        if m.len() >= n {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "only {} messages delivered",
            m.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Moves the queue's clock: queued workflow jobs become due now (a `DELAY` or a timeout
/// elapses). Answers how many jobs were moved.
async fn elapse(app: &TestApp) -> u64 {
    use sqlx::Connection;
    let sql = "UPDATE jobs SET run_at = 0 WHERE state = 'queued' AND kind IN ('workflow.step', 'workflow.timeout')";
    let n = if app.database_url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(&app.database_url)
            .await
            .unwrap();
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .unwrap()
            .rows_affected()
    } else {
        let mut c = sqlx::SqliteConnection::connect(&app.database_url)
            .await
            .unwrap();
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .unwrap()
            .rows_affected()
    };
    app.state().jobs().wake();
    n
}

#[tokio::test]
async fn onboarding_branches_sends_updates_and_exits() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let tpl = template(&app, &p, "TRANSACTIONAL").await;
    let (wf, _) = workflow(
        &app,
        &p,
        "signup",
        vec![
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "data.plan", "operator": "equals", "value": "pro" },
                    { "field": "event.data.source", "operator": "equals", "value": "ads" }
                ] } ] } }),
            ),
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
            Step(
                "UPDATE_CONTACT",
                json!({ "data": { "onboarded": true, "stage": "welcomed" } }),
            ),
            Step("EXIT", json!({ "reason": "welcomed" })),
            Step("EXIT", json!({ "reason": "not a pro" })),
        ],
        &[
            (0, 1, Some("yes")),
            (0, 4, Some("no")),
            (1, 2, None),
            (2, 3, None),
        ],
        json!({}),
    )
    .await;
    p.contact(
        &app,
        "ann@example.com",
        json!({ "plan": "pro", "firstName": "Ann" }),
    )
    .await;
    p.contact(
        &app,
        "bob@example.com",
        json!({ "plan": "free", "firstName": "Bob" }),
    )
    .await;
    track(
        &app,
        &p,
        "ann@example.com",
        "signup",
        json!({ "source": "ads" }),
    )
    .await;
    track(
        &app,
        &p,
        "bob@example.com",
        "signup",
        json!({ "source": "ads" }),
    )
    .await;
    // An event of another name triggers nothing.
    track(&app, &p, "ann@example.com", "login", json!({})).await;

    let done = settled(&app, &p, &wf, 2, &["EXITED"]).await;
    let (ann, bob) =
        if done[0]["contactId"] == contact_by_email(&app, &p, "ann@example.com").await["id"] {
            (&done[0], &done[1])
        } else {
            (&done[1], &done[0])
        };
    assert_eq!(
        runs(ann),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("SEND_EMAIL", "COMPLETED", None),
            run("UPDATE_CONTACT", "COMPLETED", None),
            run("EXIT", "COMPLETED", None),
        ]
    );
    assert_eq!(ann["exitReason"], "welcomed");
    assert!(ann["triggerEventId"].as_str().unwrap().starts_with("evt_"));
    assert!(ann["finishedAt"].is_string());
    assert_eq!(
        runs(bob),
        vec![
            run("CONDITION", "COMPLETED", Some("no")),
            run("EXIT", "COMPLETED", None)
        ]
    );
    assert_eq!(bob["exitReason"], "not a pro");
    let send_run = &ann["stepRuns"][1];
    let email_id = send_run["output"]["effects"][0]["emailId"]
        .as_str()
        .unwrap();
    assert!(email_id.starts_with("eml_"), "{send_run}");
    assert_eq!(send_run["input"]["config"]["templateId"], tpl);

    // The email went out rendered with the contact's data, to Ann only.
    let messages = delivered(&app, 1).await;
    assert_eq!(messages.len(), 1);
    let eml = &messages[0];
    assert!(eml.contains("Subject: Welcome Ann"), "{eml}");
    assert!(eml.contains("To: ann@example.com"), "{eml}");
    assert!(eml.contains("your plan is pro"), "{eml}");
    let r = app.get(&format!("/emails/{email_id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The contact was updated by the workflow; Bob was not.
    let ann_now = contact_by_email(&app, &p, "ann@example.com").await;
    assert_eq!(ann_now["data"]["onboarded"], true);
    assert_eq!(ann_now["data"]["stage"], "welcomed");
    let bob_now = contact_by_email(&app, &p, "bob@example.com").await;
    assert!(bob_now["data"].get("onboarded").is_none());

    // Filtering by status.
    let r = app
        .get(
            &format!("/workflows/{wf}/executions?status=EXITED&status=FAILED"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2, "{}", r.body);
    let r = app
        .get(
            &format!("/workflows/{wf}/executions?status=RUNNING"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.body["data"], json!([]), "{}", r.body);
    assert_eq!(r.body["total"], 0);
}

/// A step's write commits with its step run: an `UPDATE_CONTACT` that unsubscribes records
/// `contact.unsubscribed` with source `workflow`, and the `SEND_EMAIL` of a marketing template
/// after it (run on in memory, for the contact as the update leaves it, and committed with it)
/// is suppressed. Twice in a row for one contact (re-entry), the second update changes nothing.
#[tokio::test]
async fn an_update_commits_with_its_step_run_and_the_next_send_sees_it() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let tpl = template(&app, &p, "MARKETING").await;
    let (wf, _) = workflow(
        &app,
        &p,
        "optout",
        vec![
            Step(
                "UPDATE_CONTACT",
                json!({ "subscribed": false, "data": { "optedOut": true } }),
            ),
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
            Step("EXIT", json!({ "reason": "done" })),
        ],
        &[(0, 1, None), (1, 2, None)],
        json!({ "allowReentry": true }),
    )
    .await;
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "cy@example.com", "subscribed": true, "data": { "firstName": "Cy" } }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    track(&app, &p, "cy@example.com", "optout", json!({})).await;
    let done = settled(&app, &p, &wf, 1, &["EXITED"]).await;
    let e = &done[0];
    let update = &e["stepRuns"][0]["output"]["effects"][0];
    assert_eq!(update["type"], "UPDATE_CONTACT", "{e}");
    assert_eq!(update["updated"], true, "{e}");
    let send = &e["stepRuns"][1]["output"]["effects"][0];
    assert_eq!(send["type"], "SEND_EMAIL", "{e}");
    assert_eq!(send["suppressed"], true, "{e}");
    let email_id = send["emailId"].as_str().unwrap();
    let r = app.get(&format!("/emails/{email_id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "suppressed", "{}", r.body);
    // One commit recorded the three.
    let finished: Vec<&Value> = (0..3).map(|i| &e["stepRuns"][i]["finishedAt"]).collect();
    assert!(
        finished[0].is_string() && finished[0] == finished[1] && finished[1] == finished[2],
        "{e}"
    );

    let contact = contact_by_email(&app, &p, "cy@example.com").await;
    assert_eq!(contact["subscribed"], false, "{contact}");
    assert_eq!(contact["data"]["optedOut"], true, "{contact}");
    let id = contact["id"].as_str().unwrap();
    let r = app
        .get(&format!("/events/contact/{id}"), &p.secret_key)
        .await;
    let unsubscribed: Vec<&Value> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "contact.unsubscribed")
        .collect();
    assert_eq!(unsubscribed.len(), 1, "{}", r.body);
    assert_eq!(unsubscribed[0]["data"]["source"], "workflow", "{}", r.body);

    // Again: the contact is as the update asks already.
    track(&app, &p, "cy@example.com", "optout", json!({})).await;
    let done = settled(&app, &p, &wf, 2, &["EXITED"]).await;
    let update = &done[1]["stepRuns"][0]["output"]["effects"][0];
    assert_eq!(update["updated"], false, "{:?}", done[1]);
    assert_eq!(events_named(&app, &p, id, "contact.unsubscribed").await, 1);
}

/// How many events named `name` the contact `id` has.
async fn events_named(app: &TestApp, p: &TestProject, id: &str, name: &str) -> usize {
    let r = app
        .get(&format!("/events/contact/{id}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == name)
        .count()
}

/// Step runs run on in memory past an `UPDATE_CONTACT`: the `SEND_EMAIL` after it renders the
/// contact as the update leaves it and both commit together, with the contact written once; a
/// `CONDITION` on the event history after them runs from its own row in the next round, so it
/// sees the `contact.unsubscribed` event the update recorded. A step that makes several writes
/// is not run on to (its writes wait for its own row) and makes each once.
#[tokio::test]
async fn a_chain_sends_what_its_update_leaves_and_stops_before_history_and_multiple_writes() {
    let (_dir, app) = with_hostile_plugin().await;
    let p = app.project().await;
    let tpl = template(&app, &p, "TRANSACTIONAL").await;
    let saw = json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
        { "field": "event.contact.unsubscribed", "operator": "triggered" }
    ] } ] } });
    let (wf, _) = workflow(
        &app,
        &p,
        "upgrade",
        vec![
            Step(
                "UPDATE_CONTACT",
                json!({ "subscribed": false, "data": { "plan": "pro" } }),
            ),
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
            Step("CONDITION", saw),
            Step("EXIT", json!({ "reason": "saw it" })),
            Step("EXIT", json!({ "reason": "missed it" })),
            Step(
                "PLUGIN",
                json!({ "plugin": "hostile", "mode": "two-updates" }),
            ),
        ],
        &[
            (0, 1, None),
            (1, 2, None),
            (2, 5, Some("yes")),
            (2, 4, Some("no")),
            (5, 3, None),
        ],
        json!({}),
    )
    .await;
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "zed@example.com", "subscribed": true, "data": { "firstName": "Zed", "plan": "free" } }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    track(&app, &p, "zed@example.com", "upgrade", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["EXITED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("UPDATE_CONTACT", "COMPLETED", None),
            run("SEND_EMAIL", "COMPLETED", None),
            run("CONDITION", "COMPLETED", Some("yes")),
            run("PLUGIN", "COMPLETED", None),
            run("EXIT", "COMPLETED", None),
        ]
    );
    assert_eq!(e["exitReason"], "saw it", "{e}");
    let at = |i: usize| e["stepRuns"][i]["finishedAt"].clone();
    assert_eq!(at(0), at(1), "{e}");
    for r in e["stepRuns"].as_array().unwrap() {
        assert_eq!(r["attempts"], 1, "{r}");
    }
    // The email shows the plan the update set, rendered before it was written.
    let messages = delivered(&app, 1).await;
    assert_eq!(messages.len(), 1);
    assert!(messages[0].contains("your plan is pro"), "{}", messages[0]);
    let contact = contact_by_email(&app, &p, "zed@example.com").await;
    assert_eq!(contact["subscribed"], false, "{contact}");
    assert_eq!(contact["data"]["plan"], "pro", "{contact}");
    assert_eq!(contact["data"]["first"], 1, "{contact}");
    assert_eq!(contact["data"]["second"], 2, "{contact}");
    let id = contact["id"].as_str().unwrap();
    assert_eq!(events_named(&app, &p, id, "contact.unsubscribed").await, 1);
    let emails = count(
        &app.database_url,
        "SELECT COUNT(*) FROM emails WHERE to_address = 'zed@example.com'",
    )
    .await;
    assert_eq!(emails, 1);
}

/// A `CONDITION` on the contact's history (an `event.<name>` condition) is given the event
/// summaries; one on the contact alone runs without them and still decides.
#[tokio::test]
async fn a_condition_on_the_event_history_reads_it() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "checkout",
        vec![
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "event.purchase", "operator": "triggered" }
                ] } ] } }),
            ),
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "subscribed", "operator": "equals", "value": true }
                ] } ] } }),
            ),
            Step("UPDATE_CONTACT", json!({ "data": { "buyer": true } })),
            Step("EXIT", json!({ "reason": "never bought" })),
        ],
        &[(0, 1, Some("yes")), (0, 3, Some("no")), (1, 2, Some("yes"))],
        json!({}),
    )
    .await;
    track(&app, &p, "buyer@example.com", "purchase", json!({})).await;
    track(&app, &p, "buyer@example.com", "checkout", json!({})).await;
    track(&app, &p, "window@example.com", "checkout", json!({})).await;
    let done = settled(&app, &p, &wf, 2, &["COMPLETED", "EXITED"]).await;
    let by_status = |status: &str| done.iter().find(|e| e["status"] == status).unwrap().clone();
    assert_eq!(
        runs(&by_status("COMPLETED")),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("CONDITION", "COMPLETED", Some("yes")),
            run("UPDATE_CONTACT", "COMPLETED", None),
        ]
    );
    assert_eq!(
        runs(&by_status("EXITED")),
        vec![
            run("CONDITION", "COMPLETED", Some("no")),
            run("EXIT", "COMPLETED", None),
        ]
    );
    assert_eq!(
        contact_by_email(&app, &p, "buyer@example.com").await["data"]["buyer"],
        true
    );
}

#[tokio::test]
async fn a_delay_waits_in_the_queue_until_its_time() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let (wf, steps) = workflow(
        &app,
        &p,
        "trial_started",
        vec![
            Step("DELAY", json!({ "amount": 3, "unit": "days" })),
            Step("UPDATE_CONTACT", json!({ "data": { "nudged": true } })),
        ],
        &[(0, 1, None)],
        json!({}),
    )
    .await;
    let before = chrono::Utc::now().timestamp_millis();
    track(&app, &p, "cy@example.com", "trial_started", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["WAITING"]).await[0];
    assert_eq!(e["currentStepId"], steps[1].as_str());
    assert_eq!(
        runs(e),
        vec![
            run("DELAY", "COMPLETED", None),
            run("UPDATE_CONTACT", "PENDING", None)
        ]
    );
    let at = e["stepRuns"][0]["output"]["outcome"]["at"]
        .as_i64()
        .unwrap();
    let three_days = 3 * 24 * 3600 * 1000;
    assert!(
        at >= before + three_days && at < before + three_days + 60_000,
        "{at}"
    );
    // Nothing happens before its time...
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(executions(&app, &p, &wf).await[0]["status"], "WAITING");
    // ...and the next step runs once the clock reaches it.
    assert_eq!(elapse(&app).await, 1);
    let e = &settled(&app, &p, &wf, 1, &["COMPLETED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("DELAY", "COMPLETED", None),
            run("UPDATE_CONTACT", "COMPLETED", None)
        ]
    );
    assert_eq!(
        contact_by_email(&app, &p, "cy@example.com").await["data"]["nudged"],
        true
    );
}

/// A `DELAY` that is the workflow's last step holds the execution `WAITING` for its time (a
/// cool-down: the contact cannot enter again meanwhile, with or without re-entry), then
/// completes it; cancelling it meanwhile drops its job.
#[tokio::test]
async fn a_trailing_delay_holds_the_execution_until_its_time() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    for reentry in [false, true] {
        let event = format!("cooldown_{reentry}");
        let (wf, steps) = workflow(
            &app,
            &p,
            &event,
            vec![
                Step("UPDATE_CONTACT", json!({ "data": { "cooled": reentry } })),
                Step("DELAY", json!({ "amount": 2, "unit": "hours" })),
            ],
            &[(0, 1, None)],
            json!({ "allowReentry": reentry }),
        )
        .await;
        let before = chrono::Utc::now().timestamp_millis();
        track(&app, &p, "cool@example.com", &event, json!({})).await;
        let e = &settled(&app, &p, &wf, 1, &["WAITING"]).await[0];
        assert_eq!(e["currentStepId"], steps[1].as_str(), "{e:#}");
        assert_eq!(e["waitingForEvent"], Value::Null);
        assert_eq!(e["finishedAt"], Value::Null, "{e:#}");
        assert_eq!(
            runs(e),
            vec![
                run("UPDATE_CONTACT", "COMPLETED", None),
                run("DELAY", "WAITING", None)
            ]
        );
        let at = e["stepRuns"][1]["output"]["outcome"]["at"]
            .as_i64()
            .unwrap();
        let two_hours = 2 * 3600 * 1000;
        assert!(
            at >= before + two_hours && at < before + two_hours + 60_000,
            "{at}"
        );
        // The execution stays WAITING, and a second trigger starts nothing while it waits.
        track(&app, &p, "cool@example.com", &event, json!({})).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let list = executions(&app, &p, &wf).await;
        assert_eq!(list.len(), 1, "{list:#?}");
        assert_eq!(list[0]["status"], "WAITING");
        let r = app
            .post(
                &format!("/workflows/{wf}/executions"),
                &p.secret_key,
                json!({ "email": "cool@example.com" }),
            )
            .await;
        r.assert_error(409, "CONFLICT");
        // Once its time comes, the DELAY completes (its output kept), and so does the execution.
        assert_eq!(elapse(&app).await, 1);
        let e = &settled(&app, &p, &wf, 1, &["COMPLETED"]).await[0];
        assert_eq!(
            runs(e),
            vec![
                run("UPDATE_CONTACT", "COMPLETED", None),
                run("DELAY", "COMPLETED", None)
            ]
        );
        assert_eq!(e["stepRuns"][1]["output"]["outcome"]["at"], at, "{e:#}");
        assert!(e["finishedAt"].is_string(), "{e:#}");
        // After the cool-down, a workflow that allows re-entry lets the contact in again; one
        // that does not still refuses.
        track(&app, &p, "cool@example.com", &event, json!({})).await;
        if reentry {
            settled(&app, &p, &wf, 2, &["COMPLETED", "WAITING"]).await;
        } else {
            tokio::time::sleep(Duration::from_millis(400)).await;
            settled(&app, &p, &wf, 1, &["COMPLETED"]).await;
        }
    }
    // A cancelled cool-down drops its job: nothing completes it later.
    let (wf, _) = workflow(
        &app,
        &p,
        "cancelled_cooldown",
        vec![Step("DELAY", json!({ "amount": 1, "unit": "days" }))],
        &[],
        json!({}),
    )
    .await;
    track(
        &app,
        &p,
        "calm@example.com",
        "cancelled_cooldown",
        json!({}),
    )
    .await;
    let e = &settled(&app, &p, &wf, 1, &["WAITING"]).await[0];
    assert_eq!(runs(e), vec![run("DELAY", "WAITING", None)]);
    let id = e["id"].as_str().unwrap();
    let r = app
        .delete(&format!("/workflows/{wf}/executions/{id}"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let e = &settled(&app, &p, &wf, 1, &["CANCELLED"]).await[0];
    assert_eq!(runs(e), vec![run("DELAY", "SKIPPED", None)]);
    assert_eq!(
        elapse(&app).await,
        1,
        "the other workflow's re-entered execution"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    settled(&app, &p, &wf, 1, &["CANCELLED"]).await;

    // A step added after the DELAY while it waits runs when its time comes.
    let (wf, steps) = workflow(
        &app,
        &p,
        "extended_cooldown",
        vec![Step("DELAY", json!({ "amount": 1, "unit": "days" }))],
        &[],
        json!({}),
    )
    .await;
    track(&app, &p, "ext@example.com", "extended_cooldown", json!({})).await;
    settled(&app, &p, &wf, 1, &["WAITING"]).await;
    let set_enabled = |enabled: bool| {
        let app = &app;
        let p = &p;
        let wf = &wf;
        async move {
            let r = app
                .patch(
                    &format!("/workflows/{wf}"),
                    &p.secret_key,
                    json!({ "enabled": enabled }),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    set_enabled(false).await;
    let r = app
        .post(
            &format!("/workflows/{wf}/steps"),
            &p.secret_key,
            json!({ "type": "UPDATE_CONTACT", "config": { "data": { "extended": true } } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let added = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{wf}/transitions"),
            &p.secret_key,
            json!({ "fromStepId": steps[0], "toStepId": added }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    set_enabled(true).await;
    assert_eq!(elapse(&app).await, 1);
    let e = &settled(&app, &p, &wf, 1, &["COMPLETED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("DELAY", "COMPLETED", None),
            run("UPDATE_CONTACT", "COMPLETED", None)
        ]
    );
    assert_eq!(
        contact_by_email(&app, &p, "ext@example.com").await["data"]["extended"],
        true
    );
}

/// A `CONDITION` names a key holding a `.` or a `\` escaped (`\.`, `\\`), as
/// `GET /workflows/fields` lists it, in the contact's data and the event's.
#[tokio::test]
async fn a_condition_reads_keys_with_dots_and_backslashes() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "visit",
        vec![
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "data.utm\\.source", "operator": "equals", "value": "ads" },
                    { "field": "event.data.back\\\\slash", "operator": "equals", "value": 1 }
                ] } ] } }),
            ),
            Step("UPDATE_CONTACT", json!({ "data": { "matched": true } })),
        ],
        &[(0, 1, Some("yes"))],
        json!({ "allowReentry": true }),
    )
    .await;
    p.contact(&app, "dot@example.com", json!({ "utm.source": "ads" }))
        .await;
    p.contact(
        &app,
        "nest@example.com",
        json!({ "utm": { "source": "ads" } }),
    )
    .await;
    for email in ["dot@example.com", "nest@example.com"] {
        track(&app, &p, email, "visit", json!({ "back\\slash": 1 })).await;
    }
    settled(&app, &p, &wf, 2, &["COMPLETED"]).await;
    assert_eq!(
        contact_by_email(&app, &p, "dot@example.com").await["data"]["matched"],
        true
    );
    assert_eq!(
        contact_by_email(&app, &p, "nest@example.com").await["data"]["matched"],
        Value::Null
    );
    let r = app
        .get("/workflows/fields?eventName=visit", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.body.to_string();
    assert!(text.contains("\"data.utm\\\\.source\""), "{text}");
    assert!(text.contains("\"event.data.back\\\\\\\\slash\""), "{text}");
}

#[tokio::test]
async fn wait_for_event_resumes_on_the_event_or_the_timeout() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "cart_created",
        vec![
            Step(
                "WAIT_FOR_EVENT",
                json!({ "eventName": "purchase", "timeoutSeconds": 3600 }),
            ),
            Step("UPDATE_CONTACT", json!({ "data": { "bought": true } })),
            Step("UPDATE_CONTACT", json!({ "data": { "bought": false } })),
        ],
        &[(0, 1, Some("event")), (0, 2, Some("timeout"))],
        json!({}),
    )
    .await;
    // A purchase before the wait does not count.
    track(&app, &p, "dee@example.com", "purchase", json!({})).await;
    track(&app, &p, "dee@example.com", "cart_created", json!({})).await;
    track(&app, &p, "eve@example.com", "cart_created", json!({})).await;
    let waiting = settled(&app, &p, &wf, 2, &["WAITING"]).await;
    for e in &waiting {
        assert_eq!(e["waitingForEvent"], "purchase");
        assert_eq!(runs(e), vec![run("WAIT_FOR_EVENT", "WAITING", None)]);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        executions(&app, &p, &wf)
            .await
            .iter()
            .all(|e| e["status"] == "WAITING")
    );

    track(
        &app,
        &p,
        "dee@example.com",
        "purchase",
        json!({ "total": 10 }),
    )
    .await;
    let dee_id = contact_by_email(&app, &p, "dee@example.com").await["id"].clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = executions(&app, &p, &wf).await;
        let dee = list.iter().find(|e| e["contactId"] == dee_id).unwrap();
        if dee["status"] == "COMPLETED" {
            break;
        }
        assert!(Instant::now() < deadline, "{dee}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        contact_by_email(&app, &p, "dee@example.com").await["data"]["bought"],
        true
    );

    // Eve's timeout elapses; a purchase after that changes nothing.
    assert_eq!(
        elapse(&app).await,
        2,
        "both timeout jobs are queued (Dee's is a no-op now)"
    );
    let done = settled(&app, &p, &wf, 2, &["COMPLETED"]).await;
    let eve = done.iter().find(|e| e["contactId"] != dee_id).unwrap();
    assert_eq!(
        runs(eve),
        vec![
            run("WAIT_FOR_EVENT", "COMPLETED", Some("timeout")),
            run("UPDATE_CONTACT", "COMPLETED", None)
        ]
    );
    let dee = done.iter().find(|e| e["contactId"] == dee_id).unwrap();
    assert_eq!(
        runs(dee),
        vec![
            run("WAIT_FOR_EVENT", "COMPLETED", Some("event")),
            run("UPDATE_CONTACT", "COMPLETED", None)
        ]
    );
    assert_eq!(
        contact_by_email(&app, &p, "eve@example.com").await["data"]["bought"],
        false
    );
    track(&app, &p, "eve@example.com", "purchase", json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        contact_by_email(&app, &p, "eve@example.com").await["data"]["bought"],
        false
    );
}

#[tokio::test]
async fn a_webhook_step_calls_out_and_keeps_the_answer_in_the_context() {
    let (addr, seen) = http_server(
        "200 OK",
        "Content-Type: application/json\r\n".into(),
        r#"{"ok":true}"#,
    )
    .await;
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.webhook_allow_private = true;
    })
    .await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "upgraded",
        vec![Step(
            "WEBHOOK",
            json!({ "url": format!("http://{addr}/hook"), "method": "POST", "body": { "hello": "world" } }),
        )],
        &[],
        json!({}),
    )
    .await;
    track(&app, &p, "fay@example.com", "upgraded", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["COMPLETED"]).await[0];
    assert_eq!(e["context"]["webhook"]["status"], 200, "{e}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0].head.starts_with("POST /hook"),
        "{}",
        requests[0].head
    );
    assert!(requests[0].body.contains("world"), "{}", requests[0].body);
}

/// #74: a project whose webhooks answer slowly holds neither every job slot nor more calls
/// than its limit, and another project's campaign is sent beside its executions within 2 s of
/// the time it takes when the queue is idle (the issue's load: 300 executions whose webhook
/// answers after 9 s): `WEBHOOK` calls take at most half of the slots
/// (`jobs_concurrency`) and `workflows.webhooks_per_project` of them, a step run without room
/// waits in the queue, not in a slot, and a job past `workflows.job_wall_time_ms` puts the rest
/// of its batch back.
#[tokio::test]
async fn slow_webhooks_of_one_project_leave_the_job_slots_to_another_projects_campaign() {
    use std::sync::atomic::Ordering::SeqCst;
    let delay = Duration::from_millis(9_000);
    let (addr, counts) = crate::support::httpd::slow_http_server(delay).await;
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.plugins.webhook_allow_private = true;
        s.jobs_concurrency = 4;
        s.workflows.job_wall_time_ms = 1_000;
        s.workflows.webhooks_per_project = 2;
    })
    .await;
    let other = app.project().await;
    for email in ["ann@example.com", "bob@example.com", "cat@example.com"] {
        let r = app
            .post(
                "/contacts",
                &other.secret_key,
                json!({ "email": email, "subscribed": true }),
            )
            .await;
        assert!(r.status.is_success(), "{}", r.body);
    }
    // How long the other project's campaign takes to be sent on an idle queue.
    let campaign = |name: &'static str| {
        let app = &app;
        let other = &other;
        async move {
            let r = app
                .post(
                    "/campaigns",
                    &other.secret_key,
                    json!({ "name": name, "subject": format!("Campaign {name} run"), "body": "<p>Hi</p>",
                            "from": "news@acme.test", "audienceType": "ALL" }),
                )
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            let id = r.body["data"]["id"].as_str().unwrap().to_string();
            let started = Instant::now();
            let r = app
                .post(
                    &format!("/campaigns/{id}/send"),
                    &other.secret_key,
                    json!({}),
                )
                .await;
            assert!(r.status.is_success(), "{}", r.body);
            // Its batch is run (a job) and its emails handed off to the `outbox` transport.
            let subject = format!("Subject: Campaign {name} run");
            loop {
                let sent = app
                    .outbox_messages()
                    .iter()
                    .filter(|m| m.contains(&subject))
                    .count();
                if sent == 3 {
                    return started.elapsed();
                }
                assert!(started.elapsed() < Duration::from_secs(60), "never sent");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let idle = campaign("idle").await;

    let slow = app.project().await;
    let (wf, _) = workflow(
        &app,
        &slow,
        "upgraded",
        vec![Step(
            "WEBHOOK",
            json!({ "url": format!("http://{addr}/hook"), "method": "POST" }),
        )],
        &[],
        json!({}),
    )
    .await;
    let executions_n = 300;
    for i in 0..executions_n {
        track(
            &app,
            &slow,
            &format!("u{i}@example.com"),
            "upgraded",
            json!({}),
        )
        .await;
    }
    // The slow server is busy: the step runs hold what they may.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.in_flight.load(SeqCst) < 2 {
        assert!(Instant::now() < deadline, "no webhook call came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let busy = campaign("busy").await;
    eprintln!(
        "idle {idle:?} busy {busy:?} answered {}",
        counts.answered.load(SeqCst)
    );
    // Without the limits, every slot waits on the slow server, for seconds per call: the
    // campaign waits for whole batches of them.
    assert!(
        busy < idle + Duration::from_millis(2_000),
        "the campaign took {busy:?} beside the slow webhooks, {idle:?} on an idle queue"
    );
    assert!(
        counts.answered.load(SeqCst) < executions_n,
        "the webhooks were all answered before the campaign was sent: the test proves nothing"
    );
    // The executions go on meanwhile, never more than the project's limit of calls at once.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = app
            .get(
                &format!("/workflows/{wf}/executions?status=COMPLETED&limit=100"),
                &slow.secret_key,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let done = r.body["data"].as_array().unwrap().len();
        if done >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "executions did not go on: {} answered",
            counts.answered.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = app
        .post(
            &format!("/workflows/{wf}/executions/cancel-all"),
            &slow.secret_key,
            json!({}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    assert!(
        counts.most_in_flight.load(SeqCst) <= 2,
        "{} calls at once",
        counts.most_in_flight.load(SeqCst)
    );
}

/// #74: a step job past `workflows.job_wall_time_ms` commits what it ran and puts the rest of its
/// batch (and of its chain) back in the queue without counting an attempt: with a wall time of
/// 1 ms, every step job runs one step run, and every execution still runs each step once, on
/// its first attempt.
#[tokio::test]
async fn a_step_job_past_its_wall_time_puts_the_rest_back_and_each_step_runs_once() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.workflows.job_wall_time_ms = 1;
    })
    .await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "paid",
        vec![
            Step("UPDATE_CONTACT", json!({ "data": { "first": true } })),
            Step("UPDATE_CONTACT", json!({ "data": { "second": true } })),
            Step("EXIT", json!({})),
        ],
        &[(0, 1, None), (1, 2, None)],
        json!({}),
    )
    .await;
    let n = 12;
    for i in 0..n {
        track(&app, &p, &format!("w{i}@example.com"), "paid", json!({})).await;
    }
    let all = settled(&app, &p, &wf, n, &["EXITED"]).await;
    for e in &all {
        assert_eq!(
            runs(e),
            vec![
                run("UPDATE_CONTACT", "COMPLETED", None),
                run("UPDATE_CONTACT", "COMPLETED", None),
                run("EXIT", "COMPLETED", None),
            ],
            "{e}"
        );
        for r in e["stepRuns"].as_array().unwrap() {
            assert_eq!(r["attempts"], 1, "{e}");
        }
    }
    for i in 0..n {
        let c = contact_by_email(&app, &p, &format!("w{i}@example.com")).await;
        assert_eq!(c["data"]["first"], true, "{c}");
        assert_eq!(c["data"]["second"], true, "{c}");
    }
}

#[tokio::test]
async fn reentry_is_refused_unless_allowed() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "visit",
        vec![Step(
            "UPDATE_CONTACT",
            json!({ "data": { "visited": true } }),
        )],
        &[],
        json!({}),
    )
    .await;
    track(&app, &p, "gus@example.com", "visit", json!({})).await;
    settled(&app, &p, &wf, 1, &["COMPLETED"]).await;
    track(&app, &p, "gus@example.com", "visit", json!({})).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    settled(&app, &p, &wf, 1, &["COMPLETED"]).await;
    let r = app
        .post(
            &format!("/workflows/{wf}/executions"),
            &p.secret_key,
            json!({ "email": "gus@example.com" }),
        )
        .await;
    r.assert_error(409, "CONFLICT");

    let r = app
        .patch(
            &format!("/workflows/{wf}"),
            &p.secret_key,
            json!({ "allowReentry": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    track(&app, &p, "gus@example.com", "visit", json!({})).await;
    settled(&app, &p, &wf, 2, &["COMPLETED"]).await;
}

/// Several events of one contact dispatched together (the dispatcher polls once a second here,
/// so concurrent tracks mostly land in one batch) start one execution per workflow, with and
/// without re-entry: the starts of a batch see each other (and the active-execution index
/// refuses what they would miss).
#[tokio::test]
async fn events_of_one_contact_in_one_batch_start_one_execution_per_workflow() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.jobs_poll_interval_ms = 1000;
    })
    .await;
    let p = app.project().await;
    let (once, _) = workflow(
        &app,
        &p,
        "joined",
        vec![Step(
            "UPDATE_CONTACT",
            json!({ "data": { "joined": true } }),
        )],
        &[],
        json!({}),
    )
    .await;
    let waits = waits_for_reply(&app, &p, "joined").await;
    let tracks = (0..8)
        .flat_map(|c| (0..3).map(move |i| (c, i)))
        .map(|(c, i)| {
            let app = &app;
            let p = &p;
            async move {
                track(
                    app,
                    p,
                    &format!("batch{c}@example.com"),
                    "joined",
                    json!({ "i": i }),
                )
                .await;
            }
        });
    futures::future::join_all(tracks).await;
    let done = settled(&app, &p, &once, 8, &["COMPLETED"]).await;
    let waiting = settled(&app, &p, &waits, 8, &["WAITING"]).await;
    for list in [&done, &waiting] {
        let contacts: std::collections::BTreeSet<&str> = list
            .iter()
            .map(|e| e["contactId"].as_str().unwrap())
            .collect();
        assert_eq!(contacts.len(), 8, "one execution per contact: {list:#?}");
    }
    // Still one each once every event was dispatched.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(executions(&app, &p, &once).await.len(), 8);
    assert_eq!(executions(&app, &p, &waits).await.len(), 8);
}

#[tokio::test]
async fn manual_starts_cancel_one_and_all_and_delete_waits_for_them() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let wf = waits_for_reply(&app, &p, "never_tracked").await;
    let hal = p.contact(&app, "hal@example.com", json!({})).await;
    p.contact(&app, "ida@example.com", json!({})).await;
    p.contact(&app, "jo@example.com", json!({})).await;
    let r = app
        .post(
            &format!("/workflows/{wf}/executions"),
            &p.secret_key,
            json!({ "contactId": hal, "context": { "source": "manual" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(r.body["triggerEventId"], Value::Null);
    assert_eq!(r.body["context"]["source"], "manual");
    let hal_exe = r.body["id"].as_str().unwrap().to_string();
    for email in ["ida@example.com", "jo@example.com"] {
        let r = app
            .post(
                &format!("/workflows/{wf}/executions"),
                &p.secret_key,
                json!({ "email": email }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // One active execution per contact.
    let r = app
        .post(
            &format!("/workflows/{wf}/executions"),
            &p.secret_key,
            json!({ "contactId": hal }),
        )
        .await;
    r.assert_error(409, "CONFLICT");
    // Bad starts.
    let r = app
        .post(
            &format!("/workflows/{wf}/executions"),
            &p.secret_key,
            json!({ "email": "nobody@example.com" }),
        )
        .await;
    r.assert_error(404, "NOT_FOUND");
    let r = app
        .post(
            &format!("/workflows/{wf}/executions"),
            &p.secret_key,
            json!({}),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    settled(&app, &p, &wf, 3, &["WAITING"]).await;
    let r = app.get("/activity/upcoming", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["activeExecutionCount"], 3, "{}", r.body);
    let active = r.body["activeExecutions"].as_array().unwrap();
    assert_eq!(active.len(), 3);
    assert_eq!(active[0]["id"], hal_exe.as_str());
    assert_eq!(active[0]["waitingForEvent"], "reply");
    assert_eq!(active[0]["workflowName"], "on never_tracked");

    let r = app.delete(&format!("/workflows/{wf}"), &p.secret_key).await;
    r.assert_error(409, "CONFLICT");

    let r = app
        .delete(
            &format!("/workflows/{wf}/executions/{hal_exe}"),
            &p.secret_key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "CANCELLED");
    let r = app
        .delete(
            &format!("/workflows/{wf}/executions/{hal_exe}"),
            &p.secret_key,
        )
        .await;
    r.assert_error(409, "CONFLICT");
    let e = execution(&app, &p, &wf, &hal_exe).await;
    assert_eq!(runs(&e), vec![run("WAIT_FOR_EVENT", "SKIPPED", None)]);
    // A cancelled execution is not resumed by its event.
    track(&app, &p, "hal@example.com", "reply", json!({})).await;

    let r = app
        .post(
            &format!("/workflows/{wf}/executions/cancel-all"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["cancelled"], 2);
    settled(&app, &p, &wf, 3, &["CANCELLED"]).await;

    let r = app.delete(&format!("/workflows/{wf}"), &p.secret_key).await;
    assert_eq!(r.status, 204, "{}", r.body);
}

#[tokio::test]
async fn executions_of_another_project_are_not_found() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let other = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "ping",
        vec![Step("EXIT", json!({}))],
        &[],
        json!({}),
    )
    .await;
    track(&app, &p, "kim@example.com", "ping", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["EXITED"]).await[0];
    let exe = e["id"].as_str().unwrap();
    for path in [
        format!("/workflows/{wf}/executions"),
        format!("/workflows/{wf}/executions/{exe}"),
    ] {
        app.get(&path, &other.secret_key)
            .await
            .assert_error(404, "NOT_FOUND");
    }
    app.delete(
        &format!("/workflows/{wf}/executions/{exe}"),
        &other.secret_key,
    )
    .await
    .assert_error(404, "NOT_FOUND");
    app.post(
        &format!("/workflows/{wf}/executions/cancel-all"),
        &other.secret_key,
        json!({}),
    )
    .await
    .assert_error(404, "NOT_FOUND");
    // The same event in the other project starts nothing here.
    track(&app, &other, "kim@example.com", "ping", json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(executions(&app, &p, &wf).await.len(), 1);
    app.get(
        &format!("/workflows/{wf}/executions/exe_nope"),
        &p.secret_key,
    )
    .await
    .assert_error(404, "NOT_FOUND");
}

/// A directory with an external step plugin (`component` bytes and its manifest).
fn plugin_dir(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

/// A server with the hostile test plugin loaded as the step plugin `hostile` (its folder is kept
/// alive by the first value) and two attempts per job.
async fn with_hostile_plugin() -> (tempfile::TempDir, TestApp) {
    let dir = plugin_dir(&[
        ("test_hostile.wasm", crate::platform::plugins::HOSTILE),
        (
            "hostile.toml",
            b"name = \"hostile\"\nworld = \"step\"\nversion = \"0.1.0\"\ncomponent = \"test_hostile.wasm\"\n\n[limits]\ntimeout_ms = 500\nmemory_bytes = 16777216\n",
        ),
    ]);
    let path = dir.path().to_path_buf();
    let app = TestApp::spawn_with(move |s| {
        fast(s);
        s.jobs_max_attempts = 2;
        s.plugins.dir = Some(path);
    })
    .await;
    (dir, app)
}

#[tokio::test]
async fn a_trapping_step_fails_its_execution_after_retries_and_others_go_on() {
    let (_dir, app) = with_hostile_plugin().await;
    let p = app.project().await;
    let (bad, _) = workflow(
        &app,
        &p,
        "boom",
        vec![Step(
            "PLUGIN",
            json!({ "plugin": "hostile", "mode": "panic" }),
        )],
        &[],
        json!({}),
    )
    .await;
    let (good, _) = workflow(
        &app,
        &p,
        "boom",
        vec![Step("UPDATE_CONTACT", json!({ "data": { "fine": true } }))],
        &[],
        json!({}),
    )
    .await;
    track(&app, &p, "lu@example.com", "boom", json!({})).await;
    settled(&app, &p, &good, 1, &["COMPLETED"]).await;
    let e = &settled(&app, &p, &bad, 1, &["FAILED"]).await[0];
    let error = e["error"].as_str().unwrap();
    assert!(error.contains("PLUGIN step failed"), "{error}");
    let r = &e["stepRuns"][0];
    assert_eq!(r["status"], "FAILED");
    assert_eq!(r["attempts"], 2, "{r}");
    // The server is fine.
    assert_eq!(app.get("/health", &p.secret_key).await.status, 200);
}

/// Steps that go on at once are run on in memory and committed together, two contact updates
/// among them written in their order; a step run on to that traps writes nothing then and is run
/// again from its own row, where its attempts count and its failure is recorded as for any step.
#[tokio::test]
async fn steps_run_on_in_memory_record_each_run_and_a_trap_among_them_retries_from_its_row() {
    let (_dir, app) = with_hostile_plugin().await;
    let p = app.project().await;
    let yes = json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
        { "field": "email", "operator": "contains", "value": "@" }
    ] } ] } });
    let now = json!({ "amount": 0, "unit": "minutes" });
    // Its own event and contact: two executions of one contact in one round stop after an
    // update (the other workflows' executions could share its round).
    let (good, _) = workflow(
        &app,
        &p,
        "chained",
        vec![
            Step("CONDITION", yes.clone()),
            Step("DELAY", now.clone()),
            Step(
                "UPDATE_CONTACT",
                json!({ "data": { "chained": true, "n": 1 } }),
            ),
            Step("DELAY", now.clone()),
            Step(
                "UPDATE_CONTACT",
                json!({ "data": { "n": 2 }, "subscribed": false }),
            ),
            Step("EXIT", json!({ "reason": "done" })),
        ],
        &[
            (0, 1, Some("yes")),
            (1, 2, None),
            (2, 3, None),
            (3, 4, None),
            (4, 5, None),
        ],
        json!({}),
    )
    .await;
    let (bad, _) = workflow(
        &app,
        &p,
        "chain",
        vec![
            Step("CONDITION", yes.clone()),
            Step("DELAY", now),
            Step("PLUGIN", json!({ "plugin": "hostile", "mode": "panic" })),
        ],
        &[(0, 1, Some("yes")), (1, 2, None)],
        json!({}),
    )
    .await;
    let (waits, _) = workflow(
        &app,
        &p,
        "chain",
        vec![
            Step("CONDITION", yes),
            Step("WAIT_FOR_EVENT", json!({ "eventName": "go" })),
            Step("EXIT", json!({ "reason": "went" })),
        ],
        &[(0, 1, Some("yes")), (1, 2, Some("event"))],
        json!({}),
    )
    .await;
    track(&app, &p, "chain@example.com", "chain", json!({})).await;
    track(&app, &p, "chained@example.com", "chained", json!({})).await;

    // A wait run on to parks the execution on the step run the commit created.
    let e = &settled(&app, &p, &waits, 1, &["WAITING"]).await[0];
    assert_eq!(e["waitingForEvent"], "go");
    assert_eq!(
        runs(e),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("WAIT_FOR_EVENT", "WAITING", None),
        ]
    );
    track(&app, &p, "chain@example.com", "go", json!({})).await;
    let e = &settled(&app, &p, &waits, 1, &["EXITED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("WAIT_FOR_EVENT", "COMPLETED", Some("event")),
            run("EXIT", "COMPLETED", None),
        ]
    );

    let e = &settled(&app, &p, &good, 1, &["EXITED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("DELAY", "COMPLETED", None),
            run("UPDATE_CONTACT", "COMPLETED", None),
            run("DELAY", "COMPLETED", None),
            run("UPDATE_CONTACT", "COMPLETED", None),
            run("EXIT", "COMPLETED", None),
        ]
    );
    for r in e["stepRuns"].as_array().unwrap() {
        assert_eq!(r["attempts"], 1, "{r}");
        assert!(
            r["startedAt"].is_string() && r["finishedAt"].is_string(),
            "{r}"
        );
        assert!(r["input"]["contactId"].is_string(), "{r}");
    }
    // Committed in one round: the updates are written by the commit of the exit.
    let finished: Vec<&Value> = e["stepRuns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["finishedAt"])
        .collect();
    assert!(finished.iter().all(|f| *f == finished[0]), "{e}");
    assert_eq!(e["exitReason"], "done");
    // Both updates landed, the second after the first, and the unsubscription once.
    let contact = contact_by_email(&app, &p, "chained@example.com").await;
    assert_eq!(contact["data"]["chained"], true, "{contact}");
    assert_eq!(contact["data"]["n"], 2, "{contact}");
    assert_eq!(contact["subscribed"], false, "{contact}");
    let id = contact["id"].as_str().unwrap();
    assert_eq!(events_named(&app, &p, id, "contact.unsubscribed").await, 1);
    let outputs: Vec<&Value> = [2, 4]
        .iter()
        .map(|&i| &e["stepRuns"][i]["output"]["effects"][0]["updated"])
        .collect();
    assert_eq!(outputs, [&json!(true), &json!(true)], "{e}");

    let e = &settled(&app, &p, &bad, 1, &["FAILED"]).await[0];
    assert_eq!(
        runs(e),
        vec![
            run("CONDITION", "COMPLETED", Some("yes")),
            run("DELAY", "COMPLETED", None),
            run("PLUGIN", "FAILED", None),
        ]
    );
    let trapped = &e["stepRuns"][2];
    assert_eq!(trapped["attempts"], 2, "{trapped}");
    assert!(
        trapped["error"]
            .as_str()
            .is_some_and(|m| m.contains("PLUGIN step failed")),
        "{trapped}"
    );
}

/// A `SEND_EMAIL` step of a project whose sending is suspended fails its execution with the
/// suspension's reason (read with the project in the step's round) and sends nothing.
#[tokio::test]
async fn a_send_step_of_a_suspended_project_fails_and_sends_nothing() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let send = Step(
        "SEND_EMAIL",
        json!({ "templateId": template(&app, &p, "TRANSACTIONAL").await }),
    );
    let (wf, _) = workflow(&app, &p, "order", vec![send], &[], json!({})).await;
    execute(
        &app.database_url,
        "INSERT INTO project_suspensions \
         (id, project_id, reason, sent, bounced, complained, created_at) \
         VALUES ('sus_test', $1, 'sending is suspended: the test''s reason', 4, 2, 0, 1)",
        &p.id,
    )
    .await;
    track(&app, &p, "sus@example.com", "order", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["FAILED"]).await[0];
    let error = e["stepRuns"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("the test's reason"), "{e}");
    assert!(app.outbox_messages().is_empty());
}

/// Step jobs due at the same moment run in batches (a claimed job adopts its project's other due
/// step jobs, and each round commits all of them in one transaction): every step runs once, a
/// trapping step among them is retried alone and fails its own execution only.
#[tokio::test]
async fn step_jobs_due_together_run_in_batches_each_once_and_a_failing_one_retries_alone() {
    let (_dir, app) = with_hostile_plugin().await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "imported",
        vec![
            Step("DELAY", json!({ "amount": 1, "unit": "hours" })),
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "data.bad", "operator": "equals", "value": true }
                ] } ] } }),
            ),
            Step("PLUGIN", json!({ "plugin": "hostile", "mode": "panic" })),
            Step(
                "UPDATE_CONTACT",
                json!({ "data": { "done": true }, "subscribed": false }),
            ),
        ],
        &[(0, 1, None), (1, 2, Some("yes")), (1, 3, Some("no"))],
        json!({}),
    )
    .await;
    let n = 40;
    for i in 0..n {
        let email = format!("b{i}@example.com");
        if i % 8 == 3 {
            p.contact(&app, &email, json!({ "bad": true })).await;
        }
        track(&app, &p, &email, "imported", json!({})).await;
    }
    settled(&app, &p, &wf, n, &["WAITING"]).await;
    // Every DELAY elapses at once: 40 step jobs due together.
    assert_eq!(elapse(&app).await, n as u64);
    let done = settled(&app, &p, &wf, n, &["COMPLETED", "FAILED"]).await;
    let mut failed = 0;
    for e in &done {
        let email = contact_of(&app, &p, e["contactId"].as_str().unwrap()).await;
        let i: usize = email["email"].as_str().unwrap()[1..]
            .split('@')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if i % 8 == 3 {
            failed += 1;
            assert_eq!(e["status"], "FAILED", "{e}");
            assert_eq!(
                runs(e),
                vec![
                    run("DELAY", "COMPLETED", None),
                    run("CONDITION", "COMPLETED", Some("yes")),
                    run("PLUGIN", "FAILED", None),
                ]
            );
            assert_eq!(e["stepRuns"][2]["attempts"], 2, "{e}");
            assert_eq!(email["data"].get("done"), None, "{email}");
        } else {
            assert_eq!(e["status"], "COMPLETED", "{e}");
            assert_eq!(
                runs(e),
                vec![
                    run("DELAY", "COMPLETED", None),
                    run("CONDITION", "COMPLETED", Some("no")),
                    run("UPDATE_CONTACT", "COMPLETED", None),
                ]
            );
            assert_eq!(e["stepRuns"][2]["attempts"], 1, "{e}");
            assert_eq!(email["data"]["done"], true, "{email}");
            assert_eq!(email["subscribed"], false, "{email}");
        }
    }
    assert_eq!(failed, n / 8);
    // Each update ran once: one unsubscription event per good contact, and no step job is
    // left behind.
    let unsubscribed = app
        .get("/events?name=contact.unsubscribed&limit=100", &p.secret_key)
        .await;
    assert_eq!(unsubscribed.status, 200, "{}", unsubscribed.body);
    assert_eq!(
        unsubscribed.body["data"].as_array().unwrap().len(),
        n - n / 8,
        "{}",
        unsubscribed.body
    );
    let left = count(
        &app.database_url,
        "SELECT COUNT(*) FROM jobs WHERE kind = 'workflow.step' AND state IN ('queued', 'running')",
    )
    .await;
    assert_eq!(left, 0);
}

async fn contact_of(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app.get(&format!("/contacts/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn a_plugin_step_from_the_sdk_example_branches_and_sets_context() {
    let dir = plugin_dir(&[
        ("hello_step.wasm", crate::platform::plugins::HELLO),
        (
            "hello.toml",
            include_bytes!("../../../sdk/examples/hello-step/hello.toml"),
        ),
    ]);
    let path = dir.path().to_path_buf();
    let app = TestApp::spawn_with(move |s| {
        fast(s);
        s.plugins.dir = Some(path);
    })
    .await;
    let p = app.project().await;
    let (wf, _) = workflow(
        &app,
        &p,
        "hello",
        vec![
            Step("PLUGIN", json!({ "plugin": "hello", "greeting": "Howdy" })),
            Step("UPDATE_CONTACT", json!({ "data": { "lane": "vip" } })),
            Step("UPDATE_CONTACT", json!({ "data": { "lane": "regular" } })),
        ],
        &[(0, 1, Some("vip")), (0, 2, Some("regular"))],
        json!({}),
    )
    .await;
    p.contact(&app, "max@example.com", json!({ "tier": "vip" }))
        .await;
    track(&app, &p, "max@example.com", "hello", json!({})).await;
    track(&app, &p, "ned@example.com", "hello", json!({})).await;
    let done = settled(&app, &p, &wf, 2, &["COMPLETED"]).await;
    for e in &done {
        assert!(
            e["context"]["greeting"]
                .as_str()
                .unwrap()
                .starts_with("Howdy, "),
            "{e}"
        );
    }
    assert_eq!(
        contact_by_email(&app, &p, "max@example.com").await["data"]["lane"],
        "vip"
    );
    assert_eq!(
        contact_by_email(&app, &p, "ned@example.com").await["data"]["lane"],
        "regular"
    );
}

/// Runs a `SELECT COUNT(*) …` on the test database.
async fn count(url: &str, sql: &str) -> i64 {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
    }
}

/// Runs `sql` with one text parameter on the test database (to set up what no endpoint
/// makes, such as a suspension).
async fn execute(url: &str, sql: &str, param: &str) {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(sql).bind(param).execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query(sql).bind(param).execute(&mut c).await.unwrap();
    }
}

/// The rows of `sql`, one text column each.
async fn texts(url: &str, sql: &str) -> Vec<String> {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap()
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap()
    }
}

/// What the engine's tables hold, for a test that waited in vain: executions and step runs by
/// status, jobs by kind, state and attempts, and the distinct errors recorded.
async fn engine_report(url: &str) -> String {
    let queries = [
        "SELECT status || ': ' || CAST(COUNT(*) AS TEXT) FROM workflow_executions GROUP BY status",
        "SELECT status || ': ' || CAST(COUNT(*) AS TEXT) FROM workflow_step_runs GROUP BY status",
        "SELECT kind || ' ' || state || ' attempts ' || CAST(attempts AS TEXT) || ': ' || \
         CAST(COUNT(*) AS TEXT) FROM jobs GROUP BY kind, state, attempts",
        "SELECT DISTINCT 'step run: ' || error FROM workflow_step_runs WHERE error IS NOT NULL",
        "SELECT DISTINCT 'job: ' || last_error FROM jobs WHERE last_error IS NOT NULL",
    ];
    let mut report = Vec::new();
    for sql in queries {
        report.extend(texts(url, sql).await.into_iter().take(12));
    }
    report.join("\n")
}

/// Tracks `event` for `n` new contacts, eight requests at a time, alternating over `apps`.
async fn track_many(apps: &[&TestApp], p: &TestProject, event: &str, n: usize) {
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .map(|i| {
            let app = apps[i % apps.len()];
            let body =
                json!({ "email": format!("c{i}@example.com"), "event": event, "data": { "i": i } });
            async move {
                let r = app.post("/v1/track", &p.secret_key, body).await;
                assert_eq!(r.status, 200, "{}", r.body);
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
}

/// Checks that each of `n` executions completed with exactly one completed run of each of its
/// two steps and one email, and that the step runs and emails add up (nothing ran twice).
async fn exactly_once(url: &str, n: i64) {
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM workflow_executions WHERE status = 'COMPLETED'"
        )
        .await,
        n
    );
    assert_eq!(
        count(url, "SELECT COUNT(*) FROM workflow_step_runs").await,
        2 * n
    );
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM workflow_step_runs WHERE status = 'COMPLETED'"
        )
        .await,
        2 * n
    );
    assert_eq!(
        count(url, "SELECT COUNT(*) FROM emails").await,
        n,
        "one email per execution"
    );
    assert_eq!(
        count(url, "SELECT COUNT(DISTINCT contact_id) FROM emails").await,
        n,
        "each contact mailed once"
    );
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM jobs WHERE kind = 'workflow.step' AND state <> 'completed'"
        )
        .await,
        0
    );
}

/// A two-step workflow: update the contact, then send it a template.
async fn two_steps(app: &TestApp, p: &TestProject, event: &str) -> String {
    let tpl = template(app, p, "TRANSACTIONAL").await;
    workflow(
        app,
        p,
        event,
        vec![
            Step("UPDATE_CONTACT", json!({ "data": { "seen": true } })),
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
        ],
        &[(0, 1, None)],
        json!({}),
    )
    .await
    .0
}

#[tokio::test]
async fn two_instances_on_one_database_run_each_step_once() {
    let one = TestApp::spawn_with(fast).await;
    let two = one.spawn_sharing(fast).await;
    let p = one.project().await;
    let wf = two_steps(&one, &p, "joined").await;
    let n = 200;
    track_many(&[&one, &two], &p, "joined", n).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while count(
        &one.database_url,
        "SELECT COUNT(*) FROM workflow_executions WHERE status = 'COMPLETED'",
    )
    .await
        < n as i64
    {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            executions(&one, &p, &wf).await.first()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    exactly_once(&one.database_url, n as i64).await;
    two.stop().await;
    one.stop().await;
}

#[tokio::test]
async fn a_server_killed_mid_workflows_finishes_after_restart_without_doubles() {
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::harness::fresh_database_url(dir.path()).await;
    let configure = |s: &mut Settings| {
        fast(s);
        s.jobs_lease_seconds = 1;
        s.rate_limit_per_minute = 1_000_000;
    };
    // The first instance runs on its own runtime, so that it can be killed outright: its tasks
    // stop wherever they are (mid step, mid effect, mid commit), nothing shuts down cleanly.
    let mut settings = crate::support::harness::test_settings(dir.path(), &url);
    configure(&mut settings);
    let doomed = crate::support::harness::DoomedServer::start(settings, &url);
    let first = &doomed.app;
    let p = first.project().await;
    two_steps(first, &p, "joined").await;
    let n: i64 = 1000;
    track_many(&[first], &p, "joined", n as usize).await;
    // Kill it while executions are in flight.
    let deadline = Instant::now() + Duration::from_secs(120);
    while count(
        &url,
        "SELECT COUNT(*) FROM workflow_step_runs WHERE status = 'COMPLETED'",
    )
    .await
        < n / 4
    {
        if Instant::now() >= deadline {
            panic!(
                "the executions do not advance:\n{}",
                engine_report(&url).await
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = count(
        &url,
        "SELECT COUNT(*) FROM workflow_executions WHERE status = 'COMPLETED'",
    )
    .await;
    assert!(
        done < n,
        "the kill came before every execution finished ({done})"
    );

    // A new instance on the same database finishes every execution, nothing twice.
    let second = TestApp::spawn_on(&url, configure).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    while count(
        &url,
        "SELECT COUNT(*) FROM workflow_executions WHERE status = 'COMPLETED'",
    )
    .await
        < n
    {
        if Instant::now() >= deadline {
            panic!(
                "not every execution finished after the restart:\n{}",
                engine_report(&url).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    exactly_once(&url, n).await;
    // The report a stalled run would print reads the same tables.
    let report = engine_report(&url).await;
    assert!(report.contains(&format!("COMPLETED: {n}")), "{report}");
    second.stop().await;
}

#[tokio::test]
async fn usage_endpoints_list_the_workflows_and_steps_that_reference_a_name() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let tpl = template(&app, &p, "TRANSACTIONAL").await;
    p.contact(
        &app,
        "oz@example.com",
        json!({ "plan": "pro", "stage": "new" }),
    )
    .await;
    let (wf, steps) = workflow(
        &app,
        &p,
        "signup",
        vec![
            Step(
                "CONDITION",
                json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
                    { "field": "data.plan", "operator": "equals", "value": "pro" }
                ] } ] } }),
            ),
            Step("WAIT_FOR_EVENT", json!({ "eventName": "purchase" })),
            Step("SEND_EMAIL", json!({ "templateId": tpl })),
            Step("UPDATE_CONTACT", json!({ "data": { "stage": "customer" } })),
        ],
        &[(0, 1, Some("yes")), (1, 2, Some("event")), (2, 3, None)],
        json!({}),
    )
    .await;
    let usage = |path: String| {
        let app = &app;
        let key = p.secret_key.clone();
        async move {
            let r = app.get(&path, &key).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            r.body["workflows"].clone()
        }
    };
    let name = "on signup";
    assert_eq!(
        usage("/events/signup/usage".into()).await,
        json!([{ "id": wf, "name": name }])
    );
    assert_eq!(
        usage("/events/purchase/usage".into()).await,
        json!([{ "id": wf, "name": name, "stepId": steps[1] }])
    );
    assert_eq!(
        usage(format!("/templates/{tpl}/usage")).await,
        json!([{ "id": wf, "name": name, "stepId": steps[2] }])
    );
    assert_eq!(
        usage("/contacts/fields/data.plan/usage".into()).await,
        json!([{ "id": wf, "name": name, "stepId": steps[0] }])
    );
    assert_eq!(
        usage("/contacts/fields/data.stage/usage".into()).await,
        json!([{ "id": wf, "name": name, "stepId": steps[3] }])
    );
    assert_eq!(usage("/events/login/usage".into()).await, json!([]));
}

/// #74: a workflow's send is held in the render budget (`sending.render_memory_mb`) until its
/// round commits, as a `/v1/send`'s is: a message over the whole budget fails its execution with
/// an error naming the setting, queues nothing, and gives its room back.
#[tokio::test]
async fn a_workflow_send_over_the_render_budget_fails_its_execution_and_queues_nothing() {
    let app = TestApp::spawn_with(|s| {
        fast(s);
        s.sending.render_memory_mb = 1;
    })
    .await;
    let p = app.project().await;
    // 50 items of about 32 KB each: about 1.6 MB rendered, over the 1 MB budget.
    let body = format!(
        "{{{{#each items}}}}<p>{}</p>{{{{/each}}}}",
        "Hello there. ".repeat(2_500)
    );
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            json!({ "name": "big", "type": "TRANSACTIONAL", "subject": "Big", "body": body,
                    "from": "hello@acme.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let tpl = r.body["id"].as_str().unwrap().to_string();
    let (wf, _) = workflow(
        &app,
        &p,
        "big",
        vec![Step("SEND_EMAIL", json!({ "templateId": tpl }))],
        &[],
        json!({}),
    )
    .await;
    let items: Vec<u32> = (0..50).collect();
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "ann@example.com", "subscribed": true, "data": { "items": items } }),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    track(&app, &p, "ann@example.com", "big", json!({})).await;
    let e = &settled(&app, &p, &wf, 1, &["FAILED"]).await[0];
    let error = e["error"].as_str().unwrap();
    assert!(error.contains("sending.render_memory_mb"), "{error}");
    let upcoming = app.get("/activity/upcoming", &p.secret_key).await;
    assert_eq!(upcoming.body["queuedEmails"], 0, "{}", upcoming.body);
    assert_eq!(app.state().sending().render_budget().free_kb(), 1024);
}
