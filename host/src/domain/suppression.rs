//! A project's suppression list: the addresses none of its email goes to, and why each is there.

/// Why an address is on a project's suppression list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuppressionReason {
    /// A receiving server refused the address for good (a `5.x.x` bounce), or it soft-bounced
    /// too often without a delivery between (`sending.soft_bounce_limit`).
    HardBounce,
    /// The recipient marked an email as spam.
    Complaint,
    /// Added by the project through the API.
    Manual,
}

impl SuppressionReason {
    /// As stored and answered: `HARD_BOUNCE`, `COMPLAINT`, `MANUAL`.
    pub fn as_str(self) -> &'static str {
        match self {
            SuppressionReason::HardBounce => "HARD_BOUNCE",
            SuppressionReason::Complaint => "COMPLAINT",
            SuppressionReason::Manual => "MANUAL",
        }
    }

    /// The reason spelled `s`, exactly as [`SuppressionReason::as_str`] spells it.
    pub fn parse(s: &str) -> Option<SuppressionReason> {
        [
            SuppressionReason::HardBounce,
            SuppressionReason::Complaint,
            SuppressionReason::Manual,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Why an email to a listed address is not sent, as its `error` says.
pub fn suppressed_reason(reason: &str) -> String {
    format!("the address is on the project's suppression list ({reason})")
}

/// The soft-bounce rule: `limit` soft bounces of one address within `window_ms`, with no
/// delivery to it between them, suppress it as a hard bounce. A `limit` of 0 turns it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftBounceRule {
    pub limit: u32,
    pub window_ms: i64,
}

impl SoftBounceRule {
    /// `limit` soft bounces within `days` days.
    pub fn new(limit: u32, days: u32) -> SoftBounceRule {
        SoftBounceRule {
            limit,
            window_ms: i64::from(days) * 86_400_000,
        }
    }

    /// The detail of the entry the rule adds after `count` soft bounces (the last one's
    /// `detail`, when the report gave one).
    pub fn detail(&self, count: u64, last: Option<&str>) -> String {
        let days = self.window_ms / 86_400_000;
        let mut s = format!(
            "{count} soft bounces within {days} days without a delivery between them \
             (sending.soft_bounce_limit)"
        );
        if let Some(last) = last.filter(|l| !l.trim().is_empty()) {
            s.push_str("; the last: ");
            s.push_str(last);
        }
        s
    }
}

impl Default for SoftBounceRule {
    fn default() -> SoftBounceRule {
        SoftBounceRule::new(3, 7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for r in ["HARD_BOUNCE", "COMPLAINT", "MANUAL"] {
            assert_eq!(SuppressionReason::parse(r).map(|r| r.as_str()), Some(r));
        }
        assert_eq!(SuppressionReason::parse("manual"), None);
    }

    #[test]
    fn the_rule_says_what_it_counted() {
        let d = SoftBounceRule::new(3, 7).detail(3, Some("452 4.2.2 mailbox full"));
        assert!(d.starts_with("3 soft bounces within 7 days"), "{d}");
        assert!(d.ends_with("452 4.2.2 mailbox full"), "{d}");
    }
}
