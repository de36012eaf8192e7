//! Transports by name (`[transports.<name>]`): each named transport an instance of its plugin,
//! the default among them, fallbacks, and the start-time check of what the settings name.

use std::collections::BTreeMap;

use herald::plugins::{PluginError, Plugins, TransportTables};

use super::settings;
use super::transports::message;

fn tables(transports: &[(&str, &[(&str, &str)])]) -> TransportTables {
    transports
        .iter()
        .map(|(name, pairs)| {
            let table: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (name.to_string(), table)
        })
        .collect()
}

/// The platform with `transports` and the default `default`, in a fresh data directory.
fn start(default: &str, transports: &TransportTables) -> (Plugins, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.transport = default.into();
    let plugins =
        Plugins::start_with_transports(&s, transports, dir.path()).expect("the plugins load");
    (plugins, dir)
}

#[tokio::test]
async fn named_transports_resolve_to_instances_of_their_plugins() {
    let transports = tables(&[
        ("primary", &[("plugin", "outbox"), ("fallback", "Spare")]),
        ("Spare", &[("plugin", "outbox"), ("folder", "x")]),
        ("relay", &[("plugin", "smtp")]),
    ]);
    let (plugins, dir) = start("primary", &transports);
    plugins.check_setup().expect("usable settings");
    assert_eq!(plugins.transport(None).unwrap().info().name, "outbox");
    assert_eq!(
        plugins.transport(Some("relay")).unwrap().info().name,
        "smtp"
    );
    // Names are lower-cased, as the environment gives them.
    assert_eq!(
        plugins.transport(Some("SPARE")).unwrap().info().name,
        "outbox"
    );
    assert_eq!(plugins.fallback_of("primary"), Some("spare"));
    assert_eq!(plugins.fallback_of("spare"), None);
    // A bare transport plugin is a transport too; anything else is not.
    assert_eq!(plugins.transport(Some("smtp")).unwrap().info().name, "smtp");
    assert!(matches!(
        plugins.transport(Some("nowhere")),
        Err(PluginError::NotFound(_))
    ));
    assert!(matches!(
        plugins.transport(Some("delay")),
        Err(PluginError::WrongWorld { .. })
    ));
    assert!(plugins.transport_usable("relay").is_ok());
    assert!(plugins.transport_usable("outbox").is_ok());
    let err = plugins.transport_usable("nowhere").unwrap_err();
    assert!(err.contains("nowhere") && err.contains("primary"), "{err}");
    assert!(plugins.transport_usable("delay").is_err());
    let names = plugins.transport_names();
    for name in ["outbox", "primary", "relay", "smtp", "spare"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    // A provider without its required settings is not a transport to choose.
    let err = plugins.transport_usable("postmark").unwrap_err();
    assert!(
        err.contains("plugins.settings.postmark.server_token"),
        "{err}"
    );

    // The instance delivers like its plugin.
    let outcomes = plugins
        .deliver_batch(Some("spare"), vec![message("m1", "ada@example.com")])
        .await
        .unwrap();
    assert!(outcomes[0].is_ok(), "{outcomes:?}");
    assert!(dir.path().join("outbox").exists());
}

#[tokio::test]
async fn settings_naming_nothing_usable_are_refused_with_the_setting() {
    let refused = |default: &str, transports: &[(&str, &[(&str, &str)])]| {
        let (plugins, _dir) = start(default, &tables(transports));
        plugins.check_setup().unwrap_err()
    };
    let err = refused("nowhere", &[]);
    assert_eq!(err.setting, "plugins.transport");
    assert!(err.message.contains("nowhere"), "{err:?}");
    let err = refused("outbox", &[("a", &[("plugin", "condition")])]);
    assert_eq!(err.setting, "transports.a.plugin");
    assert!(err.message.contains("step plugin"), "{err:?}");
    let err = refused("outbox", &[("a", &[("fallback", "outbox")])]);
    assert_eq!(err.setting, "transports.a.plugin");
    let err = refused(
        "outbox",
        &[("a", &[("plugin", "outbox"), ("fallback", "b")])],
    );
    assert_eq!(err.setting, "transports.a.fallback");
    let err = refused(
        "a",
        &[
            ("a", &[("plugin", "outbox"), ("fallback", "b")]),
            ("b", &[("plugin", "smtp"), ("fallback", "c")]),
            ("c", &[("plugin", "outbox"), ("fallback", "a")]),
        ],
    );
    assert!(err.setting.ends_with(".fallback"), "{err:?}");
    assert!(err.message.contains("a → b → c → a"), "{err:?}");
    // A provider plugin needs its required settings: in the transport's table, or in
    // `plugins.settings.<plugin>` for the plugin by its name.
    let err = refused("outbox", &[("pm", &[("plugin", "postmark")])]);
    assert_eq!(err.setting, "transports.pm.server_token");
    let err = refused("postmark", &[]);
    assert_eq!(err.setting, "plugins.settings.postmark.server_token");
    let err = refused(
        "outbox",
        &[("a", &[("plugin", "outbox"), ("fallback", "resend")])],
    );
    assert_eq!(err.setting, "plugins.settings.resend.api_key");
    let (plugins, _dir) = start(
        "pm",
        &tables(&[("pm", &[("plugin", "postmark"), ("server_token", "t")])]),
    );
    plugins
        .check_setup()
        .expect("the token in the transport's table");
    // A chain that ends is fine, and a fallback may be a bare plugin.
    let (plugins, _dir) = start(
        "a",
        &tables(&[
            ("a", &[("plugin", "smtp"), ("fallback", "b")]),
            ("b", &[("plugin", "smtp"), ("fallback", "outbox")]),
        ]),
    );
    plugins.check_setup().expect("a chain that ends");
}
