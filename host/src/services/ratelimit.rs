//! The per-project request limit (1000 a minute by default), in fixed one-minute windows.
//!
//! On PostgreSQL the counters live in an `UNLOGGED` table that every instance shares, so the limit
//! holds across a fleet. On SQLite, where one process serves, they live in that process's memory,
//! which is the same single source of truth without a write per read request.
//!
//! On PostgreSQL the hits of one project that arrive while its counter is being written are
//! added in one statement (`hits = hits + n`) by whichever of them leads, and each is given its
//! own number out of the range that statement returns: one write per round instead of one per
//! request, with the same counts as one at a time. A request with an API key is looked up and
//! counted by that same statement ([`RateLimiter::project_by_key`]): one round trip, not two.
//!
//! Requests with the public key (`pk_`, which anyone who reads a web page has) are counted in a
//! bucket of their own, `<project>:pk`, against their share of the limit
//! (`rate_limit_public_share` percent): they never use up the budget of the secret key and the
//! dashboard, which keep the whole limit ([`bucket`], [`public_limit`]).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::keys::{KeyKind, hash_key};
use crate::domain::project::Project;
use crate::domain::time::now_ms;
use crate::store::rate_limits::{LONG_PREFIX, LONG_WINDOW_MAX_MS};
use crate::store::rounds::Rounds;
use crate::store::{Backend, Store, StoreResult};

const WINDOW_MS: i64 = 60_000;

/// The outcome of counting one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateDecision {
    /// Requests allowed per window.
    pub limit: u32,
    /// Requests left in this window.
    pub remaining: u32,
    /// Seconds until the window resets.
    pub reset_secs: u64,
    /// Whether this request may proceed.
    pub allowed: bool,
}

/// A project found by its key, with the hits so far in the window (`None` for a disabled
/// project, whose requests are not counted).
type Counted = (Project, Option<i64>);

/// Where the counters live.
#[derive(Debug)]
pub enum RateLimiter {
    /// In this process (SQLite deployments).
    Local(Mutex<HashMap<String, (i64, u32)>>),
    /// In the shared database (PostgreSQL deployments).
    Shared(SharedCounters),
}

/// The counters in the shared database, with the rounds in flight of this instance.
#[derive(Debug)]
pub struct SharedCounters {
    store: Store,
    /// Per `(bucket, window)` with a write in flight: the hits waiting for the next round.
    rounds: Rounds<(String, i64), i64>,
    /// Per key (kind, hash) and window with a counted lookup in flight: the requests waiting for
    /// the next round.
    key_rounds: Rounds<(KeyKind, String, i64), Option<Counted>>,
}

impl SharedCounters {
    /// Counts one hit of `bucket` in `window`: the hits so far, this one included.
    async fn hit(&self, bucket: &str, window: i64) -> Result<i64, crate::store::StoreError> {
        self.rounds
            .join(
                (bucket.to_string(), window),
                |n| self.store.rate_limit_add(bucket, window, n as i64),
                // The round's hits take the counts up to the counter's new total, one each.
                |&total, i| total - i as i64,
            )
            .await
    }

    /// Looks up the project of the key hashed `hash` and counts one hit of it in `window`.
    async fn project_by_key(
        &self,
        kind: KeyKind,
        hash: String,
        window: i64,
    ) -> StoreResult<Option<Counted>> {
        self.key_rounds
            .join(
                (kind, hash.clone(), window),
                |n| {
                    self.store
                        .project_by_key_counted(kind, &hash, window, n as i64)
                },
                |found, i| {
                    found
                        .as_ref()
                        .map(|(project, hits)| (project.clone(), hits.map(|h| h - i as i64)))
                },
            )
            .await
    }
}

/// The bucket that counts a project's requests made with a key of `kind` (the dashboard's count
/// with the secret key's).
pub fn bucket(project: &str, kind: KeyKind) -> String {
    match kind {
        KeyKind::Secret => project.to_string(),
        KeyKind::Public => format!("{project}{PUBLIC_SUFFIX}"),
    }
}

/// What [`bucket`] appends to a project's id for its public key's requests.
pub const PUBLIC_SUFFIX: &str = ":pk";

/// The public key's requests per minute: `share` percent of the project's `limit`, at least 1.
pub fn public_limit(limit: u32, share: u32) -> u32 {
    ((u64::from(limit) * u64::from(share) / 100) as u32).max(1)
}

/// The window a request at `now` (unix ms) falls in, and the seconds until it resets.
fn window_at(now: i64) -> (i64, u64) {
    let window = now - now.rem_euclid(WINDOW_MS);
    let reset_secs = ((window + WINDOW_MS - now) as u64).div_ceil(1000).max(1);
    (window, reset_secs)
}

/// The decision for a request that brought its bucket's hits in this window to `hits`.
fn decide(limit: u32, hits: u64, reset_secs: u64) -> RateDecision {
    RateDecision {
        limit,
        remaining: (u64::from(limit).saturating_sub(hits)) as u32,
        reset_secs,
        allowed: hits <= u64::from(limit),
    }
}

impl RateLimiter {
    /// The limiter that fits the store's backend.
    pub fn for_store(store: &Store) -> RateLimiter {
        match store.db().backend() {
            Backend::Sqlite => RateLimiter::Local(Mutex::new(HashMap::new())),
            Backend::Postgres => RateLimiter::Shared(SharedCounters {
                store: store.clone(),
                rounds: Rounds::default(),
                key_rounds: Rounds::default(),
            }),
        }
    }

    /// Counts one request of `bucket` against `limit` per minute.
    pub async fn hit(&self, bucket: &str, limit: u32) -> RateDecision {
        let (window, reset_secs) = window_at(now_ms());
        let hits: u64 = match self {
            RateLimiter::Local(map) => {
                let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
                if map.len() > 10_000 {
                    map.retain(|_, (w, _)| *w == window);
                }
                let entry = map.entry(bucket.to_string()).or_insert((window, 0));
                if entry.0 != window {
                    *entry = (window, 0);
                }
                entry.1 = entry.1.saturating_add(1);
                u64::from(entry.1)
            }
            RateLimiter::Shared(counters) => match counters.hit(bucket, window).await {
                Ok(h) => h.max(0) as u64,
                Err(err) => {
                    // Failing open keeps the API up while the database hiccups; the request
                    // itself will fail on its own if the database is really gone.
                    tracing::warn!(error = %err, "rate limit counter unavailable; allowing request");
                    0
                }
            },
        };
        decide(limit, hits, reset_secs)
    }

    /// The project a presented API key belongs to (`None` for an unknown key), with its request
    /// counted in the key's [`bucket`] against `limit` per minute, unless the project is disabled (its requests are
    /// refused uncounted, and the decision is `None`). On PostgreSQL the lookup and the count
    /// are one statement, shared in rounds by the concurrent requests with one key; each request
    /// is answered by a statement that started after it arrived, so a regenerated key or a
    /// disabled project is seen at once.
    pub async fn project_by_key(
        &self,
        store: &Store,
        kind: KeyKind,
        key: &str,
        limit: u32,
    ) -> StoreResult<Option<(Project, Option<RateDecision>)>> {
        match self {
            RateLimiter::Local(_) => {
                let Some(project) = store.project_by_key(kind, key).await? else {
                    return Ok(None);
                };
                let decision = match project.disabled {
                    true => None,
                    false => Some(self.hit(&bucket(project.id.as_str(), kind), limit).await),
                };
                Ok(Some((project, decision)))
            }
            RateLimiter::Shared(counters) => {
                let (window, reset_secs) = window_at(now_ms());
                let found = counters.project_by_key(kind, hash_key(key), window).await?;
                Ok(found.map(|(project, hits)| {
                    let decision = hits.map(|h| decide(limit, h.max(0) as u64, reset_secs));
                    (project, decision)
                }))
            }
        }
    }

    /// Drops the stored windows that have ended: the per-minute ones of the shared counters,
    /// and on both backends the long-windowed ones of [`hit_long`] once a day has passed.
    pub async fn prune(&self, store: &Store) {
        let now = now_ms();
        if let Err(err) = store
            .rate_limit_prune(now - 2 * WINDOW_MS, now - LONG_WINDOW_MAX_MS)
            .await
        {
            tracing::warn!(error = %err, "could not prune rate limit windows");
        }
    }
}

/// Counts one hit of `bucket` (under [`LONG_PREFIX`]) against `limit` in the fixed window of
/// `window_ms` (at most a day; windows start at multiples of it since the epoch, so a day is a
/// UTC day) that now falls in. Kept in the database on both backends, so rare limits with long
/// windows (mail to arbitrary addresses) hold across restarts and instances; a hit over the
/// limit still counts. Unlike the request limit, an unreachable counter is an error.
pub async fn hit_long(
    store: &Store,
    bucket: &str,
    window_ms: i64,
    limit: u32,
) -> StoreResult<RateDecision> {
    debug_assert!(bucket.starts_with(LONG_PREFIX));
    debug_assert!(window_ms > 0 && window_ms <= LONG_WINDOW_MAX_MS);
    let now = now_ms();
    let window = now - now.rem_euclid(window_ms);
    let reset_secs = ((window + window_ms - now) as u64).div_ceil(1000).max(1);
    let hits = store.rate_limit_add(bucket, window, 1).await?;
    Ok(decide(limit, hits.max(0) as u64, reset_secs))
}
