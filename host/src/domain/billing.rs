//! Billing rules: the metered categories, caps and the billing period.

use chrono::{DateTime, Datelike, TimeZone, Utc};

/// What usage is metered in (and what a cap limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UsageCategory {
    /// Emails queued for delivery (suppressed ones are not).
    Emails,
    /// Contacts created.
    Contacts,
    /// Events the project tracked (not the service's own `email.*`, `segment.*` and
    /// `contact.(un)subscribed`).
    Events,
}

impl UsageCategory {
    /// Every category.
    pub const ALL: [UsageCategory; 3] = [
        UsageCategory::Emails,
        UsageCategory::Contacts,
        UsageCategory::Events,
    ];

    /// The name stored and shown (`emails`, `contacts`, `events`).
    pub fn name(self) -> &'static str {
        match self {
            UsageCategory::Emails => "emails",
            UsageCategory::Contacts => "contacts",
            UsageCategory::Events => "events",
        }
    }

    /// The category named `name`.
    pub fn parse(name: &str) -> Option<UsageCategory> {
        UsageCategory::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The largest cap a project may set (more than any period's use).
pub const MAX_CAP: i64 = 1_000_000_000_000;

/// Per-category caps of the current period; `None` means no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BillingLimits {
    /// Emails queued.
    pub emails: Option<i64>,
    /// Contacts created.
    pub contacts: Option<i64>,
    /// Events tracked.
    pub events: Option<i64>,
}

impl BillingLimits {
    /// The cap of `category`.
    pub fn of(&self, category: UsageCategory) -> Option<i64> {
        match category {
            UsageCategory::Emails => self.emails,
            UsageCategory::Contacts => self.contacts,
            UsageCategory::Events => self.events,
        }
    }
}

/// One calendar month (UTC): the billing period usage is metered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// The first instant.
    pub start: DateTime<Utc>,
    /// The first instant of the next period.
    pub end: DateTime<Utc>,
}

impl Period {
    /// The period holding `at`.
    pub fn containing(at: DateTime<Utc>) -> Period {
        let start = Utc
            .with_ymd_and_hms(at.year(), at.month(), 1, 0, 0, 0)
            .single()
            .unwrap_or(at);
        let (year, month) = if at.month() == 12 {
            (at.year() + 1, 1)
        } else {
            (at.year(), at.month() + 1)
        };
        let end = Utc
            .with_ymd_and_hms(year, month, 1, 0, 0, 0)
            .single()
            .unwrap_or(at);
        Period { start, end }
    }

    /// The key usage is stored under, `YYYY-MM` (the migrations' triggers compute the same).
    pub fn key(&self) -> String {
        self.start.format("%Y-%m").to_string()
    }
}

/// How a billing event reported by the provider changes a project's subscription state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateChange {
    /// The plan now, when the event names one.
    pub plan: Option<String>,
    /// Whether the plan ends (a cancelled subscription).
    pub clear_plan: bool,
    /// The subscription's status now.
    pub status: String,
}

/// The change a billing event of `kind` with `detail` makes; `None` for kinds Herald does not
/// follow. Kinds: `checkout.completed`, `subscription.updated`, `subscription.deleted`,
/// `invoice.paid`, `invoice.payment_failed` (see `docs/billing.md`).
pub fn state_change(kind: &str, detail: &serde_json::Value) -> Option<StateChange> {
    let text = |key: &str| {
        detail[key]
            .as_str()
            .filter(|s| !s.is_empty() && s.len() <= 128)
            .map(str::to_string)
    };
    let (default_status, clear_plan) = match kind {
        "checkout.completed" | "subscription.updated" | "invoice.paid" => ("active", false),
        "invoice.payment_failed" => ("past_due", false),
        "subscription.deleted" => ("canceled", true),
        _ => return None,
    };
    Some(StateChange {
        plan: if clear_plan { None } else { text("plan") },
        clear_plan,
        status: text("status").unwrap_or_else(|| default_status.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_the_calendar_month_in_utc() {
        let at = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        let period = Period::containing(at);
        assert_eq!(period.key(), "2026-12");
        assert_eq!(
            period.start,
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(
            period.end,
            Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap()
        );
    }

    #[test]
    fn billing_events_change_the_state_they_name() {
        let change = state_change(
            "checkout.completed",
            &serde_json::json!({"plan": "pro", "status": "active"}),
        )
        .unwrap();
        assert_eq!(change.plan.as_deref(), Some("pro"));
        assert!(!change.clear_plan);
        let change = state_change("subscription.deleted", &serde_json::json!({})).unwrap();
        assert!(change.clear_plan);
        assert_eq!(change.status, "canceled");
        let change = state_change("invoice.payment_failed", &serde_json::json!({})).unwrap();
        assert_eq!(change.status, "past_due");
        assert_eq!(
            state_change("customer.created", &serde_json::json!({})),
            None
        );
    }

    #[test]
    fn categories_round_trip_by_name() {
        for category in UsageCategory::ALL {
            assert_eq!(UsageCategory::parse(category.name()), Some(category));
        }
        assert_eq!(UsageCategory::parse("sms"), None);
    }
}
