//! Hostile guests fail cleanly, each with a clear error for its own call, while the host goes
//! on serving (the same runtime runs a healthy call right after, and during).

use std::time::{Duration, Instant};

use herald::plugins::{Grants, HttpGrant, Limits, Outcome, PluginError, Plugins, World};
use serde_json::json;

use super::{HOSTILE, input, manifest, start};

fn install(plugins: &Plugins, grants: Grants, limits: Limits) {
    let mut m = manifest("hostile", World::Step, grants);
    m.limits = limits;
    let plugin = plugins
        .load(&m, HOSTILE, "test".into())
        .expect("the hostile plugin loads");
    plugins.install(plugin).unwrap();
}

async fn run(plugins: &Plugins, mode: &str) -> Result<herald::plugins::StepResult, PluginError> {
    plugins
        .run_step(
            "PLUGIN",
            &input(json!({ "plugin": "hostile", "mode": mode })),
        )
        .await
}

async fn still_serving(plugins: &Plugins) {
    let ok = run(plugins, "echo").await.expect("a healthy call works");
    assert_eq!(ok.outcome, Outcome::Continue { branch: None });
    let result = plugins.run_step("EXIT", &input(json!({}))).await.unwrap();
    assert_eq!(result.outcome, Outcome::Exit { reason: None });
}

fn web() -> Grants {
    Grants {
        log: true,
        http: Some(HttpGrant {
            allow: vec!["*".into()],
            allow_private: false,
        }),
        ..Grants::default()
    }
}

#[tokio::test]
async fn an_endless_loop_times_out() {
    let (plugins, _dir) = start(|_| {});
    install(
        &plugins,
        web(),
        Limits {
            timeout_ms: Some(200),
            ..Limits::default()
        },
    );
    let started = Instant::now();
    let (looping, healthy) = tokio::join!(run(&plugins, "loop"), async {
        // The host serves other calls while the loop spins.
        tokio::time::sleep(Duration::from_millis(20)).await;
        run(&plugins, "echo").await
    });
    let err = looping.unwrap_err();
    assert!(matches!(err, PluginError::Timeout { ms: 200, .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("timed out after 200 ms"));
    assert!(healthy.is_ok());
    still_serving(&plugins).await;
}

#[tokio::test]
async fn an_endless_loop_runs_out_of_fuel_when_fuel_is_metered() {
    let (plugins, _dir) = start(|s| s.fuel = Some(50_000_000));
    install(&plugins, web(), Limits::default());
    let err = run(&plugins, "loop").await.unwrap_err();
    assert!(matches!(err, PluginError::OutOfFuel { .. }), "{err}");
    still_serving(&plugins).await;
}

#[tokio::test]
async fn a_memory_bomb_hits_the_memory_cap() {
    let (plugins, _dir) = start(|_| {});
    install(
        &plugins,
        web(),
        Limits {
            memory_bytes: Some(16 << 20),
            ..Limits::default()
        },
    );
    let err = run(&plugins, "memory").await.unwrap_err();
    assert!(
        matches!(err, PluginError::MemoryLimit { bytes, .. } if bytes == 16 << 20),
        "{err}"
    );
    still_serving(&plugins).await;
}

#[tokio::test]
async fn a_huge_result_is_refused() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, web(), Limits::default());
    let err = run(&plugins, "huge").await.unwrap_err();
    assert!(
        matches!(err, PluginError::ResultTooLarge { limit: 1048576, .. }),
        "{err}"
    );
    still_serving(&plugins).await;
}

#[tokio::test]
async fn a_malformed_result_is_refused() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, web(), Limits::default());
    let err = run(&plugins, "malformed").await.unwrap_err();
    assert!(matches!(err, PluginError::MalformedResult { .. }), "{err}");
    assert!(err.to_string().contains("not JSON"), "{err}");
    still_serving(&plugins).await;
}

#[tokio::test]
async fn a_panic_is_a_trap() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, web(), Limits::default());
    let err = run(&plugins, "panic").await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("panicked"), "{err}");
    still_serving(&plugins).await;
}

#[tokio::test]
async fn ungranted_capabilities_are_denied() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, web(), Limits::default());
    for (mode, capability) in [("dns", "dns"), ("smtp", "smtp")] {
        let err = run(&plugins, mode).await.unwrap_err();
        assert!(
            matches!(err, PluginError::CapabilityDenied { capability: c, .. } if c == capability),
            "{err}"
        );
    }
    // Without the http grant, even a harmless request is denied.
    install(&plugins, Grants::default(), Limits::default());
    let err = run(&plugins, "http-loopback").await.unwrap_err();
    assert!(
        matches!(
            err,
            PluginError::CapabilityDenied {
                capability: "http",
                ..
            }
        ),
        "{err}"
    );
    still_serving(&plugins).await;
}

/// The `now` and `random` a `wasi-time` call saw.
async fn wasi_time(plugins: &Plugins) -> (u128, String) {
    let result = run(plugins, "wasi-time").await.unwrap();
    let context = |key: &str| {
        result
            .effects
            .iter()
            .find_map(|e| match e {
                herald::plugins::Effect::SetContext { key: k, value } if k == key => {
                    Some(value.as_str().unwrap().to_string())
                }
                _ => None,
            })
            .unwrap()
    };
    (context("now").parse().unwrap(), context("random"))
}

#[tokio::test]
async fn wasi_clocks_and_randomness_need_the_clock_grant() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, Grants::default(), Limits::default());
    let (now, random) = wasi_time(&plugins).await;
    assert_eq!(now, 0, "without the grant the clock reads the epoch");
    assert_eq!(
        wasi_time(&plugins).await.1,
        random,
        "without the grant the random seed is fixed"
    );
    install(
        &plugins,
        Grants {
            clock: true,
            ..Grants::default()
        },
        Limits::default(),
    );
    let (now, random) = wasi_time(&plugins).await;
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert!(now.abs_diff(host_now) < 60_000, "{now} vs {host_now}");
    assert_ne!(wasi_time(&plugins).await.1, random, "a fresh seed per call");
    still_serving(&plugins).await;
}

#[tokio::test]
async fn http_to_loopback_metadata_and_private_addresses_is_blocked() {
    let (plugins, _dir) = start(|_| {});
    install(&plugins, web(), Limits::default());
    for mode in ["http-loopback", "http-metadata", "http-private"] {
        let result = run(&plugins, mode).await.expect("the call itself succeeds");
        let Outcome::Fail { message } = result.outcome else {
            panic!("{mode}: {:?}", result.outcome)
        };
        assert!(message.starts_with("blocked address"), "{mode}: {message}");
    }
    still_serving(&plugins).await;
}

#[tokio::test]
async fn redirects_are_checked_again() {
    // A server on loopback (allowed for this plugin) redirects to a host not on its allowlist.
    let (addr, _) = crate::support::httpd::http_server(
        "302 Found",
        "location: http://metadata.google.internal/computeMetadata/v1/\r\n".into(),
        "",
    )
    .await;
    let (plugins, _dir) = start(|s| {
        s.webhook_allow = vec!["127.0.0.1".into()];
        s.webhook_allow_private = true;
    });
    let result = plugins
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://{addr}/start") })),
        )
        .await
        .unwrap();
    let Outcome::Fail { message } = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert!(message.contains("not allowed"), "{message}");
    assert!(message.contains("metadata.google.internal"), "{message}");
}

#[tokio::test]
async fn a_component_for_another_interface_version_is_refused() {
    let (plugins, _dir) = start(|_| {});
    let mut m = manifest("future", World::Step, Grants::default());
    m.version = "0.2.0".into();
    let err = plugins
        .load(&m, HOSTILE, "test".into())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("herald:plugin@0.1.0"), "{err}");
    // A real component built against another version of the interface: the same component with
    // every `herald:plugin@0.1.0` name rewritten to 0.2.0 (same length, so still valid).
    let future = replace_all(HOSTILE, b"@0.1.0", b"@0.2.0");
    let m = manifest("future", World::Step, Grants::default());
    let err = plugins
        .load(&m, &future, "test".into())
        .err()
        .expect("refused");
    let message = err.to_string();
    assert!(
        message.contains("herald:plugin/workflow-step@0.2.0"),
        "{message}"
    );
    assert!(
        message.contains("this Herald provides herald:plugin@0.1.0"),
        "{message}"
    );
    // A component of the wrong world is refused too.
    let m = manifest("confused", World::Transport, Grants::default());
    let err = plugins
        .load(&m, HOSTILE, "test".into())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("implements `step`"), "{err}");
    // And bytes that are no component at all.
    let m = manifest("junk", World::Step, Grants::default());
    let err = plugins
        .load(&m, b"\0asm junk", "test".into())
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("not a valid WebAssembly component"),
        "{err}"
    );
}

fn replace_all(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = haystack.to_vec();
    let mut i = 0;
    let mut replaced = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0);
    out
}

#[tokio::test]
async fn http_responses_are_capped_in_size_and_time() {
    let (big, _) = crate::support::httpd::http_server(
        "200 OK",
        String::new(),
        r#"{"padding":"0123456789012345678901234567890123456789"}"#,
    )
    .await;
    let (plugins, _dir) = start(|s| {
        s.webhook_allow_private = true;
        s.http_max_response_bytes = 16;
        s.http_timeout_ms = 300;
    });
    let result = plugins
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://{big}/") })),
        )
        .await
        .unwrap();
    let Outcome::Fail { message } = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert!(
        message.contains("response larger than 16 bytes"),
        "{message}"
    );

    // A server that accepts and never answers: the request times out, the step fails.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let started = Instant::now();
    let result = plugins
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://{addr}/") })),
        )
        .await
        .unwrap();
    let Outcome::Fail { message } = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert!(message.contains("timed out"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
