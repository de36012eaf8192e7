//! The `herald` binary: `init`, `openapi`, `config --markdown`, `migrate` and `serve` with a
//! clean shutdown.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::harness::fresh_database_url;
use crate::support::serve::Served;

const BIN: &str = env!("CARGO_BIN_EXE_herald");

/// `herald <args> --data-dir <dir> --database-url <url>`, run to its end.
pub(super) fn herald(args: &[&str], dir: &std::path::Path, url: &str) -> std::process::Output {
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

#[test]
fn config_markdown_prints_the_committed_settings_page() {
    let out = Command::new(BIN)
        .args(["config", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/settings.md"))
            .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout) == committed,
        "docs/settings.md is not the output of `herald config --markdown`; regenerate it with \
         `target/debug/herald config --markdown > docs/settings.md`"
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
    let status = stop(&mut child.child).await;
    assert!(status.success(), "clean exit, got {status}");
    let logs = child.wait_log();
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

/// Sends SIGTERM to a `herald serve` and answers its exit status (within 10 seconds).
async fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Up to 30 s: a loaded machine slows the stop's last writes and the trace flush.
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("herald serve did not stop on SIGTERM");
}

/// Starts `herald serve` on `url` in `dir` on a port of its own, with `env` (its log kept
/// when `logs`; `HERALD_LOG` in `env` sets the level, `info` when absent).
async fn serve(
    dir: &std::path::Path,
    url: &str,
    env: &[(&str, &str)],
    logs: bool,
) -> (Served, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--database-url", url, "--data-dir"])
        .arg(dir)
        .envs(env.iter().copied());
    let level = env
        .iter()
        .find(|(k, _)| *k == "HERALD_LOG")
        .map_or("info", |(_, v)| *v);
    let served = Served::start(cmd, level, logs).await;
    let base = served.base.clone();
    (served, base)
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
    let (server, base) = serve(live.path(), &url, &quiet, false).await;

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
    let (second, second_base) = serve(restored.path(), &restored_url, &quiet, false).await;
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
    drop((server, second));
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

/// `herald <args>` in `dir` with `env`, with no `HERALD_*` of the test's own environment.
pub(super) fn herald_env(
    args: &[&str],
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut command = Command::new(BIN);
    command.args(args).current_dir(dir);
    for (key, _) in std::env::vars() {
        if key.starts_with("HERALD_") {
            command.env_remove(key);
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("herald runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_shows_each_setting_with_its_source_and_masks_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("herald.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:9999\"\n[plugins]\nsmtp_password = \"hunter2\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let env = [
        ("HERALD_SENDING__BATCH_SIZE", "7"),
        (
            "HERALD_DATABASE_URL",
            "postgres://herald:s3cret@db.internal/herald",
        ),
        ("HERALD_SENDING__BATCHSIZE", "3"),
    ];
    let (code, out, err) = herald_env(&["config", "--config", file], dir.path(), &env);
    assert_eq!(code, 0, "{err}");
    let line = |key: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("{key} in {out}"))
            .to_string()
    };
    assert!(line("sending.batch_size").contains("# env HERALD_SENDING__BATCH_SIZE"));
    assert!(line("sending.batch_size").contains("= 7"));
    assert!(
        line("listen").contains("# file ") && line("listen").ends_with("herald.toml"),
        "{out}"
    );
    assert!(line("jobs_concurrency").ends_with("# default"), "{out}");
    assert!(line("plugins.smtp_password").contains("\"***\""), "{out}");
    assert!(
        line("database_url").contains("postgres://herald:***@db.internal/herald"),
        "{out}"
    );
    assert!(!out.contains("hunter2") && !out.contains("s3cret"), "{out}");
    assert!(
        out.contains("HERALD_SENDING__BATCHSIZE is not a setting"),
        "{out}"
    );

    let (code, out, err) = herald_env(&["config", "--json", "--config", file], dir.path(), &env);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = serde_json::from_str(&out).unwrap();
    let batch = lines
        .iter()
        .find(|l| l["setting"] == "sending.batch_size")
        .unwrap();
    assert_eq!(batch["value"], 7);
    assert_eq!(batch["source"], "env HERALD_SENDING__BATCH_SIZE");
}

#[test]
fn unusable_settings_exit_2_naming_the_setting_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("herald.toml");
    std::fs::write(&file, "[sending]\nbatchsize = 10\n").unwrap();
    let file = file.to_str().unwrap();
    // A misspelt key in the file.
    let (code, _, err) = herald_env(&["config", "--config", file], dir.path(), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`sending.batchsize`"), "{err}");
    assert!(err.contains("did you mean `sending.batch_size`?"), "{err}");

    // A value out of range, from the environment; `serve` refuses it before it starts.
    let (code, _, err) = herald_env(
        &["serve", "--data-dir", "."],
        dir.path(),
        &[("HERALD_SENDING__BATCH_SIZE", "0")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `sending.batch_size` (from env HERALD_SENDING__BATCH_SIZE)"),
        "{err}"
    );
    assert!(err.contains("between 1 and 1000"), "{err}");
    let (code, _, err) = herald_env(
        &["config"],
        dir.path(),
        &[("HERALD_ACCOUNTS__INVITATIONS_PER_PROJECT_PER_DAY", "0")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `accounts.invitations_per_project_per_day`")
            && err.contains("at least 1"),
        "{err}"
    );
    // An SMTP memory budget that cannot hold one message of the size limit.
    let (code, _, err) = herald_env(
        &["config"],
        dir.path(),
        &[("HERALD_INBOUND__MEMORY_MB", "1")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `inbound.memory_mb`")
            && err.contains("inbound.max_message_bytes")
            && err.contains("at least 26"),
        "{err}"
    );

    // A value of the wrong type.
    let (code, _, err) = herald_env(
        &["migrate"],
        dir.path(),
        &[("HERALD_JOBS_CONCURRENCY", "many")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.to_ascii_lowercase().contains("jobs_concurrency"),
        "{err}"
    );

    // An unusable address and URL.
    let (code, _, err) = herald_env(&["config"], dir.path(), &[("HERALD_LISTEN", "localhost")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `listen`") && err.contains("HOST:PORT"),
        "{err}"
    );
    let (code, _, err) = herald_env(
        &["config"],
        dir.path(),
        &[("HERALD_DATABASE_URL", "mysql://db/herald")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("setting `database_url`"), "{err}");

    // An unreadable CA file, and an address another process holds: `serve` stops at start.
    let (code, _, err) = herald_env(
        &["serve", "--data-dir", "."],
        dir.path(),
        &[("HERALD_PLUGINS__SMTP_CA_FILE", "/nowhere/ca.pem")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `plugins.smtp_ca_file` (from env HERALD_PLUGINS__SMTP_CA_FILE)")
            && err.contains("/nowhere/ca.pem"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (code, _, err) = herald_env(
        &["serve", "--data-dir", ".", "--listen", &address],
        dir.path(),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("setting `listen`") && err.contains(&address),
        "{err}"
    );
}

#[tokio::test]
async fn with_an_otlp_endpoint_spans_of_requests_and_store_calls_are_exported() {
    // A loopback OTLP/HTTP receiver (the collector's answer to an accepted export is `{}`).
    let (collector, exports) = crate::support::httpd::http_server(
        "200 OK",
        "content-type: application/json\r\n".into(),
        "{}",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let endpoint = format!("http://{collector}");
    let env = [
        ("HERALD_TRACES__OTLP_ENDPOINT", endpoint.as_str()),
        ("HERALD_TRACES__PROTOCOL", "json"),
        ("HERALD_TRACES__SERVICE_NAME", "herald-under-test"),
        // Warnings only in the kept log (the exporter's own complaints among them).
        ("HERALD_LOG", "warn"),
    ];
    let (mut child, base) = serve(dir.path(), &url, &env, true).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/auth/signup"))
        .json(&serde_json::json!({ "email": "traced@example.com", "password": "a long enough password" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // SIGTERM: the server stops and flushes the spans still buffered.
    stop(&mut child.child).await;
    let log = child.wait_log();
    let exports = exports.lock().unwrap().clone();
    assert!(!exports.is_empty(), "nothing was exported");
    let mut names = Vec::new();
    for export in &exports {
        assert!(
            export.head.starts_with("POST /v1/traces "),
            "{}",
            export.head
        );
        assert!(
            export
                .head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{}",
            export.head
        );
        let body: Value = serde_json::from_str(&export.body).expect("OTLP/JSON");
        for resource in body["resourceSpans"].as_array().unwrap() {
            let service = resource["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["key"] == "service.name")
                .unwrap();
            assert_eq!(service["value"]["stringValue"], "herald-under-test");
            for scope in resource["scopeSpans"].as_array().unwrap() {
                for span in scope["spans"].as_array().unwrap() {
                    names.push(span["name"].as_str().unwrap().to_string());
                }
            }
        }
    }
    // The request's span, and the store calls made inside it (exported at debug level).
    assert!(
        names.iter().any(|n| n == "request"),
        "{names:?}\nexports: {}\nserver log:\n{log}",
        exports.len()
    );
    assert!(
        names.iter().any(|n| n == "create_user"),
        "{names:?}\nserver log:\n{log}"
    );
}

#[test]
fn plugin_settings_that_name_no_usable_plugin_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |env: &[(&str, &str)], setting: &str, words: &[&str]| {
        let (code, _, err) = herald_env(&["serve", "--data-dir", "."], dir.path(), env);
        assert_eq!(code, 2, "{env:?}: {err}");
        // A prefix of the setting's name (the cycle is reported at either of its transports).
        assert!(
            err.contains(&format!("setting `{setting}")),
            "{env:?}: {err}"
        );
        for word in words {
            assert!(err.contains(word), "{env:?}: `{word}` in {err}");
        }
    };
    // Before, this started, answered /health and left every email queued.
    refused(
        &[("HERALD_PLUGINS__TRANSPORT", "nonexistent")],
        "plugins.transport",
        &["nonexistent", "outbox", "smtp"],
    );
    refused(
        &[("HERALD_PLUGINS__DNS_VERIFIER", "nonexistent")],
        "plugins.dns_verifier",
        &["nonexistent", "default"],
    );
    refused(
        &[("HERALD_PLUGINS__BILLING", "outbox")],
        "plugins.billing",
        &["not a billing plugin", "stripe"],
    );
    // A provider whose required setting is not set.
    refused(
        &[("HERALD_PLUGINS__TRANSPORT", "postmark")],
        "plugins.settings.postmark.server_token",
        &["postmark"],
    );
    refused(
        &[
            ("HERALD_TRANSPORTS__MAIL__PLUGIN", "resend"),
            ("HERALD_PLUGINS__TRANSPORT", "mail"),
        ],
        "transports.mail.api_key",
        &["resend"],
    );
    refused(
        &[("HERALD_PLUGINS__TRANSPORT", "delay")],
        "plugins.transport",
        &["step"],
    );
    // Named transports: a plugin that is not there, a fallback that names nothing, a cycle.
    refused(
        &[("HERALD_TRANSPORTS__PRIMARY__PLUGIN", "carrier-pigeon")],
        "transports.primary.plugin",
        &["carrier-pigeon"],
    );
    refused(
        &[("HERALD_TRANSPORTS__PRIMARY__FALLBACK", "spare")],
        "transports.primary.plugin",
        &["names no plugin"],
    );
    refused(
        &[
            ("HERALD_TRANSPORTS__PRIMARY__PLUGIN", "smtp"),
            ("HERALD_TRANSPORTS__PRIMARY__FALLBACK", "spare"),
        ],
        "transports.primary.fallback",
        &["spare"],
    );
    refused(
        &[
            ("HERALD_TRANSPORTS__PRIMARY__PLUGIN", "smtp"),
            ("HERALD_TRANSPORTS__PRIMARY__FALLBACK", "spare"),
            ("HERALD_TRANSPORTS__SPARE__PLUGIN", "outbox"),
            ("HERALD_TRANSPORTS__SPARE__FALLBACK", "primary"),
        ],
        "transports.",
        &["cycle", "primary", "spare"],
    );
    // A named transport is a valid default.
    let (code, out, err) = herald_env(
        &["config"],
        dir.path(),
        &[
            ("HERALD_TRANSPORTS__PRIMARY__PLUGIN", "smtp"),
            ("HERALD_TRANSPORTS__PRIMARY__API_KEY", "secret-value"),
            ("HERALD_PLUGINS__TRANSPORT", "primary"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("transports.primary.plugin"), "{out}");
    assert!(!out.contains("secret-value"), "{out}");
}

#[test]
fn plugins_list_shows_the_configured_transports_too() {
    let dir = tempfile::tempdir().unwrap();
    let chain = [
        ("HERALD_TRANSPORTS__PRIMARY__PLUGIN", "smtp"),
        ("HERALD_TRANSPORTS__PRIMARY__FALLBACK", "spare"),
        ("HERALD_TRANSPORTS__SPARE__PLUGIN", "outbox"),
        ("HERALD_PLUGINS__TRANSPORT", "primary"),
    ];
    let (code, out, err) = herald_env(
        &["plugins", "list", "--json", "--data-dir", "."],
        dir.path(),
        &chain,
    );
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let plugins = listed["plugins"].as_array().unwrap();
    assert!(plugins.iter().any(|p| p["name"] == "smtp"), "{listed:#}");
    assert_eq!(
        listed["transports"],
        serde_json::json!([
            { "name": "primary", "plugin": "smtp", "fallback": "spare", "default": true },
            { "name": "spare", "plugin": "outbox", "fallback": null, "default": false },
        ]),
        "{listed:#}"
    );
    let (code, out, err) = herald_env(&["plugins", "list", "--data-dir", "."], dir.path(), &chain);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("a row of {name} in {out}"))
    };
    assert!(out.contains("TRANSPORT"), "{out}");
    assert_eq!(row("primary"), ["primary", "smtp", "spare", "yes"], "{out}");
    assert_eq!(row("spare"), ["spare", "outbox", "-", "-"], "{out}");

    // Without named transports, the default plugin is the one transport.
    let (code, out, err) = herald_env(
        &["plugins", "list", "--json", "--data-dir", "."],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed["transports"],
        serde_json::json!([{ "name": "outbox", "plugin": "outbox", "fallback": null, "default": true }]),
        "{listed:#}"
    );
}
