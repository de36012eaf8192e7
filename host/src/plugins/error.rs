//! Errors of the plugin runtime.

use std::path::PathBuf;

/// Why loading a plugin or a plugin call failed. A call's error concerns that call only: the
/// runtime goes on serving.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No plugin of that name (or for that step type) is loaded.
    #[error("no plugin named `{0}` is loaded")]
    NotFound(String),
    /// The plugin exists but implements another world.
    #[error("plugin `{plugin}` is a `{actual}` plugin, not a `{expected}` plugin")]
    WrongWorld {
        plugin: String,
        /// The world the caller needs.
        expected: &'static str,
        /// The plugin's world.
        actual: &'static str,
    },
    /// A manifest could not be read or is invalid.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The component is not a valid component or does not match its world.
    #[error("plugin `{plugin}` refused: {message}")]
    Refused {
        plugin: String,
        /// Why, e.g. a world version mismatch.
        message: String,
    },
    /// The call ran past its wall-time deadline.
    #[error("plugin `{plugin}` timed out after {ms} ms")]
    Timeout {
        plugin: String,
        /// The deadline.
        ms: u64,
    },
    /// The plugin tried to grow its memory past its cap.
    #[error("plugin `{plugin}` exceeded its memory limit of {bytes} bytes")]
    MemoryLimit {
        plugin: String,
        /// The cap.
        bytes: u64,
    },
    /// The plugin used up its fuel.
    #[error("plugin `{plugin}` ran out of fuel")]
    OutOfFuel { plugin: String },
    /// The plugin called a capability it was not granted.
    #[error("plugin `{plugin}` called the `{capability}` capability, which it was not granted")]
    CapabilityDenied {
        plugin: String,
        capability: &'static str,
    },
    /// The plugin trapped (a panic, `unreachable`, an out-of-bounds access…).
    #[error("plugin `{plugin}` trapped: {message}")]
    Trap {
        plugin: String,
        /// The trap.
        message: String,
    },
    /// The result is larger than `plugins.max_result_bytes`.
    #[error("plugin `{plugin}` returned {bytes} bytes, more than the limit of {limit}")]
    ResultTooLarge {
        plugin: String,
        /// The result's size.
        bytes: usize,
        limit: usize,
    },
    /// The result is not what the world allows (e.g. a context value that is not JSON).
    #[error("plugin `{plugin}` returned a malformed result: {message}")]
    MalformedResult {
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// The engine, the cache or the instantiation failed.
    #[error("plugin runtime: {0}")]
    Runtime(String),
    /// Reading a component or the cache failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
