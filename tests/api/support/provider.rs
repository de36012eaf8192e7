//! What the loopback doubles of the provider APIs (`postmark.rs`, `resend.rs`) share: the calls
//! they saw, answers a test scripts ahead of the normal ones (a 500, a 429…), and a gate that
//! holds calls until the test opens it (so that a batch gathers behind a held call).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use poem::Response;
use poem::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

/// One call as the double received it.
#[derive(Clone, Debug)]
pub struct Call {
    /// Its path.
    pub path: String,
    /// When it arrived.
    pub at: Instant,
    /// Its JSON body.
    pub body: Value,
}

/// An answer scripted by the test.
#[derive(Clone, Debug)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// The calls a double saw, its scripted answers and its gate.
pub struct Recorder {
    calls: Mutex<Vec<Call>>,
    script: Mutex<VecDeque<Canned>>,
    open: watch::Sender<bool>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            calls: Mutex::new(Vec::new()),
            script: Mutex::new(VecDeque::new()),
            open: watch::Sender::new(true),
        }
    }
}

impl Recorder {
    /// Records a call that passed the double's checks.
    pub fn record(&self, path: &str, body: &Value) {
        self.calls.lock().unwrap().push(Call {
            path: path.to_string(),
            at: Instant::now(),
            body: body.clone(),
        });
    }

    /// The next scripted answer, if any.
    pub fn scripted(&self) -> Option<Canned> {
        self.script.lock().unwrap().pop_front()
    }

    /// Answers the next call with `status`, `headers` and `body` instead of the normal answer.
    pub fn script(&self, status: u16, headers: &[(&str, &str)], body: Value) {
        self.script.lock().unwrap().push_back(Canned {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body,
        });
    }

    /// Holds every call (once recorded) until [`Recorder::release`].
    pub fn hold(&self) {
        self.open.send_replace(false);
    }

    /// Lets held calls and later ones through.
    pub fn release(&self) {
        self.open.send_replace(true);
    }

    /// Waits while calls are held.
    pub async fn gate(&self) {
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    /// The calls to `path` so far.
    pub fn calls(&self, path: &str) -> Vec<Call> {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.path == path).cloned().collect()
    }

    /// Waits (up to 20 s) until `n` calls to `path` arrived, and answers them.
    pub async fn wait_calls(&self, path: &str, n: usize) -> Vec<Call> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let calls = self.calls(path);
            if calls.len() >= n {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "{n} calls to {path} expected, {} arrived",
                calls.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Asserts that the calls after the first, a failed one, carried its messages again, each the
/// same (an email retried on its own schedule may go in a call of its own).
pub fn assert_retried_alike(calls: &[Call]) {
    let sorted = |calls: &[Call]| {
        let mut all: Vec<String> = calls
            .iter()
            .flat_map(|c| c.body.as_array().cloned().unwrap_or_default())
            .map(|m| m.to_string())
            .collect();
        all.sort();
        all
    };
    assert!(calls.len() >= 2, "{calls:?}");
    assert_eq!(sorted(&calls[..1]), sorted(&calls[1..]), "{calls:?}");
}

/// A JSON answer.
pub fn json_response(status: u16, headers: &[(String, String)], body: &Value) -> Response {
    let mut r = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .content_type("application/json");
    for (name, value) in headers {
        r = r.header(name.as_str(), value.as_str());
    }
    r.body(body.to_string())
}

/// A scripted answer as a response.
pub fn canned(c: &Canned) -> Response {
    json_response(c.status, &c.headers, &c.body)
}

/// Whether the request's header `name` contains `value`.
pub fn header_has(req: &poem::Request, name: &str, value: &str) -> bool {
    req.header(name).is_some_and(|v| v.contains(value))
}

/// The test side of the provider transports: sending through Herald and posting the provider's
/// notifications.
pub mod herald_side {
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use herald::config::Settings;
    use serde_json::{Value, json};

    use super::Recorder;
    use crate::support::harness::{Reply, TestApp, TestProject, read};

    /// Starts Herald delivering through the transport plugin `plugin` with `settings` (the
    /// double's `api_base` among them), one delivery worker, unverified senders, then `adjust`;
    /// answers it with a project.
    pub async fn start(
        plugin: &str,
        settings: &[(&str, String)],
        adjust: impl FnOnce(&mut Settings),
    ) -> (TestApp, TestProject) {
        let app = TestApp::spawn_with(|s| {
            s.jobs_poll_interval_ms = 20;
            s.jobs_concurrency = 1;
            s.domains.allow_unverified = true;
            s.plugins.transport = plugin.into();
            s.plugins.transport_http_allow_private = true;
            s.plugins.settings.insert(
                plugin.into(),
                settings
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            );
            adjust(s);
        })
        .await;
        let p = app.project().await;
        (app, p)
    }

    /// Sends `body` (with `from: Acme <hello@acme.test>`, a subject and an HTML body unless
    /// given) to `to` through `/v1/send`, and answers the email id of each recipient by address.
    pub async fn send(
        app: &TestApp,
        p: &TestProject,
        to: &[&str],
        extra: Value,
    ) -> HashMap<String, String> {
        let mut body = json!({
            "to": to,
            "from": { "name": "Acme", "email": "hello@acme.test" },
            "subject": "Your receipt",
            "body": "<p>Thanks for your order.</p>",
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        let r = app.post("/v1/send", &p.secret_key, body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]["emails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["contact"]["email"].as_str().unwrap().to_string(),
                    e["email"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Posts a provider notification to `/webhooks/notify/<the transport>` (`query` is the URL's
    /// query string, `""` for none); no `plugins.notify_secret` is set, since the provider
    /// plugins authenticate their notifications themselves.
    pub async fn notify(
        app: &TestApp,
        query: &str,
        headers: &[(&str, String)],
        body: &str,
    ) -> Reply {
        let mut req = app
            .client
            .post(app.url(&format!(
                "/webhooks/notify/{}{query}",
                app.state().settings().plugins.transport
            )))
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        read(req.send().await.unwrap()).await
    }

    /// Waits (up to 60 s) until `n` emails of `p` have `status`.
    pub async fn wait_count(app: &TestApp, p: &TestProject, status: &str, n: i64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let sql = format!(
            "SELECT COUNT(*) FROM emails WHERE project_id = '{}' AND status = '{status}'",
            p.id
        );
        loop {
            let c = crate::http::send::count(app, &sql).await;
            if c >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{c} of {n} emails {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The project's suppression list: (address, reason).
    pub async fn suppressed(app: &TestApp, p: &TestProject) -> Vec<(String, String)> {
        let r = app.get("/suppressions?limit=100", &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["email"].as_str().unwrap().to_string(),
                    e["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The email `id` as `GET /emails/:id` answers it.
    pub async fn email(app: &TestApp, p: &TestProject, id: &str) -> Value {
        let r = app.get(&format!("/emails/{id}"), &p.secret_key).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// Holds the double's calls while one email's call arrives and `sends` sends of 50 more
    /// are queued behind it, then lets them through; answers the size of each call to `path`
    /// once all are sent (the delivery batch must take them all: `sending.batch_size`).
    pub async fn queued_behind_a_held_call(
        app: &TestApp,
        p: &TestProject,
        calls: &Recorder,
        path: &str,
        sends: usize,
    ) -> Vec<usize> {
        calls.hold();
        send(app, p, &["first@example.com"], json!({})).await;
        calls.wait_calls(path, 1).await;
        for batch in 0..sends {
            let to: Vec<String> = (0..50)
                .map(|i| format!("r{batch}-{i}@example.com"))
                .collect();
            let to: Vec<&str> = to.iter().map(String::as_str).collect();
            send(app, p, &to, json!({})).await;
        }
        calls.release();
        wait_count(app, p, "sent", 1 + 50 * sends as i64).await;
        calls
            .calls(path)
            .iter()
            .map(|c| c.body.as_array().map_or(1, Vec::len))
            .collect()
    }

    /// Sends one email whose first call the double answers as scripted (a `429`), and answers
    /// how long after it the retry came.
    pub async fn retried_after(
        app: &TestApp,
        p: &TestProject,
        calls: &Recorder,
        path: &str,
    ) -> Duration {
        let ids = send(app, p, &["ann@example.com"], json!({})).await;
        let e = crate::http::send::email_with_status(app, p, &ids["ann@example.com"], "sent").await;
        assert_eq!(e["attempts"], 2, "{e}");
        let seen = calls.calls(path);
        seen[1].at - seen[0].at
    }
}
