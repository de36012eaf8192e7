//! The `log` capability: a plugin's messages go to the host's log, tagged with its name.

use super::CallState;
use crate::plugins::bindings::imports::herald::plugin::log;

/// The longest message kept, in characters; the rest is cut.
const MAX_MESSAGE_CHARS: usize = 4096;

impl log::Host for CallState {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        if !self.granted.grants.log {
            return Err(self.deny("log"));
        }
        let plugin = &*self.granted.plugin;
        let message: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{message}"),
            log::Level::Debug => tracing::debug!(plugin, "{message}"),
            log::Level::Info => tracing::info!(plugin, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, "{message}"),
            log::Level::Error => tracing::error!(plugin, "{message}"),
        }
        Ok(())
    }
}
