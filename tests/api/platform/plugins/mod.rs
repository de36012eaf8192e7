//! The plugin platform through its runtime: the built-in steps with good and bad configs,
//! hostile guests, the transports against a real SMTP server on loopback, the DNS capability
//! against a real DNS server on loopback, and external plugins (the SDK's example step).

mod dns;
mod external;
mod hostile;
mod routing;
mod steps;
mod transports;

use std::path::PathBuf;

use herald::plugins::{
    Contact, Event, EventSummary, Manifest, PluginSettings, Plugins, StepInput, WIT_VERSION, World,
};
use serde_json::{Map, Value, json};

/// The test-only hostile step, built by `host/build.rs`.
pub const HOSTILE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/test_hostile.wasm"));
/// The SDK's example step (`sdk/examples/hello-step`), built by `host/build.rs`.
pub const HELLO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hello_step.wasm"));

/// Plugin settings for tests: a compile cache shared by all tests (keyed by content, so safe)
/// and a small pool.
pub fn settings() -> PluginSettings {
    PluginSettings {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        pool_instances: 16,
        ..PluginSettings::default()
    }
}

/// Starts the platform with `adjust`ed settings in a fresh data directory.
pub fn start(adjust: impl FnOnce(&mut PluginSettings)) -> (Plugins, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings();
    adjust(&mut settings);
    let plugins = Plugins::start(&settings, dir.path()).expect("the plugins load");
    (plugins, dir)
}

/// A manifest for a test plugin.
pub fn manifest(name: &str, world: World, capabilities: herald::plugins::Grants) -> Manifest {
    Manifest {
        name: name.into(),
        world,
        version: WIT_VERSION.into(),
        component: None,
        description: None,
        capabilities,
        limits: herald::plugins::Limits::default(),
    }
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A step input around `config`: a contact with data, a trigger event, context, history and
/// one segment.
pub fn input(config: Value) -> StepInput {
    let now = now_ms();
    let Value::Object(data) = json!({
        "tier": "gold",
        "age": 30,
        "tags": ["a", "b"],
        "renewal": "2030-01-01T00:00:00Z",
        "profile": { "city": "Paris" }
    }) else {
        unreachable!()
    };
    let mut context = Map::new();
    context.insert("score".into(), json!(5));
    StepInput {
        config,
        contact: Contact {
            id: "cnt_0190a1b2c3d4e5f60718293a4b5c6d7e".into(),
            email: "ada@example.com".into(),
            subscribed: true,
            created_at: now - 2 * 3_600_000,
            updated_at: now - 60_000,
            data,
        },
        event: Some(Event {
            name: "signup".into(),
            data: json!({ "plan": "pro", "seats": 3 }),
            created_at: now,
        }),
        context,
        history: vec![EventSummary {
            name: "purchase".into(),
            count: 2,
            last_at: now - 3_600_000,
        }],
        segments: vec!["seg_vip".into()],
    }
}
