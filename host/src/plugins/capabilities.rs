//! The host side of the capabilities (`log`, `clock`, `http`, `dns`, `smtp`, `outbox`) and the
//! per-call store state. A call to a capability the plugin was not granted traps that call.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use lettre::transport::smtp::PoolConfig;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::capabilities::herald::plugin::{clock, dns, http, log, outbox, smtp, types};
use super::manifest::{Grants, HttpGrant};
use super::net::{self, CheckedResolver, Refusal};
use super::settings::{PluginSettings, SmtpTls};

/// Services shared by every plugin call.
pub struct Services {
    dns: Option<TokioResolver>,
    dns_error: Option<String>,
    smtp: Option<AsyncSmtpTransport<Tokio1Executor>>,
    outbox_dir: PathBuf,
    outbox_index: tokio::sync::Mutex<()>,
    http_timeout: Duration,
    http_max_response_bytes: u64,
    http_max_redirects: usize,
}

fn nameserver(spec: &str) -> Result<NameServerConfig, String> {
    let (ip, port): (IpAddr, u16) = match spec.parse::<SocketAddr>() {
        Ok(addr) => (addr.ip(), addr.port()),
        Err(_) => (
            spec.trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| format!("nameserver `{spec}` is not an `ip` or `ip:port`"))?,
            53,
        ),
    };
    let mut udp = ConnectionConfig::udp();
    udp.port = port;
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = port;
    Ok(NameServerConfig::new(ip, true, vec![udp, tcp]))
}

/// The host's DNS resolver (also used by email verification, with its own timeout).
pub(crate) fn resolver(settings: &PluginSettings) -> Result<TokioResolver, String> {
    let mut builder = if settings.dns_nameservers.is_empty() {
        TokioResolver::builder_tokio().map_err(|e| format!("system DNS configuration: {e}"))?
    } else {
        let servers = settings
            .dns_nameservers
            .iter()
            .map(|s| nameserver(s))
            .collect::<Result<Vec<_>, _>>()?;
        TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(servers),
            TokioRuntimeProvider::default(),
        )
    };
    let options = builder.options_mut();
    options.timeout = Duration::from_millis(settings.dns_timeout_ms);
    options.attempts = 1;
    // Plugins look records up to check them (domain verification): a record just published must
    // be seen within seconds, so answers are cached briefly whatever TTL the zone gives.
    options.positive_max_ttl = Some(Duration::from_secs(60));
    options.negative_max_ttl = Some(Duration::from_secs(5));
    builder.build().map_err(|e| e.to_string())
}

fn smtp_transport(
    settings: &PluginSettings,
) -> Result<Option<AsyncSmtpTransport<Tokio1Executor>>, String> {
    let Some(host) = &settings.smtp_host else {
        return Ok(None);
    };
    let parameters = || -> Result<TlsParameters, String> {
        let mut builder = TlsParameters::builder(host.clone());
        if let Some(path) = &settings.smtp_ca_file {
            let shown = path.display();
            let pem = std::fs::read(path)
                .map_err(|e| format!("plugins.smtp_ca_file `{shown}` cannot be read: {e}"))?;
            if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                return Err(format!(
                    "plugins.smtp_ca_file `{shown}` holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                ));
            }
            let ca = Certificate::from_pem(&pem).map_err(|e| {
                format!("plugins.smtp_ca_file `{shown}` holds no PEM certificate: {e}")
            })?;
            builder = builder.add_root_certificate(ca);
        }
        builder.build().map_err(|e| format!("SMTP TLS: {e}"))
    };
    let tls = match settings.smtp_tls {
        SmtpTls::None => Tls::None,
        SmtpTls::Starttls => Tls::Required(parameters()?),
        SmtpTls::Tls => Tls::Wrapper(parameters()?),
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(settings.smtp_port)
        .tls(tls)
        .timeout(Some(Duration::from_millis(settings.smtp_timeout_ms)))
        .pool_config(PoolConfig::new().max_size(settings.smtp_pool_size.max(1)));
    if let (Some(user), Some(password)) = (&settings.smtp_username, &settings.smtp_password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    Ok(Some(builder.build()))
}

impl Services {
    /// Builds the shared services from the settings; `data_dir` holds the outbox.
    pub fn new(settings: &PluginSettings, data_dir: &std::path::Path) -> Result<Services, String> {
        let (dns, dns_error) = match resolver(settings) {
            Ok(r) => (Some(r), None),
            Err(e) => {
                tracing::warn!(error = %e, "the DNS capability is unavailable");
                (None, Some(e))
            }
        };
        Ok(Services {
            dns,
            dns_error,
            smtp: smtp_transport(settings)?,
            outbox_dir: data_dir.join("outbox"),
            outbox_index: tokio::sync::Mutex::new(()),
            http_timeout: Duration::from_millis(settings.http_timeout_ms),
            http_max_response_bytes: settings.http_max_response_bytes,
            http_max_redirects: settings.http_max_redirects,
        })
    }

    /// The folder the outbox writes to.
    pub fn outbox_dir(&self) -> &std::path::Path {
        &self.outbox_dir
    }
}

/// A plugin's HTTP client: its allowlist, address checks and redirect checks.
pub struct HttpClient {
    grant: HttpGrant,
    client: reqwest::Client,
}

impl HttpClient {
    /// A client for `grant`.
    pub fn new(grant: &HttpGrant, services: &Services) -> Result<HttpClient, String> {
        let allow = grant.allow.clone();
        let allow_private = grant.allow_private;
        let max = services.http_max_redirects;
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max {
                return attempt.error(format!("more than {max} redirects"));
            }
            let host = attempt.url().host_str().unwrap_or("").to_string();
            if !net::host_allowed(&allow, &host) {
                return attempt.error(Refusal::NotAllowed(host));
            }
            if let Some(ip) = net::literal_ip(&host)
                && !allow_private
                && net::is_blocked(ip)
            {
                return attempt.error(Refusal::Blocked(host));
            }
            attempt.follow()
        });
        let client = reqwest::Client::builder()
            .redirect(policy)
            .dns_resolver(Arc::new(CheckedResolver { allow_private }))
            .timeout(services.http_timeout)
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(HttpClient {
            grant: grant.clone(),
            client,
        })
    }

    async fn send(
        &self,
        request: http::Request,
        services: &Services,
    ) -> Result<http::Response, http::Error> {
        let url = reqwest::Url::parse(&request.url)
            .map_err(|e| http::Error::InvalidRequest(format!("bad URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(http::Error::InvalidRequest(
                "the URL must be http or https".into(),
            ));
        }
        let host = url.host_str().unwrap_or("").to_string();
        if !net::host_allowed(&self.grant.allow, &host) {
            return Err(http::Error::NotAllowed(host));
        }
        if let Some(ip) = net::literal_ip(&host)
            && !self.grant.allow_private
            && net::is_blocked(ip)
        {
            return Err(http::Error::BlockedAddress(
                Refusal::Blocked(host).to_string(),
            ));
        }
        let method = match request.method.to_ascii_uppercase().as_str() {
            m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") => {
                reqwest::Method::from_bytes(m.as_bytes()).expect("a valid method")
            }
            other => return Err(http::Error::InvalidRequest(format!("method `{other}`"))),
        };
        let timeout = request
            .timeout_ms
            .map(|ms| Duration::from_millis(ms.into()).min(services.http_timeout))
            .unwrap_or(services.http_timeout);
        let mut builder = self.client.request(method, url).timeout(timeout);
        for (name, value) in &request.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| http::Error::InvalidRequest(format!("header name `{name}`")))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| http::Error::InvalidRequest(format!("header value of `{name}`")))?;
            builder = builder.header(name, value);
        }
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let cap = services.http_max_response_bytes;
        let exchange = async {
            let mut response = builder.send().await.map_err(classify)?;
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            if response.content_length().is_some_and(|len| len > cap) {
                return Err(http::Error::TooLarge(cap));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(classify)? {
                if (body.len() + chunk.len()) as u64 > cap {
                    return Err(http::Error::TooLarge(cap));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(http::Response {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(http::Error::Timeout))
    }
}

/// Maps a reqwest error to the capability's error, finding refusals in its source chain.
fn classify(err: reqwest::Error) -> http::Error {
    if err.is_timeout() {
        return http::Error::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    let mut chain = Vec::new();
    while let Some(e) = source {
        if let Some(refusal) = e.downcast_ref::<Refusal>() {
            return match refusal {
                Refusal::Blocked(_) => http::Error::BlockedAddress(refusal.to_string()),
                Refusal::NotAllowed(host) => http::Error::NotAllowed(host.clone()),
            };
        }
        chain.push(e.to_string());
        source = e.source();
    }
    http::Error::Transport(chain.join(": "))
}

/// What one plugin is granted, with the clients its grants need.
pub struct Granted {
    /// The plugin's name (for logs and errors).
    pub plugin: Arc<str>,
    /// The grants.
    pub grants: Grants,
    /// The HTTP client, when `http` is granted.
    pub http: Option<HttpClient>,
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
}

impl CallState {
    /// A fresh state with a deny-all WASI context (no files, environment, arguments, network
    /// or inherited standard streams).
    pub fn new(granted: Arc<Granted>, services: Arc<Services>, memory_cap: u64) -> CallState {
        let wasi = WasiCtx::builder()
            .allow_blocking_current_thread(false)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
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
        }
    }

    fn deny(&mut self, capability: &'static str) -> wasmtime::Error {
        self.denied = Some(capability);
        wasmtime::format_err!(
            "plugin `{}` is not granted the `{capability}` capability",
            self.granted.plugin
        )
    }
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

impl log::Host for CallState {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        if !self.granted.grants.log {
            return Err(self.deny("log"));
        }
        let plugin = &*self.granted.plugin;
        let message: String = message.chars().take(4096).collect();
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{message}"),
            log::Level::Debug => tracing::debug!(plugin, "{message}"),
            log::Level::Info => tracing::info!(plugin, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, "{message}"),
            log::Level::Error => tracing::error!(plugin, "{message}"),
        }
        Ok(())
    }
}

impl clock::Host for CallState {
    async fn now(&mut self) -> wasmtime::Result<i64> {
        if !self.granted.grants.clock {
            return Err(self.deny("clock"));
        }
        Ok(chrono::Utc::now().timestamp_millis())
    }
}

impl http::Host for CallState {
    async fn send(
        &mut self,
        request: http::Request,
    ) -> wasmtime::Result<Result<http::Response, http::Error>> {
        let granted = self.granted.clone();
        let Some(client) = &granted.http else {
            return Err(self.deny("http"));
        };
        let started = std::time::Instant::now();
        let result = client.send(request, &self.services).await;
        self.io_time += started.elapsed();
        if let Err(err) = &result {
            tracing::debug!(plugin = &*granted.plugin, error = %err, "plugin HTTP request failed");
        }
        Ok(result)
    }
}

fn txt(rdata: &RData) -> String {
    match rdata {
        RData::TXT(txt) => txt
            .txt_data
            .iter()
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect(),
        other => other.to_string(),
    }
}

impl dns::Host for CallState {
    async fn resolve(
        &mut self,
        name: String,
        record_type: dns::RecordType,
    ) -> wasmtime::Result<Result<Vec<String>, dns::Error>> {
        if !self.granted.grants.dns {
            return Err(self.deny("dns"));
        }
        let Some(resolver) = &self.services.dns else {
            let why = self.services.dns_error.clone().unwrap_or_default();
            return Ok(Err(dns::Error::Failed(why)));
        };
        if name.is_empty() || name.len() > 253 {
            return Ok(Err(dns::Error::InvalidName(name)));
        }
        let rtype = match record_type {
            dns::RecordType::A => RecordType::A,
            dns::RecordType::Aaaa => RecordType::AAAA,
            dns::RecordType::Mx => RecordType::MX,
            dns::RecordType::Txt => RecordType::TXT,
            dns::RecordType::Cname => RecordType::CNAME,
            dns::RecordType::Ns => RecordType::NS,
        };
        // A fully qualified name: never apply search domains.
        let fqdn = if name.ends_with('.') {
            name.clone()
        } else {
            format!("{name}.")
        };
        let started = std::time::Instant::now();
        let answer = resolver.lookup(fqdn.as_str(), rtype).await;
        self.io_time += started.elapsed();
        Ok(match answer {
            Ok(lookup) => Ok(lookup
                .answers()
                .iter()
                .filter(|r| r.data.record_type() == rtype)
                .map(|r| txt(&r.data))
                .collect()),
            Err(e) if e.is_no_records_found() || e.is_nx_domain() => Err(dns::Error::NotFound),
            Err(e) => Err(dns::Error::Failed(e.to_string())),
        })
    }
}

impl smtp::Host for CallState {
    async fn send(
        &mut self,
        envelope: smtp::Envelope,
        message: Vec<u8>,
    ) -> wasmtime::Result<Result<String, smtp::Error>> {
        if !self.granted.grants.smtp {
            return Err(self.deny("smtp"));
        }
        let Some(transport) = &self.services.smtp else {
            return Ok(Err(smtp::Error::Permanent(
                "no SMTP relay is configured (plugins.smtp_host)".into(),
            )));
        };
        let parse = |a: &str| {
            a.parse::<lettre::Address>()
                .map_err(|e| smtp::Error::Permanent(format!("address `{a}`: {e}")))
        };
        let sender = match parse(&envelope.sender) {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let recipients = match envelope.recipients.iter().map(|r| parse(r)).collect() {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let envelope = match lettre::address::Envelope::new(Some(sender), recipients) {
            Ok(e) => e,
            Err(e) => return Ok(Err(smtp::Error::Permanent(e.to_string()))),
        };
        let started = std::time::Instant::now();
        let sent = transport.send_raw(&envelope, &message).await;
        self.io_time += started.elapsed();
        Ok(match sent {
            Ok(response) => Ok(format!(
                "{} {}",
                response.code(),
                response.message().collect::<Vec<_>>().join(" ")
            )),
            Err(e) if e.is_permanent() => Err(smtp::Error::Permanent(e.to_string())),
            Err(e) => Err(smtp::Error::Transient(e.to_string())),
        })
    }
}

fn safe_file_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl outbox::Host for CallState {
    async fn store(
        &mut self,
        id: String,
        sender: String,
        recipients: Vec<String>,
        message: Vec<u8>,
    ) -> wasmtime::Result<Result<String, String>> {
        if !self.granted.grants.outbox {
            return Err(self.deny("outbox"));
        }
        if !safe_file_id(&id) {
            return Ok(Err(format!("`{id}` is not usable as a file name")));
        }
        let dir = self.services.outbox_dir.clone();
        let path = dir.join(format!("{id}.eml"));
        let write = async {
            tokio::fs::create_dir_all(&dir).await?;
            let tmp = dir.join(format!(".{id}.eml.tmp"));
            tokio::fs::write(&tmp, &message).await?;
            tokio::fs::rename(&tmp, &path).await?;
            let record = serde_json::json!({
                "id": id,
                "sender": sender,
                "recipients": recipients,
                "file": format!("{id}.eml"),
                "bytes": message.len(),
                "at": chrono::Utc::now().timestamp_millis(),
            });
            let _guard = self.services.outbox_index.lock().await;
            use tokio::io::AsyncWriteExt;
            let mut index = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("index.jsonl"))
                .await?;
            index.write_all(format!("{record}\n").as_bytes()).await?;
            index.flush().await?;
            Ok::<_, std::io::Error>(())
        };
        let started = std::time::Instant::now();
        let written = write.await;
        self.io_time += started.elapsed();
        Ok(match written {
            Ok(()) => Ok(path.display().to_string()),
            Err(e) => Err(format!("writing {}: {e}", path.display())),
        })
    }
}
