//! Sending domains as a service: asks the DNS verifier plugin (`plugins.dns_verifier`) for the
//! records a domain must publish and for their state, decides the domain's status with the
//! rules of [`crate::domain::sending_domain`], and decides who may send as a `from` address. The
//! API (checks on request) and the background check job ([`crate::jobs::domains`], through
//! [`DomainChecker`]) both go through here.
//!
//! A domain's optional Ed25519 key (RFC 8463 dual-signing) has a record of the service's own,
//! added to the plugin's and looked up here through the host's resolver (the one the plugins'
//! `dns` capability uses): the `dns-verifier` world (0.1.0) carries one DKIM key per domain.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::domain::email::EmailAddress;
use crate::domain::ids::ProjectId;
use crate::domain::sending_domain::{
    DnsRecordState, DomainName, DomainStatus, Ed25519DkimKey, RecordStatus, VerifiedDomain,
    conclude, covering, ed25519_record, ed25519_record_status, inbound_record,
    inbound_record_status,
};
use crate::jobs::domains::{CheckIntervals, DomainChecker, next_check};
use crate::plugins::{self, PluginError, Plugins, Requirement, SendingDomain};
use crate::store::domains::{CheckedDomain, Domain, SigningDomain};
use crate::store::jobs::NewJob;
use crate::store::{Store, StoreError};

/// What the deployment says about sending domains.
#[derive(Clone, Debug)]
pub struct DomainPolicy {
    /// The host that receives bounces (target of the return-path MX record).
    pub mail_host: String,
    /// The SPF mechanism that authorises this service's outgoing mail.
    pub spf_include: String,
    /// Development only: `from` addresses on unverified domains may send, unsigned.
    pub allow_unverified: bool,
    /// How often the background job checks a domain again.
    pub intervals: CheckIntervals,
}

/// Sending domains: their DNS records, their checks and the sender rule.
pub struct SendingDomains {
    store: Store,
    plugins: Arc<Plugins>,
    policy: DomainPolicy,
}

fn status(s: plugins::RecordStatus) -> RecordStatus {
    match s {
        plugins::RecordStatus::Pending => RecordStatus::Pending,
        plugins::RecordStatus::Verified => RecordStatus::Verified,
        plugins::RecordStatus::Failed => RecordStatus::Failed,
    }
}

impl SendingDomains {
    /// The service over `store` and the DNS verifier plugin of `plugins`.
    pub fn new(store: Store, plugins: Arc<Plugins>, policy: DomainPolicy) -> SendingDomains {
        SendingDomains {
            store,
            plugins,
            policy,
        }
    }

    /// The host the inbound MX records of domains that receive mail point at.
    pub fn mail_host(&self) -> &str {
        &self.policy.mail_host
    }

    /// Looks `domain`'s inbound MX record up, when it receives mail.
    async fn check_inbound(&self, domain: &Domain) -> Option<DnsRecordState> {
        if !domain.inbound {
            return None;
        }
        let mut record = inbound_record(domain.name.as_str(), &self.policy.mail_host);
        let found = self
            .plugins
            .resolve_mx(&record.name)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(record = %record.name, error = %e, "inbound MX record not found");
                Vec::new()
            });
        record.status = inbound_record_status(&found, &self.policy.mail_host);
        record.found = found;
        Some(record)
    }

    /// Looks the record of `domain`'s Ed25519 key up, when it has one.
    async fn check_ed25519(&self, domain: &Domain) -> Option<DnsRecordState> {
        let mut record = domain.ed25519_record()?;
        let key = &domain.dkim_ed25519.as_ref()?.public_key;
        let found = self
            .plugins
            .resolve_txt(&record.name)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(record = %record.name, error = %e, "Ed25519 DKIM record not found");
                Vec::new()
            });
        record.status = ed25519_record_status(&found, key);
        record.found = found;
        Some(record)
    }

    /// What the plugin needs to know of a domain.
    fn sending_domain(&self, name: &str, selector: &str, key: &str) -> SendingDomain {
        SendingDomain {
            name: name.to_string(),
            dkim_selector: selector.to_string(),
            dkim_public_key: key.to_string(),
            mail_host: self.policy.mail_host.clone(),
            spf_include: self.policy.spf_include.clone(),
        }
    }

    /// The records a new domain must publish, all pending: the plugin's, then the record of the
    /// Ed25519 key when there is one, then the inbound MX record when it receives mail.
    pub async fn records_to_publish(
        &self,
        name: &DomainName,
        selector: &str,
        public_key: &str,
        ed25519: Option<&Ed25519DkimKey>,
        inbound: bool,
    ) -> Result<Vec<DnsRecordState>, PluginError> {
        let domain = self.sending_domain(name.as_str(), selector, public_key);
        let records = self.plugins.domain_records(&domain).await?;
        let ed25519 = ed25519.map(|k| ed25519_record(name.as_str(), &k.selector, &k.public_base64));
        Ok(records
            .into_iter()
            .map(|r| DnsRecordState {
                record_type: r.record_type,
                name: r.name,
                value: r.value,
                required: r.requirement == Requirement::Required,
                status: RecordStatus::Pending,
                found: Vec::new(),
            })
            .chain(ed25519)
            .chain(inbound.then(|| inbound_record(name.as_str(), &self.policy.mail_host)))
            .collect())
    }

    /// Looks a domain's records up now and decides its new status.
    pub async fn check(&self, domain: &Domain) -> Result<CheckedDomain, PluginError> {
        let target = self.sending_domain(
            domain.name.as_str(),
            &domain.dkim_selector,
            &domain.dkim_public_key,
        );
        let checked = self.plugins.verify_domain(&target).await?;
        let mut records: Vec<DnsRecordState> = checked
            .into_iter()
            .map(|c| DnsRecordState {
                record_type: c.expected.record_type,
                name: c.expected.name,
                value: c.expected.value,
                required: c.expected.requirement == Requirement::Required,
                status: status(c.status),
                found: c.found,
            })
            .collect();
        // Recommended only, so they never change the domain's status.
        records.extend(self.check_ed25519(domain).await);
        records.extend(self.check_inbound(domain).await);
        let outcome = conclude(&records, domain.verified_at.is_some());
        Ok(CheckedDomain {
            status: outcome.status,
            records,
            failure_reason: outcome.reason,
        })
    }

    /// The first background check of a new domain: due now; later ones follow the intervals.
    pub fn first_check(&self, max_attempts: i32) -> NewJob {
        NewJob {
            run_at: crate::domain::time::now_ms(),
            ..next_check(&self.policy.intervals, DomainStatus::Pending, max_attempts)
        }
    }

    /// Decides whether `from` may send for `project` (the rule of `docs/decisions.md`).
    pub async fn authorize_sender(
        &self,
        project: &ProjectId,
        from: &EmailAddress,
    ) -> Result<Sender, SenderError> {
        let store = &self.store;
        let candidates = DomainName::self_and_parents(from.domain());
        let (verified, mut signing): (Vec<VerifiedDomain>, Vec<_>) = store
            .verified_domains(project, &candidates)
            .await?
            .into_iter()
            .unzip();
        let covered = covering(from.domain(), &verified)
            .and_then(|domain| verified.iter().position(|v| v.name == domain.name));
        match covered {
            Some(i) => Ok(Sender::Verified(signing.swap_remove(i))),
            None if self.policy.allow_unverified => Ok(Sender::Unverified),
            None => Err(SenderError::NotVerified(from.domain().to_string())),
        }
    }
}

impl DomainChecker for SendingDomains {
    fn check<'a>(
        &'a self,
        domain: &'a Domain,
    ) -> BoxFuture<'a, Result<CheckedDomain, PluginError>> {
        Box::pin(SendingDomains::check(self, domain))
    }
}

/// Who may send as a `from` address.
#[derive(Clone, Debug)]
pub enum Sender {
    /// A verified domain of the project covers it; mail is DKIM-signed with its key.
    Verified(SigningDomain),
    /// No verified domain covers it, but `domains.allow_unverified` lets it send unsigned.
    Unverified,
}

/// Why a `from` address may not send.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    /// No verified domain of the project covers the address's domain.
    #[error(
        "the domain {0} is not verified for this project; add it with POST /domains, publish its DNS records and verify it"
    )]
    NotVerified(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
