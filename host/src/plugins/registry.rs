//! The registry of loaded plugins: loading a component under its manifest, the built-ins and
//! `plugins.dir` (reloaded on SIGHUP), lookups by name and world, and `herald plugins check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use wasmtime::component::InstancePre;

use super::Plugins;
use super::builtin;
use super::call::Pre;
use super::error::PluginError;
use super::host::{CallState, Granted, HttpClient};
use super::manifest::{Limits, Manifest, WIT_VERSION, World};
use super::runtime::CallLimits;

/// What `herald plugins list` shows of a loaded plugin.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfo {
    /// The plugin's name.
    pub name: String,
    pub world: World,
    /// The WIT version it implements.
    pub version: String,
    /// `built-in` or the component's path.
    pub origin: String,
    /// What it does.
    pub description: Option<String>,
    /// Granted capabilities.
    pub granted: Vec<&'static str>,
    /// Capabilities its component imports.
    pub imports: Vec<String>,
    /// Wall-time limit per call, in milliseconds.
    pub timeout_ms: u64,
    /// Memory cap, in bytes.
    pub memory_bytes: u64,
}

/// A loaded plugin, ready to instantiate.
pub struct LoadedPlugin {
    pub(super) info: PluginInfo,
    pub(super) granted: Arc<Granted>,
    pub(super) limits: CallLimits,
    pub(super) pre: Pre,
}

impl LoadedPlugin {
    /// What it is.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }
}

/// What a component file exports and asks for (`herald plugins check`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The world it implements.
    pub world: World,
    /// Its `herald:plugin` exports.
    pub exports: Vec<String>,
    /// The capabilities it imports.
    pub capabilities: Vec<String>,
    /// Its other imports.
    pub other_imports: Vec<String>,
}

/// The outcome of loading one external plugin.
#[derive(Debug)]
pub struct LoadReport {
    pub manifest: PathBuf,
    /// The plugin's name, or why it was refused.
    pub result: Result<String, PluginError>,
}

/// The loaded plugins by name; replaced as a whole on reload, so a call keeps the plugin it
/// looked up.
pub(super) type Registry = BTreeMap<String, Arc<LoadedPlugin>>;

impl Plugins {
    /// Loads the built-in plugins, granted what they need under the runtime's settings.
    pub(super) fn load_builtins(&self) -> Result<(), PluginError> {
        let settings = &self.runtime.settings;
        let mut registry = Registry::new();
        for builtin in &builtin::BUILTINS {
            let manifest = Manifest {
                name: builtin.name.to_string(),
                world: builtin.world,
                version: WIT_VERSION.to_string(),
                component: None,
                description: Some(builtin.description.to_string()),
                capabilities: builtin.grants(settings),
                limits: Limits::default(),
            };
            let component = self.runtime.builtin_component(builtin)?;
            let plugin = self.prepare(&manifest, component, "built-in".into())?;
            registry.insert(builtin.name.to_string(), Arc::new(plugin));
        }
        *self.registry.write().expect("registry lock") = Arc::new(registry);
        Ok(())
    }

    /// The loaded plugins now.
    pub(super) fn registry(&self) -> Arc<Registry> {
        self.registry.read().expect("registry lock").clone()
    }

    /// Compiles (or loads from the cache), checks and prepares a component under `manifest`.
    pub fn load(
        &self,
        manifest: &Manifest,
        bytes: &[u8],
        origin: String,
    ) -> Result<LoadedPlugin, PluginError> {
        let component = self.runtime.compile(&manifest.name, bytes)?;
        self.prepare(manifest, component, origin)
    }

    /// Checks a compiled component against `manifest` and prepares it for calls.
    fn prepare(
        &self,
        manifest: &Manifest,
        component: wasmtime::component::Component,
        origin: String,
    ) -> Result<LoadedPlugin, PluginError> {
        let name = manifest.name.as_str();
        manifest.check().map_err(|message| PluginError::Refused {
            plugin: name.to_string(),
            message,
        })?;
        let inspection = self.runtime.inspect(name, &component)?;
        if inspection.world != manifest.world {
            return Err(PluginError::Refused {
                plugin: name.to_string(),
                message: format!(
                    "its manifest says world `{}` but the component implements `{}`",
                    manifest.world.name(),
                    inspection.world.name()
                ),
            });
        }
        let refused = |err: wasmtime::Error| PluginError::Refused {
            plugin: name.to_string(),
            message: format!("{err:#}"),
        };
        let instance_pre: InstancePre<CallState> = self
            .runtime
            .linker
            .instantiate_pre(&component)
            .map_err(refused)?;
        let pre = Pre::new(manifest.world, instance_pre).map_err(refused)?;
        let settings = &self.runtime.settings;
        let limits = CallLimits {
            timeout: Duration::from_millis(
                manifest
                    .limits
                    .timeout_ms
                    .unwrap_or(settings.timeout_ms)
                    .min(settings.timeout_ms),
            ),
            memory_bytes: manifest
                .limits
                .memory_bytes
                .unwrap_or(settings.memory_bytes)
                .min(settings.memory_bytes),
            // A manifest may ask for less fuel than the operator's setting, never more.
            fuel: match (manifest.limits.fuel, settings.fuel) {
                (Some(asked), Some(cap)) => Some(asked.min(cap)),
                (asked, cap) => asked.or(cap),
            },
            io_budget: Duration::from_millis(settings.io_budget_ms),
        };
        let http = match &manifest.capabilities.http {
            Some(grant) => Some(
                HttpClient::new(grant, &self.runtime.services)
                    .map_err(|e| PluginError::Runtime(e.to_string()))?,
            ),
            None => None,
        };
        Ok(LoadedPlugin {
            info: PluginInfo {
                name: name.to_string(),
                world: manifest.world,
                version: manifest.version.clone(),
                origin,
                description: manifest.description.clone(),
                granted: manifest.capabilities.names(),
                imports: inspection.capabilities,
                timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
                memory_bytes: limits.memory_bytes,
            },
            granted: Arc::new(Granted {
                plugin: Arc::from(name),
                grants: manifest.capabilities.clone(),
                http,
                settings: self
                    .runtime
                    .settings
                    .settings
                    .get(name)
                    .map(|table| {
                        table
                            .iter()
                            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
            limits,
            pre,
        })
    }

    /// Adds (or replaces) a plugin outside `plugins.dir`, e.g. one built by a test.
    pub fn install(&self, plugin: LoadedPlugin) -> Result<(), PluginError> {
        let mut guard = self.registry.write().expect("registry lock");
        if let Some(existing) = guard.get(&plugin.info.name)
            && existing.info.origin == "built-in"
        {
            return Err(PluginError::Refused {
                plugin: plugin.info.name.clone(),
                message: "a built-in plugin has that name".into(),
            });
        }
        let mut next = (**guard).clone();
        next.insert(plugin.info.name.clone(), Arc::new(plugin));
        *guard = Arc::new(next);
        drop(guard);
        self.load_routes();
        Ok(())
    }

    /// (Re)loads the external plugins of `plugins.dir`: every `*.toml` manifest with its
    /// component. External plugins no longer there are dropped; built-ins stay.
    pub fn reload(&self) -> Vec<LoadReport> {
        let Some(dir) = self.runtime.settings.dir.clone() else {
            return Vec::new();
        };
        let mut reports = Vec::new();
        let mut manifests: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect(),
            Err(source) => {
                reports.push(LoadReport {
                    manifest: dir.clone(),
                    result: Err(PluginError::Io { path: dir, source }),
                });
                return reports;
            }
        };
        manifests.sort();
        let mut loaded = Vec::new();
        for path in manifests {
            let result = Manifest::read(&path).and_then(|manifest| {
                let component = manifest.component_path(&path);
                let bytes = std::fs::read(&component).map_err(|source| PluginError::Io {
                    path: component.clone(),
                    source,
                })?;
                let plugin = self.load(&manifest, &bytes, component.display().to_string())?;
                if builtin::BUILTINS.iter().any(|b| b.name == manifest.name) {
                    return Err(PluginError::Refused {
                        plugin: manifest.name.clone(),
                        message: "a built-in plugin has that name".into(),
                    });
                }
                Ok(plugin)
            });
            let result = result.map(|plugin| {
                let name = plugin.info.name.clone();
                loaded.push(plugin);
                name
            });
            if let Ok(name) = &result {
                tracing::info!(plugin = %name, manifest = %path.display(), "plugin loaded");
            }
            reports.push(LoadReport {
                manifest: path,
                result,
            });
        }
        let mut guard = self.registry.write().expect("registry lock");
        let mut next: Registry = guard
            .iter()
            .filter(|(_, p)| p.info.origin == "built-in")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for plugin in loaded {
            next.insert(plugin.info.name.clone(), Arc::new(plugin));
        }
        *guard = Arc::new(next);
        drop(guard);
        // The named transports run the plugins loaded now.
        self.load_routes();
        reports
    }

    /// Reloads `plugins.dir` on every SIGHUP (Unix), for as long as `self` lives.
    pub fn reload_on_sighup(self: &Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let weak = Arc::downgrade(self);
            match signal(SignalKind::hangup()) {
                Ok(mut hangups) => {
                    tokio::spawn(async move {
                        while hangups.recv().await.is_some() {
                            let Some(plugins) = weak.upgrade() else { break };
                            tracing::info!("SIGHUP: reloading plugins");
                            let reports = tokio::task::spawn_blocking(move || plugins.reload())
                                .await
                                .unwrap_or_default();
                            for report in reports {
                                if let Err(err) = report.result {
                                    tracing::error!(manifest = %report.manifest.display(), error = %err, "plugin refused");
                                }
                            }
                        }
                    });
                }
                Err(err) => tracing::warn!(error = %err, "cannot listen for SIGHUP"),
            }
        }
    }

    /// Every loaded plugin, by name.
    pub fn list(&self) -> Vec<PluginInfo> {
        self.registry().values().map(|p| p.info.clone()).collect()
    }

    /// A loaded plugin by name.
    pub fn get(&self, name: &str) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.registry()
            .get(name)
            .cloned()
            .ok_or_else(|| PluginError::NotFound(name.to_string()))
    }

    /// A loaded plugin by name, which must implement `world`.
    pub(super) fn of_world(
        &self,
        name: &str,
        world: World,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        let plugin = self.get(name)?;
        if plugin.info.world != world {
            return Err(PluginError::WrongWorld {
                plugin: name.to_string(),
                expected: world.name(),
                actual: plugin.info.world.name(),
            });
        }
        Ok(plugin)
    }

    /// Reads a component file: its world, exports and the capabilities it asks for; refuses a
    /// file that is not a component of this Herald's plugin interface.
    pub fn check_file(&self, path: &Path) -> Result<CheckReport, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let component = self.runtime.compile(&name, &bytes)?;
        let inspection = self.runtime.inspect(&name, &component)?;
        self.runtime
            .linker
            .instantiate_pre(&component)
            .map_err(|err| PluginError::Refused {
                plugin: name.clone(),
                message: format!("{err:#}"),
            })?;
        Ok(CheckReport {
            world: inspection.world,
            exports: inspection.exports,
            capabilities: inspection.capabilities,
            other_imports: inspection.other_imports,
        })
    }
}
