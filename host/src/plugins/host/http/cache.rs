//! The response cache of the `http` capability. A plugin asks for a `GET` to be cached by
//! sending the request header `x-herald-cache: <seconds>` (which never leaves the host); a 2xx
//! answer is then kept for that long, per plugin and URL, and a later request of the same plugin
//! for the same URL that asks for caching too is answered from it without a call. Plugin
//! instances live for one call, so this is how a plugin keeps what it fetches often and rarely
//! changes (the `ses` plugin's Amazon SNS signing certificate).
//!
//! The cache holds at most `plugins.http_cache_bytes` (bodies, headers and URLs), evicting the
//! entries stored longest ago first; a response larger than the whole budget is not kept, and
//! `0` turns caching off. A hit counts in `herald_plugin_http_cache_hits_total`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::plugins::bindings::imports::herald::plugin::http;

/// The request header a plugin asks for caching with; its value is seconds.
pub(super) const HEADER: &str = "x-herald-cache";

/// The longest a response is kept, whatever a plugin asks (30 days).
const MAX_TTL: Duration = Duration::from_secs(30 * 86_400);

/// What an entry costs beside its bytes (its key and bookkeeping), so that many empty
/// answers cannot hold unbounded memory.
const ENTRY_OVERHEAD: usize = 128;

/// One plugin's request for one URL.
type Key = (Arc<str>, String);

/// The cached responses of every plugin (shared by every call).
pub(super) struct HttpCache {
    budget: usize,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<Key, Entry>,
    /// The keys by when they were stored (a sequence number), oldest first.
    order: BTreeMap<u64, Key>,
    /// The size of every entry held.
    bytes: usize,
    next: u64,
}

struct Entry {
    stored: u64,
    expires: Instant,
    size: usize,
    response: http::Response,
}

/// Takes the caching request out of `request`'s headers (every `x-herald-cache`, so none is
/// sent): the time to keep the answer for, `None` when not asked or asked `0`. A value that is
/// not whole seconds, or the header on another method than `GET`, is an invalid request.
pub(super) fn asked(request: &mut http::Request) -> Result<Option<Duration>, http::Error> {
    let mut seconds = None;
    let mut error = None;
    request.headers.retain(|(name, value)| {
        if !name.eq_ignore_ascii_case(HEADER) {
            return true;
        }
        match value.trim().parse::<u64>() {
            Ok(s) => seconds = Some(s),
            Err(_) => {
                error = Some(format!(
                    "header `{HEADER}` must be whole seconds, not `{value}`"
                ))
            }
        }
        false
    });
    if let Some(message) = error {
        return Err(http::Error::InvalidRequest(message));
    }
    let Some(seconds) = seconds else {
        return Ok(None);
    };
    if !request.method.eq_ignore_ascii_case("GET") {
        return Err(http::Error::InvalidRequest(format!(
            "header `{HEADER}` asks to cache a GET; this is a {}",
            request.method
        )));
    }
    Ok((seconds > 0).then(|| Duration::from_secs(seconds).min(MAX_TTL)))
}

impl HttpCache {
    /// A cache of at most `budget` bytes (`0`: off).
    pub(super) fn new(budget: u64) -> HttpCache {
        HttpCache {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The response `plugin` stored for `url`, if it has not expired (an expired one goes).
    pub(super) fn get(&self, plugin: &Arc<str>, url: &str) -> Option<http::Response> {
        if self.budget == 0 {
            return None;
        }
        let key = (plugin.clone(), url.to_string());
        let mut entries = self.entries();
        let entry = entries.by_key.get(&key)?;
        if entry.expires > Instant::now() {
            let response = entry.response.clone();
            drop(entries);
            metrics::counter!("herald_plugin_http_cache_hits_total", "plugin" => plugin.to_string())
                .increment(1);
            return Some(response);
        }
        entries.remove(&key);
        None
    }

    /// Keeps `response` of `plugin` for `url` for `ttl`, when it is a 2xx answer that fits the
    /// budget; older entries are evicted to make room.
    pub(super) fn put(
        &self,
        plugin: &Arc<str>,
        url: &str,
        ttl: Duration,
        response: &http::Response,
    ) {
        if !(200..300).contains(&response.status) {
            return;
        }
        let size = ENTRY_OVERHEAD
            + url.len()
            + response.body.len()
            + response
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>();
        if size > self.budget {
            return;
        }
        let key = (plugin.clone(), url.to_string());
        let mut entries = self.entries();
        entries.remove(&key);
        while entries.bytes + size > self.budget {
            let Some((_, oldest)) = entries.order.pop_first() else {
                break;
            };
            entries.remove(&oldest);
        }
        let stored = entries.next;
        entries.next += 1;
        entries.order.insert(stored, key.clone());
        entries.bytes += size;
        entries.by_key.insert(
            key,
            Entry {
                stored,
                expires: Instant::now() + ttl,
                size,
                response: response.clone(),
            },
        );
    }
}

impl Entries {
    fn remove(&mut self, key: &Key) {
        if let Some(gone) = self.by_key.remove(key) {
            self.order.remove(&gone.stored);
            self.bytes -= gone.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> http::Request {
        http::Request {
            method: method.into(),
            url: "https://sns.eu-west-1.amazonaws.com/cert.pem".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: None,
            timeout_ms: None,
        }
    }

    fn response(status: u16, body: usize) -> http::Response {
        http::Response {
            status,
            headers: Vec::new(),
            body: vec![b'x'; body],
        }
    }

    #[test]
    fn the_header_is_taken_out_and_read() {
        let mut r = request("GET", &[("accept", "*/*"), ("X-Herald-Cache", "86400")]);
        assert_eq!(asked(&mut r).unwrap(), Some(Duration::from_secs(86_400)));
        assert_eq!(r.headers, vec![("accept".to_string(), "*/*".to_string())]);
        let mut r = request("GET", &[("x-herald-cache", "0")]);
        assert_eq!(asked(&mut r).unwrap(), None);
        assert!(r.headers.is_empty());
        let mut r = request("GET", &[("x-herald-cache", "99999999999")]);
        assert_eq!(asked(&mut r).unwrap(), Some(MAX_TTL));
        assert_eq!(asked(&mut request("GET", &[])).unwrap(), None);
        for (method, value) in [("GET", "a day"), ("GET", "-1"), ("POST", "60")] {
            let mut r = request(method, &[("x-herald-cache", value)]);
            assert!(
                matches!(asked(&mut r), Err(http::Error::InvalidRequest(_))),
                "{method} {value}"
            );
        }
    }

    #[test]
    fn hits_are_per_plugin_and_url_and_only_of_2xx() {
        let cache = HttpCache::new(1 << 20);
        let (ses, other): (Arc<str>, Arc<str>) = (Arc::from("ses"), Arc::from("other"));
        let ttl = Duration::from_secs(60);
        cache.put(&ses, "https://a/cert.pem", ttl, &response(200, 10));
        cache.put(&ses, "https://a/missing.pem", ttl, &response(404, 10));
        assert_eq!(
            cache.get(&ses, "https://a/cert.pem").unwrap().body.len(),
            10
        );
        assert!(cache.get(&other, "https://a/cert.pem").is_none());
        assert!(cache.get(&ses, "https://a/missing.pem").is_none());
        assert!(cache.get(&ses, "https://a/other.pem").is_none());
        cache.put(
            &ses,
            "https://a/soon.pem",
            Duration::ZERO,
            &response(200, 1),
        );
        assert!(cache.get(&ses, "https://a/soon.pem").is_none());
        assert_eq!(cache.entries().by_key.len(), 1);
    }

    #[test]
    fn the_budget_evicts_the_oldest_and_refuses_what_never_fits() {
        let entry = ENTRY_OVERHEAD + "https://a/0".len() + 100;
        let cache = HttpCache::new(3 * entry as u64);
        let p: Arc<str> = Arc::from("p");
        let ttl = Duration::from_secs(60);
        for i in 0..4 {
            cache.put(&p, &format!("https://a/{i}"), ttl, &response(200, 100));
        }
        assert!(cache.get(&p, "https://a/0").is_none());
        for i in 1..4 {
            assert!(cache.get(&p, &format!("https://a/{i}")).is_some(), "{i}");
        }
        assert_eq!(cache.entries().bytes, 3 * entry);
        // Stored again, an entry is the newest: the next eviction takes 2.
        cache.put(&p, "https://a/1", ttl, &response(200, 100));
        cache.put(&p, "https://a/4", ttl, &response(200, 100));
        assert!(cache.get(&p, "https://a/2").is_none());
        assert!(cache.get(&p, "https://a/1").is_some());
        // Larger than the whole budget: not kept, nothing evicted for it.
        cache.put(&p, "https://a/big", ttl, &response(200, 4 * entry));
        assert!(cache.get(&p, "https://a/big").is_none());
        assert_eq!(cache.entries().by_key.len(), 3);
        let off = HttpCache::new(0);
        off.put(&p, "https://a/0", ttl, &response(200, 1));
        assert!(off.get(&p, "https://a/0").is_none());
    }
}
