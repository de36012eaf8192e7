//! Email addresses as Herald accepts them.
//!
//! The rule (also in `docs/decisions.md`): a local part of at most 64 octets that is either a
//! dot-atom (RFC 5322 `atext` characters, dots not leading, trailing or doubled) or a quoted
//! string of printable ASCII; an `@`; a domain of at least two labels, each 1..=63 letters, digits
//! or inner hyphens, with an alphabetic or `xn--` top-level label. Internationalised domains are
//! accepted and stored in their ASCII (punycode) form. The whole address is at most 254 octets.
//! Local parts with non-ASCII characters (RFC 6531) are not accepted, and an address sent with a
//! display name (`Ann <ann@example.com>`) is refused with a message saying to send it bare.
//! Addresses are stored lower-cased, so that `Ann@Example.com` and `ann@example.com` are one
//! contact.

use std::fmt;

/// A syntactically valid, normalised (lower-case, ASCII domain) email address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmailAddress(String);

/// Why a string is not an email address; the text is shown to API users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    /// Nothing was sent.
    #[error("the email address is empty")]
    Empty,
    /// There is no `@` between a local part and a domain.
    #[error("an email address needs one @ between a local part and a domain, like ann@example.com")]
    MissingAt,
    /// The part before the `@` is not valid.
    #[error("the part before @ is not valid: {0}")]
    LocalPart(&'static str),
    /// The part after the `@` is not valid.
    #[error("the domain is not valid: {0}")]
    Domain(&'static str),
    /// The address is longer than SMTP allows.
    #[error("the address is longer than 254 characters")]
    TooLong,
    /// A display name or angle brackets came with the address (`Ann <ann@example.com>`).
    #[error("send only the address, without a name or angle brackets, like ann@example.com")]
    DisplayName,
}

/// Longest input worth parsing: a 64-octet local part, `@` and a 253-octet domain written in
/// Unicode (at most four UTF-8 bytes for each character of its ASCII form), with room to spare.
const MAX_INPUT_BYTES: usize = 2048;

impl EmailAddress {
    /// Parses and normalises an address.
    pub fn parse(input: &str) -> Result<EmailAddress, EmailError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(EmailError::Empty);
        }
        if input.len() > MAX_INPUT_BYTES {
            return Err(EmailError::TooLong);
        }
        if input.ends_with('>') && input.contains('<') && !input.starts_with('"') {
            return Err(EmailError::DisplayName);
        }
        let at = input.rfind('@').ok_or(EmailError::MissingAt)?;
        let (local, domain) = (&input[..at], &input[at + 1..]);
        if local.is_empty() || domain.is_empty() {
            return Err(EmailError::MissingAt);
        }
        let local = parse_local(local)?;
        let domain = parse_domain(domain)?;
        let address = format!("{local}@{domain}");
        if address.len() > 254 {
            return Err(EmailError::TooLong);
        }
        Ok(EmailAddress(address))
    }

    /// Wraps a value that was parsed before (read back from the store), without checking it
    /// again.
    pub fn from_trusted(s: String) -> EmailAddress {
        EmailAddress(s)
    }

    /// The normalised address.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The domain part.
    pub fn domain(&self) -> &str {
        self.0.rsplit_once('@').map(|(_, d)| d).unwrap_or("")
    }

    /// The local part (before the last `@`), quotes included when it is quoted.
    pub fn local_part(&self) -> &str {
        self.0.rsplit_once('@').map(|(l, _)| l).unwrap_or("")
    }

    /// Whether the local part is a quoted string (`"john doe"@example.org`).
    pub fn is_quoted(&self) -> bool {
        self.0.starts_with('"')
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c)
}

fn parse_local(local: &str) -> Result<String, EmailError> {
    if local.len() > 64 {
        return Err(EmailError::LocalPart("it is longer than 64 characters"));
    }
    if local.starts_with('"') {
        if local.len() < 2 || !local.ends_with('"') {
            return Err(EmailError::LocalPart(
                "a quoted local part must end with a quote",
            ));
        }
        let inner = &local[1..local.len() - 1];
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n) if (' '..='~').contains(&n) => {}
                    _ => {
                        return Err(EmailError::LocalPart(
                            "a backslash must escape a printable character",
                        ));
                    }
                },
                '"' => {
                    return Err(EmailError::LocalPart(
                        "a quote inside a quoted local part must be escaped",
                    ));
                }
                c if (' '..='~').contains(&c) => {}
                _ => {
                    return Err(EmailError::LocalPart(
                        "a quoted local part holds printable ASCII only",
                    ));
                }
            }
        }
        // Quoted local parts keep their case: they are opaque to us.
        return Ok(local.to_string());
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return Err(EmailError::LocalPart(
            "dots may not lead, trail or follow each other",
        ));
    }
    if let Some(bad) = local.chars().find(|&c| c != '.' && !is_atext(c)) {
        return Err(if bad.is_whitespace() {
            EmailError::LocalPart("it contains a space; quote it or remove the space")
        } else if !bad.is_ascii() {
            EmailError::LocalPart(
                "it contains non-ASCII characters, which are not accepted before the @",
            )
        } else {
            EmailError::LocalPart("it contains a character that needs quoting")
        });
    }
    Ok(local.to_ascii_lowercase())
}

/// Checks a domain and answers it in lower-case ASCII (punycode for international names).
pub fn parse_domain(domain: &str) -> Result<String, EmailError> {
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    if domain.starts_with('[') {
        return Err(EmailError::Domain(
            "address literals like [127.0.0.1] are not accepted",
        ));
    }
    let ascii = if domain.is_ascii() {
        domain.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii(domain)
            .map_err(|_| EmailError::Domain("it is not a valid internationalised domain name"))?
    };
    if ascii.len() > 253 {
        return Err(EmailError::Domain("it is longer than 253 characters"));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    if labels.len() < 2 {
        return Err(EmailError::Domain("it needs a dot, like example.com"));
    }
    for label in &labels {
        if label.is_empty() || label.len() > 63 {
            return Err(EmailError::Domain(
                "each part between dots must be 1 to 63 characters",
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(EmailError::Domain(
                "it may hold only letters, digits, hyphens and dots",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(EmailError::Domain(
                "a part may not start or end with a hyphen",
            ));
        }
    }
    let tld = labels[labels.len() - 1];
    if !(tld.starts_with("xn--") || tld.bytes().all(|b| b.is_ascii_alphabetic())) {
        return Err(EmailError::Domain(
            "the last part must be a top-level domain like com",
        ));
    }
    Ok(ascii)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_normalises() {
        assert_eq!(
            EmailAddress::parse(" Ann.Lee+x@Example.COM ")
                .unwrap()
                .as_str(),
            "ann.lee+x@example.com"
        );
        assert_eq!(
            EmailAddress::parse("\"john doe\"@example.org")
                .unwrap()
                .as_str(),
            "\"john doe\"@example.org"
        );
        assert_eq!(
            EmailAddress::parse("user@bücher.de").unwrap().as_str(),
            "user@xn--bcher-kva.de"
        );
        assert_eq!(EmailAddress::parse("a@b.co").unwrap().domain(), "b.co");
    }

    #[test]
    fn rejects_with_reasons() {
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a..b@example.com",
            ".a@example.com",
            "a b@example.com",
            "a@localhost",
            "a@-x.com",
            "a@x.123",
            "a@[127.0.0.1]",
            "a@ex_ample.com",
        ] {
            assert!(
                EmailAddress::parse(bad).is_err(),
                "{bad} should be rejected"
            );
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(matches!(
            EmailAddress::parse(&long),
            Err(EmailError::LocalPart(_))
        ));
    }

    #[test]
    fn quoted_local_parts() {
        for (input, local) in [
            (r#""john doe"@example.org"#, r#""john doe""#),
            (r#""Ann@Home"@example.org"#, r#""Ann@Home""#),
            (r#""a\"b"@example.org"#, r#""a\"b""#),
            (r#""a\\b"@example.org"#, r#""a\\b""#),
            (r#""(),:;<>[]"@example.org"#, r#""(),:;<>[]""#),
            (r#"""@example.org"#, r#""""#),
        ] {
            let parsed = EmailAddress::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(parsed.local_part(), local, "{input}");
            assert!(parsed.is_quoted());
            assert_eq!(parsed.domain(), "example.org");
        }
        for bad in [
            r#""unterminated@example.org"#,
            r#""a"b"@example.org"#,
            r#""a\"@example.org"#,
            "\"tab\there\"@example.org",
            "\"caf\u{e9}\"@example.org",
        ] {
            assert!(
                matches!(EmailAddress::parse(bad), Err(EmailError::LocalPart(_))),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn dot_atom_edges() {
        let specials = "!#$%&'*+-/=?^_`{|}~";
        let parsed = EmailAddress::parse(&format!("a{specials}z@example.com")).unwrap();
        assert_eq!(parsed.local_part(), format!("a{specials}z"));
        assert!(!parsed.is_quoted());
        assert!(EmailAddress::parse("a.b.c@example.com").is_ok());
        assert!(EmailAddress::parse("a.@example.com").is_err());
        assert!(EmailAddress::parse("a(comment)@example.com").is_err());
        assert_eq!(
            EmailAddress::parse("jos\u{e9}@example.com"),
            Err(EmailError::LocalPart(
                "it contains non-ASCII characters, which are not accepted before the @"
            ))
        );
        assert_eq!(
            EmailAddress::parse("Ann Lee <ann@example.com>"),
            Err(EmailError::DisplayName)
        );
        assert_eq!(
            EmailAddress::parse("<ann@example.com>"),
            Err(EmailError::DisplayName)
        );
    }

    #[test]
    fn domain_edges() {
        // A trailing root dot is dropped; digits-only labels are fine except as the TLD.
        assert_eq!(
            EmailAddress::parse("a@Example.COM.").unwrap().domain(),
            "example.com"
        );
        assert_eq!(
            EmailAddress::parse("a@123.com").unwrap().domain(),
            "123.com"
        );
        assert_eq!(
            EmailAddress::parse("a@x.y.z.io").unwrap().domain(),
            "x.y.z.io"
        );
        // IDN: Unicode in any case becomes punycode; punycode input passes through.
        assert_eq!(
            EmailAddress::parse("a@BÜCHER.de").unwrap().domain(),
            "xn--bcher-kva.de"
        );
        assert_eq!(
            EmailAddress::parse("a@пример.рф").unwrap().domain(),
            "xn--e1afmkfd.xn--p1ai"
        );
        assert_eq!(
            EmailAddress::parse("a@xn--bcher-kva.de").unwrap().domain(),
            "xn--bcher-kva.de"
        );
        for bad in [
            "a@example..com",
            "a@.example.com",
            "a@example.com-",
            "a@exa mple.com",
        ] {
            assert!(
                matches!(EmailAddress::parse(bad), Err(EmailError::Domain(_))),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn length_limits() {
        let local64 = "l".repeat(64);
        assert!(EmailAddress::parse(&format!("{local64}@example.com")).is_ok());
        let label63 = "d".repeat(63);
        assert!(EmailAddress::parse(&format!("a@{label63}.com")).is_ok());
        assert!(matches!(
            EmailAddress::parse(&format!("a@{label63}d.com")),
            Err(EmailError::Domain(_))
        ));
        // 64 + 1 + 189 = 254 octets is the most an address may have.
        let domain189 = format!(
            "{}.{}.{}.com",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(57)
        );
        assert_eq!(domain189.len(), 189);
        assert!(EmailAddress::parse(&format!("{local64}@{domain189}")).is_ok());
        let domain190 = format!(
            "{}.{}.{}.com",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(58)
        );
        assert_eq!(
            EmailAddress::parse(&format!("{local64}@{domain190}")),
            Err(EmailError::TooLong)
        );
        assert_eq!(
            EmailAddress::parse(&"x".repeat(5000)),
            Err(EmailError::TooLong)
        );
    }
}
