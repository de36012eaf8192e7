//! Sending domains as a service: asks the DNS verifier plugin (`plugins.dns_verifier`) for the
//! records a domain must publish and for their state, and decides the domain's status with the
//! rules of [`crate::domain::sending_domain`]. The API (checks on request) and the background
//! check job both go through here.

use crate::config::Settings;
use crate::domain::email::EmailAddress;
use crate::domain::ids::ProjectId;
use crate::domain::sending_domain::{
    DnsRecordState, DomainName, RecordStatus, VerifiedDomain, conclude, covering,
};
use crate::plugins::{self, PluginError, Plugins, Requirement, SendingDomain};
use crate::store::domains::{CheckedDomain, Domain, SigningDomain};
use crate::store::{Store, StoreError};

/// What the plugin needs to know of a domain.
fn sending_domain(settings: &Settings, name: &str, selector: &str, key: &str) -> SendingDomain {
    SendingDomain {
        name: name.to_string(),
        dkim_selector: selector.to_string(),
        dkim_public_key: key.to_string(),
        mail_host: settings.mail_host(),
        spf_include: settings.spf_include(),
    }
}

fn status(s: plugins::RecordStatus) -> RecordStatus {
    match s {
        plugins::RecordStatus::Pending => RecordStatus::Pending,
        plugins::RecordStatus::Verified => RecordStatus::Verified,
        plugins::RecordStatus::Failed => RecordStatus::Failed,
    }
}

/// The records a new domain must publish, all pending.
pub async fn records_to_publish(
    plugins: &Plugins,
    settings: &Settings,
    name: &DomainName,
    selector: &str,
    public_key: &str,
) -> Result<Vec<DnsRecordState>, PluginError> {
    let domain = sending_domain(settings, name.as_str(), selector, public_key);
    let records = plugins.domain_records(&domain).await?;
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
        .collect())
}

/// Looks a domain's records up now and decides its new status.
pub async fn check(
    plugins: &Plugins,
    settings: &Settings,
    domain: &Domain,
) -> Result<CheckedDomain, PluginError> {
    let target = sending_domain(
        settings,
        domain.name.as_str(),
        &domain.dkim_selector,
        &domain.dkim_public_key,
    );
    let checked = plugins.verify_domain(&target).await?;
    let records: Vec<DnsRecordState> = checked
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
    let outcome = conclude(&records, domain.verified_at.is_some());
    Ok(CheckedDomain {
        status: outcome.status,
        records,
        failure_reason: outcome.reason,
    })
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

/// Decides whether `from` may send for `project` (the rule of `docs/decisions.md`).
pub async fn authorize_sender(
    store: &Store,
    settings: &Settings,
    project: &ProjectId,
    from: &EmailAddress,
) -> Result<Sender, SenderError> {
    let candidates = DomainName::self_and_parents(from.domain());
    let verified: Vec<VerifiedDomain> = store.verified_domains(project, &candidates).await?;
    match covering(from.domain(), &verified) {
        Some(domain) => {
            let signing = store
                .signing_domain(project, &domain.name)
                .await?
                .ok_or_else(|| SenderError::NotVerified(from.domain().to_string()))?;
            Ok(Sender::Verified(signing))
        }
        None if settings.domains.allow_unverified => Ok(Sender::Unverified),
        None => Err(SenderError::NotVerified(from.domain().to_string())),
    }
}
