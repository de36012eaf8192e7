//! Plugin manifests: name, world, version, granted capabilities and limits.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::PluginError;

/// The WIT package version this Herald implements (`herald:plugin@0.1.0`).
pub const WIT_VERSION: &str = "0.1.0";

/// The world a plugin implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// A workflow step.
    Step,
    /// A mail transport.
    Transport,
    /// A DNS verifier.
    DnsVerifier,
    /// A billing provider.
    Billing,
}

impl World {
    /// Every world.
    pub const ALL: [World; 4] = [
        World::Step,
        World::Transport,
        World::DnsVerifier,
        World::Billing,
    ];

    /// The world's WIT name.
    pub fn name(self) -> &'static str {
        match self {
            World::Step => "step",
            World::Transport => "transport",
            World::DnsVerifier => "dns-verifier",
            World::Billing => "billing",
        }
    }

    /// The interface the world exports (without the version).
    pub fn export(self) -> &'static str {
        match self {
            World::Step => "herald:plugin/workflow-step",
            World::Transport => "herald:plugin/mail-transport",
            World::DnsVerifier => "herald:plugin/domain-verifier",
            World::Billing => "herald:plugin/billing-provider",
        }
    }
}

/// The outbound HTTP grant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpGrant {
    /// Hosts the plugin may call: `*` (any), `host.example` or `*.example` (any subdomain).
    pub allow: Vec<String>,
    /// Whether loopback, private, link-local and metadata addresses may be called.
    pub allow_private: bool,
}

/// The capabilities granted to a plugin; everything is denied by default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Grants {
    /// Writing to the host's log.
    pub log: bool,
    /// Reading the wall clock.
    pub clock: bool,
    /// Outbound HTTP, with its allowlist.
    pub http: Option<HttpGrant>,
    /// DNS resolution.
    pub dns: bool,
    /// SMTP submission.
    pub smtp: bool,
    /// Writing to the local outbox.
    pub outbox: bool,
}

impl Grants {
    /// The names of the granted capabilities.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        for (granted, name) in [
            (self.log, "log"),
            (self.clock, "clock"),
            (self.http.is_some(), "http"),
            (self.dns, "dns"),
            (self.smtp, "smtp"),
            (self.outbox, "outbox"),
        ] {
            if granted {
                names.push(name);
            }
        }
        names
    }
}

/// Per-plugin limits; unset ones take the `plugins.*` settings (and never exceed them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-time limit of one call, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Memory cap, in bytes.
    pub memory_bytes: Option<u64>,
    /// Fuel per call (used when the runtime meters fuel).
    pub fuel: Option<u64>,
}

/// A plugin manifest (`<name>.toml` in `plugins.dir`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name (lower-case letters, digits and `-`); a `PLUGIN` step names it in
    /// `config.plugin`.
    pub name: String,
    /// The world it implements.
    pub world: World,
    /// The `herald:plugin` WIT version it was built against.
    pub version: String,
    /// The component file, relative to the manifest; defaults to `<name>.wasm`.
    #[serde(default)]
    pub component: Option<PathBuf>,
    /// What the plugin does.
    #[serde(default)]
    pub description: Option<String>,
    /// Granted capabilities.
    #[serde(default)]
    pub capabilities: Grants,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
}

impl Manifest {
    /// Reads and checks a manifest file.
    pub fn read(path: &Path) -> Result<Manifest, PluginError> {
        let text = std::fs::read_to_string(path).map_err(|source| PluginError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let manifest: Manifest = toml::from_str(&text).map_err(|e| PluginError::Manifest {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        manifest.check().map_err(|message| PluginError::Manifest {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(manifest)
    }

    /// Checks the name, the component path (relative, inside the plugins directory) and the
    /// version.
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "name `{}` must be 1 to 64 lower-case letters, digits and `-`",
                self.name
            ));
        }
        if let Some(component) = &self.component
            && (component.is_absolute()
                || component.components().any(|c| {
                    !matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::CurDir
                    )
                }))
        {
            return Err(format!(
                "component `{}` must be a path inside the plugins directory, relative to the \
                 manifest, without `..`",
                component.display()
            ));
        }
        if self.version != WIT_VERSION {
            return Err(format!(
                "version {} does not match this Herald's plugin interface herald:plugin@{WIT_VERSION}; \
                 rebuild the plugin with a herald-sdk for {WIT_VERSION}",
                self.version
            ));
        }
        Ok(())
    }

    /// The component file of a manifest read from `manifest_path`.
    pub fn component_path(&self, manifest_path: &Path) -> PathBuf {
        let dir = manifest_path.parent().unwrap_or(Path::new("."));
        dir.join(
            self.component
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}.wasm", self.name))),
        )
    }
}
