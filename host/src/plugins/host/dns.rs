//! The `dns` capability: lookups through the host's resolver (`plugins.dns_nameservers` or the
//! system's), which email verification uses too.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};

use super::{CallState, timed};
use crate::plugins::bindings::imports::herald::plugin::dns;
use crate::plugins::settings::PluginSettings;

/// Why the host's DNS resolver cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum DnsSetupError {
    /// A `plugins.dns_nameservers` entry is not an address.
    #[error("nameserver `{0}` is not an `ip` or `ip:port`")]
    Nameserver(String),
    /// The system's resolver configuration cannot be read.
    #[error("system DNS configuration: {0}")]
    SystemConfig(NetError),
    /// The resolver refused its configuration.
    #[error("{0}")]
    Build(NetError),
}

fn nameserver(spec: &str) -> Result<NameServerConfig, DnsSetupError> {
    let (ip, port): (IpAddr, u16) = match spec.parse::<SocketAddr>() {
        Ok(addr) => (addr.ip(), addr.port()),
        Err(_) => (
            spec.trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| DnsSetupError::Nameserver(spec.to_string()))?,
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
pub fn resolver(settings: &PluginSettings) -> Result<TokioResolver, DnsSetupError> {
    let mut builder = if settings.dns_nameservers.is_empty() {
        TokioResolver::builder_tokio().map_err(DnsSetupError::SystemConfig)?
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
    builder.build().map_err(DnsSetupError::Build)
}

/// The resolver plugins use, or why there is none.
pub(super) struct Dns(Result<TokioResolver, DnsSetupError>);

impl Dns {
    /// The resolver of `settings`; without one, lookups fail with the reason (logged here).
    pub(super) fn new(settings: &PluginSettings) -> Dns {
        let resolver = resolver(settings);
        if let Err(e) = &resolver {
            tracing::warn!(error = %e, "the DNS capability is unavailable");
        }
        Dns(resolver)
    }
}

/// An answer's value as text: a TXT record's strings joined, other records as DNS shows them.
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

/// Why a lookup answered no value.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The name has no record of the type, or does not exist.
    #[error("no such record")]
    NotFound,
    /// The name cannot be looked up.
    #[error("`{0}` is not a name that can be looked up")]
    InvalidName(String),
    /// No answer (a timeout, a server failure), or no resolver.
    #[error("{0}")]
    Failed(String),
}

impl Dns {
    /// The values of the `record_type` records at `name`, as text (a TXT record's strings
    /// joined). The name is fully qualified: search domains never apply.
    pub(crate) async fn lookup(
        &self,
        name: &str,
        record_type: RecordType,
    ) -> Result<Vec<String>, LookupError> {
        let resolver = match &self.0 {
            Ok(resolver) => resolver,
            Err(why) => return Err(LookupError::Failed(why.to_string())),
        };
        if name.is_empty() || name.len() > 253 {
            return Err(LookupError::InvalidName(name.to_string()));
        }
        let fqdn = if name.ends_with('.') {
            name.to_string()
        } else {
            format!("{name}.")
        };
        match resolver.lookup(fqdn.as_str(), record_type).await {
            Ok(lookup) => Ok(lookup
                .answers()
                .iter()
                .filter(|r| r.data.record_type() == record_type)
                .map(|r| txt(&r.data))
                .collect()),
            Err(e) if e.is_no_records_found() || e.is_nx_domain() => Err(LookupError::NotFound),
            Err(e) => Err(LookupError::Failed(e.to_string())),
        }
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
        let rtype = match record_type {
            dns::RecordType::A => RecordType::A,
            dns::RecordType::Aaaa => RecordType::AAAA,
            dns::RecordType::Mx => RecordType::MX,
            dns::RecordType::Txt => RecordType::TXT,
            dns::RecordType::Cname => RecordType::CNAME,
            dns::RecordType::Ns => RecordType::NS,
        };
        let answer = timed(&mut self.io_time, self.services.dns.lookup(&name, rtype)).await;
        Ok(answer.map_err(|e| match e {
            LookupError::NotFound => dns::Error::NotFound,
            LookupError::InvalidName(name) => dns::Error::InvalidName(name),
            LookupError::Failed(why) => dns::Error::Failed(why),
        }))
    }
}
