//! The `plugins` settings (TOML table `[plugins]`, environment `HERALD_PLUGINS__<NAME>`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the SMTP capability connects to its relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    /// Plain text (only for a relay on a trusted network).
    None,
    /// Plain connection upgraded with `STARTTLS` (required).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// Settings of the plugin runtime and of the host capabilities.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct PluginSettings {
    /// A folder of external plugins: `*.toml` manifests next to their components.
    pub dir: Option<PathBuf>,
    /// Where compiled components are cached; defaults to `<data_dir>/plugin-cache`.
    pub cache_dir: Option<PathBuf>,
    /// Wall-time limit of one plugin call's own work, in milliseconds; time spent waiting on
    /// host I/O (DNS, HTTP, SMTP) is not counted here.
    pub timeout_ms: u64,
    /// Most wall time one plugin call may spend waiting on host I/O, in milliseconds, on top of
    /// `timeout_ms` (each capability also has its own timeout).
    pub io_budget_ms: u64,
    /// Memory limit of one plugin instance, in bytes.
    pub memory_bytes: u64,
    /// Fuel (roughly, WebAssembly instructions) per call; unset means no fuel metering.
    pub fuel: Option<u64>,
    /// Largest result a plugin call may return (sum of its strings and byte lists), in bytes.
    pub max_result_bytes: usize,
    /// Use the pooling instance allocator (falls back to on-demand when the machine refuses it).
    pub pooling: bool,
    /// Instances the pool holds at once (concurrent plugin calls).
    pub pool_instances: u32,
    /// The transport plugin that delivers mail (`outbox`, `smtp` or an external one).
    pub transport: String,
    /// The DNS verifier plugin.
    pub dns_verifier: String,
    /// The billing plugin (`none`, `stripe` or an external one).
    pub billing: String,
    /// Hosts the `stripe` billing plugin may call (its API); tests point it at a loopback
    /// server.
    pub billing_http_allow: Vec<String>,
    /// Whether the billing plugin may call loopback and private addresses.
    pub billing_http_allow_private: bool,
    /// Whether the provider transport plugins (`ses`, `postmark`, `mailgun`, `sendgrid`,
    /// `resend`) may call loopback and private addresses (a test double at their `api_base`).
    pub transport_http_allow_private: bool,
    /// The secret that payment webhooks are signed with (for `stripe`, the endpoint's `whsec_…`
    /// signing secret).
    pub billing_webhook_secret: Option<String>,
    /// Each plugin's own settings, by plugin name: `[plugins.settings.stripe]
    /// secret_key = "sk_…"` (environment `HERALD_PLUGINS__SETTINGS__STRIPE__SECRET_KEY`).
    pub settings: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// Shared secret that inbound provider notifications must carry.
    pub notify_secret: Option<String>,
    /// Hosts the built-in `WEBHOOK` step may call (`*`, `host` or `*.domain`).
    pub webhook_allow: Vec<String>,
    /// Whether the `WEBHOOK` step may call loopback, private, link-local and metadata addresses.
    pub webhook_allow_private: bool,
    /// Default timeout of an outbound HTTP request, in milliseconds.
    pub http_timeout_ms: u64,
    /// Largest outbound HTTP response body, in bytes.
    pub http_max_response_bytes: u64,
    /// Most redirects an outbound HTTP request follows (each one checked again).
    pub http_max_redirects: usize,
    /// Bytes of answers the HTTP response cache holds (the `GET`s plugins ask to cache with
    /// `x-herald-cache: <seconds>`); the oldest go first, `0` turns caching off.
    pub http_cache_bytes: u64,
    /// Nameservers of the DNS capability (`ip` or `ip:port`); empty uses the system's.
    pub dns_nameservers: Vec<String>,
    /// Timeout of one DNS lookup, in milliseconds.
    pub dns_timeout_ms: u64,
    /// The SMTP relay of the `smtp` capability (host name); unset disables SMTP submission.
    pub smtp_host: Option<String>,
    /// The relay's port.
    pub smtp_port: u16,
    /// `none`, `starttls` or `tls`.
    pub smtp_tls: SmtpTls,
    /// A PEM file of certificate authorities to trust for the relay's certificate, in addition
    /// to the public roots (for a relay with a private CA).
    pub smtp_ca_file: Option<PathBuf>,
    /// SMTP user name (with `smtp_password`).
    pub smtp_username: Option<String>,
    /// SMTP password.
    pub smtp_password: Option<String>,
    /// Connections kept open to the relay.
    pub smtp_pool_size: u32,
    /// Timeout of one SMTP command, in milliseconds.
    pub smtp_timeout_ms: u64,
}

impl Default for PluginSettings {
    fn default() -> PluginSettings {
        PluginSettings {
            dir: None,
            cache_dir: None,
            timeout_ms: 2_000,
            io_budget_ms: 60_000,
            memory_bytes: 64 * 1024 * 1024,
            fuel: None,
            max_result_bytes: 1024 * 1024,
            pooling: true,
            pool_instances: 128,
            transport: "outbox".into(),
            dns_verifier: "default".into(),
            billing: "none".into(),
            billing_http_allow: vec!["api.stripe.com".into()],
            billing_http_allow_private: false,
            billing_webhook_secret: None,
            transport_http_allow_private: false,
            settings: std::collections::BTreeMap::new(),
            notify_secret: None,
            webhook_allow: vec!["*".into()],
            webhook_allow_private: false,
            http_timeout_ms: 10_000,
            http_max_response_bytes: 1024 * 1024,
            http_max_redirects: 5,
            http_cache_bytes: 4 * 1024 * 1024,
            dns_nameservers: Vec::new(),
            dns_timeout_ms: 3_000,
            smtp_host: None,
            smtp_port: 587,
            smtp_tls: SmtpTls::Starttls,
            smtp_ca_file: None,
            smtp_username: None,
            smtp_password: None,
            smtp_pool_size: 4,
            smtp_timeout_ms: 30_000,
        }
    }
}
