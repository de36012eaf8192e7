//! How one export of a loaded plugin is called: the prepared instance of each world, and the
//! `call!` machinery that runs an export in a fresh instance under the plugin's limits.

use std::time::Duration;

use wasmtime::component::InstancePre;

use super::bindings;
use super::error::PluginError;
use super::host::CallState;
use super::manifest::World;

/// Extra wall time a call may take beyond its epoch deadline (host I/O, instantiation).
pub(super) const CALL_GRACE: Duration = Duration::from_millis(50);

/// A component prepared for its world's typed exports.
#[derive(Clone)]
pub(super) enum Pre {
    Step(bindings::step::StepPre<CallState>),
    Transport(bindings::transport::TransportPre<CallState>),
    DnsVerifier(bindings::dns_verifier::DnsVerifierPre<CallState>),
    Billing(bindings::billing::BillingPre<CallState>),
}

impl Pre {
    /// Checks that `instance_pre` exports `world` and prepares its typed exports.
    pub(super) fn new(world: World, instance_pre: InstancePre<CallState>) -> wasmtime::Result<Pre> {
        Ok(match world {
            World::Step => Pre::Step(bindings::step::StepPre::new(instance_pre)?),
            World::Transport => {
                Pre::Transport(bindings::transport::TransportPre::new(instance_pre)?)
            }
            World::DnsVerifier => {
                Pre::DnsVerifier(bindings::dns_verifier::DnsVerifierPre::new(instance_pre)?)
            }
            World::Billing => Pre::Billing(bindings::billing::BillingPre::new(instance_pre)?),
        })
    }
}

/// Refuses a result whose size (`bytes`: its length, or the lengths of its strings) is over
/// `limit` (`plugins.max_result_bytes`).
pub(super) fn oversize(plugin: &str, bytes: usize, limit: usize) -> Result<(), PluginError> {
    if bytes > limit {
        return Err(PluginError::ResultTooLarge {
            plugin: plugin.to_string(),
            bytes,
            limit,
        });
    }
    Ok(())
}

/// Runs one export of a loaded plugin in a fresh instance, under the plugin's limits, and maps
/// the end of the call to its result or a [`PluginError`]. The plugin's name is recorded in the
/// current span's `plugin` field.
macro_rules! call {
    ($self:ident, $plugin:expr, $variant:ident, $world:expr, $iface:ident . $method:ident ( $($arg:expr),* )) => {{
        use $crate::plugins::call::{CALL_GRACE, Pre};
        use $crate::plugins::error::PluginError;
        let plugin: &$crate::plugins::registry::LoadedPlugin = $plugin;
        tracing::Span::current().record("plugin", plugin.info.name.as_str());
        let Pre::$variant(pre) = &plugin.pre else {
            return Err(PluginError::WrongWorld {
                plugin: plugin.info.name.clone(),
                expected: $world.name(),
                actual: plugin.info.world.name(),
            });
        };
        let started = std::time::Instant::now();
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
        $crate::plugins::runtime::finish(&plugin.info.name, &plugin.limits, &store, outcome, started)
    }};
}

pub(super) use call;
