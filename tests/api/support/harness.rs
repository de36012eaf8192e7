//! Starts the real server on a random port, per test, on a fresh SQLite file, or on a fresh
//! PostgreSQL schema when `HERALD_TEST_POSTGRES_URL` is set, and talks HTTP to it.

use herald::app::{App, RunningServer};
use herald::config::Settings;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// With `TEST_LOG` set (`1`, or a filter such as `herald=debug`), the servers' logs are
/// written through the test harness (shown for failing tests, or all with `--nocapture`);
/// without it, tests log nothing.
fn init_test_log() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let filter = if filter.is_empty() || filter == "1" {
            "info".to_string()
        } else {
            filter
        };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// The settings every test server starts from: a random port, `dir` as the data directory, the
/// given database, a compile cache shared by all tests and a small plugin pool.
pub fn test_settings(dir: &std::path::Path, url: &str) -> Settings {
    init_test_log();
    Settings {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.to_path_buf(),
        database_url: Some(url.to_string()),
        database_max_connections: 4,
        // Every test client is 127.0.0.1, and some tests sign many users up; the limit itself
        // is tested with its default in `hostile.rs`.
        auth_attempts_per_ip_per_minute: 100_000,
        plugins: herald::plugins::PluginSettings {
            // Compiled components are cached by content hash: one cache for every test.
            cache_dir: Some(
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"),
            ),
            pool_instances: 16,
            ..Default::default()
        },
        // Tests read exact member counts right after their writes; the count's cache is
        // tested with it on in `segments.rs`.
        segments: herald::config::SegmentSettings {
            members_count_cache_seconds: 0,
            ..Default::default()
        },
        ..Settings::default()
    }
}

/// Turns Herald's SMTP listeners on, each at a random port on loopback: the MX listener, and
/// the submission listener (`STARTTLS`, plain `AUTH` allowed on loopback).
pub fn smtp_listeners(s: &mut Settings) {
    s.inbound.listen = Some("127.0.0.1:0".into());
    s.submission.listen = Some("127.0.0.1:0".into());
}

/// A running server with its own fresh database.
pub struct TestApp {
    /// The server, when this test started it (not for [`TestApp::attach`]).
    server: Option<RunningServer>,
    base_url: String,
    pub client: reqwest::Client,
    pub database_url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The answer to one request.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// The error code of a standard error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error body: {}", self.body))
    }

    /// A header as a string.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a standard error body with this status and code, its request id matching the
    /// `X-Request-Id` header.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> &Reply {
        assert_eq!(self.status.as_u16(), status, "status of {}", self.body);
        assert_eq!(self.body["success"], json!(false), "{}", self.body);
        assert_eq!(self.code(), code, "{}", self.body);
        assert_eq!(self.body["error"]["statusCode"], json!(status));
        let id = self.body["error"]["requestId"].as_str().expect("requestId");
        assert!(id.starts_with("req_"));
        assert_eq!(self.header("x-request-id"), Some(id));
        assert!(
            self.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(self.body["timestamp"].as_str().is_some());
        self
    }

    /// The `errors[].field` values.
    pub fn error_fields(&self) -> Vec<String> {
        self.body["error"]["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["field"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Waits, when less than `needed` is left of this minute, until the next one begins, so that a
/// test's requests fall in one of the rate limiter's fixed one-minute windows.
pub async fn fresh_minute(needed: std::time::Duration) {
    let ms = chrono::Utc::now().timestamp_millis().rem_euclid(60_000) as u64;
    let needed = (needed.as_millis() as u64).min(55_000);
    if ms + needed > 60_000 {
        tokio::time::sleep(std::time::Duration::from_millis(60_000 - ms + 200)).await;
    }
}

/// The PostgreSQL URL tests run against, if any.
pub fn postgres_url() -> Option<String> {
    std::env::var("HERALD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A database URL for a fresh, empty database.
pub async fn fresh_database_url(dir: &std::path::Path) -> String {
    match postgres_url() {
        None => format!("sqlite://{}", dir.join("herald.db").display()),
        Some(url) => {
            let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
            let mut conn: sqlx::PgConnection =
                sqlx::Connection::connect(&url).await.unwrap_or_else(|e| {
                    panic!("HERALD_TEST_POSTGRES_URL is set but PostgreSQL is unreachable: {e}")
                });
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&mut conn)
                .await
                .expect("create schema");
            let sep = if url.contains('?') { '&' } else { '?' };
            format!("{url}{sep}options=-c%20search_path%3D{schema}")
        }
    }
}

/// Runs `sql` (one statement or several) on the database at `url`, on a connection of its own.
pub async fn execute_sql(url: &str, sql: &str) {
    use sqlx::Connection;
    let done = if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.map(|_| ())
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.map(|_| ())
    };
    done.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

impl TestApp {
    /// A server with default settings.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    /// A server with adjusted settings.
    pub async fn spawn_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = fresh_database_url(dir.path()).await;
        TestApp::start(dir, url, adjust).await
    }

    /// A client of a server started elsewhere (e.g. on a runtime a test kills).
    pub fn attach(addr: std::net::SocketAddr, database_url: String) -> TestApp {
        TestApp {
            server: None,
            base_url: format!("http://{addr}"),
            client: reqwest::Client::builder().build().unwrap(),
            database_url,
            _dir: None,
        }
    }

    /// A server on an existing database, with its own data directory.
    pub async fn spawn_on(url: &str, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        TestApp::start(dir, url.to_string(), adjust).await
    }

    /// The state of the server this test started.
    pub fn state(&self) -> &herald::app::AppState {
        &self
            .server
            .as_ref()
            .expect("a server this test started")
            .state
    }

    /// Where the server's SMTP listeners are bound (those its settings turned on, e.g. with
    /// [`smtp_listeners`]).
    pub fn smtp(&self) -> herald::smtp::SmtpAddrs {
        self.server
            .as_ref()
            .expect("a server this test started")
            .smtp
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// A second server on the same database (another "instance").
    pub async fn spawn_sharing(&self, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        TestApp::start(dir, self.database_url.clone(), adjust).await
    }

    async fn start(
        dir: tempfile::TempDir,
        url: String,
        adjust: impl FnOnce(&mut Settings),
    ) -> TestApp {
        let mut settings = test_settings(dir.path(), &url);
        adjust(&mut settings);
        let server = App::build(settings).await.expect("server starts").spawn();
        let client = reqwest::Client::builder().build().unwrap();
        TestApp {
            base_url: server.url(),
            server: Some(server),
            client,
            database_url: url,
            _dir: Some(dir),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// Sends a request with an optional bearer key and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        self.call_with(&self.client, method, path, key, body, &[])
            .await
    }

    /// Sends a request through `client` (for cookies) with extra headers.
    pub async fn call_with(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = client.request(method, self.url(path));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request sent");
        read(resp).await
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.call(Method::GET, path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(key), Some(body)).await
    }

    pub async fn patch(&self, path: &str, key: &str, body: Value) -> Reply {
        self.call(Method::PATCH, path, Some(key), Some(body)).await
    }

    pub async fn delete(&self, path: &str, key: &str) -> Reply {
        self.call(Method::DELETE, path, Some(key), None).await
    }

    /// Starts a `POST` of `body` to `path` with `key` (and an `Idempotency-Key`) on a task of its
    /// own, so that many run at once; its reply comes with the task.
    pub fn spawn_post(
        &self,
        path: &str,
        key: &str,
        body: Value,
        idempotency_key: Option<&'static str>,
    ) -> tokio::task::JoinHandle<Reply> {
        let mut req = self
            .client
            .post(self.url(path))
            .bearer_auth(key)
            .json(&body);
        if let Some(idem) = idempotency_key {
            req = req.header("Idempotency-Key", idem);
        }
        tokio::spawn(async move { read(req.send().await.unwrap()).await })
    }

    /// Signs a new user up and returns a cookie-carrying client.
    pub async fn user(&self, email: &str) -> reqwest::Client {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .unwrap();
        let r = self
            .call_with(
                &client,
                Method::POST,
                "/auth/signup",
                None,
                Some(json!({ "email": email, "password": "correct horse battery" })),
                &[],
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        client
    }

    /// A new user (signed up as [`TestApp::user`]) whose address is verified, as if they had
    /// opened the mailed verification link.
    pub async fn verified_user(&self, email: &str) -> reqwest::Client {
        use herald::domain::email::EmailAddress;
        use herald::store::accounts::TokenPurpose;
        let client = self.user(email).await;
        let store = self.state().store();
        let address = EmailAddress::parse(email).unwrap();
        let user = store.user_by_email(&address).await.unwrap().unwrap();
        let hash = format!("verified-{}", uuid::Uuid::new_v4().simple());
        store
            .create_account_token(&user.id, TokenPurpose::VerifyEmail, &hash, &address, 60_000)
            .await
            .unwrap();
        let verified = store.verify_email_with_token(&hash).await.unwrap();
        assert!(verified.is_some_and(|u| u.email_verified));
        client
    }

    /// A new user with a new project.
    pub async fn project(&self) -> TestProject {
        let email = format!("owner-{}@example.com", uuid::Uuid::new_v4().simple());
        let client = self.user(&email).await;
        let r = self
            .call_with(
                &client,
                Method::POST,
                "/users/@me/projects",
                None,
                Some(json!({ "name": "Test project" })),
                &[],
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        TestProject {
            id: r.body["id"].as_str().unwrap().to_string(),
            public_key: r.body["publicKey"].as_str().unwrap().to_string(),
            secret_key: r.body["secretKey"].as_str().unwrap().to_string(),
            owner: client,
        }
    }

    /// The `.eml` files the `outbox` transport wrote in this server's data directory, as text,
    /// in file name order.
    pub fn outbox_messages(&self) -> Vec<String> {
        let dir = self.state().settings().data_dir.join("outbox");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "eml"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    pub async fn stop(self) {
        if let Some(server) = self.server {
            server.stop().await.expect("clean stop");
        }
    }
}

/// The `Message-ID` of a raw message (as the transport's notifications name it).
pub fn message_id_of(raw: &str) -> String {
    mail_parser::MessageParser::default()
        .parse(raw.as_bytes())
        .expect("a parsable message")
        .message_id()
        .expect("a Message-ID")
        .to_string()
}

/// A server on its own runtime and thread, so that a test can kill it outright: its tasks stop
/// wherever they are (mid job, mid hand-off, mid commit) and nothing shuts down cleanly.
pub struct DoomedServer {
    /// A client of it.
    pub app: TestApp,
    /// Where its SMTP listeners are bound (those its settings turned on).
    pub smtp: herald::smtp::SmtpAddrs,
    kill: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl DoomedServer {
    /// Starts a server with `settings` on a runtime of its own.
    pub fn start(settings: Settings, database_url: &str) -> DoomedServer {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (kill, kill_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let server = rt.block_on(herald::app::spawn(settings)).expect("starts");
            addr_tx.send((server.addr, server.smtp)).unwrap();
            let _ = kill_rx.recv();
            std::mem::forget(server);
            rt.shutdown_background();
        });
        let (addr, smtp) = addr_rx.recv().unwrap();
        let app = TestApp::attach(addr, database_url.to_string());
        DoomedServer {
            app,
            smtp,
            kill,
            thread,
        }
    }

    /// Kills it: the runtime is dropped with every task where it stands.
    pub fn kill(self) {
        self.kill.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// Reads a response into a [`Reply`].
pub async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// A project created through the API, with its keys and its owner's session.
pub struct TestProject {
    pub id: String,
    pub public_key: String,
    pub secret_key: String,
    pub owner: reqwest::Client,
}

impl TestProject {
    /// Creates a contact and returns its id.
    pub async fn contact(&self, app: &TestApp, email: &str, data: Value) -> String {
        let r = app
            .post(
                "/contacts",
                &self.secret_key,
                json!({ "email": email, "data": data }),
            )
            .await;
        assert!(r.status.is_success(), "{}", r.body);
        r.body["id"].as_str().unwrap().to_string()
    }

    /// Sets the project's billing caps (`{"emails": 5}`, …) as its owner.
    pub async fn cap(&self, app: &TestApp, limits: Value) {
        let path = format!("/users/@me/projects/{}/billing-limits", self.id);
        let r = app
            .call_with(&self.owner, Method::PUT, &path, None, Some(limits), &[])
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

/// A migrated store on a fresh database (SQLite in `dir`, or a fresh PostgreSQL schema when
/// `HERALD_TEST_POSTGRES_URL` is set) with one user and one project, for library-level tests.
pub async fn store_with_project(
    dir: &std::path::Path,
) -> (herald::store::Store, herald::domain::ids::ProjectId) {
    use herald::store::{Db, Store};
    let url = fresh_database_url(dir).await;
    let db = Db::connect(&url, 4).await.expect("database");
    db.migrate().await.expect("migrations");
    let store = Store::new(db);
    let email = herald::domain::email::EmailAddress::parse("owner@example.com").unwrap();
    let user = store.create_user(&email, "x").await.unwrap();
    let name = herald::domain::project::ProjectName::parse("p").unwrap();
    let project = store
        .create_project(&name, &user.id, &herald::domain::keys::KeyPair::generate())
        .await
        .unwrap()
        .id;
    (store, project)
}

/// Awaits requests of a project with a cap: answers how many were taken (200) and refused (429,
/// each checked by `refusal`, since endpoints differ in their error body); any other answer fails
/// the test.
pub async fn taken_and_refused(
    tasks: Vec<tokio::task::JoinHandle<Reply>>,
    refusal: impl Fn(&Reply),
) -> (usize, usize) {
    let (mut taken, mut refused) = (0, 0);
    for t in tasks {
        let r = t.await.unwrap();
        match r.status.as_u16() {
            200 => taken += 1,
            429 => {
                refusal(&r);
                refused += 1;
            }
            other => panic!("{other}: {}", r.body),
        }
    }
    (taken, refused)
}

/// Awaits racing requests under one `Idempotency-Key`: each is 200 or 409, and every 200
/// carries the same `data`, which is answered (`None` when none went through).
pub async fn one_keyed_response(tasks: Vec<tokio::task::JoinHandle<Reply>>) -> Option<Value> {
    let mut first = None;
    for t in tasks {
        let r = t.await.unwrap();
        assert!(
            r.status == 200 || r.status == 409,
            "{}: {}",
            r.status,
            r.body
        );
        if r.status == 200 {
            let data = r.body["data"].clone();
            assert_eq!(
                *first.get_or_insert(data.clone()),
                data,
                "one response, replayed"
            );
        }
    }
    first
}
