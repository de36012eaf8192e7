//! The default DNS verifier: a DKIM TXT record, an SPF TXT record and a return-path MX
//! (required) and a DMARC TXT record (recommended), looked up through the host's resolver
//! (capability `dns`).

use herald_sdk::dns::{Error, RecordType, resolve};
use herald_sdk::dns_verifier::{
    CheckedRecord, DnsRecord, Guest, RecordStatus, Requirement, SendingDomain,
};

/// The label under the domain that receives bounces (the return path).
const RETURN_PATH_LABEL: &str = "bounces";

fn records(domain: &SendingDomain) -> Vec<DnsRecord> {
    let name = domain.name.trim_end_matches('.').to_ascii_lowercase();
    vec![
        DnsRecord {
            record_type: "TXT".into(),
            name: format!("{}._domainkey.{name}", domain.dkim_selector),
            value: format!("v=DKIM1; k=rsa; p={}", domain.dkim_public_key),
            requirement: Requirement::Required,
        },
        DnsRecord {
            record_type: "TXT".into(),
            name: name.clone(),
            value: format!("v=spf1 {} ~all", domain.spf_include),
            requirement: Requirement::Required,
        },
        DnsRecord {
            record_type: "MX".into(),
            name: format!("{RETURN_PATH_LABEL}.{name}"),
            value: format!("10 {}", domain.mail_host.trim_end_matches('.')),
            requirement: Requirement::Required,
        },
        DnsRecord {
            record_type: "TXT".into(),
            name: format!("_dmarc.{name}"),
            value: "v=DMARC1; p=none;".into(),
            requirement: Requirement::Recommended,
        },
    ]
}

fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase()
}

/// Whether a found value satisfies the expected record.
fn satisfies(record: &DnsRecord, found: &str, domain: &SendingDomain) -> bool {
    let found_s = squash(found);
    if record.record_type == "MX" {
        let host = found.split_whitespace().last().unwrap_or("");
        return host
            .trim_end_matches('.')
            .eq_ignore_ascii_case(domain.mail_host.trim_end_matches('.'));
    }
    if record.name.starts_with("_dmarc.") {
        return found_s.starts_with("v=dmarc1");
    }
    if record.name.contains("._domainkey.") {
        return found_s.contains(&format!("p={}", squash(&domain.dkim_public_key)));
    }
    found_s.starts_with("v=spf1") && found_s.contains(&squash(&domain.spf_include))
}

struct Verifier;

impl Guest for Verifier {
    fn records(domain: SendingDomain) -> Vec<DnsRecord> {
        records(&domain)
    }

    fn verify(domain: SendingDomain) -> Vec<CheckedRecord> {
        records(&domain)
            .into_iter()
            .map(|record| {
                let kind = if record.record_type == "MX" {
                    RecordType::Mx
                } else {
                    RecordType::Txt
                };
                let (found, status) = match resolve(&record.name, kind) {
                    Ok(values) if values.is_empty() => (values, RecordStatus::Pending),
                    Ok(values) => {
                        let ok = values.iter().any(|v| satisfies(&record, v, &domain));
                        let relevant: bool = record.record_type == "MX"
                            || values.iter().any(|v| {
                                let s = squash(v);
                                s.starts_with("v=spf1")
                                    || s.starts_with("v=dkim1")
                                    || s.starts_with("v=dmarc1")
                                    || s.contains("p=")
                            });
                        let status = if ok {
                            RecordStatus::Verified
                        } else if relevant {
                            RecordStatus::Failed
                        } else {
                            RecordStatus::Pending
                        };
                        (values, status)
                    }
                    Err(Error::NotFound) | Err(Error::Failed(_)) | Err(Error::InvalidName(_)) => {
                        (Vec::new(), RecordStatus::Pending)
                    }
                };
                CheckedRecord {
                    expected: record,
                    status,
                    found,
                }
            })
            .collect()
    }
}

herald_sdk::export_dns_verifier!(Verifier);
