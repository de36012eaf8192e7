//! Host bindings of the WIT worlds in `sdk/wit/` (package `herald:plugin@0.1.0`).
//!
//! The capability interfaces are generated once, in [`imports`] (from the WIT world
//! `capabilities`), and shared by the four plugin worlds. This module is generated code only;
//! the host's side of the capabilities is in [`super::host`] and the host-side values of the
//! worlds in [`super::types`]. Every import is `async` (HTTP, DNS and SMTP do I/O) and `trappable` (a call to a
//! capability the plugin was not granted traps the call).

#![allow(missing_docs, clippy::all)]

/// The capability interfaces every world imports (WIT world `capabilities`).
pub mod imports {
    wasmtime::component::bindgen!({
        path: "../sdk/wit",
        world: "capabilities",
        imports: { default: async | trappable },
    });
}

/// Bindings of one plugin world, reusing the capability interfaces generated above.
macro_rules! world {
    ($(#[$doc:meta])* $module:ident, $world:literal) => {
        $(#[$doc])*
        pub mod $module {
            wasmtime::component::bindgen!({
                path: "../sdk/wit",
                world: $world,
                imports: { default: async | trappable },
                exports: { default: async },
                with: {
                    "herald:plugin/types": super::imports::herald::plugin::types,
                    "herald:plugin/log": super::imports::herald::plugin::log,
                    "herald:plugin/clock": super::imports::herald::plugin::clock,
                    "herald:plugin/http": super::imports::herald::plugin::http,
                    "herald:plugin/dns": super::imports::herald::plugin::dns,
                    "herald:plugin/smtp": super::imports::herald::plugin::smtp,
                    "herald:plugin/outbox": super::imports::herald::plugin::outbox,
                    "herald:plugin/settings": super::imports::herald::plugin::settings,
                },
            });
        }
    };
}

world!(
    /// The `step` world.
    step,
    "step"
);
world!(
    /// The `transport` world.
    transport,
    "transport"
);
world!(
    /// The `dns-verifier` world.
    dns_verifier,
    "dns-verifier"
);
world!(
    /// The `billing` world.
    billing,
    "billing"
);
