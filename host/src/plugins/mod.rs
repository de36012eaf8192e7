//! The WebAssembly plugin platform: workflow steps, mail transports, DNS verifiers and billing
//! are components of the WIT package `herald:plugin@0.1.0` (`sdk/wit/`), run by wasmtime.
//!
//! [`Plugins`] is the entry point: it creates the [`runtime::Runtime`] (one engine, a disk cache
//! of compiled components, a linker with a deny-all WASI context and the capabilities), loads
//! the built-in plugins and those of `plugins.dir`, and calls them. Every call runs in a fresh
//! instance (from an `InstancePre`) with its own deadline, memory cap and optional fuel; a trap,
//! a timeout, a limit, a denied capability or a malformed result is a [`PluginError`] for that
//! call only.
//!
//! The parts:
//! - `bindings`: the code generated from the WIT package, used only inside this module;
//! - [`types`]: the host-side values of every world and their conversions, the only types
//!   callers see;
//! - [`host`]: the capabilities (`log`, `clock`, `http`, `dns`, `smtp`, `outbox`), one module
//!   each, and the per-call store state;
//! - [`registry`]: loading, reloading and looking plugins up;
//! - `call` and `worlds`: how an export is called, and each world's call API on [`Plugins`];
//! - [`runtime`]: the engine, the compile cache, the linker and per-call limits.

mod bindings;
pub mod builtin;
mod call;
pub mod engine_config;
pub mod error;
pub mod host;
pub mod manifest;
pub mod registry;
pub mod routing;
pub mod runtime;
pub mod settings;
pub mod types;
mod worlds;

use std::path::Path;
use std::sync::{Arc, RwLock};

pub use error::PluginError;
pub use manifest::{Grants, HttpGrant, Limits, Manifest, WIT_VERSION, World};
pub use registry::{CheckReport, LoadReport, LoadedPlugin, PluginInfo};
pub use routing::{SetupError, TransportConfig, TransportSummary, TransportTables};
pub use settings::{PluginSettings, SmtpTls};
pub use types::{
    BillingError, BillingEvent, CheckedRecord, CheckoutRequest, Contact, DeliveryError,
    DeliveryEvent, DeliveryEventKind, DnsRecord, Effect, Event, EventSummary, FieldError, Outcome,
    OutgoingMessage, Receipt, RecordStatus, Requirement, SendingDomain, Session, StepInput,
    StepResult, Webhook,
};

use runtime::Runtime;

/// The plugin platform: runtime plus registry.
pub struct Plugins {
    runtime: Runtime,
    registry: RwLock<Arc<registry::Registry>>,
    /// The named transports as configured (`[transports.<name>]`).
    transports: std::collections::BTreeMap<String, TransportConfig>,
    /// Their loaded instances.
    routes: RwLock<Arc<routing::Routes>>,
}

impl Plugins {
    /// Starts the runtime and loads the built-in plugins and those of `plugins.dir`. Must run
    /// inside a Tokio runtime. A refused external plugin is logged and skipped.
    pub fn start(settings: &PluginSettings, data_dir: &Path) -> Result<Plugins, PluginError> {
        Plugins::start_with_transports(settings, &TransportTables::new(), data_dir)
    }

    /// [`Plugins::start`], and loads the named transports of `transports` (`[transports.*]`)
    /// over the plugins loaded; [`Plugins::check_setup`] says whether they are usable.
    pub fn start_with_transports(
        settings: &PluginSettings,
        transports: &TransportTables,
        data_dir: &Path,
    ) -> Result<Plugins, PluginError> {
        let plugins = Plugins {
            runtime: Runtime::new(settings, data_dir)?,
            registry: RwLock::default(),
            transports: TransportConfig::read(transports),
            routes: RwLock::default(),
        };
        plugins.load_builtins()?;
        for report in plugins.reload() {
            if let Err(err) = &report.result {
                tracing::error!(manifest = %report.manifest.display(), error = %err, "plugin refused");
            }
        }
        plugins.load_routes();
        tracing::debug!(
            pooling = plugins.runtime.pooling(),
            loaded = plugins.registry().len(),
            "plugins loaded"
        );
        Ok(plugins)
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}
