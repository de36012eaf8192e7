//! The `clock` capability: the host's wall clock.

use super::CallState;
use crate::plugins::bindings::imports::herald::plugin::clock;

impl clock::Host for CallState {
    async fn now(&mut self) -> wasmtime::Result<i64> {
        if !self.granted.grants.clock {
            return Err(self.deny("clock"));
        }
        Ok(chrono::Utc::now().timestamp_millis())
    }
}
