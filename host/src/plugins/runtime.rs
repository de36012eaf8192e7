//! The engine (one per process), the on-disk cache of compiled components, the linker with the
//! deny-all WASI context and the capabilities, and per-call stores with their limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
};

use super::bindings;
use super::builtin::{self, Builtin};
use super::engine_config::{compatibility, compile_config};
use super::error::PluginError;
use super::host::{CallState, Granted, Services};
use super::manifest::{WIT_VERSION, World};
use super::settings::PluginSettings;

/// The capability interfaces (the other `herald:plugin` imports are type-only).
const CAPABILITIES: [&str; 7] = ["log", "clock", "http", "dns", "smtp", "outbox", "settings"];

/// How often the epoch advances; per-call deadlines are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The plugin runtime: engine, linker, services and cache.
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<CallState>,
    pub(crate) settings: PluginSettings,
    pub(crate) services: Arc<Services>,
    cache_dir: PathBuf,
    pooling: bool,
    stop: Arc<AtomicBool>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn config(settings: &PluginSettings, pooling: bool) -> Config {
    let mut config = compile_config(settings.fuel.is_some());
    if pooling {
        let n = settings.pool_instances.max(1);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(n)
            .total_core_instances(n.saturating_mul(16))
            .total_memories(n.saturating_mul(2))
            .total_tables(n.saturating_mul(4))
            .total_stacks(n)
            .max_core_instances_per_component(32)
            .max_memories_per_component(4)
            .max_tables_per_component(8)
            .max_memory_size(usize::try_from(settings.memory_bytes).unwrap_or(usize::MAX))
            .max_unused_warm_slots(n.min(32))
            // Reset reused slots by zeroing instead of unmapping, so that the next instance does
            // not page-fault its stack, heap start and tables back in (instantiation speed).
            .linear_memory_keep_resident(2 << 20)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(128 << 10)
            // Where Linux offers `PAGEMAP_SCAN` (6.7 and later), reset only the pages the
            // instance wrote instead of `memset`ting the whole resident 2 MiB each time (a step
            // writes a few dozen pages); elsewhere the `memset` above stays.
            .pagemap_scan(Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// A component's world and what it imports, read from its type.
#[derive(Clone, Debug)]
pub struct Inspection {
    /// The world it implements.
    pub world: World,
    /// Its `herald:plugin` exports.
    pub exports: Vec<String>,
    /// The capabilities it imports (`log`, `http`…).
    pub capabilities: Vec<String>,
    /// Its other imports (WASI).
    pub other_imports: Vec<String>,
}

fn split_version(name: &str) -> (&str, Option<&str>) {
    match name.split_once('@') {
        Some((iface, version)) => (iface, Some(version)),
        None => (name, None),
    }
}

impl Runtime {
    /// Creates the engine (pooling allocator when allowed, else on demand), the linker and the
    /// services, and starts the epoch ticker. Must run inside a Tokio runtime.
    pub fn new(settings: &PluginSettings, data_dir: &Path) -> Result<Runtime, PluginError> {
        let (engine, pooling) = if settings.pooling {
            match Engine::new(&config(settings, true)) {
                Ok(engine) => (engine, true),
                Err(err) => {
                    tracing::warn!(error = %err, "the pooling allocator is unavailable; allocating plugin instances on demand");
                    (
                        Engine::new(&config(settings, false)).map_err(runtime_error)?,
                        false,
                    )
                }
            }
        } else {
            (
                Engine::new(&config(settings, false)).map_err(runtime_error)?,
                false,
            )
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(runtime_error)?;
        bindings::imports::Capabilities::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(runtime_error)?;
        let services =
            Services::new(settings, data_dir).map_err(|e| PluginError::Runtime(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("herald-plugin-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| PluginError::Runtime(format!("epoch thread: {e}")))?;
        }
        let cache_dir = settings
            .cache_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("plugin-cache"));
        Ok(Runtime {
            engine,
            linker,
            settings: settings.clone(),
            services: Arc::new(services),
            cache_dir,
            pooling,
            stop,
        })
    }

    /// Whether instances come from the pooling allocator.
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    /// The folder of compiled components.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    fn compatibility(&self) -> String {
        compatibility(&self.engine)
    }

    /// A built-in plugin's component: the artifact `host/build.rs` compiled ahead of time when
    /// this engine can run it (same compatibility hash: the default compile settings on the
    /// machine kind it was built for), else compiled now like any plugin (or read from the
    /// cache). A first start thus compiles nothing.
    pub fn builtin_component(&self, builtin: &Builtin) -> Result<Component, PluginError> {
        if self.compatibility() == builtin::AOT_COMPATIBILITY {
            // SAFETY: the artifact was produced by `precompile_component` of an engine with the
            // same compatibility hash, in this crate's build script, and embedded in the binary;
            // `deserialize` still checks its header.
            match unsafe { Component::deserialize(&self.engine, builtin.precompiled) } {
                Ok(component) => return Ok(component),
                Err(err) => {
                    tracing::warn!(plugin = builtin.name, error = %err, "ignoring an unusable embedded component; compiling it");
                }
            }
        } else {
            tracing::debug!(
                plugin = builtin.name,
                "the engine differs from the build's (fuel metering or another CPU); compiling"
            );
        }
        self.compile(builtin.name, builtin.bytes)
    }

    /// Compiles a component, or loads it from the cache (keyed by the engine's compatibility
    /// hash and the component's SHA-256).
    pub fn compile(&self, plugin: &str, bytes: &[u8]) -> Result<Component, PluginError> {
        let digest = hex::encode(Sha256::digest(bytes));
        let path = self
            .cache_dir
            .join(format!("{}-{digest}.cwasm", self.compatibility()));
        if path.exists() {
            // SAFETY: the cache holds only files this runtime wrote with `precompile_component`
            // for an engine of the same compatibility hash (in the file name); `deserialize_file`
            // still checks the header and refuses files from another engine.
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(component) => return Ok(component),
                Err(err) => {
                    tracing::warn!(plugin, path = %path.display(), error = %err, "ignoring an unusable cached component");
                }
            }
        }
        let refused = |err: wasmtime::Error| PluginError::Refused {
            plugin: plugin.to_string(),
            message: format!("not a valid WebAssembly component: {err}"),
        };
        let compiled = self.engine.precompile_component(bytes).map_err(refused)?;
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.cache_dir)?;
            let tmp = self.cache_dir.join(format!(
                ".{digest}.{}.{:?}.tmp",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, &compiled)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(err) = write() {
            tracing::warn!(plugin, path = %path.display(), error = %err, "cannot cache a compiled component");
        }
        // SAFETY: `compiled` was just produced by `precompile_component` of this engine.
        unsafe { Component::deserialize(&self.engine, &compiled) }.map_err(refused)
    }

    /// Reads a component's world and imports, refusing a version mismatch with a message that
    /// says why.
    pub fn inspect(&self, plugin: &str, component: &Component) -> Result<Inspection, PluginError> {
        let refused = |message: String| PluginError::Refused {
            plugin: plugin.to_string(),
            message,
        };
        let ty = component.component_type();
        let mut worlds = Vec::new();
        let mut exports = Vec::new();
        for (name, _) in ty.exports(&self.engine) {
            let (iface, version) = split_version(name);
            if !iface.starts_with("herald:plugin/") {
                continue;
            }
            exports.push(name.to_string());
            if version != Some(WIT_VERSION) {
                return Err(refused(format!(
                    "it exports `{name}`, built for herald:plugin@{}, but this Herald provides \
                     herald:plugin@{WIT_VERSION}; rebuild it with a herald-sdk for {WIT_VERSION}",
                    version.unwrap_or("(no version)")
                )));
            }
            if let Some(world) = World::ALL.into_iter().find(|w| w.export() == iface) {
                worlds.push(world);
            }
        }
        let world = match worlds.as_slice() {
            [world] => *world,
            [] => {
                return Err(refused(format!(
                    "it exports none of the herald:plugin@{WIT_VERSION} worlds (step, transport, \
                     dns-verifier, billing)"
                )));
            }
            _ => return Err(refused("it exports more than one world".into())),
        };
        let mut capabilities = Vec::new();
        let mut other_imports = Vec::new();
        for (name, _) in ty.imports(&self.engine) {
            let (iface, version) = split_version(name);
            match iface.strip_prefix("herald:plugin/") {
                Some(capability) => {
                    if version != Some(WIT_VERSION) {
                        return Err(refused(format!(
                            "it imports `{name}`, but this Herald provides herald:plugin@{WIT_VERSION}; \
                             rebuild it with a herald-sdk for {WIT_VERSION}"
                        )));
                    }
                    if CAPABILITIES.contains(&capability) {
                        capabilities.push(capability.to_string());
                    }
                }
                None => other_imports.push(name.to_string()),
            }
        }
        Ok(Inspection {
            world,
            exports,
            capabilities,
            other_imports,
        })
    }

    /// A store for one call, with the plugin's memory cap, epoch deadline and fuel.
    pub(crate) fn store(&self, granted: &Arc<Granted>, limits: &CallLimits) -> Store<CallState> {
        let mut state = CallState::new(granted.clone(), self.services.clone(), limits.memory_bytes);
        state.io_budget = limits.io_budget;
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        // The deadline counts the guest's own time: time spent waiting on host I/O (bounded by
        // each capability's timeout, and in all by `io_budget_ms`) is added back when the epoch
        // deadline is reached.
        let ticks = |d: Duration| {
            u64::try_from(d.as_millis() / EPOCH_TICK.as_millis() + 1).unwrap_or(u64::MAX)
        };
        store.set_epoch_deadline(ticks(limits.timeout));
        let started = std::time::Instant::now();
        let timeout = limits.timeout;
        store.epoch_deadline_callback(move |ctx| {
            let guest = started.elapsed().saturating_sub(ctx.data().io_time);
            if guest < timeout {
                Ok(wasmtime::UpdateDeadline::Continue(ticks(timeout - guest)))
            } else {
                Err(Trap::Interrupt.into())
            }
        });
        if self.settings.fuel.is_some() {
            let fuel = limits.fuel.or(self.settings.fuel).unwrap_or(u64::MAX);
            // Fuel is enabled on the engine whenever `settings.fuel` is set.
            let _ = store.set_fuel(fuel);
        }
        store
    }
}

/// The effective limits of one plugin's calls.
#[derive(Clone, Debug)]
pub struct CallLimits {
    /// Wall-time deadline of the guest's own work (host I/O not counted).
    pub timeout: Duration,
    /// Most wall time the call may additionally spend waiting on host I/O.
    pub io_budget: Duration,
    /// Memory cap in bytes.
    pub memory_bytes: u64,
    /// Fuel per call, when metered.
    pub fuel: Option<u64>,
}

/// Maps the end of a call to its result or to a clear error for that call.
pub(crate) fn finish<R>(
    plugin: &str,
    limits: &CallLimits,
    store: &Store<CallState>,
    outcome: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
    started: std::time::Instant,
) -> Result<R, PluginError> {
    let result = classify(plugin, limits, store, outcome);
    let label = match &result {
        Ok(_) => "ok",
        Err(PluginError::Timeout { .. }) => "timeout",
        Err(PluginError::CapabilityDenied { .. }) => "denied",
        Err(PluginError::MemoryLimit { .. }) => "memory",
        Err(PluginError::OutOfFuel { .. }) => "fuel",
        Err(_) => "trap",
    };
    metrics::counter!("herald_plugin_calls_total", "plugin" => plugin.to_string(), "outcome" => label)
        .increment(1);
    metrics::histogram!("herald_plugin_call_seconds", "plugin" => plugin.to_string())
        .record(started.elapsed().as_secs_f64());
    result
}

/// The result of a call: its value, or why it failed (timeout, denied capability, memory, fuel,
/// trap).
fn classify<R>(
    plugin: &str,
    limits: &CallLimits,
    store: &Store<CallState>,
    outcome: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
) -> Result<R, PluginError> {
    let plugin = plugin.to_string();
    let timeout = || PluginError::Timeout {
        plugin: plugin.clone(),
        ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
    };
    let err = match outcome {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(err)) => err,
        Err(_) => return Err(timeout()),
    };
    let state = store.data();
    if let Some(capability) = state.denied {
        return Err(PluginError::CapabilityDenied { plugin, capability });
    }
    if state.limiter.hit {
        return Err(PluginError::MemoryLimit {
            plugin,
            bytes: limits.memory_bytes,
        });
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Err(timeout()),
        Some(Trap::OutOfFuel) => Err(PluginError::OutOfFuel { plugin }),
        Some(Trap::UnreachableCodeReached) => Err(PluginError::Trap {
            plugin,
            message: "the plugin panicked or aborted (wasm `unreachable`)".into(),
        }),
        Some(trap) => Err(PluginError::Trap {
            plugin,
            message: trap.to_string(),
        }),
        None => Err(PluginError::Trap {
            plugin,
            message: format!("{err:#}"),
        }),
    }
}

fn runtime_error(err: wasmtime::Error) -> PluginError {
    PluginError::Runtime(format!("{err:#}"))
}
