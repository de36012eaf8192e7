//! Logging: structured `tracing` to stderr, as text or JSON.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, Settings};

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the `log` setting.
pub fn init(settings: &Settings) {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| {
        EnvFilter::try_new(&settings.log).unwrap_or_else(|_| EnvFilter::new("info"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match settings.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
