//! The WebAssembly plugin platform: workflow steps, mail transports, DNS verifiers and billing
//! are components of the WIT package `herald:plugin@0.1.0` (`sdk/wit/`), run by wasmtime.
//!
//! [`Plugins`] is the entry point: it creates the [`runtime::Runtime`] (one engine, a disk cache
//! of compiled components, a linker with a deny-all WASI context and the capabilities), loads
//! the built-in plugins and those of `plugins.dir`, and calls them. Every call runs in a fresh
//! instance (from an `InstancePre`) with its own deadline, memory cap and optional fuel; a trap,
//! a timeout, a limit, a denied capability or a malformed result is a [`PluginError`] for that
//! call only.

pub mod bindings;
pub mod builtin;
pub mod capabilities;
pub mod engine_config;
pub mod error;
pub mod manifest;
pub mod net;
pub mod runtime;
pub mod settings;
pub mod types;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use bindings::billing::exports::herald::plugin::billing_provider::{
    BillingError, BillingEvent, CheckoutRequest, Invoice, Session, Webhook,
};
pub use bindings::dns_verifier::exports::herald::plugin::domain_verifier::{
    CheckedRecord, DnsRecord, RecordStatus, Requirement, SendingDomain,
};
pub use bindings::transport::exports::herald::plugin::mail_transport::{
    DeliveryError, DeliveryEvent, DeliveryEventKind, Notification, OutgoingMessage, Receipt,
};
pub use error::PluginError;
pub use manifest::{Grants, HttpGrant, Limits, Manifest, WIT_VERSION, World};
pub use settings::{PluginSettings, SmtpTls};
pub use types::{Contact, Effect, Event, EventSummary, FieldError, Outcome, StepInput, StepResult};

use capabilities::{CallState, Granted, HttpClient};
use runtime::{CallLimits, Runtime, finish};
use wasmtime::component::InstancePre;

/// Extra wall time a call may take beyond its epoch deadline (host I/O, instantiation).
const CALL_GRACE: Duration = Duration::from_millis(50);

/// Runs one export of a loaded plugin in a fresh instance, under the plugin's limits, and maps
/// the end of the call to its result or a [`PluginError`].
macro_rules! call {
    ($self:ident, $plugin:expr, $variant:ident, $world:expr, $iface:ident . $method:ident ( $($arg:expr),* )) => {{
        let plugin = $plugin;
        let Pre::$variant(pre) = &plugin.pre else {
            return Err(PluginError::WrongWorld {
                plugin: plugin.info.name.clone(),
                expected: $world.name(),
                actual: plugin.info.world.name(),
            });
        };
        let mut store = $self.runtime.store(&plugin.granted, &plugin.limits);
        let call = async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance.$iface().$method(&mut store $(, $arg)*).await
        };
        let outcome = tokio::time::timeout(
            plugin.limits.timeout + plugin.limits.io_budget + CALL_GRACE,
            call,
        )
        .await;
        finish(&plugin.info.name, &plugin.limits, &store, outcome)
    }};
}

/// What `herald plugins list` shows of a loaded plugin.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfo {
    /// The plugin's name.
    pub name: String,
    /// Its world.
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

enum Pre {
    Step(bindings::step::StepPre<CallState>),
    Transport(bindings::transport::TransportPre<CallState>),
    DnsVerifier(bindings::dns_verifier::DnsVerifierPre<CallState>),
    Billing(bindings::billing::BillingPre<CallState>),
}

/// A loaded plugin, ready to instantiate.
pub struct LoadedPlugin {
    info: PluginInfo,
    granted: Arc<Granted>,
    limits: CallLimits,
    pre: Pre,
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
    /// The manifest.
    pub manifest: PathBuf,
    /// The plugin's name, or why it was refused.
    pub result: Result<String, PluginError>,
}

/// The plugin platform: runtime plus registry.
pub struct Plugins {
    runtime: Runtime,
    registry: RwLock<Arc<BTreeMap<String, Arc<LoadedPlugin>>>>,
}

/// Adds `bytes`'s length, or the lengths of its strings, to a result-size count.
fn oversize(plugin: &str, bytes: usize, limit: usize) -> Result<(), PluginError> {
    if bytes > limit {
        return Err(PluginError::ResultTooLarge {
            plugin: plugin.to_string(),
            bytes,
            limit,
        });
    }
    Ok(())
}

impl Plugins {
    /// Starts the runtime and loads the built-in plugins and those of `plugins.dir`. Must run
    /// inside a Tokio runtime. A refused external plugin is logged and skipped.
    pub fn start(settings: &PluginSettings, data_dir: &Path) -> Result<Plugins, PluginError> {
        let runtime = Runtime::new(settings, data_dir)?;
        let plugins = Plugins {
            runtime,
            registry: RwLock::new(Arc::new(BTreeMap::new())),
        };
        let mut registry = BTreeMap::new();
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
            let component = plugins.runtime.builtin_component(builtin)?;
            let plugin = plugins.prepare(&manifest, component, "built-in".into())?;
            registry.insert(builtin.name.to_string(), Arc::new(plugin));
        }
        *plugins.registry.write().expect("registry lock") = Arc::new(registry);
        for report in plugins.reload() {
            if let Err(err) = &report.result {
                tracing::error!(manifest = %report.manifest.display(), error = %err, "plugin refused");
            }
        }
        tracing::debug!(
            pooling = plugins.runtime.pooling(),
            loaded = plugins.registry().len(),
            "plugins loaded"
        );
        Ok(plugins)
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    fn registry(&self) -> Arc<BTreeMap<String, Arc<LoadedPlugin>>> {
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
        let pre = match manifest.world {
            World::Step => Pre::Step(bindings::step::StepPre::new(instance_pre).map_err(refused)?),
            World::Transport => Pre::Transport(
                bindings::transport::TransportPre::new(instance_pre).map_err(refused)?,
            ),
            World::DnsVerifier => Pre::DnsVerifier(
                bindings::dns_verifier::DnsVerifierPre::new(instance_pre).map_err(refused)?,
            ),
            World::Billing => {
                Pre::Billing(bindings::billing::BillingPre::new(instance_pre).map_err(refused)?)
            }
        };
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
            fuel: manifest.limits.fuel,
            io_budget: Duration::from_millis(settings.io_budget_ms),
        };
        let http = match &manifest.capabilities.http {
            Some(grant) => {
                Some(HttpClient::new(grant, &self.runtime.services).map_err(PluginError::Runtime)?)
            }
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
        let mut next: BTreeMap<String, Arc<LoadedPlugin>> = guard
            .iter()
            .filter(|(_, p)| p.info.origin == "built-in")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for plugin in loaded {
            next.insert(plugin.info.name.clone(), Arc::new(plugin));
        }
        *guard = Arc::new(next);
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

    fn of_world(&self, name: &str, world: World) -> Result<Arc<LoadedPlugin>, PluginError> {
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

    /// The plugin that runs a workflow step: a built-in for the seven step types, or for
    /// `PLUGIN` the step plugin named by `config.plugin`. This is the lookup the workflow
    /// engine uses.
    pub fn step_plugin(
        &self,
        step_type: &str,
        config: &Value,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        if step_type == "PLUGIN" {
            let name = config
                .get("plugin")
                .and_then(Value::as_str)
                .ok_or_else(|| PluginError::NotFound("(config.plugin is not set)".into()))?;
            return self.of_world(name, World::Step);
        }
        let name = builtin::STEP_TYPES
            .iter()
            .find(|(t, _)| *t == step_type)
            .map(|(_, name)| *name)
            .ok_or_else(|| PluginError::NotFound(format!("step type {step_type}")))?;
        self.of_world(name, World::Step)
    }

    /// Validates a step config: an empty list means it is valid. For `PLUGIN`, a missing or
    /// unknown `config.plugin` is reported as a field error too.
    pub async fn validate_step(
        &self,
        step_type: &str,
        config: &Value,
    ) -> Result<Vec<FieldError>, PluginError> {
        if !config.is_object() {
            return Ok(vec![FieldError {
                field: "config".into(),
                message: "must be an object".into(),
            }]);
        }
        let plugin = match self.step_plugin(step_type, config) {
            Ok(plugin) => plugin,
            Err(PluginError::NotFound(_) | PluginError::WrongWorld { .. })
                if step_type == "PLUGIN" =>
            {
                return Ok(vec![FieldError {
                    field: "plugin".into(),
                    message: "must name a loaded step plugin".into(),
                }]);
            }
            Err(err) => return Err(err),
        };
        let json = config.to_string();
        let errors = call!(
            self,
            &plugin,
            Step,
            World::Step,
            herald_plugin_workflow_step.call_validate(&json)
        )?;
        let size = errors.iter().map(|e| e.field.len() + e.message.len()).sum();
        oversize(
            &plugin.info.name,
            size,
            self.runtime.settings.max_result_bytes,
        )?;
        Ok(types::field_errors(errors))
    }

    /// Runs a step once. A step's own `fail` outcome is a result, not an error.
    pub async fn run_step(
        &self,
        step_type: &str,
        input: &StepInput,
    ) -> Result<StepResult, PluginError> {
        let plugin = self.step_plugin(step_type, &input.config)?;
        self.run_step_with(&plugin, input).await
    }

    /// Runs a step plugin once.
    pub async fn run_step_with(
        &self,
        plugin: &LoadedPlugin,
        input: &StepInput,
    ) -> Result<StepResult, PluginError> {
        let wit_input = input.to_wit();
        let result = call!(
            self,
            plugin,
            Step,
            World::Step,
            herald_plugin_workflow_step.call_run(&wit_input)
        )?;
        oversize(
            &plugin.info.name,
            types::result_size(&result),
            self.runtime.settings.max_result_bytes,
        )?;
        types::from_wit(result).map_err(|message| PluginError::MalformedResult {
            plugin: plugin.info.name.clone(),
            message,
        })
    }

    fn transport(&self, name: Option<&str>) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.of_world(
            name.unwrap_or(&self.runtime.settings.transport),
            World::Transport,
        )
    }

    /// Delivers a message through the transport `name` (default: `plugins.transport`). The
    /// outer error is the plugin's failure; the inner one is the transport's answer.
    pub async fn deliver(
        &self,
        name: Option<&str>,
        message: &OutgoingMessage,
    ) -> Result<Result<Receipt, DeliveryError>, PluginError> {
        let plugin = self.transport(name)?;
        call!(
            self,
            &plugin,
            Transport,
            World::Transport,
            herald_plugin_mail_transport.call_deliver(message)
        )
    }

    /// Authenticates and parses an inbound provider notification with the transport `name`
    /// (default: `plugins.transport`); `plugins.notify_secret` is passed as the secret.
    pub async fn parse_notification(
        &self,
        name: Option<&str>,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Result<Vec<DeliveryEvent>, String>, PluginError> {
        let plugin = self.transport(name)?;
        let notification = Notification {
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            body,
            secret: self.runtime.settings.notify_secret.clone(),
        };
        call!(
            self,
            &plugin,
            Transport,
            World::Transport,
            herald_plugin_mail_transport.call_parse_notification(&notification)
        )
    }

    fn verifier(&self) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.of_world(&self.runtime.settings.dns_verifier, World::DnsVerifier)
    }

    /// The DNS records a sending domain must publish (from `plugins.dns_verifier`).
    pub async fn domain_records(
        &self,
        domain: &SendingDomain,
    ) -> Result<Vec<DnsRecord>, PluginError> {
        let plugin = self.verifier()?;
        call!(
            self,
            &plugin,
            DnsVerifier,
            World::DnsVerifier,
            herald_plugin_domain_verifier.call_records(domain)
        )
    }

    /// Looks a sending domain's records up and reports each one's state.
    pub async fn verify_domain(
        &self,
        domain: &SendingDomain,
    ) -> Result<Vec<CheckedRecord>, PluginError> {
        let plugin = self.verifier()?;
        call!(
            self,
            &plugin,
            DnsVerifier,
            World::DnsVerifier,
            herald_plugin_domain_verifier.call_verify(domain)
        )
    }

    /// Whether billing is on (`plugins.billing`).
    pub async fn billing_enabled(&self) -> Result<bool, PluginError> {
        let plugin = self.of_world(&self.runtime.settings.billing, World::Billing)?;
        call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_enabled()
        )
    }

    /// Starts a checkout with the billing plugin.
    pub async fn billing_checkout(
        &self,
        request: &CheckoutRequest,
    ) -> Result<Result<Session, BillingError>, PluginError> {
        let plugin = self.of_world(&self.runtime.settings.billing, World::Billing)?;
        call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_checkout(request)
        )
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
