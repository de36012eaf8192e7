//! Email verification's I/O: the DNS lookups of a domain, run concurrently with a deadline, and
//! an in-process cache of what they established. The rules are in
//! [`crate::domain::verification`].
//!
//! The cache is only a cache: every instance keeps its own, and losing it costs lookups only.
//! It holds the facts of a domain for `verify_cache_seconds`; a domain that DNS could not tell
//! about (timeout, failure) is not cached, so the next request asks again. Concurrent requests
//! for a domain that is not cached share one set of lookups and its outcome, a failure included
//! (they do not queue up to try again one after another).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use hickory_resolver::proto::rr::{RData, RecordType};
use tokio::sync::OnceCell;

use crate::domain::email::EmailAddress;
use crate::domain::verification::{AddressFacts, Answer, DnsFacts, DnsUnknown, Lookups, Verdict};
use crate::plugins::PluginSettings;

/// Most domains the cache holds; past it, expired entries go first, then arbitrary ones.
const MAX_CACHED_DOMAINS: usize = 100_000;

/// A cache slot: filled once with the outcome of the lookups and, for facts, when they were
/// fetched. A filled failure is shared with the requests that waited for it, then replaced.
type Slot = Arc<OnceCell<Result<(Instant, DnsFacts), DnsUnknown>>>;

/// Verifies addresses: syntax and lists in memory, DNS through the host's resolver.
pub struct Verifier {
    resolver: Result<TokioResolver, String>,
    timeout: Duration,
    ttl: Duration,
    cache: Mutex<HashMap<String, Slot>>,
}

impl Verifier {
    /// A verifier using the nameservers of `plugins` (`plugins.dns_nameservers`, or the
    /// system's), waiting `timeout_ms` for each answer (`verify_dns_timeout_ms`) and keeping
    /// facts for `ttl` (`verify_cache_seconds`).
    pub fn new(plugins: &PluginSettings, timeout_ms: u64, ttl: Duration) -> Verifier {
        let timeout = Duration::from_millis(timeout_ms.max(1));
        // The plugins' resolver, with verification's own timeout.
        let dns_settings = PluginSettings {
            dns_timeout_ms: timeout_ms.max(1),
            ..plugins.clone()
        };
        let resolver =
            crate::plugins::host::dns::resolver(&dns_settings).map_err(|e| e.to_string());
        if let Err(e) = &resolver {
            tracing::warn!(error = %e, "email verification has no DNS resolver; every domain is unverified");
        }
        crate::domain::verification::preload();
        Verifier {
            resolver,
            timeout,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict on `input`. Input that is not an address is not looked up.
    pub async fn verify(&self, input: &str) -> Verdict {
        let address = match EmailAddress::parse(input) {
            Ok(address) => address,
            Err(error) => return Verdict::syntax_error(input, &error),
        };
        let facts = AddressFacts::of(address);
        let dns = self.dns_facts(facts.address.domain()).await;
        Verdict::of(&facts, &dns)
    }

    /// The DNS facts of `domain`, from the cache when they are fresh.
    pub async fn dns_facts(&self, domain: &str) -> Result<DnsFacts, DnsUnknown> {
        let slot = self.slot(domain);
        slot.get_or_init(|| async {
            let started = Instant::now();
            let result = self.lookup(domain).await;
            tracing::debug!(
                domain,
                elapsed_ms = started.elapsed().as_millis() as u64,
                result = ?result,
                "verification DNS lookup"
            );
            result.map(|facts| (Instant::now(), facts))
        })
        .await
        .clone()
        .map(|(_, facts)| facts)
    }

    /// The cache slot of `domain`: the cached one while fresh (or still being filled), else a
    /// new one.
    fn slot(&self, domain: &str) -> Slot {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let fresh =
            |slot: &Slot| matches!(slot.get(), Some(Ok((at, _))) if at.elapsed() < self.ttl);
        // A slot still being filled is joined; a fresh one answers; any other is replaced.
        if let Some(slot) = cache
            .get(domain)
            .filter(|s| fresh(s) || (s.get().is_none() && Arc::strong_count(s) > 1))
        {
            return slot.clone();
        }
        if cache.len() >= MAX_CACHED_DOMAINS {
            // Keep fresh facts and lookups in flight; then make room regardless.
            cache.retain(|_, slot| Arc::strong_count(slot) > 1 || fresh(slot));
            let excess = (cache.len() + 1).saturating_sub(MAX_CACHED_DOMAINS);
            let evicted: Vec<String> = cache.keys().take(excess).cloned().collect();
            for key in evicted {
                cache.remove(&key);
            }
        }
        let slot = Slot::default();
        cache.insert(domain.to_string(), slot.clone());
        slot
    }

    /// Asks every question about `domain` at once, each with the deadline.
    async fn lookup(&self, domain: &str) -> Result<DnsFacts, DnsUnknown> {
        let resolver = self
            .resolver
            .as_ref()
            .map_err(|e| DnsUnknown::Failed(e.clone()))?;
        let www = format!("www.{domain}");
        let ask = |name: &str, kind: RecordType| self.ask(resolver, name.to_string(), kind);
        let (mx, a, aaaa, ns, www_a, www_aaaa) = tokio::join!(
            ask(domain, RecordType::MX),
            ask(domain, RecordType::A),
            ask(domain, RecordType::AAAA),
            ask(domain, RecordType::NS),
            ask(&www, RecordType::A),
            ask(&www, RecordType::AAAA),
        );
        Lookups {
            mx,
            a,
            aaaa,
            ns,
            www_a,
            www_aaaa,
        }
        .facts()
    }

    /// One query, reduced to what verification needs.
    async fn ask(&self, resolver: &TokioResolver, name: String, kind: RecordType) -> Answer {
        // Fully qualified: search domains never apply.
        let fqdn = format!("{name}.");
        let lookup = match tokio::time::timeout(self.timeout, resolver.lookup(fqdn, kind)).await {
            Err(_) => return Answer::TimedOut,
            Ok(Err(e)) if e.is_nx_domain() => return Answer::NxDomain,
            Ok(Err(e)) if e.is_no_records_found() => return Answer::NoRecords,
            Ok(Err(e)) => {
                return match e {
                    hickory_resolver::net::NetError::Timeout => Answer::TimedOut,
                    other => Answer::Failed(other.to_string()),
                };
            }
            Ok(Ok(lookup)) => lookup,
        };
        let values: Vec<String> = lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::MX(mx) if kind == RecordType::MX => Some(if mx.exchange.is_root() {
                    ".".to_string()
                } else {
                    mx.exchange.to_ascii()
                }),
                RData::A(a) if kind == RecordType::A => Some(a.to_string()),
                RData::AAAA(aaaa) if kind == RecordType::AAAA => Some(aaaa.to_string()),
                RData::NS(ns) if kind == RecordType::NS => Some(ns.to_ascii()),
                _ => None,
            })
            .collect();
        if values.is_empty() {
            Answer::NoRecords
        } else {
            Answer::Records(values)
        }
    }
}
