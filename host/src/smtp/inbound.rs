//! The MX listener's side: which recipients it takes, and what a message received for them
//! does. A recipient is taken only when it is the return path of an email of this service
//! (`bounces+<email id>@bounces.<domain>`, the email's envelope sender exactly), the
//! configured abuse address, or an address at a project's verified inbound domain (its route
//! kept a few seconds by `services::inbound_routes`); anything
//! else is refused at `RCPT` (no open relay, no backscatter). At the end of `DATA` the message is classified (`mail::inbound`): a bounce
//! applies a hard or soft bounce to the email of its return path for each recipient it reports,
//! a feedback-loop report a complaint, through `services::delivery_events`, which applies an
//! event only when its address is the email's recipient (so a forged bounce changes nothing).
//! At an inbound domain, a person's message is recorded as an `email.received` event on its
//! sender's contact (`services::inbound_mail`). Auto-replies, and mail that is neither a bounce nor a
//! complaint at a return path, are accepted and dropped. Everything is written before the
//! `250`.

use crate::api::AppState;
use crate::domain::ids::{EmailId, ProjectId};
use crate::mail::inbound::{Inbound, Received, classify};
use crate::plugins::{DeliveryEvent, DeliveryEventKind};
use crate::services::delivery_events::email_id as named_email;

use super::reply::{self, Reply};

/// Messages up to this size are classified where they are received; larger ones on the
/// blocking pool.
const INLINE_CLASSIFY_BYTES: usize = 256 * 1024;

/// Where an accepted recipient leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The return path of an email.
    ReturnPath {
        /// The email.
        email_id: String,
        /// Its recipient.
        to_address: String,
    },
    /// The abuse address.
    Abuse,
    /// An address of a project's inbound domain.
    Domain {
        /// The project whose verified domain receives it.
        project: ProjectId,
        /// The address, lowercased.
        address: String,
    },
}

/// The MX handler; cheap to clone.
#[derive(Clone)]
pub struct InboundMx {
    state: AppState,
    abuse: Option<String>,
}

/// The email whose return path `rcpt` (lowercased) has the shape of.
fn return_path_email(rcpt: &str) -> Option<String> {
    let (local, domain) = rcpt.rsplit_once('@')?;
    if !domain.starts_with("bounces.") {
        return None;
    }
    let id = local.strip_prefix("bounces+")?;
    EmailId::parse(id).map(EmailId::into_string)
}

impl InboundMx {
    /// Receives for `state`'s emails and its settings' abuse address.
    pub fn new(state: AppState) -> InboundMx {
        let abuse = state
            .settings()
            .inbound
            .abuse_address
            .as_deref()
            .map(|a| a.trim().to_ascii_lowercase())
            .filter(|a| !a.is_empty());
        InboundMx { state, abuse }
    }

    /// Where `rcpt` leads, or `None` when nobody is here by that address.
    pub async fn route(&self, rcpt: &str) -> Result<Option<Route>, crate::store::StoreError> {
        let rcpt = rcpt.trim().to_ascii_lowercase();
        if let Some(id) = return_path_email(&rcpt) {
            let path = self.state.store().email_return_path(&id).await?;
            return Ok(path
                .filter(|p| p.envelope_from.eq_ignore_ascii_case(&rcpt))
                .map(|p| Route::ReturnPath {
                    email_id: id,
                    to_address: p.to_address,
                }));
        }
        if self.abuse.as_deref() == Some(rcpt.as_str()) {
            return Ok(Some(Route::Abuse));
        }
        let project = self.state.inbound_routes().route(&rcpt).await?;
        Ok(project.map(|project| Route::Domain {
            project,
            address: rcpt,
        }))
    }

    /// Classifies `raw`, received for `routes`, and applies what it reports; the reply to the
    /// end of `DATA` (`451 4.3.0` when the database failed: the sender tries again).
    pub async fn receive(&self, routes: &[Route], raw: Vec<u8>) -> Reply {
        let classified = if raw.len() <= INLINE_CLASSIFY_BYTES {
            classify(&raw)
        } else {
            match tokio::task::spawn_blocking(move || classify(&raw)).await {
                Ok(classified) => classified,
                Err(err) => {
                    tracing::error!(error = %err, "classifying an inbound message failed");
                    return reply::TRY_LATER;
                }
            }
        };
        if let Inbound::Message(message) = classified {
            return self.deliver(routes, message).await;
        }
        let events = events(&classified, routes, crate::domain::time::now_ms());
        if events.is_empty() {
            return Reply::fixed(250, [2, 0, 0], "message accepted");
        }
        match self.state.delivery_events().apply(events).await {
            Ok(applied) => Reply::new(
                250,
                [2, 0, 0],
                format!("message accepted ({} applied)", applied.applied),
            ),
            Err(err) => {
                tracing::warn!(error = %err, "could not apply an inbound bounce or complaint");
                reply::TRY_LATER
            }
        }
    }

    /// Records a person's `message` for each of `routes` at an inbound domain (one receipt a
    /// recipient, each keyed on the message, so that a retry after a failure records nothing
    /// twice); a message at a return path or the abuse address is dropped.
    async fn deliver(&self, routes: &[Route], message: Received) -> Reply {
        for route in routes {
            let Route::Domain { project, address } = route else {
                continue;
            };
            let received = self
                .state
                .inbound_mail()
                .receive(project, address, message.clone())
                .await;
            if let Err(err) = received {
                let (code, enhanced) = err.smtp_status();
                if code < 500 {
                    tracing::warn!(error = %err, "could not record an inbound message");
                    return reply::TRY_LATER;
                }
                return Reply::parsed(code, enhanced, err.to_string());
            }
        }
        Reply::fixed(250, [2, 0, 0], "message accepted")
    }
}

/// The delivery events `message`, received for `routes`, reports at `now` (Unix ms): a
/// bounce's recipients, each about the email of a return path it arrived at; a complaint about
/// the email of its return path, or at the abuse address about the email it names (with the
/// recipient it names: a report that names none is not applied there). A `not-spam` report
/// applies nothing.
fn events(message: &Inbound, routes: &[Route], now: i64) -> Vec<DeliveryEvent> {
    let mut events = Vec::new();
    // A report that the message is *not* spam (RFC 5965 `not-spam`) is no complaint.
    if let Inbound::Complaint(c) = message
        && c.feedback_type.eq_ignore_ascii_case("not-spam")
    {
        return events;
    }
    for route in routes {
        match (message, route) {
            (Inbound::Bounce(bounce), Route::ReturnPath { email_id, .. }) => {
                for r in &bounce.recipients {
                    let detail = match &r.diagnostic {
                        Some(d) => format!("{} {d}", r.status),
                        None => r.status.clone(),
                    };
                    events.push(DeliveryEvent {
                        kind: if r.hard {
                            DeliveryEventKind::BouncedHard
                        } else {
                            DeliveryEventKind::BouncedSoft
                        },
                        message_id: Some(email_id.clone()),
                        email: r.address.clone(),
                        at: now,
                        detail: Some(detail),
                    });
                }
            }
            (
                Inbound::Complaint(complaint),
                Route::ReturnPath {
                    email_id,
                    to_address,
                },
            ) => events.push(DeliveryEvent {
                kind: DeliveryEventKind::Complained,
                message_id: Some(email_id.clone()),
                email: complaint
                    .original_recipient
                    .clone()
                    .unwrap_or_else(|| to_address.clone()),
                at: now,
                detail: Some(complaint.feedback_type.clone()),
            }),
            (Inbound::Complaint(complaint), Route::Abuse) => {
                let named = complaint
                    .original_message_id
                    .as_deref()
                    .and_then(named_email)
                    .zip(complaint.original_recipient.clone());
                if let Some((id, recipient)) = named {
                    events.push(DeliveryEvent {
                        kind: DeliveryEventKind::Complained,
                        message_id: Some(id),
                        email: recipient,
                        at: now,
                        detail: Some(complaint.feedback_type.clone()),
                    });
                }
            }
            // Auto-replies, bounces at the abuse address, and mail that is neither at a
            // return path: accepted, nothing to apply.
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::inbound::{Bounce, BounceRecipient, Complaint};

    const ID: &str = "eml_0123456789abcdef0123456789abcdef";

    fn at_return_path() -> Vec<Route> {
        vec![Route::ReturnPath {
            email_id: ID.into(),
            to_address: "ann@example.com".into(),
        }]
    }

    #[test]
    fn only_return_path_shaped_addresses_name_an_email() {
        assert_eq!(
            return_path_email(&format!("bounces+{ID}@bounces.acme.test")).as_deref(),
            Some(ID)
        );
        assert_eq!(return_path_email(&format!("bounces+{ID}@acme.test")), None);
        assert_eq!(return_path_email(&format!("{ID}@bounces.acme.test")), None);
        assert_eq!(
            return_path_email("bounces+eml_nothex@bounces.acme.test"),
            None
        );
        assert_eq!(return_path_email("postmaster@bounces.acme.test"), None);
    }

    #[test]
    fn a_bounce_reports_each_recipient_about_the_return_paths_email() {
        let bounce = Inbound::Bounce(Bounce {
            recipients: vec![
                BounceRecipient {
                    address: "ann@example.com".into(),
                    status: "5.1.1".into(),
                    hard: true,
                    diagnostic: Some("smtp; 550 no such user".into()),
                },
                BounceRecipient {
                    address: "bob@example.com".into(),
                    status: "4.2.2".into(),
                    hard: false,
                    diagnostic: None,
                },
            ],
            original_message_id: None,
        });
        let events = events(&bounce, &at_return_path(), 7);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].kind, DeliveryEventKind::BouncedHard);
        assert_eq!(events[0].message_id.as_deref(), Some(ID));
        assert_eq!(events[0].email, "ann@example.com");
        assert_eq!(
            events[0].detail.as_deref(),
            Some("5.1.1 smtp; 550 no such user")
        );
        assert_eq!(events[1].kind, DeliveryEventKind::BouncedSoft);
        assert_eq!(events[1].email, "bob@example.com", "checked by apply");
        assert!(super::events(&bounce, &[Route::Abuse], 7).is_empty());
    }

    #[test]
    fn a_complaint_at_the_abuse_address_needs_the_email_and_its_recipient() {
        let complaint = |id: Option<&str>, rcpt: Option<&str>| {
            Inbound::Complaint(Complaint {
                feedback_type: "abuse".into(),
                original_message_id: id.map(String::from),
                original_recipient: rcpt.map(String::from),
            })
        };
        let named = complaint(Some(&format!("<{ID}@acme.test>")), Some("ann@example.com"));
        let events = events(&named, &[Route::Abuse], 1);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, DeliveryEventKind::Complained);
        assert_eq!(events[0].message_id.as_deref(), Some(ID));
        assert!(super::events(&complaint(Some(ID), None), &[Route::Abuse], 1).is_empty());
        let redacted = super::events(&complaint(None, None), &at_return_path(), 1);
        assert_eq!(
            redacted[0].email, "ann@example.com",
            "the return path names it"
        );
        assert!(super::events(&Inbound::AutoReply, &at_return_path(), 1).is_empty());
        let not_spam = Inbound::Complaint(Complaint {
            feedback_type: "not-spam".into(),
            original_message_id: Some(format!("<{ID}@acme.test>")),
            original_recipient: Some("ann@example.com".into()),
        });
        assert!(super::events(&not_spam, &at_return_path(), 1).is_empty());
        assert!(super::events(&not_spam, &[Route::Abuse], 1).is_empty());
    }
}
