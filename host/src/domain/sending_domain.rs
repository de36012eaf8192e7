//! Sending domains: their names, DKIM keys, the state of their DNS records, and the rule that
//! decides which verified domain may send for an address.
//!
//! The sender rule (also in `docs/decisions.md`): the domain of a `from` address is covered by a
//! verified domain of the project when it is that domain exactly, or a subdomain of it and that
//! verified domain has `allowSubdomains` set. The closest covering domain signs the mail.

use std::fmt;

use base64::Engine as _;
use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
use rsa::pkcs8::EncodePublicKey;
use serde::{Deserialize, Serialize};

use super::email::{EmailError, parse_domain};

/// A sending domain's name: lower-case ASCII (IDNs in punycode), at least two labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DomainName(String);

/// Why a string is not a usable sending domain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DomainNameError {
    /// Not a valid host name.
    #[error("{0}")]
    Syntax(String),
    /// A name that can never receive public DNS records.
    #[error("`{0}` is a reserved name that cannot publish DNS records; use a domain you own")]
    Reserved(String),
}

impl DomainName {
    /// Parses a domain as a user types it: surrounding spaces, a trailing dot, capitals and
    /// Unicode are accepted; a scheme, a path, an `@` or a port are not.
    pub fn parse(input: &str) -> Result<DomainName, DomainNameError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(DomainNameError::Syntax(
                "the domain is empty; send a name like example.com".into(),
            ));
        }
        if input.contains("://") || input.contains('/') || input.contains('@') {
            return Err(DomainNameError::Syntax(
                "send only the domain name, like example.com, without a scheme, path or @".into(),
            ));
        }
        if input.contains(':') {
            return Err(DomainNameError::Syntax(
                "send only the domain name, without a port".into(),
            ));
        }
        let ascii = parse_domain(input).map_err(|e| match e {
            EmailError::Domain(why) => {
                DomainNameError::Syntax(format!("the domain is not valid: {why}"))
            }
            other => DomainNameError::Syntax(other.to_string()),
        })?;
        let tld = ascii.rsplit('.').next().unwrap_or_default();
        if matches!(
            tld,
            "localhost" | "local" | "invalid" | "example" | "internal"
        ) || ascii == "example.com"
            || ascii == "example.org"
            || ascii == "example.net"
        {
            return Err(DomainNameError::Reserved(ascii));
        }
        Ok(DomainName(ascii))
    }

    /// Wraps a value read back from the store.
    pub(crate) fn from_trusted(s: String) -> DomainName {
        DomainName(s)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This name and every parent with at least two labels, closest first:
    /// `a.b.example.com`, `b.example.com`, `example.com`.
    pub fn self_and_parents(host: &str) -> Vec<String> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let mut out = Vec::new();
        let mut rest = host.as_str();
        while rest.contains('.') {
            out.push(rest.to_string());
            rest = rest.split_once('.').map(|x| x.1).unwrap_or_default();
        }
        out
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Verification state of a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainStatus {
    /// Its required records have not all been found yet.
    Pending,
    /// Every required record is published with the expected value.
    Verified,
    /// A required record has a wrong value, or disappeared after verification.
    Failed,
}

impl DomainStatus {
    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            DomainStatus::Pending => "pending",
            DomainStatus::Verified => "verified",
            DomainStatus::Failed => "failed",
        }
    }

    /// Reads a stored name.
    pub fn parse(s: &str) -> Option<DomainStatus> {
        match s {
            "pending" => Some(DomainStatus::Pending),
            "verified" => Some(DomainStatus::Verified),
            "failed" => Some(DomainStatus::Failed),
            _ => None,
        }
    }
}

/// State of one DNS record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordStatus {
    /// Not found yet.
    Pending,
    /// Found with the expected value.
    Verified,
    /// Found with another value.
    Failed,
}

/// One DNS record a domain must (or should) publish, with what the last check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsRecordState {
    /// `TXT`, `MX` or `CNAME`.
    #[serde(rename = "type")]
    pub record_type: String,
    /// Full name to publish at.
    pub name: String,
    /// Value to publish.
    pub value: String,
    /// Whether verification needs it (DMARC is only recommended).
    pub required: bool,
    /// Its state.
    pub status: RecordStatus,
    /// What DNS answered at the name in the last check.
    #[serde(default)]
    pub found: Vec<String>,
}

/// What a check concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckOutcome {
    /// The new status.
    pub status: DomainStatus,
    /// Why it is not verified, in words a person can act on.
    pub reason: Option<String>,
}

/// A short description of a record for messages.
fn describe(r: &DnsRecordState) -> String {
    let what = if r.name.contains("._domainkey.") {
        "DKIM"
    } else if r.name.starts_with("_dmarc.") {
        "DMARC"
    } else if r.record_type == "MX" {
        "return-path MX"
    } else {
        "SPF"
    };
    format!("the {what} {} record at {}", r.record_type, r.name)
}

/// Decides a domain's status from a check of its records. `was_verified` says whether it had been
/// verified before, so that records that vanish turn it `failed` rather than back to `pending`.
pub fn conclude(records: &[DnsRecordState], was_verified: bool) -> CheckOutcome {
    let required: Vec<&DnsRecordState> = records.iter().filter(|r| r.required).collect();
    if !required.is_empty() && required.iter().all(|r| r.status == RecordStatus::Verified) {
        return CheckOutcome {
            status: DomainStatus::Verified,
            reason: None,
        };
    }
    if let Some(wrong) = required.iter().find(|r| r.status == RecordStatus::Failed) {
        return CheckOutcome {
            status: DomainStatus::Failed,
            reason: Some(format!(
                "{} has another value (found: {}); publish: {}",
                describe(wrong),
                wrong.found.join(" | "),
                wrong.value
            )),
        };
    }
    let missing: Vec<String> = required
        .iter()
        .filter(|r| r.status == RecordStatus::Pending)
        .map(|r| describe(r))
        .collect();
    if was_verified {
        CheckOutcome {
            status: DomainStatus::Failed,
            reason: Some(format!(
                "{} disappeared after the domain was verified; publish it again",
                missing.join(", ")
            )),
        }
    } else {
        CheckOutcome {
            status: DomainStatus::Pending,
            reason: Some(format!("waiting for {}", missing.join(", "))),
        }
    }
}

/// A verified domain of a project, as the sender rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedDomain {
    pub name: String,
    /// Whether subdomains may send under it.
    pub allow_subdomains: bool,
}

/// The verified domain that covers `host` (the domain of a from address), if any: the closest
/// one, matching exactly, or as a parent when it allows subdomains.
pub fn covering<'a>(host: &str, verified: &'a [VerifiedDomain]) -> Option<&'a VerifiedDomain> {
    covering_by(host, verified, |d| (&d.name, d.allow_subdomains))
}

/// [`covering`] among any records of domains, `name` answering each one's (lower-case) name and
/// whether its subdomains send under it.
pub fn covering_by<'a, T>(
    host: &str,
    domains: &'a [T],
    name: impl Fn(&T) -> (&str, bool),
) -> Option<&'a T> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    DomainName::self_and_parents(&host)
        .into_iter()
        .find_map(|candidate| {
            domains.iter().find(|d| {
                let (name, allow_subdomains) = name(d);
                name == candidate && (candidate == host || allow_subdomains)
            })
        })
}

/// A freshly generated DKIM key.
pub struct DkimKey {
    /// The selector (the label before `._domainkey.`).
    pub selector: String,
    /// The private key, PKCS#1 PEM; stored, used to sign, never shown.
    pub private_pem: String,
    /// The public key for the `p=` tag: base64 of the DER SubjectPublicKeyInfo.
    pub public_base64: String,
}

impl DkimKey {
    /// Generates an RSA-2048 key with a fresh selector `herald<6 hex>`; CPU-heavy (tens of ms).
    pub fn generate() -> Result<DkimKey, String> {
        use rand::RngCore;
        let mut rng = rand::thread_rng();
        let key = rsa::RsaPrivateKey::new(&mut rng, 2048).map_err(|e| e.to_string())?;
        let private_pem = key
            .to_pkcs1_pem(LineEnding::LF)
            .map_err(|e| e.to_string())?
            .to_string();
        let der = key
            .to_public_key()
            .to_public_key_der()
            .map_err(|e| e.to_string())?;
        let public_base64 = base64::engine::general_purpose::STANDARD.encode(der.as_bytes());
        let mut tag = [0u8; 3];
        rng.fill_bytes(&mut tag);
        Ok(DkimKey {
            selector: format!("herald{}", hex::encode(tag)),
            private_pem,
            public_base64,
        })
    }
}

/// A freshly generated Ed25519 DKIM key (RFC 8463), which signs beside the RSA key.
pub struct Ed25519DkimKey {
    /// The selector, `herald<6 hex>-ed25519` (its own: one selector's record holds one key).
    pub selector: String,
    /// The private key: base64 of its PKCS#8 document; stored, used to sign, never shown.
    pub private_pkcs8: String,
    /// The public key for the `p=` tag: base64 of the raw 32 bytes (RFC 8463 section 4).
    pub public_base64: String,
}

impl Ed25519DkimKey {
    /// Generates a key with a fresh selector.
    pub fn generate() -> Result<Ed25519DkimKey, String> {
        use mail_auth::common::crypto::Ed25519Key;
        use rand::RngCore;
        let engine = base64::engine::general_purpose::STANDARD;
        let pkcs8 = Ed25519Key::generate_pkcs8().map_err(|e| e.to_string())?;
        let public = Ed25519Key::from_pkcs8_der(&pkcs8)
            .map_err(|e| e.to_string())?
            .public_key();
        let mut tag = [0u8; 3];
        rand::thread_rng().fill_bytes(&mut tag);
        Ok(Ed25519DkimKey {
            selector: format!("herald{}-ed25519", hex::encode(tag)),
            private_pkcs8: engine.encode(pkcs8),
            public_base64: engine.encode(public),
        })
    }
}

/// The name of a DKIM key's TXT record: `<selector>._domainkey.<domain>`.
pub fn dkim_record_name(domain: &str, selector: &str) -> String {
    format!("{selector}._domainkey.{domain}")
}

/// The TXT record of a domain's Ed25519 key, not looked up yet. It is recommended, not required:
/// the domain verifies and sends, signed with RSA, without it, and mail is signed with the
/// Ed25519 key as well once the record is found.
pub fn ed25519_record(domain: &str, selector: &str, public_base64: &str) -> DnsRecordState {
    DnsRecordState {
        record_type: "TXT".into(),
        name: dkim_record_name(domain, selector),
        value: format!("v=DKIM1; k=ed25519; p={public_base64}"),
        required: false,
        status: RecordStatus::Pending,
        found: Vec::new(),
    }
}

/// The state of an Ed25519 key's record from the TXT values `found` at its name: verified when
/// one names `k=ed25519` and the key; failed when one is another DKIM key; pending otherwise.
pub fn ed25519_record_status(found: &[String], public_base64: &str) -> RecordStatus {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let key = format!("p={}", squash(public_base64));
    let values: Vec<String> = found.iter().map(|v| squash(v)).collect();
    if values
        .iter()
        .any(|v| v.contains("k=ed25519") && v.split(';').any(|tag| tag == key))
    {
        RecordStatus::Verified
    } else if values
        .iter()
        .any(|v| v.starts_with("v=dkim1") || v.contains("p="))
    {
        RecordStatus::Failed
    } else {
        RecordStatus::Pending
    }
}

/// The MX record of a domain that receives mail (`inbound`): at the domain itself, to the
/// deployment's mail host, not looked up yet. It is not required for sending: the domain verifies
/// and sends without it, and receives mail once it is found.
pub fn inbound_record(domain: &str, mail_host: &str) -> DnsRecordState {
    DnsRecordState {
        record_type: "MX".into(),
        name: domain.to_string(),
        value: format!("10 {}", mail_host.trim_end_matches('.')),
        required: false,
        status: RecordStatus::Pending,
        found: Vec::new(),
    }
}

/// Whether `record` is the inbound MX record of the domain `domain`.
pub fn is_inbound_record(record: &DnsRecordState, domain: &str) -> bool {
    record.record_type == "MX" && record.name == domain
}

/// The state of an inbound MX record from the MX values `found` at its name (`preference host`):
/// verified when the mail host is among the most preferred hosts (so mail reaches it first);
/// failed when the name has MX records but not so; pending when it has none.
pub fn inbound_record_status(found: &[String], mail_host: &str) -> RecordStatus {
    let mail_host = mail_host.trim_end_matches('.');
    let parsed: Vec<(u32, &str)> = found
        .iter()
        .filter_map(|v| {
            let mut parts = v.split_whitespace();
            let preference = parts.next()?.parse().ok()?;
            Some((preference, parts.next()?.trim_end_matches('.')))
        })
        .collect();
    let Some(best) = parsed.iter().map(|(p, _)| *p).min() else {
        return if found.is_empty() {
            RecordStatus::Pending
        } else {
            RecordStatus::Failed
        };
    };
    if parsed
        .iter()
        .any(|(p, host)| *p == best && host.eq_ignore_ascii_case(mail_host))
    {
        RecordStatus::Verified
    } else {
        RecordStatus::Failed
    }
}

/// Whether a domain named `domain` with these `records` receives mail: its inbound MX record is
/// listed and was found.
pub fn receives_mail(records: &[DnsRecordState], domain: &str) -> bool {
    records
        .iter()
        .any(|r| is_inbound_record(r, domain) && r.status == RecordStatus::Verified)
}

/// The records to store after a check: the domain's records as they are now (`current`), each
/// with the state the check found for the same record. A check reads the domain before it asks
/// DNS; a record added meanwhile (`PATCH /domains/:id`) stays, pending, and one removed meanwhile
/// is not brought back.
pub fn apply_check(current: &[DnsRecordState], checked: &[DnsRecordState]) -> Vec<DnsRecordState> {
    current
        .iter()
        .map(|record| {
            checked
                .iter()
                .find(|c| {
                    c.record_type == record.record_type
                        && c.name == record.name
                        && c.value == record.value
                })
                .map_or_else(
                    || record.clone(),
                    |c| DnsRecordState {
                        status: c.status,
                        found: c.found.clone(),
                        ..record.clone()
                    },
                )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, required: bool, status: RecordStatus) -> DnsRecordState {
        DnsRecordState {
            record_type: "TXT".into(),
            name: name.into(),
            value: "v".into(),
            required,
            status,
            found: vec!["other".into()],
        }
    }

    #[test]
    fn a_check_keeps_records_added_meanwhile_and_drops_records_removed_meanwhile() {
        let dkim = record("s._domainkey.acme.io", true, RecordStatus::Pending);
        let removed = record("old._domainkey.acme.io", false, RecordStatus::Pending);
        let added = inbound_record("acme.io", "mail.herald.test");
        let checked = vec![
            DnsRecordState {
                status: RecordStatus::Verified,
                found: vec!["v".into()],
                ..dkim.clone()
            },
            DnsRecordState {
                status: RecordStatus::Verified,
                ..removed
            },
        ];
        let stored = apply_check(&[dkim.clone(), added.clone()], &checked);
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[0].status, RecordStatus::Verified);
        assert_eq!(stored[0].found, vec!["v".to_string()]);
        assert_eq!(stored[1], added);
        // A record whose value changed meanwhile keeps its own state.
        let rekeyed = DnsRecordState {
            value: "new".into(),
            ..dkim
        };
        assert_eq!(
            apply_check(std::slice::from_ref(&rekeyed), &checked),
            vec![rekeyed]
        );
    }

    #[test]
    fn names_are_normalised_and_junk_is_refused() {
        assert_eq!(
            DomainName::parse(" Mail.Example.co.UK. ").unwrap().as_str(),
            "mail.example.co.uk"
        );
        assert_eq!(
            DomainName::parse("bücher.de").unwrap().as_str(),
            "xn--bcher-kva.de"
        );
        for bad in [
            "",
            "https://acme.io",
            "acme.io/path",
            "ann@acme.io",
            "acme.io:25",
            "acme",
            "-acme.io",
            "acme..io",
            "[127.0.0.1]",
            "acme.123",
        ] {
            assert!(
                matches!(DomainName::parse(bad), Err(DomainNameError::Syntax(_))),
                "{bad}"
            );
        }
        for reserved in ["mail.localhost", "example.com", "printer.local"] {
            assert!(
                matches!(
                    DomainName::parse(reserved),
                    Err(DomainNameError::Reserved(_))
                ),
                "{reserved}"
            );
        }
    }

    #[test]
    fn status_follows_the_required_records() {
        use RecordStatus::*;
        let all = [
            record("s._domainkey.acme.io", true, Verified),
            record("acme.io", true, Verified),
            record("_dmarc.acme.io", false, Pending),
        ];
        assert_eq!(conclude(&all, false).status, DomainStatus::Verified);

        let missing = [
            record("s._domainkey.acme.io", true, Pending),
            record("acme.io", true, Verified),
        ];
        let outcome = conclude(&missing, false);
        assert_eq!(outcome.status, DomainStatus::Pending);
        assert!(outcome.reason.unwrap().contains("DKIM TXT record"));
        let outcome = conclude(&missing, true);
        assert_eq!(outcome.status, DomainStatus::Failed);
        assert!(outcome.reason.unwrap().contains("disappeared"));

        let wrong = [
            record("s._domainkey.acme.io", true, Verified),
            record("acme.io", true, Failed),
        ];
        let outcome = conclude(&wrong, false);
        assert_eq!(outcome.status, DomainStatus::Failed);
        assert!(
            outcome
                .reason
                .unwrap()
                .contains("SPF TXT record at acme.io")
        );
    }

    #[test]
    fn subdomains_are_covered_only_when_allowed() {
        let verified = vec![
            VerifiedDomain {
                name: "acme.io".into(),
                allow_subdomains: false,
            },
            VerifiedDomain {
                name: "news.beta.io".into(),
                allow_subdomains: true,
            },
        ];
        assert_eq!(covering("acme.io", &verified).unwrap().name, "acme.io");
        assert!(covering("mail.acme.io", &verified).is_none());
        assert!(covering("otheracme.io", &verified).is_none());
        assert_eq!(
            covering("eu.news.beta.io", &verified).unwrap().name,
            "news.beta.io"
        );
        assert!(covering("beta.io", &verified).is_none());
    }

    #[test]
    fn dkim_keys_are_rsa_2048_with_fresh_selectors() {
        let a = DkimKey::generate().unwrap();
        let b = DkimKey::generate().unwrap();
        assert_ne!(a.selector, b.selector);
        assert!(a.private_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        // SPKI of a 2048-bit key: 294 bytes, 392 base64 characters.
        assert_eq!(a.public_base64.len(), 392);
    }

    #[test]
    fn ed25519_keys_have_their_own_selector_and_a_raw_public_key() {
        use base64::Engine as _;
        let a = Ed25519DkimKey::generate().unwrap();
        let b = Ed25519DkimKey::generate().unwrap();
        assert_ne!(a.selector, b.selector);
        assert!(a.selector.starts_with("herald") && a.selector.ends_with("-ed25519"));
        let engine = base64::engine::general_purpose::STANDARD;
        assert_eq!(engine.decode(&a.public_base64).unwrap().len(), 32);
        // The stored private key is a PKCS#8 document that signs for the shown public key.
        let pkcs8 = engine.decode(&a.private_pkcs8).unwrap();
        let key = mail_auth::common::crypto::Ed25519Key::from_pkcs8_der(&pkcs8).unwrap();
        assert_eq!(engine.encode(key.public_key()), a.public_base64);

        let record = ed25519_record("acme.io", &a.selector, &a.public_base64);
        assert_eq!(record.name, format!("{}._domainkey.acme.io", a.selector));
        assert!(!record.required);
        let published = vec![record.value.clone()];
        assert_eq!(
            ed25519_record_status(&published, &a.public_base64),
            RecordStatus::Verified
        );
        // Split into strings with other spacing, as some DNS consoles publish it.
        let spaced = vec![format!("v=DKIM1;k=ed25519;  p={}", a.public_base64)];
        assert_eq!(
            ed25519_record_status(&spaced, &a.public_base64),
            RecordStatus::Verified
        );
        let rsa = vec![format!("v=DKIM1; k=rsa; p={}", a.public_base64)];
        assert_eq!(
            ed25519_record_status(&rsa, &a.public_base64),
            RecordStatus::Failed
        );
        let other = vec![format!("v=DKIM1; k=ed25519; p={}", b.public_base64)];
        assert_eq!(
            ed25519_record_status(&other, &a.public_base64),
            RecordStatus::Failed
        );
        assert_eq!(
            ed25519_record_status(&["hello".into()], &a.public_base64),
            RecordStatus::Pending
        );
        assert_eq!(
            ed25519_record_status(&[], &a.public_base64),
            RecordStatus::Pending
        );
    }

    #[test]
    fn an_inbound_mx_verifies_when_the_mail_host_is_most_preferred() {
        let host = "mail.herald.test";
        let found = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(inbound_record_status(&[], host), RecordStatus::Pending);
        assert_eq!(
            inbound_record_status(&found(&["10 mail.herald.test."]), host),
            RecordStatus::Verified
        );
        assert_eq!(
            inbound_record_status(
                &found(&["5 MAIL.herald.test", "20 backup.example.net."]),
                host
            ),
            RecordStatus::Verified
        );
        // Another host is tried first: mail would not reach Herald.
        assert_eq!(
            inbound_record_status(&found(&["5 mx.example.net.", "10 mail.herald.test."]), host),
            RecordStatus::Failed
        );
        assert_eq!(
            inbound_record_status(&found(&["garbage"]), host),
            RecordStatus::Failed
        );
        let mut record = inbound_record("in.acme.io", "mail.herald.test.");
        assert_eq!(record.value, "10 mail.herald.test");
        assert!(!record.required);
        assert!(!receives_mail(std::slice::from_ref(&record), "in.acme.io"));
        record.status = RecordStatus::Verified;
        assert!(receives_mail(std::slice::from_ref(&record), "in.acme.io"));
        assert!(!receives_mail(&[record], "acme.io"));
    }
}
