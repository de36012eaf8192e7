//! Transports by name: the named transports of the settings (`[transports.<name>]`: a transport
//! plugin, an optional fallback, and settings of that plugin overlaid on
//! `plugins.settings.<plugin>`), each loaded as an instance of its own with its own settings and
//! grants; a bare transport plugin's name is a transport too, with `plugins.settings.<plugin>`.
//! `plugins.transport` names the deployment's default. [`Plugins::transport`] resolves a name,
//! [`Plugins::check_setup`] refuses, at start, settings that name no loaded plugin of the right
//! world, a transport without its plugin's required settings, or a fallback cycle.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Plugins;
use super::builtin;
use super::error::PluginError;
use super::host::{Granted, HttpClient};
use super::manifest::World;
use super::registry::LoadedPlugin;

/// The `[transports.<name>]` tables as configured: transport name, then its keys (`plugin`,
/// `fallback` and the plugin's settings).
pub type TransportTables = BTreeMap<String, BTreeMap<String, String>>;

/// A named transport, read from its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// The transport plugin it runs (`plugin`).
    pub plugin: String,
    /// The transport a message goes to when this one fails transiently (`fallback`).
    pub fallback: Option<String>,
    /// Settings of the plugin for this transport, over `plugins.settings.<plugin>`.
    pub settings: BTreeMap<String, String>,
}

impl TransportConfig {
    /// Reads the named transports of `tables`, names and keys lower-cased (the environment
    /// lower-cases them too). A table without `plugin` keeps an empty plugin (refused by
    /// [`Plugins::check_setup`]).
    pub fn read(tables: &TransportTables) -> BTreeMap<String, TransportConfig> {
        tables
            .iter()
            .map(|(name, table)| {
                let mut settings: BTreeMap<String, String> = table
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect();
                let plugin = settings.remove("plugin").unwrap_or_default();
                let fallback = settings.remove("fallback").filter(|f| !f.is_empty());
                (
                    name.to_ascii_lowercase(),
                    TransportConfig {
                        plugin,
                        fallback: fallback.map(|f| f.to_ascii_lowercase()),
                        settings,
                    },
                )
            })
            .collect()
    }
}

/// What `herald plugins list` shows of a configured transport.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TransportSummary {
    /// Its name (a `[transports.<name>]` table, or the plugin `plugins.transport` names).
    pub name: String,
    /// The transport plugin it runs.
    pub plugin: String,
    /// The transport a message goes to when this one fails transiently.
    pub fallback: Option<String>,
    /// Whether it is the deployment's default (`plugins.transport`).
    pub default: bool,
}

/// The loaded named transports, by name; replaced as a whole when the plugins are reloaded.
pub(super) type Routes = BTreeMap<String, Arc<LoadedPlugin>>;

/// A setting that stops the start, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupError {
    /// The setting, dotted (`plugins.transport`, `transports.primary.fallback`…).
    pub setting: String,
    /// What is wrong, and what to set.
    pub message: String,
}

fn setup_error(setting: impl Into<String>, message: impl Into<String>) -> SetupError {
    SetupError {
        setting: setting.into(),
        message: message.into(),
    }
}

impl Plugins {
    /// The named transports as configured.
    pub fn transport_configs(&self) -> &BTreeMap<String, TransportConfig> {
        &self.transports
    }

    /// The deployment's default transport (`plugins.transport`).
    pub fn default_transport(&self) -> &str {
        &self.runtime.settings.transport
    }

    /// The configured transports, sorted by name: the named transports, and the default when
    /// it names a plugin rather than one of them.
    pub fn transport_summaries(&self) -> Vec<TransportSummary> {
        let default = self.default_transport().to_ascii_lowercase();
        let mut list: Vec<TransportSummary> = self
            .transports
            .iter()
            .map(|(name, config)| TransportSummary {
                name: name.clone(),
                plugin: config.plugin.clone(),
                fallback: config.fallback.clone(),
                default: *name == default,
            })
            .collect();
        if !self.transports.contains_key(&default) {
            list.push(TransportSummary {
                name: self.default_transport().to_string(),
                plugin: self.default_transport().to_string(),
                fallback: None,
                default: true,
            });
            list.sort_by(|a, b| a.name.cmp(&b.name));
        }
        list
    }

    /// The fallback of the transport `name`, if it names one.
    pub fn fallback_of(&self, name: &str) -> Option<&str> {
        self.transports.get(name)?.fallback.as_deref()
    }

    /// The loaded instance of the transport `name` (default: `plugins.transport`): the named
    /// transport of that name, else the transport plugin of that name with
    /// `plugins.settings.<plugin>`.
    pub fn transport(&self, name: Option<&str>) -> Result<Arc<LoadedPlugin>, PluginError> {
        let name = name.unwrap_or(&self.runtime.settings.transport);
        // Named transports are lower-cased when read (the environment lower-cases them).
        let named = name.to_ascii_lowercase();
        if let Some(route) = self.routes().get(&named) {
            return Ok(route.clone());
        }
        if let Some(config) = self.transports.get(&named) {
            // Configured but not loaded (its plugin is missing; the start refuses that, a
            // reload may have dropped it since).
            return Err(PluginError::NotFound(format!(
                "{} (the plugin of transport `{name}`)",
                config.plugin
            )));
        }
        self.of_world(name, World::Transport)
    }

    /// Whether `name` is a transport a project or domain may choose: a named transport, or a
    /// loaded transport plugin whose required settings are set. `Err` says why not.
    pub fn transport_usable(&self, name: &str) -> Result<(), String> {
        if self.transports.contains_key(name) {
            return Ok(());
        }
        match self.of_world(name, World::Transport) {
            Ok(_) => self
                .missing_required(name, &BTreeMap::new())
                .map_or(Ok(()), |key| {
                    Err(format!(
                        "transport `{name}` is not configured: plugins.settings.{name}.{key} is not set"
                    ))
                }),
            Err(_) => Err(format!(
                "no transport named `{name}` is configured (transports: {})",
                self.transport_names().join(", ")
            )),
        }
    }

    /// The names of the configured transports and loaded transport plugins, sorted.
    pub fn transport_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.transports.keys().cloned().collect();
        names.extend(
            self.registry()
                .values()
                .filter(|p| p.info.world == World::Transport)
                .map(|p| p.info.name.clone()),
        );
        names.sort();
        names.dedup();
        names
    }

    /// The loaded named transports now.
    fn routes(&self) -> Arc<Routes> {
        self.routes.read().expect("routes lock").clone()
    }

    /// (Re)loads the named transports over the plugins loaded now; one whose plugin is not
    /// loaded is left out (and logged; [`Plugins::check_setup`] refuses it at start).
    pub(super) fn load_routes(&self) {
        let mut routes = Routes::new();
        for (name, config) in &self.transports {
            match self.instance(config) {
                Ok(plugin) => {
                    routes.insert(name.clone(), Arc::new(plugin));
                }
                Err(err) => {
                    tracing::error!(transport = %name, error = %err, "transport not loaded")
                }
            }
        }
        *self.routes.write().expect("routes lock") = Arc::new(routes);
    }

    /// The settings of `plugin` for a transport that overlays `overlay` on them.
    fn effective_settings(
        &self,
        plugin: &str,
        overlay: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut table: BTreeMap<String, String> = self
            .runtime
            .settings
            .settings
            .get(plugin)
            .map(|t| {
                t.iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        table.extend(overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
        table
    }

    /// The first required setting of the transport plugin `plugin` that is unset or empty
    /// under `overlay` over `plugins.settings.<plugin>`.
    fn missing_required(
        &self,
        plugin: &str,
        overlay: &BTreeMap<String, String>,
    ) -> Option<&'static str> {
        let builtin = builtin::BUILTINS.iter().find(|b| b.name == plugin)?;
        let table = self.effective_settings(plugin, overlay);
        builtin
            .required
            .iter()
            .copied()
            .find(|key| table.get(*key).is_none_or(|v| v.trim().is_empty()))
    }

    /// An instance of the transport `config`: its plugin's component with the transport's own
    /// settings and, for a built-in, the grants those settings give (its `api_base` host).
    fn instance(&self, config: &TransportConfig) -> Result<LoadedPlugin, PluginError> {
        let base = self.of_world(&config.plugin, World::Transport)?;
        let settings = self.effective_settings(&config.plugin, &config.settings);
        let grants = match builtin::BUILTINS.iter().find(|b| b.name == config.plugin) {
            Some(builtin) if base.info.origin == "built-in" => {
                let mut plugin_settings = self.runtime.settings.clone();
                plugin_settings
                    .settings
                    .insert(config.plugin.clone(), settings.clone());
                builtin.grants(&plugin_settings)
            }
            _ => base.granted.grants.clone(),
        };
        let http = match &grants.http {
            Some(grant) => Some(
                HttpClient::new(grant, &self.runtime.services)
                    .map_err(|e| PluginError::Runtime(e.to_string()))?,
            ),
            None => None,
        };
        let mut info = base.info.clone();
        info.granted = grants.names();
        Ok(LoadedPlugin {
            info,
            granted: Arc::new(Granted {
                plugin: Arc::from(config.plugin.as_str()),
                grants,
                http,
                settings,
            }),
            limits: base.limits.clone(),
            pre: base.pre.clone(),
        })
    }

    /// Checks, at start, that `plugins.transport`, `plugins.dns_verifier`, `plugins.billing`
    /// and every named transport's `plugin` and `fallback` name loaded plugins of the right
    /// world, that every transport in use has its plugin's required settings, and that no
    /// fallbacks go round in a cycle. The first problem found, with the setting to fix.
    pub fn check_setup(&self) -> Result<(), SetupError> {
        let settings = &self.runtime.settings;
        for (setting, name, world) in [
            (
                "plugins.dns_verifier",
                &settings.dns_verifier,
                World::DnsVerifier,
            ),
            ("plugins.billing", &settings.billing, World::Billing),
        ] {
            self.of_world(name, world)
                .map_err(|err| setup_error(setting, self.why_not(name, world, err)))?;
        }
        for (name, config) in &self.transports {
            let setting = format!("transports.{name}.plugin");
            if config.plugin.is_empty() {
                return Err(setup_error(
                    setting,
                    format!(
                        "transport `{name}` names no plugin; set it to a transport plugin ({})",
                        self.plugins_of(World::Transport).join(", ")
                    ),
                ));
            }
            self.of_world(&config.plugin, World::Transport)
                .map_err(|err| {
                    setup_error(
                        &setting,
                        self.why_not(&config.plugin, World::Transport, err),
                    )
                })?;
            if let Some(key) = self.missing_required(&config.plugin, &config.settings) {
                return Err(setup_error(
                    format!("transports.{name}.{key}"),
                    format!(
                        "the `{}` plugin of transport `{name}` needs it (set it here or as \
                         plugins.settings.{}.{key})",
                        config.plugin, config.plugin
                    ),
                ));
            }
            if let Some(fallback) = &config.fallback {
                self.check_transport_name(fallback, &format!("transports.{name}.fallback"))?;
            }
        }
        self.check_transport_name(&settings.transport, "plugins.transport")?;
        for name in self.transports.keys() {
            let mut seen = vec![name.as_str()];
            let mut at = name.as_str();
            while let Some(next) = self.fallback_of(at) {
                if seen.contains(&next) {
                    seen.push(next);
                    return Err(setup_error(
                        format!("transports.{at}.fallback"),
                        format!(
                            "the fallbacks go round in a cycle ({}); end the chain with a \
                             transport without a fallback",
                            seen.join(" → ")
                        ),
                    ));
                }
                seen.push(next);
                at = next;
            }
        }
        Ok(())
    }

    /// Checks that the transport name `name` (of `setting`) resolves: a named transport, or a
    /// loaded transport plugin with its required settings.
    fn check_transport_name(&self, name: &str, setting: &str) -> Result<(), SetupError> {
        if self.transports.contains_key(&name.to_ascii_lowercase()) {
            return Ok(());
        }
        match self.of_world(name, World::Transport) {
            Ok(_) => match self.missing_required(name, &BTreeMap::new()) {
                Some(key) => Err(setup_error(
                    format!("plugins.settings.{name}.{key}"),
                    format!("the `{name}` transport (named by {setting}) needs it"),
                )),
                None => Ok(()),
            },
            Err(PluginError::NotFound(_)) => Err(setup_error(
                setting,
                format!(
                    "`{name}` names no transport: no [transports.{name}] table and no transport \
                     plugin of that name is loaded (transports: {})",
                    self.transport_names().join(", ")
                ),
            )),
            Err(err) => Err(setup_error(
                setting,
                self.why_not(name, World::Transport, err),
            )),
        }
    }

    /// Why `name` is not a usable plugin of `world`, with the ones that are.
    fn why_not(&self, name: &str, world: World, err: PluginError) -> String {
        let loaded = self.plugins_of(world).join(", ");
        match err {
            PluginError::NotFound(_) => format!(
                "no plugin named `{name}` is loaded; {} plugins: {loaded}",
                world.name()
            ),
            PluginError::WrongWorld { actual, .. } => format!(
                "`{name}` is a {actual} plugin, not a {} plugin; {} plugins: {loaded}",
                world.name(),
                world.name()
            ),
            other => other.to_string(),
        }
    }

    /// The names of the loaded plugins of `world`.
    fn plugins_of(&self, world: World) -> Vec<String> {
        self.registry()
            .values()
            .filter(|p| p.info.world == world)
            .map(|p| p.info.name.clone())
            .collect()
    }
}
