//! External plugins: the SDK's example step (`sdk/examples/hello-step`, built by the build
//! script) installed in `plugins.dir` with its manifest, used as a `PLUGIN` step, reloaded,
//! and inspected with `herald plugins check` and `herald plugins list`.

use std::process::Command;

use herald::plugins::{Effect, Outcome, World};
use serde_json::{Value, json};

use super::{HELLO, input, start};

const MANIFEST: &str = include_str!("../../../../sdk/examples/hello-step/hello.toml");

fn plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello_step.wasm"), HELLO).unwrap();
    std::fs::write(dir.path().join("hello.toml"), MANIFEST).unwrap();
    dir
}

#[tokio::test]
async fn the_example_step_runs_as_a_plugin_step() {
    let dir = plugin_dir();
    let (plugins, _data) = start(|s| s.dir = Some(dir.path().to_path_buf()));
    let info = plugins.get("hello").unwrap().info().clone();
    assert_eq!(info.world, World::Step);
    assert_eq!(info.granted, ["log"]);
    assert_eq!(info.timeout_ms, 200);

    let config = json!({ "plugin": "hello", "greeting": "Bonjour" });
    assert!(
        plugins
            .validate_step("PLUGIN", &config)
            .await
            .unwrap()
            .is_empty()
    );
    let result = plugins.run_step("PLUGIN", &input(config)).await.unwrap();
    assert_eq!(
        result.outcome,
        Outcome::Continue {
            branch: Some("regular".into())
        }
    );
    assert_eq!(
        result.effects,
        vec![Effect::SetContext {
            key: "greeting".into(),
            value: json!("Bonjour, ada@example.com!")
        }]
    );
    let vip = json!({ "plugin": "hello", "greeting": "Hi", "vipField": "tier" });
    let mut vip_input = input(vip);
    vip_input.contact.data.insert("tier".into(), json!("vip"));
    let result = plugins.run_step("PLUGIN", &vip_input).await.unwrap();
    assert_eq!(
        result.outcome,
        Outcome::Continue {
            branch: Some("vip".into())
        }
    );

    let bad = plugins
        .validate_step("PLUGIN", &json!({ "plugin": "hello", "greeting": "" }))
        .await
        .unwrap();
    assert_eq!(bad[0].field, "greeting");
}

#[tokio::test]
async fn reload_picks_up_new_plugins_and_refuses_bad_ones_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, _data) = start(|s| s.dir = Some(dir.path().to_path_buf()));
    assert!(plugins.get("hello").is_err());

    std::fs::write(dir.path().join("hello_step.wasm"), HELLO).unwrap();
    std::fs::write(dir.path().join("hello.toml"), MANIFEST).unwrap();
    std::fs::write(
        dir.path().join("future.toml"),
        "name = \"future\"\nworld = \"step\"\nversion = \"0.9.0\"\ncomponent = \"hello_step.wasm\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("liar.toml"),
        "name = \"liar\"\nworld = \"billing\"\nversion = \"0.1.0\"\ncomponent = \"hello_step.wasm\"\n",
    )
    .unwrap();
    // A component outside the plugins directory is refused before anything is read.
    for (file, component) in [
        ("escape.toml", "../hello_step.wasm"),
        ("absolute.toml", "/etc/passwd"),
    ] {
        std::fs::write(
            dir.path().join(file),
            format!("name = \"{}\"\nworld = \"step\"\nversion = \"0.1.0\"\ncomponent = \"{component}\"\n", file.trim_end_matches(".toml")),
        )
        .unwrap();
    }
    let reports = plugins.reload();
    assert_eq!(reports.len(), 5);
    for file in ["escape.toml", "absolute.toml"] {
        let report = reports.iter().find(|r| r.manifest.ends_with(file)).unwrap();
        let err = report.result.as_ref().unwrap_err().to_string();
        assert!(
            err.contains("inside the plugins directory"),
            "{file}: {err}"
        );
    }
    let by_file = |f: &str| reports.iter().find(|r| r.manifest.ends_with(f)).unwrap();
    assert_eq!(by_file("hello.toml").result.as_ref().unwrap(), "hello");
    let future = by_file("future.toml")
        .result
        .as_ref()
        .unwrap_err()
        .to_string();
    assert!(
        future.contains("0.9.0") && future.contains("herald:plugin@0.1.0"),
        "{future}"
    );
    let liar = by_file("liar.toml")
        .result
        .as_ref()
        .unwrap_err()
        .to_string();
    assert!(
        liar.contains("world `billing`") && liar.contains("implements `step`"),
        "{liar}"
    );
    assert!(plugins.get("hello").is_ok());
    assert!(plugins.get("liar").is_err());

    // Removing the manifest and reloading drops the plugin; built-ins stay.
    std::fs::remove_file(dir.path().join("hello.toml")).unwrap();
    for file in ["escape.toml", "absolute.toml", "future.toml", "liar.toml"] {
        std::fs::remove_file(dir.path().join(file)).unwrap();
    }
    plugins.reload();
    assert!(plugins.get("hello").is_err());
    assert!(plugins.get("condition").is_ok());
}

fn herald(
    args: &[&str],
    data: &std::path::Path,
    plugin_dir: &std::path::Path,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("HERALD_PLUGINS__DIR", plugin_dir)
        .env(
            "HERALD_PLUGINS__CACHE_DIR",
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"),
        )
        .output()
        .expect("herald runs")
}

#[test]
fn the_cli_checks_a_component_and_lists_the_plugins() {
    let dir = plugin_dir();
    let data = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("hello_step.wasm");
    let out = herald(
        &["plugins", "check", wasm.to_str().unwrap(), "--json"],
        data.path(),
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["world"], "step");
    assert_eq!(
        report["exports"],
        json!(["herald:plugin/workflow-step@0.1.0"])
    );
    assert_eq!(report["capabilities"], json!(["log"]));

    let text = herald(
        &["plugins", "check", wasm.to_str().unwrap()],
        data.path(),
        dir.path(),
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("world:        step (herald:plugin@0.1.0)"),
        "{text}"
    );

    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"not wasm").unwrap();
    let out = herald(
        &["plugins", "check", junk.to_str().unwrap()],
        data.path(),
        dir.path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid WebAssembly component"));

    let out = herald(&["plugins", "list", "--json"], data.path(), dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = listed["plugins"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for name in [
        "send-email",
        "delay",
        "wait-for-event",
        "condition",
        "webhook",
        "update-contact",
        "exit",
        "outbox",
        "smtp",
        "default",
        "none",
        "hello",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let hello = list.iter().find(|p| p["name"] == "hello").unwrap();
    assert!(
        hello["origin"]
            .as_str()
            .unwrap()
            .ends_with("hello_step.wasm")
    );
    let table = herald(&["plugins", "list"], data.path(), dir.path());
    assert!(String::from_utf8_lossy(&table.stdout).contains("webhook"));
}
