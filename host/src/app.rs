//! The state every request shares.

use std::sync::Arc;

use jsonwebtoken::{DecodingKey, EncodingKey};

use crate::config::Settings;
use crate::jobs::JobQueue;
use crate::mail::dkim::DkimSigner;
use crate::mail::links::LinkSigner;
use crate::plugins::Plugins;
use crate::ratelimit::RateLimiter;
use crate::store::Store;
use crate::verify::Verifier;

/// Shared, cheaply cloned application state.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: Settings,
    rate_limiter: RateLimiter,
    jobs: JobQueue,
    plugins: Arc<Plugins>,
    verifier: Verifier,
    links: LinkSigner,
    dkim: DkimSigner,
    jwt_encoding: EncodingKey,
    jwt_decoding: DecodingKey,
}

impl AppState {
    /// Builds the state; `jwt_secret` signs dashboard sessions.
    pub fn new(
        store: Store,
        settings: Settings,
        plugins: Arc<Plugins>,
        jwt_secret: &str,
    ) -> AppState {
        let rate_limiter = RateLimiter::for_store(&store);
        let jobs = JobQueue::new(store.clone(), &settings, plugins.clone());
        let verifier = Verifier::new(&settings);
        let links = LinkSigner::new(jwt_secret, &settings.public_url());
        AppState {
            inner: Arc::new(Inner {
                store,
                settings,
                rate_limiter,
                jobs,
                plugins,
                verifier,
                links,
                dkim: DkimSigner::default(),
                jwt_encoding: EncodingKey::from_secret(jwt_secret.as_bytes()),
                jwt_decoding: DecodingKey::from_secret(jwt_secret.as_bytes()),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The settings in effect.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The request limiter.
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.inner.rate_limiter
    }

    /// The durable job queue.
    pub fn jobs(&self) -> &JobQueue {
        &self.inner.jobs
    }

    /// The plugin platform (transport, DNS verifier, billing, steps).
    pub fn plugins(&self) -> &Arc<Plugins> {
        &self.inner.plugins
    }

    /// Email address verification (`POST /v1/verify`).
    pub fn verifier(&self) -> &Verifier {
        &self.inner.verifier
    }

    /// Makes and checks the signed links of emails.
    pub fn links(&self) -> &LinkSigner {
        &self.inner.links
    }

    /// Signs messages with their domain's DKIM key.
    pub fn dkim(&self) -> &DkimSigner {
        &self.inner.dkim
    }

    /// Key that signs session tokens.
    pub fn jwt_encoding(&self) -> &EncodingKey {
        &self.inner.jwt_encoding
    }

    /// Key that checks session tokens.
    pub fn jwt_decoding(&self) -> &DecodingKey {
        &self.inner.jwt_decoding
    }
}
