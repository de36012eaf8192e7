//! Sending health: when a project's hard-bounce or complaint rate says it is mailing people who
//! do not want its mail, its sending is suspended (decisions.md, "Security").

/// What a project sent over the recent window, and how much of it bounced or was reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendingHealth {
    /// Emails handed to the transport (test sends excluded).
    pub sent: i64,
    /// Of those, hard-bounced.
    pub bounced: i64,
    /// Of those, reported as spam.
    pub complained: i64,
}

impl SendingHealth {
    /// Bounced per sent, 0 when nothing was sent.
    pub fn bounce_rate(&self) -> f64 {
        rate(self.bounced, self.sent)
    }

    /// Complaints per sent, 0 when nothing was sent.
    pub fn complaint_rate(&self) -> f64 {
        rate(self.complained, self.sent)
    }
}

fn rate(part: i64, whole: i64) -> f64 {
    if whole <= 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// When a project is suspended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Bounce rate at or above which sending stops (e.g. 0.05).
    pub bounce_rate: f64,
    /// Complaint rate at or above which sending stops (e.g. 0.001).
    pub complaint_rate: f64,
    /// Emails sent in the window before any rate counts.
    pub min_volume: i64,
}

/// Why `health` crosses `limits`, or `None` while it does not.
pub fn verdict(health: &SendingHealth, limits: &Thresholds) -> Option<String> {
    if health.sent < limits.min_volume.max(1) {
        return None;
    }
    let pct = |r: f64| format!("{:.2} %", r * 100.0);
    if health.complaint_rate() >= limits.complaint_rate {
        return Some(format!(
            "complaint rate {} ({} of {} emails) reached the limit of {}",
            pct(health.complaint_rate()),
            health.complained,
            health.sent,
            pct(limits.complaint_rate)
        ));
    }
    if health.bounce_rate() >= limits.bounce_rate {
        return Some(format!(
            "bounce rate {} ({} of {} emails) reached the limit of {}",
            pct(health.bounce_rate()),
            health.bounced,
            health.sent,
            pct(limits.bounce_rate)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Thresholds = Thresholds {
        bounce_rate: 0.05,
        complaint_rate: 0.001,
        min_volume: 100,
    };

    fn health(sent: i64, bounced: i64, complained: i64) -> SendingHealth {
        SendingHealth {
            sent,
            bounced,
            complained,
        }
    }

    #[test]
    fn rates_count_only_over_the_minimum_volume() {
        assert_eq!(verdict(&health(99, 99, 99), &LIMITS), None);
        assert_eq!(verdict(&health(0, 0, 0), &LIMITS), None);
        assert_eq!(verdict(&health(1000, 49, 0), &LIMITS), None);
        let why = verdict(&health(1000, 50, 0), &LIMITS).unwrap();
        assert_eq!(
            why,
            "bounce rate 5.00 % (50 of 1000 emails) reached the limit of 5.00 %"
        );
        let why = verdict(&health(1000, 0, 1), &LIMITS).unwrap();
        assert!(
            why.starts_with("complaint rate 0.10 % (1 of 1000 emails)"),
            "{why}"
        );
        assert_eq!(health(0, 0, 0).bounce_rate(), 0.0);
    }
}
