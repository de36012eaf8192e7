//! The `http` capability: outbound requests to the hosts of the plugin's allowlist, refusing
//! private and metadata addresses (also after DNS and on redirects), with a size cap and a
//! timeout; a `GET` the plugin asks to cache (`x-herald-cache`) is answered from the host's
//! response cache ([`cache`]) while its answer is fresh.

mod cache;
mod net;

use std::sync::Arc;
use std::time::Duration;

use self::net::{CheckedResolver, Refusal};
use super::{CallState, Services, timed};
use crate::plugins::bindings::imports::herald::plugin::http;
use crate::plugins::manifest::HttpGrant;
use crate::plugins::settings::PluginSettings;

/// What every plugin's HTTP requests share (`plugins.http_*`): the limits and the response
/// cache.
pub(super) struct HttpLimits {
    timeout: Duration,
    max_response_bytes: u64,
    max_redirects: usize,
    cache: cache::HttpCache,
}

impl HttpLimits {
    /// The limits and an empty cache of `settings`.
    pub(super) fn new(settings: &PluginSettings) -> HttpLimits {
        HttpLimits {
            timeout: Duration::from_millis(settings.http_timeout_ms),
            max_response_bytes: settings.http_max_response_bytes,
            max_redirects: settings.http_max_redirects,
            cache: cache::HttpCache::new(settings.http_cache_bytes),
        }
    }
}

/// A plugin's HTTP client: its allowlist, address checks and redirect checks.
pub struct HttpClient {
    grant: HttpGrant,
    client: reqwest::Client,
}

impl HttpClient {
    /// A client for `grant`.
    pub fn new(grant: &HttpGrant, services: &Services) -> Result<HttpClient, reqwest::Error> {
        let allow = grant.allow.clone();
        let allow_private = grant.allow_private;
        let limits = &services.http;
        let max = limits.max_redirects;
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
            // A proxy from the environment (`HTTP(S)_PROXY`) would receive every request and
            // resolve it itself, past the address checks: plugins never use one.
            .no_proxy()
            .timeout(limits.timeout)
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpClient {
            grant: grant.clone(),
            client,
        })
    }

    /// Sends `request` of `plugin`, or answers it from the cache when it asks for caching and
    /// a fresh answer is there (after the same checks as a request that goes out).
    async fn send(
        &self,
        plugin: &Arc<str>,
        mut request: http::Request,
        limits: &HttpLimits,
    ) -> Result<http::Response, http::Error> {
        let keep_for = cache::asked(&mut request)?;
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
        let key = url.as_str().to_string();
        if keep_for.is_some()
            && let Some(cached) = limits.cache.get(plugin, &key)
        {
            return Ok(cached);
        }
        let timeout = request
            .timeout_ms
            .map(|ms| Duration::from_millis(ms.into()).min(limits.timeout))
            .unwrap_or(limits.timeout);
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
        let cap = limits.max_response_bytes;
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
        let response = tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(http::Error::Timeout))?;
        if let Some(ttl) = keep_for {
            limits.cache.put(plugin, &key, ttl, &response);
        }
        Ok(response)
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

impl http::Host for CallState {
    async fn send(
        &mut self,
        request: http::Request,
    ) -> wasmtime::Result<Result<http::Response, http::Error>> {
        let granted = self.granted.clone();
        let Some(client) = &granted.http else {
            return Err(self.deny("http"));
        };
        let result = timed(
            &mut self.io_time,
            client.send(&granted.plugin, request, &self.services.http),
        )
        .await;
        if let Err(err) = &result {
            tracing::debug!(plugin = &*granted.plugin, error = %err, "plugin HTTP request failed");
        }
        Ok(result)
    }
}
