//! The host side of the capabilities, one module per capability (its `Host` impl and the
//! service it uses), and the per-call store state. A call to a capability the plugin was not
//! granted traps that call.

pub mod clock;
pub mod dns;
pub mod http;
pub mod log;
pub mod outbox;
pub mod settings;
pub mod smtp;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::imports::herald::plugin::types;
use super::manifest::Grants;
use super::settings::PluginSettings;

pub use dns::{DnsSetupError, LookupError};
pub use http::HttpClient;
pub use outbox::OutboxError;
pub use smtp::SmtpSetupError;

/// Services shared by every plugin call, one per capability that needs one.
pub struct Services {
    dns: dns::Dns,
    smtp: smtp::Smtp,
    outbox: outbox::Outbox,
    http: http::HttpLimits,
}

impl Services {
    /// Builds the shared services from the settings; `data_dir` holds the outbox. A DNS
    /// resolver that cannot be built only disables the `dns` capability.
    pub fn new(
        settings: &PluginSettings,
        data_dir: &std::path::Path,
    ) -> Result<Services, SmtpSetupError> {
        Ok(Services {
            dns: dns::Dns::new(settings),
            smtp: smtp::Smtp::new(settings)?,
            outbox: outbox::Outbox::new(data_dir),
            http: http::HttpLimits::new(settings),
        })
    }

    /// The values of the `record_type` records at `name`, through the resolver the `dns`
    /// capability uses.
    pub async fn resolve(
        &self,
        name: &str,
        record_type: hickory_resolver::proto::rr::RecordType,
    ) -> Result<Vec<String>, LookupError> {
        self.dns.lookup(name, record_type).await
    }

    /// The folder the outbox writes to.
    pub fn outbox_dir(&self) -> &std::path::Path {
        self.outbox.dir()
    }
}

/// What one plugin is granted, with the clients its grants need.
pub struct Granted {
    /// The plugin's name (for logs and errors).
    pub plugin: Arc<str>,
    pub grants: Grants,
    /// The HTTP client, when `http` is granted.
    pub http: Option<HttpClient>,
    /// The plugin's own settings (`plugins.settings.<name>`), names lower-cased.
    pub settings: std::collections::BTreeMap<String, String>,
}

/// Caps the memory of one instance and remembers whether the cap was hit.
pub struct MemoryLimiter {
    cap: usize,
    /// Whether a memory grew past the cap.
    pub hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The WASI clocks of a plugin without the `clock` grant: always the epoch.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// The state of one plugin call's store.
pub struct CallState {
    granted: Arc<Granted>,
    services: Arc<Services>,
    wasi: WasiCtx,
    table: ResourceTable,
    /// The memory cap.
    pub limiter: MemoryLimiter,
    /// The capability the plugin called without a grant, if it did.
    pub denied: Option<&'static str>,
    /// Wall time spent waiting on host I/O (DNS, HTTP, SMTP, files) in this call; the guest's
    /// deadline does not count it (each capability has its own timeout).
    pub io_time: Duration,
    /// Most wall time this call may spend on host I/O (`plugins.io_budget_ms`): a capability
    /// refuses, with a transient error, I/O that could run past it, so that a batch call ends
    /// with an answer for every message instead of being cut off after some were sent.
    pub io_budget: Duration,
}

impl CallState {
    /// A fresh state with a deny-all WASI context (no files, environment, arguments, network
    /// or inherited standard streams; clocks and randomness only with the `clock` grant).
    pub fn new(granted: Arc<Granted>, services: Arc<Services>, memory_cap: u64) -> CallState {
        let mut wasi = WasiCtx::builder();
        wasi.allow_blocking_current_thread(false)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if !granted.grants.clock {
            // Without the `clock` grant a plugin sees neither time nor entropy through WASI: a
            // clock frozen at the epoch and fixed random bytes, enough for a language runtime's
            // start-up (hash seeds) and nothing to time or fingerprint the host with.
            wasi.wall_clock(FrozenClock)
                .monotonic_clock(FrozenClock)
                .secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a; 32]))
                .insecure_random(wasmtime_wasi::Deterministic::new(vec![0xa5; 32]))
                .insecure_random_seed(0);
        }
        let wasi = wasi.build();
        CallState {
            granted,
            services,
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                cap: usize::try_from(memory_cap).unwrap_or(usize::MAX),
                hit: false,
            },
            denied: None,
            io_time: Duration::ZERO,
            io_budget: Duration::MAX,
        }
    }

    /// Records that the plugin called `capability` without a grant; the error traps the call.
    fn deny(&mut self, capability: &'static str) -> wasmtime::Error {
        self.denied = Some(capability);
        wasmtime::format_err!(
            "plugin `{}` is not granted the `{capability}` capability",
            self.granted.plugin
        )
    }
}

/// Runs host I/O, adding its wall time to `io_time` (a call's [`CallState::io_time`]).
async fn timed<T>(io_time: &mut Duration, work: impl Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = work.await;
    *io_time += started.elapsed();
    out
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for CallState {}
