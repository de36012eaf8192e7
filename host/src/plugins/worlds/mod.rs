//! Each world's call API, as `impl Plugins` blocks: what the host asks of step, transport, DNS
//! verifier and billing plugins. Every call is a span named after the method, with the
//! plugin's name in its `plugin` field.

mod billing;
mod dns_verifier;
mod step;
mod transport;
