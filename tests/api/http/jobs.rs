//! The rest of contacts (lookup, fields, CSV import, bulk actions) and the durable job queue:
//! retries, a job finished after its server was killed, and each job run exactly once by two
//! server processes sharing one database.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::harness::{Reply, TestApp, fresh_database_url, read};
use crate::support::serve::Served;

/// Uploads a file to `/contacts/import`.
pub async fn upload(
    app: &TestApp,
    key: &str,
    name: &str,
    content_type: &str,
    bytes: Vec<u8>,
) -> Reply {
    upload_to(app, "/contacts/import", key, name, content_type, bytes).await
}

/// Uploads a file as the multipart field `file` to `path`.
pub async fn upload_to(
    app: &TestApp,
    path: &str,
    key: &str,
    name: &str,
    content_type: &str,
    bytes: Vec<u8>,
) -> Reply {
    let part = reqwest::multipart::Part::bytes(bytes)
        .file_name(name.to_string())
        .mime_str(content_type)
        .unwrap();
    let form = reqwest::multipart::Form::new().part("file", part);
    read(
        app.client
            .post(app.url(path))
            .bearer_auth(key)
            .multipart(form)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Polls a job (`import` or `bulk`) until it finishes; answers its last status.
pub async fn wait_job(app: &TestApp, key: &str, kind: &str, id: &str) -> Value {
    wait_job_at(&app.client, app.base_url(), key, kind, id).await
}

async fn wait_job_at(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    kind: &str,
    id: &str,
) -> Value {
    // Generous: the whole suite runs beside it on 2 cores (a debug build on PostgreSQL imports
    // 40,000 rows after a restart in about a minute under that load).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let r = read(
            client
                .get(format!("{base}/contacts/{kind}/{id}"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.body["state"] == "completed" || r.body["state"] == "failed" {
            return r.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job did not finish: {}",
            r.body
        );
        // 300 reads a minute at most: well under the project's rate limit (1,000 a minute)
        // however long the job takes.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn fast_jobs(s: &mut herald::config::Settings) {
    s.jobs_poll_interval_ms = 50;
}

#[tokio::test]
async fn csv_import_types_values_and_reports_bad_rows() {
    let app = TestApp::spawn_with(fast_jobs).await;
    let p = app.project().await;
    let key = &p.secret_key;
    p.contact(
        &app,
        "existing@example.com",
        json!({ "plan": "free", "keep": 1 }),
    )
    .await;
    let csv = "\u{feff}Email,Subscribed,plan,Age,vip,zip,Signup,empty\n\
               new@example.com,yes,pro,41,true,02134,2024-05-01,\n\
               EXISTING@example.com,0,team,,false,10001,,\n\
               not-an-email,yes,pro,1,true,1,,\n\
               ,yes,pro,1,true,1,,\n\
               maybe@example.com,maybe,pro,1,true,1,,\n\
               third@example.com,,\"a, b\",3.5,TRUE,1,,\n";
    let r = upload(&app, key, "people.csv", "text/csv", csv.as_bytes().to_vec()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job_id = r.body["jobId"].as_str().unwrap().to_string();
    assert!(job_id.starts_with("job_"));
    let job = wait_job(&app, key, "import", &job_id).await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["progress"], 100);
    assert_eq!(job["kind"], "contacts.import");
    assert!(job["finishedAt"].is_string());
    let result = &job["result"];
    assert_eq!(result["total"], 6);
    assert_eq!(result["succeeded"], 3);
    assert_eq!(result["failed"], 3);
    assert_eq!(result["created"], 2);
    assert_eq!(result["updated"], 1);
    let rows: Vec<i64> = result["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["row"].as_i64().unwrap())
        .collect();
    assert_eq!(rows, vec![4, 5, 6], "line numbers, the header being line 1");
    assert!(
        result["errors"][2]["error"]
            .as_str()
            .unwrap()
            .contains("subscribed")
    );

    let look = app
        .post(
            "/contacts/lookup",
            key,
            json!({ "emails": ["new@example.com", "existing@example.com", "third@example.com"] }),
        )
        .await;
    let id_of = |email: &str| {
        look.body["found"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["email"] == email)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let new = app
        .get(&format!("/contacts/{}", id_of("new@example.com")), key)
        .await;
    assert_eq!(new.body["subscribed"], true);
    assert_eq!(
        new.body["data"],
        json!({ "plan": "pro", "Age": 41, "vip": true, "zip": "02134", "Signup": "2024-05-01" })
    );
    let existing = app
        .get(&format!("/contacts/{}", id_of("existing@example.com")), key)
        .await;
    assert_eq!(existing.body["subscribed"], false);
    assert_eq!(
        existing.body["data"],
        json!({ "plan": "team", "keep": 1, "vip": false, "zip": 10001 }),
        "patched, empty cells ignored"
    );
    let third = app
        .get(&format!("/contacts/{}", id_of("third@example.com")), key)
        .await;
    assert_eq!(
        third.body["subscribed"], true,
        "new contacts default to subscribed"
    );
    assert_eq!(third.body["data"]["plan"], "a, b");
    assert_eq!(third.body["data"]["Age"], 3.5);

    // Field types were inferred from the import.
    let fields = app.get("/contacts/fields", key).await;
    let ty = |f: &str| {
        fields.body["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["field"] == f)
            .map(|x| x["type"].clone())
    };
    assert_eq!(ty("data.Age"), Some(json!("number")));
    assert_eq!(ty("data.Signup"), Some(json!("date")));
    assert_eq!(
        ty("data.zip"),
        Some(json!("string")),
        "the first value seen was \"02134\""
    );
}

#[tokio::test]
async fn import_rejects_what_it_cannot_take() {
    let app = TestApp::spawn_with(fast_jobs).await;
    let p = app.project().await;
    let key = &p.secret_key;
    let r = upload(
        &app,
        key,
        "x.csv",
        "text/csv",
        b"name,plan\nann,pro\n".to_vec(),
    )
    .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["file"]);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("email")
    );
    upload(&app, key, "x.csv", "text/csv", Vec::new())
        .await
        .assert_error(422, "VALIDATION_ERROR");
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    upload(&app, key, "x.csv", "text/csv", png.clone())
        .await
        .assert_error(422, "VALIDATION_ERROR");
    upload(&app, key, "x.png", "image/png", png)
        .await
        .assert_error(415, "INVALID_REQUEST_BODY");
    let mut big = b"email,pad\n".to_vec();
    while big.len() <= 5 * 1024 * 1024 {
        big.extend_from_slice(
            format!("user{}@example.com,{}\n", big.len(), "x".repeat(80)).as_bytes(),
        );
    }
    upload(&app, key, "big.csv", "text/csv", big.clone())
        .await
        .assert_error(413, "PAYLOAD_TOO_LARGE");
    big.extend_from_slice(&vec![b'x'; 2 * 1024 * 1024]);
    upload(&app, key, "bigger.csv", "text/csv", big)
        .await
        .assert_error(413, "PAYLOAD_TOO_LARGE");
    // Not multipart, and multipart without the file field.
    app.post("/contacts/import", key, json!({ "file": "email\n" }))
        .await
        .assert_error(415, "INVALID_REQUEST_BODY");
    let form = reqwest::multipart::Form::new().text("other", "x");
    let r = read(
        app.client
            .post(app.url("/contacts/import"))
            .bearer_auth(key)
            .multipart(form)
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    assert_eq!(app.get("/contacts", key).await.body["total"], 0);
    // Polling: unknown, malformed and other projects' jobs are 404.
    app.get("/contacts/import/job_0123456789abcdef0123456789abcdef", key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/contacts/import/garbage", key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn the_contact_total_is_kept_by_every_way_contacts_come_and_go() {
    let app = TestApp::spawn_with(fast_jobs).await;
    let p = app.project().await;
    let q = app.project().await;
    let key = &p.secret_key;
    let a = p.contact(&app, "a@example.com", json!({})).await;
    let b = p.contact(&app, "b@example.com", json!({})).await;
    p.contact(&app, "c@example.com", json!({})).await;
    // An upsert of an existing address adds nobody.
    p.contact(&app, "a@example.com", json!({ "again": true }))
        .await;
    q.contact(&app, "other@example.com", json!({})).await;
    // Tracking an event of a new address creates its contact.
    let r = app
        .post(
            "/v1/track",
            &p.public_key,
            json!({ "event": "signed-up", "email": "tracked@example.com" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // An import adds the new rows only.
    let csv = "email\nc@example.com\nd@example.com\ne@example.com\n";
    let r = upload(&app, key, "list.csv", "text/csv", csv.as_bytes().to_vec()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    wait_job(&app, key, "import", r.body["jobId"].as_str().unwrap()).await;
    // One deleted alone, one in bulk.
    assert_eq!(app.delete(&format!("/contacts/{a}"), key).await.status, 204);
    let r = app
        .post("/contacts/bulk-delete", key, json!({ "contactIds": [b] }))
        .await;
    wait_job(&app, key, "bulk", r.body["jobId"].as_str().unwrap()).await;

    let list = app.get("/contacts?limit=100", key).await;
    let listed = list.body["data"].as_array().unwrap().len();
    assert_eq!(listed, 4, "{}", list.body);
    assert_eq!(list.body["total"], 4);
    assert_eq!(app.get("/contacts", &q.secret_key).await.body["total"], 1);
    assert_eq!(
        app.state()
            .store()
            .count_contacts(&herald::domain::ids::ProjectId::parse(&p.id).unwrap())
            .await
            .unwrap(),
        4
    );
}

#[tokio::test]
async fn bulk_actions_touch_only_the_project_and_report_the_rest() {
    let app = TestApp::spawn_with(fast_jobs).await;
    let p = app.project().await;
    let q = app.project().await;
    let key = &p.secret_key;
    let a = p.contact(&app, "a@example.com", json!({})).await;
    let b = p.contact(&app, "b@example.com", json!({})).await;
    let other = q.contact(&app, "other@example.com", json!({})).await;

    let r = app
        .post(
            "/contacts/bulk-unsubscribe",
            key,
            json!({ "contactIds": [a, b, other, "cnt_garbage", a] }),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job_id = r.body["jobId"].as_str().unwrap().to_string();
    let job = wait_job(&app, key, "bulk", &job_id).await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["result"]["total"], 4, "duplicates are counted once");
    assert_eq!(job["result"]["succeeded"], 2);
    assert_eq!(job["result"]["failed"], 2);
    let missing: Vec<&str> = job["result"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["contactId"].as_str().unwrap())
        .collect();
    assert_eq!(missing, vec![other.as_str(), "cnt_garbage"]);
    assert_eq!(
        app.get(&format!("/contacts/{a}"), key).await.body["subscribed"],
        false
    );
    assert_eq!(
        app.get(&format!("/contacts/{other}"), &q.secret_key)
            .await
            .body["subscribed"],
        true,
        "never touched"
    );

    // The job is only visible to its project and at its own endpoint.
    app.get(&format!("/contacts/bulk/{job_id}"), &q.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get(&format!("/contacts/import/{job_id}"), key)
        .await
        .assert_error(404, "NOT_FOUND");

    let r = app
        .post(
            "/contacts/bulk-subscribe",
            key,
            json!({ "contactIds": [a] }),
        )
        .await;
    wait_job(&app, key, "bulk", r.body["jobId"].as_str().unwrap()).await;
    assert_eq!(
        app.get(&format!("/contacts/{a}"), key).await.body["subscribed"],
        true
    );

    let r = app
        .post(
            "/contacts/bulk-delete",
            key,
            json!({ "contactIds": [b, other] }),
        )
        .await;
    let job = wait_job(&app, key, "bulk", r.body["jobId"].as_str().unwrap()).await;
    assert_eq!(job["result"]["succeeded"], 1);
    app.get(&format!("/contacts/{b}"), key)
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(
        app.get(&format!("/contacts/{other}"), &q.secret_key)
            .await
            .status,
        200
    );

    let too_many: Vec<String> = (0..1001).map(|i| format!("cnt_{i:032x}")).collect();
    let r = app
        .post(
            "/contacts/bulk-delete",
            key,
            json!({ "contactIds": too_many }),
        )
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["contactIds"]);
    app.post("/contacts/bulk-subscribe", key, json!({ "contactIds": [] }))
        .await
        .assert_error(422, "VALIDATION_ERROR");
    app.post(
        "/contacts/bulk-subscribe",
        key,
        json!({ "contactIds": "x" }),
    )
    .await
    .assert_error(400, "INVALID_REQUEST_BODY");
    app.post("/contacts/bulk-subscribe", key, json!({}))
        .await
        .assert_error(422, "VALIDATION_ERROR");
}

#[tokio::test]
async fn lookup_and_field_endpoints() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let key = &p.secret_key;
    let a = p
        .contact(
            &app,
            "ann@example.com",
            json!({ "plan": "pro", "profile": { "tier": "gold" } }),
        )
        .await;
    p.contact(&app, "bob@example.com", json!({ "plan": "pro" }))
        .await;
    p.contact(
        &app,
        "cy@example.com",
        json!({ "plan": "free", "profile": { "tier": "gold" } }),
    )
    .await;

    let r = app
        .post(
            "/contacts/lookup",
            key,
            json!({ "emails": ["ANN@example.com", "nobody@example.com", "not an email"] }),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["found"],
        json!([{ "id": a, "email": "ANN@example.com" }])
    );
    assert_eq!(
        r.body["notFound"],
        json!(["nobody@example.com", "not an email"])
    );
    let many: Vec<String> = (0..501).map(|i| format!("u{i}@example.com")).collect();
    let r = app
        .post("/contacts/lookup", key, json!({ "emails": many }))
        .await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["emails"]);

    let r = app.get("/contacts/fields/data.plan/values", key).await;
    assert_eq!(
        r.body["values"],
        json!([{ "value": "pro", "count": 2 }, { "value": "free", "count": 1 }])
    );
    let r = app
        .get("/contacts/fields/data.profile.tier/values", key)
        .await;
    assert_eq!(r.body["values"], json!([{ "value": "gold", "count": 2 }]));
    let r = app.get("/contacts/fields/subscribed/values", key).await;
    assert_eq!(r.body["values"], json!([{ "value": true, "count": 3 }]));
    app.get("/contacts/fields/nonsense/values", key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/contacts/fields/data./values", key)
        .await
        .assert_error(422, "VALIDATION_ERROR");
    let r = app.get("/contacts/fields/data.plan/usage", key).await;
    assert_eq!(
        r.body,
        json!({ "field": "data.plan", "segments": [], "campaigns": [], "workflows": [] })
    );

    let r = app.delete("/contacts/fields/data.plan", key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["contactsUpdated"], 3);
    let r = app.get(&format!("/contacts/{a}"), key).await;
    assert_eq!(r.body["data"], json!({ "profile": { "tier": "gold" } }));
    let fields = app.get("/contacts/fields", key).await;
    assert!(!fields.body.to_string().contains("data.plan"));
    app.delete("/contacts/fields/email", key)
        .await
        .assert_error(422, "VALIDATION_ERROR");
    // Another project's delete does not reach these contacts.
    let q = app.project().await;
    assert_eq!(
        app.delete("/contacts/fields/data.profile", &q.secret_key)
            .await
            .body["contactsUpdated"],
        0
    );
    assert_eq!(
        app.get(&format!("/contacts/{a}"), key).await.body["data"],
        json!({ "profile": { "tier": "gold" } })
    );
}

// ---------------------------------------------------------------------------------------------
// Crashes and several processes

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// Starts `herald serve` on `url` in `dir` with the extra environment.
async fn start(url: &str, dir: &std::path::Path, extra: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--database-url", url, "--data-dir"])
        .arg(dir)
        .env("HERALD_JOBS_POLL_INTERVAL_MS", "50");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Served::start(cmd, "warn", false).await
}

async fn project_on(base: &str) -> (reqwest::Client, String) {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let email = format!("o{}@example.com", uuid::Uuid::new_v4().simple());
    let r = client
        .post(format!("{base}/auth/signup"))
        .json(&json!({ "email": email, "password": "long enough" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let p: Value = client
        .post(format!("{base}/users/@me/projects"))
        .json(&json!({ "name": "p" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (client, p["secretKey"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn an_import_interrupted_by_kill_9_finishes_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let lease = [("HERALD_JOBS_LEASE_SECONDS", "2")];
    let first = start(&url, dir.path(), &lease).await;
    let (client, key) = project_on(&first.base).await;
    let rows = 40_000;
    let mut csv = String::from("email,n\n");
    for i in 0..rows {
        csv.push_str(&format!("person{i}@example.com,{i}\n"));
    }
    let part = reqwest::multipart::Part::bytes(csv.into_bytes())
        .file_name("big.csv")
        .mime_str("text/csv")
        .unwrap();
    let r = read(
        client
            .post(format!("{}/contacts/import", first.base))
            .bearer_auth(&key)
            .multipart(reqwest::multipart::Form::new().part("file", part))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job_id = r.body["jobId"].as_str().unwrap().to_string();
    // Kill the server as soon as the import has committed a chunk but not finished.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = read(
            client
                .get(format!("{}/contacts/import/{job_id}", first.base))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        let progress = s.body["progress"].as_i64().unwrap();
        assert_ne!(
            s.body["state"], "completed",
            "the import finished before it could be interrupted; make it bigger"
        );
        if progress > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill9();

    let second = start(&url, dir.path(), &lease).await;
    let job = wait_job_at(&client, &second.base, &key, "import", &job_id).await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["attempts"], 2, "resumed once after the lease expired");
    assert_eq!(job["result"]["total"], rows);
    assert_eq!(job["result"]["succeeded"], rows);
    assert_eq!(job["result"]["created"], rows, "no chunk was applied twice");
    let list = read(
        client
            .get(format!("{}/contacts?limit=1", second.base))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list.body["total"], rows);
}

#[tokio::test]
async fn two_processes_on_one_database_run_each_job_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let one = start(&url, dir.path(), &[]).await;
    let two = start(&url, dir.path(), &[]).await;
    let (client, key) = project_on(&one.base).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let base = if i % 2 == 0 { &one.base } else { &two.base };
        let r = read(
            client
                .post(format!("{base}/contacts"))
                .bearer_auth(&key)
                .json(&json!({ "email": format!("x{i}@example.com") }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        ids.push(r.body["id"].as_str().unwrap().to_string());
    }
    let mut jobs = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let base = if i % 2 == 0 { &one.base } else { &two.base };
        let r = read(
            client
                .post(format!("{base}/contacts/bulk-unsubscribe"))
                .bearer_auth(&key)
                .json(&json!({ "contactIds": [id] }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 202);
        jobs.push(r.body["jobId"].as_str().unwrap().to_string());
    }
    for job in &jobs {
        let done = wait_job_at(&client, &one.base, &key, "bulk", job).await;
        assert_eq!(done["state"], "completed");
        assert_eq!(done["attempts"], 1, "claimed by exactly one worker: {done}");
        assert_eq!(done["result"]["changed"], 1, "its effect applied once");
    }
    let r = read(
        client
            .get(format!(
                "{}/events?name=contact.unsubscribed&limit=100",
                two.base
            ))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.body["total"], 20, "one subscription event per job");
}

// ---------------------------------------------------------------------------------------------
// Retries, failures and scheduling, with handlers of the test's own

mod queue {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use herald::domain::ids::JobId;
    use herald::jobs::{JobContext, JobError, JobHandler, JobQueue, QueueConfig, Workers};
    use herald::store::Store;
    use serde_json::json;

    /// Fails `fail_first` times with a transient error, then completes; `forever` never does.
    struct Flaky {
        calls: AtomicUsize,
        fail_first: usize,
    }

    impl JobHandler for Flaky {
        fn kinds(&self) -> &'static [&'static str] {
            &["test.flaky", "test.broken", "test.later"]
        }

        fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
            Box::pin(async move {
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                match ctx.job.kind.as_str() {
                    "test.broken" => Err(JobError::Retry(
                        format!("upstream unavailable (call {n})").into(),
                    )),
                    "test.flaky" if ctx.job.attempts as usize <= self.fail_first => {
                        Err(JobError::Retry("transient".into()))
                    }
                    _ => {
                        ctx.store
                            .complete_job(&ctx.lease, &json!({ "attempt": ctx.job.attempts }))
                            .await?;
                        Ok(())
                    }
                }
            })
        }
    }

    /// Workers running [`Flaky`] over a queue of `store`, two at a time.
    struct Running {
        queue: JobQueue,
        stop: tokio::sync::watch::Sender<bool>,
        workers: tokio::task::JoinHandle<()>,
    }

    impl Running {
        fn start(store: &Store, max_attempts: i32, fail_first: usize) -> Running {
            let config = QueueConfig {
                concurrency: 2,
                poll_interval: Duration::from_millis(20),
                lease: Duration::from_secs(5),
                max_attempts,
            };
            let handler = Arc::new(Flaky {
                calls: AtomicUsize::new(0),
                fail_first,
            });
            let queue = JobQueue::new(store.clone(), config);
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let workers = tokio::spawn(Workers::new(queue.clone(), vec![handler]).run(stopped));
            Running {
                queue,
                stop,
                workers,
            }
        }

        async fn stop(self) {
            self.stop.send(true).unwrap();
            tokio::time::timeout(Duration::from_secs(10), self.workers)
                .await
                .expect("workers stop cleanly")
                .unwrap();
        }
    }

    async fn wait_state(store: &Store, id: &JobId, state: &str) -> herald::store::jobs::JobRecord {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let job = store.job_by_id(id).await.unwrap().unwrap();
            if job.state == state {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job stuck in {}: {:?}",
                job.state,
                job.last_error
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn failures_retry_with_backoff_then_fail_and_jobs_wait_for_their_time() {
        let dir = tempfile::tempdir().unwrap();
        let (store, project) = crate::support::harness::store_with_project(dir.path()).await;

        let running = Running::start(&store, 3, 2);
        let queue = &running.queue;

        let flaky = queue
            .enqueue("test.flaky", &project, json!({}), None)
            .await
            .unwrap();
        let broken = queue
            .enqueue("test.broken", &project, json!({}), None)
            .await
            .unwrap();
        let unknown = queue
            .enqueue("test.unknown", &project, json!({}), None)
            .await
            .unwrap();
        let later_at = chrono::Utc::now().timestamp_millis() + 1500;
        let later = queue
            .schedule("test.later", &project, json!({}), None, later_at)
            .await
            .unwrap();

        // Two transient failures (backoff 1 s, then 2 s, each less a jitter of up to a quarter),
        // then success on the third attempt.
        let started = std::time::Instant::now();
        let job = wait_state(&store, &flaky, "completed").await;
        assert_eq!(job.attempts, 3);
        assert_eq!(job.result.unwrap().0, json!({ "attempt": 3 }));
        assert!(
            started.elapsed() >= Duration::from_millis(2200),
            "retries wait out their backoff"
        );
        assert_eq!(
            job.last_error.as_deref(),
            Some("transient"),
            "the last error is kept"
        );

        // Always failing: failed after max_attempts, with its error kept.
        let job = wait_state(&store, &broken, "failed").await;
        assert_eq!(job.attempts, 3);
        assert!(job.last_error.unwrap().starts_with("upstream unavailable"));
        assert!(job.finished_at.is_some());

        // No handler: failed at once, saying why.
        let job = wait_state(&store, &unknown, "failed").await;
        assert_eq!(job.attempts, 1);
        assert!(job.last_error.unwrap().contains("no handler"));

        // The scheduled job ran, and not before its time.
        let job = wait_state(&store, &later, "completed").await;
        assert!(job.finished_at.unwrap() >= later_at);

        running.stop().await;
        store.db().close().await;
    }

    #[tokio::test]
    async fn finished_jobs_are_deleted_after_their_retention_and_waiting_ones_never() {
        let dir = tempfile::tempdir().unwrap();
        let (store, project) = crate::support::harness::store_with_project(dir.path()).await;
        let running = Running::start(&store, 1, 0);
        let queue = &running.queue;

        let done = queue
            .enqueue("test.later", &project, json!({}), None)
            .await
            .unwrap();
        let failed = queue
            .enqueue("test.unknown", &project, json!({}), None)
            .await
            .unwrap();
        let an_hour = 3_600_000;
        let waiting = queue
            .schedule(
                "test.later",
                &project,
                json!({}),
                None,
                chrono::Utc::now().timestamp_millis() + an_hour,
            )
            .await
            .unwrap();
        wait_state(&store, &done, "completed").await;
        wait_state(&store, &failed, "failed").await;

        // Finished within the retention: kept.
        let now = chrono::Utc::now().timestamp_millis();
        assert_eq!(
            store.prune_finished_jobs(now - an_hour, 100).await.unwrap(),
            0
        );
        assert!(store.job_by_id(&done).await.unwrap().is_some());

        // Past it: deleted, oldest first, at most `limit` a call.
        let later = chrono::Utc::now().timestamp_millis() + 1;
        assert_eq!(store.prune_finished_jobs(later, 1).await.unwrap(), 1);
        assert!(
            store.job_by_id(&done).await.unwrap().is_none(),
            "oldest first"
        );
        assert!(store.job_by_id(&failed).await.unwrap().is_some());
        assert_eq!(store.prune_finished_jobs(later, 100).await.unwrap(), 1);
        assert!(store.job_by_id(&failed).await.unwrap().is_none());
        assert_eq!(store.prune_finished_jobs(later, 100).await.unwrap(), 0);

        // A job still queued is never deleted, however old the cut-off.
        let far = later + 10 * an_hour;
        assert_eq!(store.prune_finished_jobs(far, 100).await.unwrap(), 0);
        assert_eq!(
            store.job_by_id(&waiting).await.unwrap().unwrap().state,
            "queued"
        );

        running.stop().await;
        store.db().close().await;
    }
}
