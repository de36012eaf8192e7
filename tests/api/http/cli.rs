//! The `herald` binary: `init`, `openapi`, `migrate` and `serve` with a clean shutdown.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::harness::fresh_database_url;

const BIN: &str = env!("CARGO_BIN_EXE_herald");

fn herald(args: &[&str], dir: &std::path::Path, url: &str) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .arg("--database-url")
        .arg(url)
        .env_remove("HERALD_DATABASE_URL")
        .output()
        .expect("herald runs")
}

#[tokio::test]
async fn init_prints_credentials_once_and_they_work() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let out = herald(
        &["init", "--json", "--email", "boss@example.com"],
        dir.path(),
        &url,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in ["email", "password", "projectId", "publicKey", "secretKey"] {
        assert!(
            json[key].as_str().is_some_and(|v| !v.is_empty()),
            "{key} in {json}"
        );
    }
    assert_eq!(json["email"], "boss@example.com");

    // A second init refuses: the database is not empty.
    let again = herald(&["init"], dir.path(), &url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already initialised"));

    // Migrate is idempotent.
    assert!(herald(&["migrate"], dir.path(), &url).status.success());

    // The printed credentials work against a server on the same database.
    let mut settings = herald::config::Settings {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_path_buf(),
        database_url: Some(url.clone()),
        ..Default::default()
    };
    settings.database_max_connections = 2;
    let server = herald::app::spawn(settings).await.unwrap();
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/contacts", server.url()))
        .bearer_auth(json["secretKey"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .post(format!("{}/auth/login", server.url()))
        .json(&serde_json::json!({ "email": json["email"], "password": json["password"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let projects: Value = client
        .get(format!("{}/users/@me/projects", server.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(projects[0]["id"], json["projectId"]);
    server.stop().await.unwrap();
}

#[test]
fn openapi_command_prints_the_committed_spec() {
    let out = Command::new(BIN).arg("openapi").output().unwrap();
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../openapi/openapi.json"
    ))
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        committed.trim_end()
    );
}

#[tokio::test]
async fn serve_logs_answers_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    // Find a free port, then hand it to the process.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &listen,
            "--database-url",
            &url,
            "--data-dir",
        ])
        .arg(dir.path())
        .env("HERALD_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..100 {
        if let Ok(r) = client.get(format!("http://{listen}/ready")).send().await
            && r.status() == 200
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "herald serve did not become ready");
    // The built-in plugins were compiled ahead of time: a first start compiles nothing, so it
    // leaves no compiled component in the cache.
    assert!(
        !dir.path().join("plugin-cache").exists(),
        "a first start compiled plugins instead of using the embedded artifacts"
    );
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut exited = None;
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = exited.expect("herald serve stops on SIGTERM");
    assert!(status.success(), "clean exit, got {status}");
    let mut logs = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut logs).unwrap();
    assert!(logs.contains("herald listening"), "{logs}");
    assert!(logs.contains(&listen), "{logs}");
    let backend = if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    assert!(logs.contains(backend), "{logs}");
    assert!(logs.contains("stopped"), "{logs}");
}
