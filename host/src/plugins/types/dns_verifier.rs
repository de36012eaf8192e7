//! Host-side values of the `dns-verifier` world and their conversion to and from the WIT types.

use crate::plugins::bindings::dns_verifier::exports::herald::plugin::domain_verifier as wit;

/// A sending domain and the values the service generated for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendingDomain {
    /// The domain, e.g. `example.com`.
    pub name: String,
    /// The DKIM selector, e.g. `herald`.
    pub dkim_selector: String,
    /// The DKIM public key, base64 (the `p=` value).
    pub dkim_public_key: String,
    /// The host name the service receives bounces at (the return-path MX target).
    pub mail_host: String,
    /// The SPF mechanism that authorises the service, e.g. `include:spf.herald.example`.
    pub spf_include: String,
}

/// Whether a record is required or recommended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Needed for verification.
    Required,
    /// Recommended (e.g. DMARC).
    Recommended,
}

/// One DNS record to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsRecord {
    /// `TXT`, `MX` or `CNAME`.
    pub record_type: String,
    /// The full name, e.g. `herald._domainkey.example.com`.
    pub name: String,
    /// The value to publish.
    pub value: String,
    /// Required or recommended.
    pub requirement: Requirement,
}

/// The state of one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordStatus {
    /// Not found yet.
    Pending,
    /// Found with the expected value.
    Verified,
    /// Found with another value.
    Failed,
}

/// One record and what DNS answered for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedRecord {
    /// The record that should be published.
    pub expected: DnsRecord,
    /// Its state.
    pub status: RecordStatus,
    /// The values found at the name.
    pub found: Vec<String>,
}

impl From<&SendingDomain> for wit::SendingDomain {
    fn from(domain: &SendingDomain) -> wit::SendingDomain {
        wit::SendingDomain {
            name: domain.name.clone(),
            dkim_selector: domain.dkim_selector.clone(),
            dkim_public_key: domain.dkim_public_key.clone(),
            mail_host: domain.mail_host.clone(),
            spf_include: domain.spf_include.clone(),
        }
    }
}

impl From<wit::Requirement> for Requirement {
    fn from(requirement: wit::Requirement) -> Requirement {
        match requirement {
            wit::Requirement::Required => Requirement::Required,
            wit::Requirement::Recommended => Requirement::Recommended,
        }
    }
}

impl From<wit::DnsRecord> for DnsRecord {
    fn from(record: wit::DnsRecord) -> DnsRecord {
        DnsRecord {
            record_type: record.record_type,
            name: record.name,
            value: record.value,
            requirement: record.requirement.into(),
        }
    }
}

impl From<wit::RecordStatus> for RecordStatus {
    fn from(status: wit::RecordStatus) -> RecordStatus {
        match status {
            wit::RecordStatus::Pending => RecordStatus::Pending,
            wit::RecordStatus::Verified => RecordStatus::Verified,
            wit::RecordStatus::Failed => RecordStatus::Failed,
        }
    }
}

impl From<wit::CheckedRecord> for CheckedRecord {
    fn from(record: wit::CheckedRecord) -> CheckedRecord {
        CheckedRecord {
            expected: record.expected.into(),
            status: record.status.into(),
            found: record.found,
        }
    }
}
