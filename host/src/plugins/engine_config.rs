//! The part of the wasmtime engine configuration that decides how components are compiled.
//!
//! It is shared, as this very file, by the runtime and by `host/build.rs`, which compiles the
//! built-in plugins ahead of time with it (`#[path]`-included there, so it may use nothing but
//! wasmtime). Whatever changes compiled code belongs here and nowhere else: an engine built from
//! another configuration has another compatibility hash, and the embedded artifacts are then
//! ignored in favour of compiling at start (see `plugins::builtin`). The allocation strategy does
//! not change compiled code (wasmtime's `PoolingAllocationConfig` docs) and stays in the runtime.

use std::hash::{Hash, Hasher};

use wasmtime::{Config, Engine, OptLevel};

/// The compilation settings of every plugin engine; `fuel` turns on fuel metering
/// (`plugins.fuel`), which instruments the compiled code.
pub fn compile_config(fuel: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.consume_fuel(fuel);
    config.cranelift_opt_level(OptLevel::Speed);
    config
}

/// What an artifact compiled by `engine` needs of the engine that runs it: a digest of the
/// engine's compatibility hash (wasmtime version, target, compiler flags, tunables, features).
/// Cached and embedded artifacts are keyed by it.
pub fn compatibility(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}
