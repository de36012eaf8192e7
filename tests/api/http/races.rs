//! Deletes racing the writes that refer to what they delete. Each write either lands whole before
//! the delete, or is answered 404 (what it names is gone) or 409 (a concurrent request deleted
//! something it refers to) after it: never a 500, and nothing of it outlives the delete. Each test
//! runs its race over several rounds, since which request wins is the scheduler's choice.

use reqwest::Method;
use serde_json::json;

use crate::support::harness::{Reply, TestApp, TestProject};

const ROUNDS: usize = 8;

/// A workflow whose one step waits an hour, so that an execution started stays active.
async fn waiting_workflow(app: &TestApp, p: &TestProject, name: &str) -> String {
    let key = &p.secret_key;
    let r = app
        .post(
            "/workflows",
            key,
            json!({ "name": name, "triggerConfig": { "eventName": "never_tracked" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let wf = r.body["id"].as_str().unwrap().to_string();
    let r = app
        .post(
            &format!("/workflows/{wf}/steps"),
            key,
            json!({ "type": "DELAY", "config": { "amount": 1, "unit": "hours" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    wf
}

/// Asserts that `r` is a success, or one of the `allowed` error statuses in the standard shape.
#[track_caller]
fn landed_or_refused(r: &Reply, allowed: &[(u16, &str)], what: &str) {
    if r.status.is_success() {
        return;
    }
    let status = r.status.as_u16();
    let Some((_, code)) = allowed.iter().find(|(s, _)| *s == status) else {
        panic!("{what}: {status} {}", r.body);
    };
    r.assert_error(status, code);
}

#[tokio::test]
async fn a_start_racing_the_deletion_of_its_workflow_or_contact_is_404_or_lands_whole() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    for round in 0..ROUNDS {
        let wf = waiting_workflow(&app, &p, &format!("race {round}")).await;
        let contact = p
            .contact(&app, &format!("r{round}@example.com"), json!({}))
            .await;
        let executions = format!("/workflows/{wf}/executions");
        let deletes_workflow = round % 2 == 0;
        let doomed = if deletes_workflow {
            format!("/workflows/{wf}")
        } else {
            format!("/contacts/{contact}")
        };
        let (started, deleted) = tokio::join!(
            app.post(&executions, key, json!({ "contactId": contact })),
            app.delete(&doomed, key)
        );
        landed_or_refused(&started, &[(404, "NOT_FOUND")], "the start");
        // A workflow with an active execution is not deleted (409); a contact always is.
        landed_or_refused(&deleted, &[(409, "CONFLICT")], "the delete");
        if started.status == 404 {
            assert!(deleted.status.is_success(), "{}", deleted.body);
            let gone = if deletes_workflow {
                "workflow"
            } else {
                "contact"
            };
            assert!(
                started.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(gone)),
                "{}",
                started.body
            );
        }
        // Nothing of the start outlives what it referred to.
        let listed = app.get(&executions, key).await;
        if deletes_workflow && deleted.status.is_success() {
            listed.assert_error(404, "NOT_FOUND");
        } else {
            assert_eq!(listed.status, 200, "{}", listed.body);
            let executions = listed.body["data"].as_array().unwrap().len();
            let contact_left = app.get(&format!("/contacts/{contact}"), key).await;
            let expected = usize::from(started.status == 201 && contact_left.status == 200);
            assert_eq!(executions, expected, "{}", listed.body);
        }
    }
}

#[tokio::test]
async fn static_members_added_while_the_contact_is_deleted_are_skipped() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    for round in 0..ROUNDS {
        let r = app
            .post(
                "/segments",
                key,
                json!({ "name": format!("race {round}"), "type": "STATIC" }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let segment = r.body["id"].as_str().unwrap().to_string();
        let email = format!("m{round}@example.com");
        let contact = p.contact(&app, &email, json!({})).await;
        let members = format!("/segments/{segment}/members");
        let doomed = format!("/contacts/{contact}");
        let (added, deleted) = tokio::join!(
            app.post(&members, key, json!({ "emails": [email] })),
            app.delete(&doomed, key)
        );
        assert_eq!(added.status, 200, "{}", added.body);
        assert!(deleted.status.is_success(), "{}", deleted.body);
        // However the two interleaved, the contact is gone and so is its membership.
        let r = app.get(&format!("/segments/{segment}/contacts"), key).await;
        assert_eq!(r.body["total"], 0, "{}", r.body);
        let r = app
            .post(&format!("/segments/{segment}/refresh"), key, json!({}))
            .await;
        assert_eq!(r.body["memberCount"], 0, "{}", r.body);
    }
}

#[tokio::test]
async fn writes_with_the_key_of_a_project_being_deleted_are_never_500_and_others_land() {
    let app = TestApp::spawn().await;
    // Another tenant writing at the same moment: its requests may share a group commit with the
    // doomed project's, and must land whatever becomes of those.
    let bystander = app.project().await;
    for round in 0..ROUNDS {
        let p = app.project().await;
        let key = p.secret_key.as_str();
        let contact = format!("k{round}@example.com");
        let writes = [
            (
                "/contacts",
                json!({ "email": contact, "data": { "n": round } }),
            ),
            ("/v1/track", json!({ "event": "signup", "email": contact })),
            ("/segments", json!({ "name": "s", "type": "STATIC" })),
            (
                "/templates",
                json!({ "name": "t", "subject": "s", "body": "b", "type": "MARKETING" }),
            ),
            ("/workflows", json!({ "name": "w", "eventName": "signup" })),
        ];
        let calls = writes
            .iter()
            .map(|(path, body)| app.post(path, key, body.clone()));
        let theirs = [
            (
                "/contacts",
                json!({ "email": format!("c{round}@example.com") }),
            ),
            (
                "/v1/track",
                json!({ "event": "signup", "email": format!("t{round}@example.com") }),
            ),
        ];
        let their_calls = theirs
            .iter()
            .map(|(path, body)| app.post(path, &bystander.secret_key, body.clone()));
        let project = format!("/users/@me/projects/{}", p.id);
        let delete = app.call_with(&p.owner, Method::DELETE, &project, None, None, &[]);
        let (answers, their_answers, deleted) = tokio::join!(
            futures::future::join_all(calls),
            futures::future::join_all(their_calls),
            delete
        );
        assert_eq!(deleted.status, 204, "{}", deleted.body);
        for ((path, _), r) in writes.iter().zip(&answers) {
            landed_or_refused(
                r,
                &[(401, "UNAUTHORIZED"), (404, "NOT_FOUND"), (409, "CONFLICT")],
                path,
            );
        }
        for ((path, _), r) in theirs.iter().zip(&their_answers) {
            assert!(r.status.is_success(), "{path}: {} {}", r.status, r.body);
        }
        // Whatever landed went with the project.
        app.get("/contacts", key)
            .await
            .assert_error(401, "UNAUTHORIZED");
    }
    let r = app.get("/contacts?limit=100", &bystander.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["total"], json!(2 * ROUNDS), "{}", r.body);
}

#[tokio::test]
async fn a_replace_racing_a_send_or_a_delete_names_the_status_it_lost_to() {
    let app = TestApp::spawn_with(|s| s.domains.allow_unverified = true).await;
    let p = app.project().await;
    let key = &p.secret_key;
    p.contact(&app, "reader@example.com", json!({})).await;
    let body = |name: &str| {
        json!({
            "name": name, "subject": "News", "body": "<p>Hello</p>",
            "from": "news@acme.test", "audienceType": "ALL",
        })
    };
    for round in 0..ROUNDS {
        let r = app.post("/campaigns", key, body("race")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap().to_string();
        let campaign = format!("/campaigns/{id}");
        let sends = round % 2 == 0;
        let (method, path, other_body) = if sends {
            (Method::POST, format!("{campaign}/send"), Some(json!({})))
        } else {
            (Method::DELETE, campaign.clone(), None)
        };
        let other = app.call(method, &path, Some(key), other_body);
        let replace = app.call(Method::PUT, &campaign, Some(key), Some(body("replaced")));
        let (replaced, other) = tokio::join!(replace, other);
        assert!(other.status.is_success(), "{}", other.body);
        landed_or_refused(
            &replaced,
            &[(404, "NOT_FOUND"), (409, "CONFLICT")],
            "the replace",
        );
        if replaced.status == 409 {
            // Refused for the status the send moved it to, and saying so.
            let message = replaced.body["error"]["message"].as_str().unwrap();
            assert!(!message.starts_with("the campaign is DRAFT"), "{message}");
        }
        if replaced.status == 404 {
            assert!(!sends, "{}", replaced.body);
        }
    }
}

#[tokio::test]
async fn invitations_of_one_address_at_once_all_land_and_the_last_one_stays() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let members = format!("/projects/{}/members", p.id);
    let invite = |role: &'static str| {
        app.call_with(
            &p.owner,
            Method::POST,
            &members,
            None,
            Some(json!({ "email": "newcomer@example.com", "role": role })),
            &[],
        )
    };
    let answers =
        futures::future::join_all([invite("MEMBER"), invite("ADMIN"), invite("MEMBER")]).await;
    for r in &answers {
        assert_eq!(r.status, 202, "{}", r.body);
    }
    let list = app
        .call_with(&p.owner, Method::GET, &members, None, None, &[])
        .await;
    let invitations = list.body["invitations"].as_array().unwrap();
    assert_eq!(invitations.len(), 1, "{}", list.body);
    assert_eq!(invitations[0]["email"], "newcomer@example.com");
}

#[tokio::test]
async fn an_import_racing_writes_of_its_addresses_finishes_in_one_attempt() {
    let app = TestApp::spawn_with(|s| s.jobs_poll_interval_ms = 20).await;
    let p = app.project().await;
    let key = &p.secret_key;
    let n = 1_000;
    let mut csv = String::from("email,plan\n");
    for i in 0..n {
        csv.push_str(&format!("imported{i}@example.com,pro\n"));
    }
    let r = crate::http::jobs::upload(&app, key, "race.csv", "text/csv", csv.into_bytes()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job = r.body["jobId"].as_str().unwrap().to_string();
    // The same addresses written one by one while the import's chunks insert them.
    let writes = (0..n).rev().step_by(5).map(|i| {
        app.spawn_post(
            "/contacts",
            key,
            json!({ "email": format!("imported{i}@example.com"), "data": { "seen": true } }),
            None,
        )
    });
    for w in futures::future::join_all(writes).await {
        let r = w.unwrap();
        assert!(r.status.is_success(), "{}", r.body);
    }
    let job = crate::http::jobs::wait_job(&app, key, "import", &job).await;
    assert_eq!(job["state"], "completed", "{job}");
    // A chunk that met an address created meanwhile was written again in the same attempt.
    assert_eq!(job["attempts"], 1, "{job}");
    assert_eq!(job["result"]["succeeded"], n, "{job}");
    let r = app.get("/contacts", key).await;
    assert_eq!(r.body["total"], n, "{}", r.body);
}
