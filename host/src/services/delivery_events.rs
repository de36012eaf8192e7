//! What the mail infrastructure tells Herald about its emails (deliveries, bounces, complaints,
//! opens, clicks), applied the same way whatever brought it: `POST /webhooks/notify` through
//! the transport plugin, or the SMTP server receiving a bounce or a feedback-loop report. Each
//! event applies to the email it names only when its recipient is that email's (so a message id
//! quoted in someone else's mail changes nothing); a hard bounce or a complaint unsubscribes the
//! contact and puts the address on the project's suppression list (so that no email of any kind
//! goes to it again), soft bounces are counted towards the soft-bounce rule (that many within
//! the window, with no delivery between, list the address as a hard bounce), and the projects
//! with a new hard bounce or complaint have their sending health measured once, at the end
//! (at most once per `services::security::MEASURE_EVERY` a project, then at its end).

use crate::domain::event::SubscriptionSource;
use crate::domain::ids::ProjectId;
use crate::domain::suppression::{SoftBounceRule, SuppressionReason};
use crate::plugins::{DeliveryEvent, DeliveryEventKind};
use crate::services::security::HealthGuard;
use crate::store::delivery_events::{EventWrite, Then};
use crate::store::emails::status;
use crate::store::{Store, StoreError};

/// What applying a batch of events did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Events applied to an email of this service.
    pub applied: usize,
    /// Events about no email of this service (or not about its recipient).
    pub ignored: usize,
}

/// Applies delivery events; cheap to clone.
#[derive(Clone)]
pub struct DeliveryEvents {
    store: Store,
    health_guard: HealthGuard,
    /// When soft bounces suppress an address (`sending.soft_bounce_limit`, `_days`).
    soft_bounces: SoftBounceRule,
}

/// Herald's email id from a message id as providers report it (`<eml_…@domain>`, `eml_…`).
pub fn email_id(message_id: &str) -> Option<String> {
    let id = message_id.trim().trim_matches(['<', '>']);
    let id = id.split('@').next().unwrap_or(id);
    crate::domain::ids::EmailId::parse(id).map(|e| e.into_string())
}

impl DeliveryEvents {
    /// Applies through `store`, measuring health with `health_guard`.
    pub fn new(store: Store, health_guard: HealthGuard) -> DeliveryEvents {
        DeliveryEvents {
            store,
            health_guard,
            soft_bounces: SoftBounceRule::default(),
        }
    }

    /// Suppresses an address after soft bounces as `rule` says (a limit of 0: never).
    pub fn with_soft_bounce_rule(mut self, rule: SoftBounceRule) -> DeliveryEvents {
        self.soft_bounces = rule;
        self
    }

    /// Applies `events` in order, all of them or none (one transaction, shared with other
    /// callers writing at the same time: `store::delivery_events`).
    pub async fn apply(&self, events: Vec<DeliveryEvent>) -> Result<Applied, StoreError> {
        let mut result = Applied::default();
        let mut writes = Vec::with_capacity(events.len());
        for event in events {
            let Some(id) = event.message_id.as_deref().and_then(email_id) else {
                result.ignored += 1;
                continue;
            };
            let (kind, then) = match event.kind {
                DeliveryEventKind::Delivered => (status::DELIVERED, Then::ClearSoftBounces),
                DeliveryEventKind::BouncedHard => (
                    status::BOUNCED,
                    Then::Suppress {
                        source: SubscriptionSource::Bounce,
                        reason: SuppressionReason::HardBounce,
                    },
                ),
                DeliveryEventKind::BouncedSoft => {
                    ("soft_bounced", Then::CountSoftBounce(self.soft_bounces))
                }
                DeliveryEventKind::Complained => (
                    status::COMPLAINED,
                    Then::Suppress {
                        source: SubscriptionSource::Complaint,
                        reason: SuppressionReason::Complaint,
                    },
                ),
                DeliveryEventKind::Opened => (status::OPENED, Then::Nothing),
                DeliveryEventKind::Clicked => (status::CLICKED, Then::Nothing),
                DeliveryEventKind::Inbound => ("inbound", Then::Nothing),
            };
            writes.push(EventWrite {
                email_id: id,
                kind,
                detail: event.detail,
                // The recipient, as the email has it (the event applies only when they match).
                recipient: event.email.trim().to_ascii_lowercase(),
                then,
            });
        }
        let written = self.store.write_delivery_events(writes.clone()).await?;
        // Projects with a new hard bounce or complaint: their health is measured once, at the end.
        let mut to_check: Vec<&ProjectId> = Vec::new();
        for (write, written) in writes.iter().zip(&written) {
            let Some(recorded) = &written.recorded else {
                result.ignored += 1;
                continue;
            };
            result.applied += 1;
            if written.listed {
                tracing::info!(project_id = %recorded.project_id, email_id = %write.email_id, "an address that soft-bounced too often is suppressed");
            }
            if matches!(write.then, Then::Suppress { .. })
                && recorded.first
                && !to_check.contains(&&recorded.project_id)
            {
                to_check.push(&recorded.project_id);
            }
        }
        for project in to_check {
            self.health_guard.check_soon(project).await;
        }
        Ok(result)
    }
}
