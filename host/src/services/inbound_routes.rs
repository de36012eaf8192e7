//! The routing of the inbound SMTP server's `RCPT` addresses by their domain, kept for a few
//! seconds: which project's verified inbound domain receives mail to a domain, or that none
//! does. Without it every `RCPT` at an inbound domain (and every one at a domain nobody here
//! receives for, the bulk of what an open MX is offered) reads the database.
//!
//! - **Bounded**: at most [`MAX_DOMAINS`] domains (moka's TinyLFU keeps the busy ones), each for
//!   [`TTL`] after the read that found it.
//! - **Never older than the TTL**: an entry is used only while less than [`TTL`] has passed since
//!   its read *started*, so a `RCPT` is never taken on what the database said longer ago than that.
//! - **Invalidated in this instance**: the domain API ([`InboundRoutes::forget`]: `PATCH` and
//!   `DELETE /domains/:id`, `inbound` turned on or off, `GET /domains/:id/verify`) drops the
//!   domain's entry at once, and a read that started before the change is not kept (a generation
//!   count, checked before and after the entry is stored), so this instance answers the next
//!   `RCPT` from the database. Other instances, and changes made without the API (a background
//!   check, a project deleted), are seen within [`TTL`].
//!
//! A return-path address (`bounces+<email id>@bounces.<domain>`) names one email, which is read
//! for each `RCPT` (`smtp::inbound`): the domain says nothing of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::domain::ids::ProjectId;
use crate::domain::sending_domain::DomainName;
use crate::store::{Store, StoreError};

/// How long a domain's route is used after its read started.
pub const TTL: Duration = Duration::from_secs(5);
/// The most domains kept.
pub const MAX_DOMAINS: u64 = 10_000;

/// A domain's route as read at `read_at`: the project that receives its mail, or none.
#[derive(Clone)]
struct Kept {
    project: Option<ProjectId>,
    read_at: Instant,
}

/// The routes of one instance; cheap to clone.
#[derive(Clone)]
pub struct InboundRoutes {
    store: Store,
    kept: moka::sync::Cache<String, Kept, foldhash::fast::RandomState>,
    /// Counts the invalidations: a read that saw another count before it than after it is not
    /// kept.
    generation: Arc<AtomicU64>,
}

/// The domain of a `RCPT` address as domains are stored (lower-case ASCII), when it has one.
pub fn rcpt_domain(rcpt: &str) -> Option<String> {
    let (local, domain) = rcpt.trim().trim_matches(['<', '>']).rsplit_once('@')?;
    if local.is_empty() {
        return None;
    }
    DomainName::parse(domain)
        .ok()
        .map(|d| d.as_str().to_string())
}

/// The project whose verified inbound domain is `domain` (lower-case ASCII), read from `store`:
/// a domain with `inbound`, verified, its inbound MX record found, of a project not being
/// deleted. When several projects' domains qualify, the first verified.
pub async fn read_route(store: &Store, domain: &str) -> Result<Option<ProjectId>, StoreError> {
    let found = store.receiving_domains(domain).await?;
    Ok(found.into_iter().next().map(|d| d.project_id))
}

impl InboundRoutes {
    /// Routes read from `store`, each kept for [`TTL`].
    pub fn new(store: Store) -> InboundRoutes {
        let kept = moka::sync::Cache::builder()
            .max_capacity(MAX_DOMAINS)
            .time_to_live(TTL)
            .build_with_hasher(foldhash::fast::RandomState::default());
        InboundRoutes {
            store,
            kept,
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The project `rcpt` (an address) is received by at its domain, if any; read from the
    /// database at most [`TTL`] ago.
    pub async fn route(&self, rcpt: &str) -> Result<Option<ProjectId>, StoreError> {
        let Some(domain) = rcpt_domain(rcpt) else {
            return Ok(None);
        };
        if let Some(kept) = self.kept.get(domain.as_str())
            && kept.read_at.elapsed() < TTL
        {
            return Ok(kept.project);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let read_at = Instant::now();
        let project = read_route(&self.store, &domain).await?;
        if self.generation.load(Ordering::SeqCst) == generation {
            self.kept.insert(
                domain.clone(),
                Kept {
                    project: project.clone(),
                    read_at,
                },
            );
            // An invalidation between the check and the insert: drop what may be stale.
            if self.generation.load(Ordering::SeqCst) != generation {
                self.kept.invalidate(domain.as_str());
            }
        }
        Ok(project)
    }

    /// Forgets the route of `domain` (as stored: lower-case ASCII) after a change to it; reads
    /// under way are not kept.
    pub fn forget(&self, domain: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.kept.invalidate(domain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rcpt_routes_by_its_domain_as_domains_are_stored() {
        assert_eq!(
            rcpt_domain("Hello@IN.Acme.io").as_deref(),
            Some("in.acme.io")
        );
        assert_eq!(
            rcpt_domain("<a@in.acme.io.>").as_deref(),
            Some("in.acme.io")
        );
        assert_eq!(
            rcpt_domain("a@bücher.de").as_deref(),
            Some("xn--bcher-kva.de")
        );
        assert_eq!(rcpt_domain("in.acme.io"), None);
        assert_eq!(rcpt_domain("@in.acme.io"), None);
        assert_eq!(rcpt_domain("a@localhost"), None);
    }
}
