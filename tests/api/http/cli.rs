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
    let (mut child, base) = serve(dir.path(), &url, &[("HERALD_LOG_FORMAT", "json")], true).await;
    let listen = base.trim_start_matches("http://").to_string();
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

/// Starts `herald serve` on `url` in `dir` on a free port, with `env` (and its log on a pipe
/// when `logs`); answers the child and its base URL once it is ready.
async fn serve(
    dir: &std::path::Path,
    url: &str,
    env: &[(&str, &str)],
    logs: bool,
) -> (std::process::Child, String) {
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
            url,
            "--data-dir",
        ])
        .arg(dir)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(if logs { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    for _ in 0..200 {
        if let Ok(r) = client.get(format!("http://{listen}/ready")).send().await
            && r.status() == 200
        {
            return (child, format!("http://{listen}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("herald serve did not become ready");
}

#[tokio::test]
async fn a_backup_taken_under_write_load_restores_every_committed_row() {
    use std::sync::{Arc, Mutex};
    let live = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", live.path().join("herald.db").display());
    let out = herald(&["init", "--json"], live.path(), &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let init: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = init["secretKey"].as_str().unwrap().to_string();
    let quiet = [
        ("HERALD_LOG", "warn"),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "1000000"),
    ];
    let (mut server, base) = serve(live.path(), &url, &quiet, false).await;

    // Writers create contacts without pause; each one acknowledged (201) is committed.
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (acked, stop, base, key) = (acked.clone(), stop.clone(), base.clone(), key.clone());
        writers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let email = format!("w{w}-{i}@example.com");
                let r = client
                    .post(format!("{base}/contacts"))
                    .bearer_auth(&key)
                    .json(&serde_json::json!({ "email": email }))
                    .send()
                    .await
                    .unwrap();
                if r.status() == 201 {
                    acked.lock().unwrap().push(email);
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let committed_before: Vec<String> = acked.lock().unwrap().clone();
    assert!(
        committed_before.len() > 20,
        "the load runs: {}",
        committed_before.len()
    );
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("herald-backup.db");
    let out = herald(
        &["backup", "--to", copy.to_str().unwrap()],
        live.path(),
        &url,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("backed up"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    // A backup never overwrites a file.
    let again = herald(
        &["backup", "--to", copy.to_str().unwrap()],
        live.path(),
        &url,
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    // The running deployment's database is not replaced.
    let refused = herald(
        &["restore", "--from", copy.to_str().unwrap()],
        live.path(),
        &url,
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("running"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Restored into a new directory, it serves every contact committed before the backup.
    let restored = tempfile::tempdir().unwrap();
    let restored_url = format!("sqlite://{}", restored.path().join("herald.db").display());
    let out = herald(
        &["restore", "--from", copy.to_str().unwrap()],
        restored.path(),
        &restored_url,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut second, second_base) = serve(restored.path(), &restored_url, &quiet, false).await;
    let client = reqwest::Client::new();
    let mut found = std::collections::BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{second_base}/contacts?limit=100");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = client
            .get(&url)
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for c in page["data"].as_array().unwrap() {
            found.insert(c["email"].as_str().unwrap().to_string());
        }
        match page["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let missing: Vec<_> = committed_before
        .iter()
        .filter(|e| !found.contains(*e))
        .collect();
    assert!(
        missing.is_empty(),
        "{} committed rows missing: {missing:?}",
        missing.len()
    );
    for child in [&mut server, &mut second] {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Not a backup at all.
    let junk = copy_dir.path().join("junk.db");
    std::fs::write(&junk, b"not a database").unwrap();
    let out = herald(
        &["restore", "--from", junk.to_str().unwrap()],
        restored.path(),
        &restored_url,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Herald backup"));
}
