//! The rules of `POST /v1/verify`, with no I/O: what an address tells by itself (the lists, plus
//! addressing, typos), what the DNS answers of its domain mean, and the verdict.
//!
//! The verdict (also in `docs/decisions.md`): an address is **valid** when its syntax is accepted
//! ([`EmailAddress::parse`]), its domain exists in DNS, the domain can receive mail (an MX record
//! naming a mail server, or no MX at all but an A/AAAA record at the domain itself, the implicit
//! MX of RFC 5321 §5.1; a null MX of RFC 7505 refuses mail) and the domain is not a disposable
//! provider. A DNS answer that did not come (timeout, server failure) leaves the domain
//! unverified, so the address is not valid. Typos, alias services, personal providers and plus
//! addressing are reported but never make an address invalid by themselves.

use std::collections::HashSet;
use std::sync::LazyLock;

use super::email::{EmailAddress, EmailError};

// ---------------------------------------------------------------------------------------------
// Lists (host/data, see its README for sources and licences)

fn load(text: &'static str) -> HashSet<&'static str> {
    entries(text).collect()
}

fn entries(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

static DISPOSABLE: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| load(include_str!("../../data/disposable-domains.txt")));
static ALIAS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| load(include_str!("../../data/alias-domains.txt")));
static PERSONAL: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| load(include_str!("../../data/personal-domains.txt")));
static TLDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| load(include_str!("../../data/tlds.txt")));
/// Typo targets in order of popularity, split at their first dot into (name, suffix).
static POPULAR: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
    entries(include_str!("../../data/popular-domains.txt"))
        .filter_map(|d| d.split_once('.'))
        .collect()
});

/// Top-level domains a mistyped TLD is corrected to, most used first.
const COMMON_TLDS: [&str; 16] = [
    "com", "net", "org", "edu", "gov", "io", "co", "uk", "de", "fr", "it", "es", "nl", "ca", "au",
    "ru",
];

/// Loads every list now, so that the first request does not pay for it.
pub fn preload() {
    for set in [&DISPOSABLE, &ALIAS, &PERSONAL, &TLDS] {
        LazyLock::force(set);
    }
    LazyLock::force(&POPULAR);
}

/// Whether `domain` or a domain it is below is in `list` (`a.b.example.com` matches
/// `example.com`; a bare top-level domain never matches).
fn listed(list: &HashSet<&'static str>, domain: &str) -> bool {
    let mut rest = domain;
    loop {
        if list.contains(rest) {
            return true;
        }
        match rest.split_once('.') {
            Some((_, parent)) if parent.contains('.') => rest = parent,
            _ => return false,
        }
    }
}

/// Whether the domain is a disposable (throw-away) mail provider.
pub fn is_disposable(domain: &str) -> bool {
    listed(&DISPOSABLE, domain)
}

/// Whether the domain is an alias or forwarding service.
pub fn is_alias(domain: &str) -> bool {
    listed(&ALIAS, domain)
}

/// Whether the domain is a personal mailbox provider.
pub fn is_personal(domain: &str) -> bool {
    listed(&PERSONAL, domain)
}

// ---------------------------------------------------------------------------------------------
// Typos

/// Optimal string alignment distance: insertions, deletions, substitutions and transpositions of
/// adjacent characters each cost one (restricted Damerau–Levenshtein). Compares bytes, which is
/// exact for the ASCII (punycode) domains it is used on.
pub fn osa_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Three rows of the dynamic programme: i-2, i-1 and i.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// Edits allowed in the name part of a popular domain: none for names of up to three letters
/// (`aol`, `msn`, `gmx`: too many real domains are one edit away), one up to six, two above.
fn name_edits_allowed(name: &str) -> usize {
    match name.len() {
        0..=3 => 0,
        4..=6 => 1,
        _ => 2,
    }
}

/// The domain `domain` was probably meant to be, when it looks like a misspelling.
///
/// 1. Against the popular mailbox domains: a domain with as many labels as the popular one, its
///    first label within [`name_edits_allowed`] edits of the popular name and the rest within one
///    edit of the popular suffix, two edits at most in all (`gmial.com`, `hotmial.con`,
///    `gmail.co`, `outlok.com`). The closest wins, then the more popular.
/// 2. Otherwise a top-level domain that does not exist and is one edit from a common one
///    (`example.cmo` → `example.com`).
///
/// Popular, personal and alias domains (and their subdomains) are never typos.
pub fn typo_correction(domain: &str) -> Option<String> {
    if is_personal(domain) || is_alias(domain) {
        return None;
    }
    let labels = domain.split('.').count();
    let (name, suffix) = domain.split_once('.')?;
    let mut best: Option<(usize, &(&str, &str))> = None;
    for popular in POPULAR.iter() {
        let (p_name, p_suffix) = *popular;
        if p_suffix.split('.').count() + 1 != labels {
            continue;
        }
        let allowed = name_edits_allowed(p_name);
        // Each edit changes the length by one at most: skip the work when that already fails.
        if name.len().abs_diff(p_name.len()) > allowed {
            continue;
        }
        let name_edits = osa_distance(name, p_name);
        if name_edits > allowed {
            continue;
        }
        let suffix_edits = osa_distance(suffix, p_suffix);
        let total = name_edits + suffix_edits;
        if suffix_edits > 1 || total == 0 || total > 2 {
            continue;
        }
        if best.is_none_or(|(edits, _)| total < edits) {
            best = Some((total, popular));
        }
    }
    if let Some((_, (p_name, p_suffix))) = best {
        return Some(format!("{p_name}.{p_suffix}"));
    }
    let (rest, tld) = domain.rsplit_once('.')?;
    if TLDS.contains(tld) {
        return None;
    }
    COMMON_TLDS
        .iter()
        .find(|common| osa_distance(tld, common) == 1)
        .map(|common| format!("{rest}.{common}"))
}

// ---------------------------------------------------------------------------------------------
// What the address tells by itself

/// Facts of a syntactically valid address that need no lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressFacts {
    /// The normalised address.
    pub address: EmailAddress,
    /// The domain is a disposable provider.
    pub is_disposable: bool,
    /// The domain is an alias or forwarding service.
    pub is_alias: bool,
    /// The domain is a personal mailbox provider.
    pub is_personal: bool,
    /// A dot-atom local part with a `+tag` after a non-empty name (`ann+news@…`).
    pub is_plus_addressed: bool,
    /// The corrected domain when the domain looks like a typo.
    pub typo_of: Option<String>,
}

impl AddressFacts {
    /// The facts of `address`.
    pub fn of(address: EmailAddress) -> AddressFacts {
        let domain = address.domain();
        let is_plus_addressed = !address.is_quoted()
            && address
                .local_part()
                .split_once('+')
                .is_some_and(|(name, tag)| !name.is_empty() && !tag.is_empty());
        AddressFacts {
            is_disposable: is_disposable(domain),
            is_alias: is_alias(domain),
            is_personal: is_personal(domain),
            is_plus_addressed,
            typo_of: typo_correction(domain),
            address,
        }
    }

    /// The address with the corrected domain, when the domain looks like a typo.
    pub fn suggested_email(&self) -> Option<String> {
        self.typo_of
            .as_ref()
            .map(|domain| format!("{}@{domain}", self.address.local_part()))
    }
}

// ---------------------------------------------------------------------------------------------
// What DNS says about the domain

/// The answer to one DNS query, as far as verification cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Records of the asked type: for MX the exchange host names (`.` for the root, as in a
    /// null MX), for A/AAAA the addresses.
    Records(Vec<String>),
    /// The name exists but has no records of this type (NOERROR, no answer).
    NoRecords,
    /// The name does not exist (NXDOMAIN).
    NxDomain,
    /// No answer before the deadline.
    TimedOut,
    /// Any other failure (SERVFAIL, refused, network error).
    Failed(String),
}

impl Answer {
    fn has_records(&self) -> bool {
        matches!(self, Answer::Records(r) if !r.is_empty())
    }

    /// The name exists (an answer, empty or not).
    fn shows_existence(&self) -> bool {
        matches!(self, Answer::Records(_) | Answer::NoRecords)
    }

    /// A definitive answer (not a timeout or failure).
    fn answered(&self) -> bool {
        !matches!(self, Answer::TimedOut | Answer::Failed(_))
    }
}

/// The answers about one domain that verification asks for, all at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookups {
    /// MX at the domain.
    pub mx: Answer,
    /// A at the domain.
    pub a: Answer,
    /// AAAA at the domain.
    pub aaaa: Answer,
    /// NS at the domain.
    pub ns: Answer,
    /// A at `www.` the domain.
    pub www_a: Answer,
    /// AAAA at `www.` the domain.
    pub www_aaaa: Answer,
}

/// Where mail for a domain goes, from its MX records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailRoute {
    /// MX records name at least one mail server.
    Exchangers,
    /// A null MX (`0 .`, RFC 7505): the domain accepts no mail.
    NullMx,
    /// No MX records.
    NoMx,
}

/// What DNS established about a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsFacts {
    /// The domain exists (any answer but NXDOMAIN).
    pub exists: bool,
    /// Its MX records.
    pub mail: MailRoute,
    /// An A or AAAA record at the domain itself.
    pub has_address: bool,
    /// An A or AAAA record at the domain or at `www.` the domain.
    pub has_website: bool,
}

impl DnsFacts {
    /// The facts of a domain that does not exist.
    pub const NONEXISTENT: DnsFacts = DnsFacts {
        exists: false,
        mail: MailRoute::NoMx,
        has_address: false,
        has_website: false,
    };

    /// Whether the domain can receive mail: a mail server in MX, or no MX but an address at the
    /// domain itself (the implicit MX of RFC 5321 §5.1).
    pub fn accepts_mail(&self) -> bool {
        self.exists
            && match self.mail {
                MailRoute::Exchangers => true,
                MailRoute::NullMx => false,
                MailRoute::NoMx => self.has_address,
            }
    }
}

/// Why DNS could not tell.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsUnknown {
    /// A query needed for the verdict was not answered before the deadline.
    #[error("DNS did not answer in time")]
    TimedOut,
    /// A query needed for the verdict failed.
    #[error("DNS lookup failed ({0})")]
    Failed(String),
}

impl DnsUnknown {
    fn of(answer: &Answer) -> DnsUnknown {
        match answer {
            Answer::Failed(why) => DnsUnknown::Failed(why.clone()),
            _ => DnsUnknown::TimedOut,
        }
    }
}

impl Lookups {
    /// The facts the answers establish, or why they establish nothing.
    ///
    /// Any answer at the domain shows it exists; NXDOMAIN without such an answer shows it does
    /// not. The mail route needs the MX answer, and, without MX records, both address answers;
    /// a missing one of those makes the domain unknown. The `www.` answers only feed
    /// `has_website` (a failure there counts as no website).
    pub fn facts(&self) -> Result<DnsFacts, DnsUnknown> {
        let apex = [&self.mx, &self.a, &self.aaaa, &self.ns];
        if !apex.iter().any(|a| a.shows_existence()) {
            // Nothing shows the domain exists: NXDOMAIN says it does not, else nothing answered.
            if apex.contains(&&Answer::NxDomain) {
                return Ok(DnsFacts::NONEXISTENT);
            }
            return Err(DnsUnknown::of(apex[0]));
        }
        let has_address = self.a.has_records() || self.aaaa.has_records();
        let mail = match &self.mx {
            Answer::Records(hosts) if hosts.iter().all(|h| h == "." || h.is_empty()) => {
                MailRoute::NullMx
            }
            Answer::Records(_) => MailRoute::Exchangers,
            Answer::NoRecords | Answer::NxDomain => MailRoute::NoMx,
            missing => return Err(DnsUnknown::of(missing)),
        };
        if mail == MailRoute::NoMx
            && !has_address
            && let Some(missing) = [&self.a, &self.aaaa].into_iter().find(|a| !a.answered())
        {
            return Err(DnsUnknown::of(missing));
        }
        Ok(DnsFacts {
            exists: true,
            mail,
            has_address,
            has_website: has_address || self.www_a.has_records() || self.www_aaaa.has_records(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The verdict

/// The answer of `POST /v1/verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The normalised address, or the input (trimmed) when it is not an address.
    pub email: String,
    /// See the module documentation.
    pub valid: bool,
    /// The domain is a disposable provider.
    pub is_disposable: bool,
    /// The domain is an alias or forwarding service.
    pub is_alias: bool,
    /// The domain looks like a typo of another one.
    pub is_typo: bool,
    /// The local part has a `+tag`.
    pub is_plus_addressed: bool,
    /// The domain is a personal mailbox provider.
    pub is_personal: bool,
    /// The domain exists in DNS.
    pub domain_exists: bool,
    /// A or AAAA at the domain or `www.` the domain.
    pub has_website: bool,
    /// MX records naming a mail server (a null MX is not one).
    pub has_mx_records: bool,
    /// The address with the corrected domain, for a typo.
    pub suggested_email: Option<String>,
    /// Sentences explaining every problem and every flag that is set.
    pub reasons: Vec<String>,
}

impl Verdict {
    /// The verdict on input that is not an address: nothing is looked up.
    pub fn syntax_error(input: &str, error: &EmailError) -> Verdict {
        Verdict {
            email: input.trim().to_string(),
            valid: false,
            is_disposable: false,
            is_alias: false,
            is_typo: false,
            is_plus_addressed: false,
            is_personal: false,
            domain_exists: false,
            has_website: false,
            has_mx_records: false,
            suggested_email: None,
            reasons: vec![format!("The address is not valid: {error}.")],
        }
    }

    /// The verdict on a valid address, given what DNS said about its domain.
    pub fn of(facts: &AddressFacts, dns: &Result<DnsFacts, DnsUnknown>) -> Verdict {
        let domain = facts.address.domain();
        let mut reasons = Vec::new();
        match dns {
            Err(unknown) => reasons.push(format!(
                "{unknown} for {domain}, so the domain could not be verified."
            )),
            Ok(known) if !known.exists => {
                reasons.push(format!("The domain {domain} does not exist."));
            }
            Ok(known) => match known.mail {
                MailRoute::NullMx => reasons.push(format!(
                    "The domain {domain} publishes a null MX record: it accepts no mail."
                )),
                MailRoute::NoMx if known.has_address => reasons.push(
                    "No mail server (MX) is published for the domain; mail goes to the \
                     domain's own address, as RFC 5321 allows."
                        .to_string(),
                ),
                MailRoute::NoMx => reasons.push(
                    "No mail server (MX) is published for the domain, and it has no address \
                     to fall back to."
                        .to_string(),
                ),
                MailRoute::Exchangers => {}
            },
        }
        let known = dns.as_ref().copied().unwrap_or(DnsFacts::NONEXISTENT);
        if facts.is_disposable {
            reasons.push(format!("{domain} is a disposable email provider."));
        }
        if let Some(correct) = &facts.typo_of {
            reasons.push(format!(
                "The domain {domain} looks like a typo of {correct}."
            ));
        }
        if facts.is_alias {
            reasons.push(format!(
                "{domain} is an alias service that forwards to another mailbox."
            ));
        }
        if facts.is_personal {
            reasons.push(format!("{domain} is a personal mailbox provider."));
        }
        if facts.is_plus_addressed {
            reasons.push("The address has a +tag (plus addressing).".to_string());
        }
        Verdict {
            email: facts.address.to_string(),
            valid: known.accepts_mail() && !facts.is_disposable,
            is_disposable: facts.is_disposable,
            is_alias: facts.is_alias,
            is_typo: facts.typo_of.is_some(),
            is_plus_addressed: facts.is_plus_addressed,
            is_personal: facts.is_personal,
            domain_exists: known.exists,
            has_website: known.has_website,
            has_mx_records: known.mail == MailRoute::Exchangers,
            suggested_email: facts.suggested_email(),
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(address: &str) -> AddressFacts {
        AddressFacts::of(EmailAddress::parse(address).unwrap())
    }

    fn records(values: &[&str]) -> Answer {
        Answer::Records(values.iter().map(|v| v.to_string()).collect())
    }

    /// Answers of a domain with MX `mx`, A `a` and everything else empty.
    fn lookups(mx: Answer, a: Answer) -> Lookups {
        Lookups {
            mx,
            a,
            aaaa: Answer::NoRecords,
            ns: Answer::NoRecords,
            www_a: Answer::NoRecords,
            www_aaaa: Answer::NoRecords,
        }
    }

    fn all(answer: Answer) -> Lookups {
        Lookups {
            mx: answer.clone(),
            a: answer.clone(),
            aaaa: answer.clone(),
            ns: answer.clone(),
            www_a: answer.clone(),
            www_aaaa: answer,
        }
    }

    #[test]
    fn lists_are_clean() {
        let domain_like = |d: &str| {
            !d.is_empty()
                && d.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        };
        for (name, list, dotted) in [
            ("disposable", &*DISPOSABLE, true),
            ("alias", &*ALIAS, true),
            ("personal", &*PERSONAL, true),
            ("tlds", &*TLDS, false),
        ] {
            assert!(list.len() > 10, "{name} is loaded");
            for d in list {
                assert!(domain_like(d), "{name}: {d:?}");
                assert_eq!(d.contains('.'), dotted, "{name}: {d:?}");
            }
        }
        assert!(DISPOSABLE.len() > 5_000);
        assert!(TLDS.contains("com") && TLDS.contains("xn--p1ai") && !TLDS.contains("con"));
        for (name, suffix) in POPULAR.iter() {
            let domain = format!("{name}.{suffix}");
            assert!(PERSONAL.contains(domain.as_str()), "{domain} is personal");
        }
        for d in PERSONAL.iter() {
            assert!(!is_disposable(d), "{d} is personal, not disposable");
        }
    }

    #[test]
    fn lists_match_subdomains() {
        assert!(is_disposable("mailinator.com"));
        assert!(is_disposable("x.y.mailinator.com"));
        assert!(!is_disposable("mailinator.example.com"));
        assert!(!is_disposable("example.com"));
        assert!(is_alias("duck.com") && is_alias("ann.anonaddy.com"));
        assert!(is_alias("privaterelay.appleid.com"));
        assert!(!is_alias("appleid.com"));
        assert!(is_personal("gmail.com") && is_personal("yahoo.co.uk"));
        assert!(!is_personal("co.uk") && !is_personal("example.co.uk"));
    }

    #[test]
    fn osa() {
        assert_eq!(osa_distance("", ""), 0);
        assert_eq!(osa_distance("", "abc"), 3);
        assert_eq!(osa_distance("abc", ""), 3);
        assert_eq!(osa_distance("gmail", "gmail"), 0);
        assert_eq!(osa_distance("gmial", "gmail"), 1, "transposition");
        assert_eq!(osa_distance("gmai", "gmail"), 1, "deletion");
        assert_eq!(osa_distance("gmaill", "gmail"), 1, "insertion");
        assert_eq!(osa_distance("gnail", "gmail"), 1, "substitution");
        assert_eq!(osa_distance("kitten", "sitting"), 3);
        assert_eq!(osa_distance("hotmial.con", "hotmail.com"), 2);
        // OSA edits no substring twice: `ca` → `abc` is 3, where unrestricted
        // Damerau–Levenshtein says 2.
        assert_eq!(osa_distance("ca", "abc"), 3);
    }

    #[test]
    fn typos_are_corrected() {
        for (typo, meant) in [
            ("gmial.com", "gmail.com"),
            ("gmai.com", "gmail.com"),
            ("gamil.com", "gmail.com"),
            ("gmail.co", "gmail.com"),
            ("gmail.cmo", "gmail.com"),
            ("gmil.con", "gmail.com"),
            ("yaho.com", "yahoo.com"),
            ("yahooo.com", "yahoo.com"),
            ("yhaoo.com", "yahoo.com"),
            ("hotmial.con", "hotmail.com"),
            ("hotmal.com", "hotmail.com"),
            ("outlok.com", "outlook.com"),
            ("outllok.com", "outlook.com"),
            ("iclod.com", "icloud.com"),
            ("aol.con", "aol.com"),
            ("hotmial.co.uk", "hotmail.co.uk"),
            ("yahoo.co.ik", "yahoo.co.uk"),
            ("example.con", "example.com"),
            ("example.cmo", "example.com"),
            ("example.nte", "example.net"),
            ("example.ogr", "example.org"),
        ] {
            assert_eq!(typo_correction(typo).as_deref(), Some(meant), "{typo}");
        }
    }

    #[test]
    fn real_domains_are_not_typos() {
        for domain in [
            // Popular and personal providers, even one edit from each other.
            "gmail.com",
            "googlemail.com",
            "ymail.com",
            "mail.com",
            "email.com",
            "me.com",
            "mac.com",
            "hotmail.de",
            "live.fr",
            "mail.gmail.com",
            // Alias services.
            "duck.com",
            // Short popular names take no edit in the name: too many real domains are one away.
            "aok.com",
            "msm.com",
            // Ordinary domains, and real TLDs close to common ones.
            "example.com",
            "example.co",
            "example.cm",
            "example.om",
            "acme.io",
            "hotmail.com.br",
            "xn--bcher-kva.de",
        ] {
            assert_eq!(typo_correction(domain), None, "{domain}");
        }
    }

    #[test]
    fn address_facts() {
        let f = facts("Ann+News@GMaill.com");
        assert!(f.is_plus_addressed && !f.is_personal && !f.is_disposable);
        assert_eq!(f.suggested_email().as_deref(), Some("ann+news@gmail.com"));
        // Typo domains can be registered as throw-away providers too.
        let squat = facts("ann@gmial.com");
        assert!(squat.is_disposable && squat.typo_of.is_some());
        assert!(facts("ann@gmail.com").is_personal);
        assert_eq!(facts("ann@gmail.com").suggested_email(), None);
        assert!(facts("ann@mailinator.com").is_disposable);
        assert!(facts("ann@x.anonaddy.me").is_alias);
        for (address, plus) in [
            ("ann+tag@example.com", true),
            ("a.b+c+d@example.com", true),
            ("ann@example.com", false),
            ("+tag@example.com", false),
            ("ann+@example.com", false),
            ("\"ann+tag\"@example.com", false),
        ] {
            assert_eq!(facts(address).is_plus_addressed, plus, "{address}");
        }
    }

    #[test]
    fn dns_facts() {
        let mx = lookups(records(&["mx.example.com."]), Answer::NoRecords);
        assert_eq!(
            mx.facts(),
            Ok(DnsFacts {
                exists: true,
                mail: MailRoute::Exchangers,
                has_address: false,
                has_website: false
            })
        );
        assert!(mx.facts().unwrap().accepts_mail());

        let null = lookups(records(&["."]), records(&["192.0.2.1"]));
        let f = null.facts().unwrap();
        assert_eq!(f.mail, MailRoute::NullMx);
        assert!(f.has_website && !f.accepts_mail(), "a null MX refuses mail");

        let fallback = lookups(Answer::NoRecords, records(&["192.0.2.1"]));
        assert!(fallback.facts().unwrap().accepts_mail(), "implicit MX");

        let nothing = lookups(Answer::NoRecords, Answer::NoRecords);
        let f = nothing.facts().unwrap();
        assert!(f.exists && !f.accepts_mail() && !f.has_website);

        let mut www = nothing.clone();
        www.www_aaaa = records(&["2001:db8::1"]);
        assert!(www.facts().unwrap().has_website);
        www.www_aaaa = Answer::TimedOut;
        assert!(
            !www.facts().unwrap().has_website,
            "www failures count as none"
        );

        let mut apex_ns = all(Answer::NxDomain);
        assert_eq!(apex_ns.facts(), Ok(DnsFacts::NONEXISTENT));
        apex_ns.ns = records(&["ns1.example.com."]);
        assert!(apex_ns.facts().unwrap().exists, "NS shows existence");
    }

    #[test]
    fn dns_unknowns() {
        assert_eq!(all(Answer::TimedOut).facts(), Err(DnsUnknown::TimedOut));
        assert_eq!(
            all(Answer::Failed("SERVFAIL".into())).facts(),
            Err(DnsUnknown::Failed("SERVFAIL".into()))
        );
        // NXDOMAIN is an answer: the rest timing out does not matter.
        let mut nx = all(Answer::TimedOut);
        nx.a = Answer::NxDomain;
        assert_eq!(nx.facts(), Ok(DnsFacts::NONEXISTENT));
        // The MX answer decides the route: without it, nothing is known.
        let no_mx_answer = lookups(Answer::TimedOut, records(&["192.0.2.1"]));
        assert_eq!(no_mx_answer.facts(), Err(DnsUnknown::TimedOut));
        // With mail servers in MX, a missing address answer does not matter.
        let mut mx = lookups(records(&["mx.example.com."]), Answer::TimedOut);
        mx.aaaa = Answer::TimedOut;
        assert!(mx.facts().unwrap().accepts_mail());
        // Without MX, both address answers are needed to say there is no fallback ...
        let mut half = lookups(Answer::NoRecords, Answer::NoRecords);
        half.aaaa = Answer::TimedOut;
        assert_eq!(half.facts(), Err(DnsUnknown::TimedOut));
        // ... but one address is enough to say there is.
        half.a = records(&["192.0.2.1"]);
        assert!(half.facts().unwrap().accepts_mail());
    }

    fn verdict(address: &str, dns: Result<DnsFacts, DnsUnknown>) -> Verdict {
        Verdict::of(&facts(address), &dns)
    }

    const MAIL: DnsFacts = DnsFacts {
        exists: true,
        mail: MailRoute::Exchangers,
        has_address: true,
        has_website: true,
    };

    #[test]
    fn verdicts() {
        let ok = verdict("Ann@Example.com", Ok(MAIL));
        assert!(ok.valid && ok.domain_exists && ok.has_mx_records && ok.has_website);
        assert_eq!(ok.email, "ann@example.com");
        assert!(ok.reasons.is_empty(), "{:?}", ok.reasons);

        let disposable = verdict("ann@mailinator.com", Ok(MAIL));
        assert!(!disposable.valid && disposable.is_disposable);
        assert_eq!(
            disposable.reasons,
            ["mailinator.com is a disposable email provider."]
        );

        let typo = verdict("ann@yaho.com", Ok(MAIL));
        assert!(typo.valid && typo.is_typo, "a typo alone is not invalid");
        assert_eq!(typo.suggested_email.as_deref(), Some("ann@yahoo.com"));
        assert_eq!(
            typo.reasons,
            ["The domain yaho.com looks like a typo of yahoo.com."]
        );

        let typo_nx = verdict("ann@outlok.com", Ok(DnsFacts::NONEXISTENT));
        assert!(!typo_nx.valid && !typo_nx.domain_exists && typo_nx.is_typo);
        assert_eq!(typo_nx.reasons[0], "The domain outlok.com does not exist.");

        let alias = verdict("ann@duck.com", Ok(MAIL));
        assert!(alias.valid && alias.is_alias && !alias.is_personal);
        let personal = verdict("ann+x@gmail.com", Ok(MAIL));
        assert!(personal.valid && personal.is_personal && personal.is_plus_addressed);
        assert_eq!(personal.reasons.len(), 2);

        let null = verdict(
            "ann@example.com",
            Ok(DnsFacts {
                mail: MailRoute::NullMx,
                ..MAIL
            }),
        );
        assert!(!null.valid && !null.has_mx_records && null.domain_exists);
        assert!(null.reasons[0].contains("null MX"), "{:?}", null.reasons);

        let fallback = verdict(
            "ann@example.com",
            Ok(DnsFacts {
                mail: MailRoute::NoMx,
                ..MAIL
            }),
        );
        assert!(fallback.valid && !fallback.has_mx_records);

        let none = verdict(
            "ann@example.com",
            Ok(DnsFacts {
                mail: MailRoute::NoMx,
                has_address: false,
                ..MAIL
            }),
        );
        assert!(!none.valid);
        assert_eq!(
            none.reasons,
            [
                "No mail server (MX) is published for the domain, and it has no address to fall back to."
            ]
        );

        let unknown = verdict("ann@example.com", Err(DnsUnknown::TimedOut));
        assert!(!unknown.valid && !unknown.domain_exists);
        assert_eq!(
            unknown.reasons,
            ["DNS did not answer in time for example.com, so the domain could not be verified."]
        );
    }

    #[test]
    fn syntax_verdict() {
        let error = EmailAddress::parse("ann@@example").unwrap_err();
        let v = Verdict::syntax_error(" ann@@example ", &error);
        assert_eq!(v.email, "ann@@example");
        assert!(!v.valid && !v.domain_exists && v.suggested_email.is_none());
        assert_eq!(v.reasons, [format!("The address is not valid: {error}.")]);
    }
}
