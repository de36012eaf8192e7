//! The `settings` capability: a plugin reads its own table of the operator's settings
//! (`[plugins.settings.<plugin name>]`); no grant is needed, since no other table is reachable.

use super::CallState;
use crate::plugins::bindings::imports::herald::plugin::settings;

impl settings::Host for CallState {
    async fn get(&mut self, name: String) -> wasmtime::Result<Option<String>> {
        Ok(self
            .granted
            .settings
            .get(&name.to_ascii_lowercase())
            .cloned())
    }
}
