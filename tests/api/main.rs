//! The test suite of the `herald` crate, in three parts:
//! - `http/`: black-box tests. Each starts the real server on a random port with a fresh
//!   database (SQLite, or PostgreSQL when `HERALD_TEST_POSTGRES_URL` is set) and talks HTTP to
//!   it, with real SMTP, DNS and HTTP servers on loopback where mail, lookups or webhooks happen.
//! - `platform/`: library-level tests of the parts below the API: the plugin runtime and the
//!   built-in plugins, the two migration sets, and the architecture map.
//! - `support/`: the harness that starts servers, and the loopback SMTP, DNS and HTTP servers.
//!
//! `TEST_LOG=1` (or a filter such as `TEST_LOG=herald=debug`) prints the servers' logs.

mod http;
mod platform;
mod support;
