//! Address and host checks of the outbound HTTP capability: the allowlist, blocked addresses
//! and a resolver that drops them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why a destination was refused; found in the source chain of a failed request.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A loopback, private, link-local or metadata address.
    #[error("{0} is a loopback, private, link-local or metadata address")]
    Blocked(String),
    /// A host not on the allowlist.
    #[error("host `{0}` is not on the plugin's allowlist")]
    NotAllowed(String),
}

fn blocked_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        // Carrier-grade NAT (100.64.0.0/10), including Alibaba's metadata 100.100.100.200.
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments and benchmarking.
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240
}

fn blocked_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // Unique local (fc00::/7, including fd00:ec2::254), link-local (fe80::/10).
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        // Deprecated site-local (fec0::/10).
        || (first & 0xffc0) == 0xfec0
        // IPv4-compatible (::/96, e.g. ::127.0.0.1).
        || ip.segments()[..6].iter().all(|&s| s == 0)
        // NAT64, Teredo (2001::/32) and 6to4 can reach IPv4 addresses; refuse them too.
        || first == 0x0064
        || (first == 0x2001 && ip.segments()[1] == 0)
        || first == 0x2002
}

/// Whether `ip` is loopback, private, link-local, a metadata address or otherwise not a
/// public unicast address.
pub fn is_blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

/// Whether `host` matches the allowlist (`*`, an exact host, or `*.domain` for subdomains).
pub fn host_allowed(allow: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allow.iter().any(|pattern| {
        let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
        if pattern == "*" {
            true
        } else if let Some(domain) = pattern.strip_prefix("*.") {
            host.ends_with(&format!(".{domain}"))
        } else {
            host == pattern
        }
    })
}

/// The IP of a URL host that is an address literal (`1.2.3.4`, `[::1]`).
pub fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// A reqwest resolver that drops blocked addresses (unless private addresses are granted), so
/// that neither DNS answers nor redirects reach them.
pub struct CheckedResolver {
    /// Whether private addresses are allowed.
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| allow_private || !is_blocked(a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(Refusal::Blocked(host)) as Box<_>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_loopback_private_link_local_and_metadata() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "fec0::1",
            "::127.0.0.1",
            "::a00:1",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
        ] {
            assert!(is_blocked(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
        ] {
            assert!(!is_blocked(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn allowlist_patterns() {
        let allow = vec!["api.example.com".to_string(), "*.hooks.test".to_string()];
        assert!(host_allowed(&allow, "api.example.com"));
        assert!(host_allowed(&allow, "API.example.com."));
        assert!(host_allowed(&allow, "a.hooks.test"));
        assert!(!host_allowed(&allow, "hooks.test"));
        assert!(!host_allowed(&allow, "example.com"));
        assert!(host_allowed(&["*".to_string()], "anything.org"));
        assert!(!host_allowed(&[], "anything.org"));
    }
}
