//! Guest-side SDK for Herald plugins.
//!
//! Herald's workflow steps and provider integrations (mail transports, DNS verifiers, billing)
//! are WebAssembly components. This crate is where plugin authors will find the typed bindings
//! of the versioned WIT worlds (`sdk/wit/`); those worlds and bindings arrive with the plugin
//! platform, and this crate has no items until then.
