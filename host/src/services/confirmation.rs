//! Confirmed opt-in (docs/engagement.md, "Confirmed opt-in"): a subscription asked where the
//! project's `doubleOptIn` applies leaves the contact unsubscribed and pending
//! (`store::confirmations`), and mails it a confirmation through the ordinary transactional
//! send ([`Sending::send`], so it is queued, delivered and recorded like any email): the
//! project's own template when it names one (its body links to `{{confirmUrl}}`), else the
//! built-in one in the contact's language (`i18n`, `[confirm]`). The link's page changes
//! nothing; its form's `POST` ([`Confirmations::confirm`]) subscribes the contact, with
//! `contact.subscribed` (source `confirmation`). Resends are spaced by the claim in the
//! database, so several instances never mail one address twice within the interval.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::domain::contact::{Contact, ContactChange};
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::{ContactId, TemplateId};
use crate::domain::project::{DoubleOptIn, Project};
use crate::domain::time::now_ms;
use crate::i18n;
use crate::mail::links::LinkSigner;
use crate::services::send_plan::{SendInput, SendPlanError, SendPlanner};
use crate::services::sending::{SendError, Sending};
use crate::services::sending_domains::SendingDomains;
use crate::store::confirmations::ClaimTimes;
use crate::store::{Store, StoreError, StoreResult};

/// How long a contact stays pending and how often its confirmation may be mailed.
#[derive(Clone, Copy, Debug)]
pub struct ConfirmationPolicy {
    /// Days a wait lasts (`contacts.pending_days`).
    pub pending_days: u64,
    /// The time between two mails of one wait, in ms (`contacts.confirmation_resend_minutes`).
    pub resend_ms: i64,
}

impl ConfirmationPolicy {
    fn pending_ms(&self) -> i64 {
        i64::try_from(self.pending_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX)
    }
}

/// Why a confirmation could not be mailed.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmationError {
    /// The mail could not be planned (no sender, a template that no longer renders…).
    #[error("the confirmation mail could not be planned: {0}")]
    Plan(String),
    /// The send failed.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a project's confirmed opt-in settings cannot be used.
#[derive(Clone, Debug)]
pub struct SettingsProblem {
    /// The request's field (`doubleOptIn`, `confirmationTemplateId`).
    pub field: &'static str,
    /// The error's code.
    pub code: &'static str,
    /// What to fix.
    pub message: String,
}

/// Where a confirmation link stands.
#[derive(Clone, Debug)]
pub enum LinkState {
    /// The contact is gone.
    Unknown,
    /// The contact waits for this link's confirmation.
    Pending(Contact),
    /// The contact is subscribed (confirmed, or subscribed otherwise meanwhile).
    Subscribed(Contact),
    /// The link's wait expired or was replaced by a newer one: it confirms nothing.
    Expired(Contact),
}

/// Confirmed opt-in: marks contacts pending, mails their confirmations, confirms.
pub struct Confirmations {
    store: Store,
    planner: SendPlanner,
    sending: Arc<Sending>,
    links: LinkSigner,
    policy: ConfirmationPolicy,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Confirmations {
    /// Confirmations sending through `sending` (senders authorized by `sending_domains`), with
    /// links signed by `links`.
    pub fn new(
        store: Store,
        sending: Arc<Sending>,
        sending_domains: Arc<SendingDomains>,
        links: LinkSigner,
        policy: ConfirmationPolicy,
    ) -> Confirmations {
        Confirmations {
            planner: SendPlanner::new(store.clone(), sending.clone(), sending_domains),
            store,
            sending,
            links,
            policy,
        }
    }

    /// After a write that asked `contact`'s subscription where the project's confirmed opt-in
    /// applies (so the write left it unsubscribed): makes it pending and mails its confirmation,
    /// unless it is subscribed, or its last confirmation went within the resend interval.
    /// Answers whether a confirmation was queued.
    pub async fn ask(
        &self,
        project: &Project,
        contact: &Contact,
    ) -> Result<bool, ConfirmationError> {
        if contact.subscribed {
            return Ok(false);
        }
        let now = now_ms();
        let times = ClaimTimes {
            now,
            expires_at: now.saturating_add(self.policy.pending_ms()),
            resend_before: now.saturating_sub(self.policy.resend_ms),
        };
        let Some(pending) = self
            .store
            .claim_confirmation(&project.id, &contact.id, times)
            .await?
        else {
            return Ok(false);
        };
        let url = self
            .links
            .confirm_url(contact.id.as_str(), pending.pending_since);
        self.mail(project, contact, &url).await?;
        Ok(true)
    }

    /// Checks a project's confirmed opt-in settings as a change would leave them (`project`
    /// with its other changes applied): the confirmation template, when named, must be one of
    /// the project's and link to `{{confirmUrl}}`; with confirmed opt-in on, the mail needs a
    /// sender (the template's `from`, or the project's `defaultFrom`). The problem names the
    /// field, a code and what to fix.
    pub async fn check_settings(
        &self,
        project: &Project,
        double_opt_in: DoubleOptIn,
        template: Option<&str>,
    ) -> StoreResult<Result<(), SettingsProblem>> {
        let mut template_from = false;
        if let Some(id) = template {
            let found = match TemplateId::parse(id) {
                Some(tid) => match self.store.template(&project.id, &tid).await {
                    Ok(t) => Some(t),
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e),
                },
                None => None,
            };
            let Some(t) = found else {
                return Ok(Err(SettingsProblem {
                    field: "confirmationTemplateId",
                    code: "not_found",
                    message: format!("no template `{id}` in this project"),
                }));
            };
            if !t.fields.body.contains("confirmUrl") {
                return Ok(Err(SettingsProblem {
                    field: "confirmationTemplateId",
                    code: "missing_confirm_url",
                    message: "the template's body must link to `{{confirmUrl}}`, the link that \
                              confirms the subscription"
                        .into(),
                }));
            }
            template_from = t.fields.from_email.is_some();
        }
        if double_opt_in != DoubleOptIn::Off && !template_from && project.default_from.is_none() {
            return Ok(Err(SettingsProblem {
                field: "doubleOptIn",
                code: "no_sender",
                message: "the confirmation mail needs a sender: set `defaultFrom`, or a \
                          `confirmationTemplateId` whose template has a `from`"
                    .into(),
            }));
        }
        Ok(Ok(()))
    }

    /// Ends `contact`'s wait, if any (its subscription was refused: `subscribed: false`).
    pub async fn cancel(&self, project: &Project, contact: &ContactId) -> StoreResult<()> {
        self.store.end_confirmation(&project.id, contact).await?;
        Ok(())
    }

    /// Mails the confirmation with `url` as `{{confirmUrl}}`: the project's template if it
    /// names one that still exists, else the built-in one in the contact's language.
    async fn mail(
        &self,
        project: &Project,
        contact: &Contact,
        url: &str,
    ) -> Result<(), ConfirmationError> {
        let own = match project
            .confirmation_template
            .as_deref()
            .and_then(TemplateId::parse)
        {
            Some(id) => match self.store.template(&project.id, &id).await {
                Ok(_) => Some(id.to_string()),
                Err(StoreError::NotFound) => {
                    tracing::warn!(project = %project.id, template = %id,
                        "the confirmation template is gone; the built-in one is sent");
                    None
                }
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let (subject, body) = match own {
            Some(_) => (None, None),
            None => {
                let (subject, body) = self.built_in(contact);
                (Some(subject), Some(body))
            }
        };
        let to = Value::String(contact.email.to_string());
        let data: std::collections::BTreeMap<String, Value> = [(
            "confirmUrl".to_string(),
            json!({ "value": url, "persistent": false }),
        )]
        .into_iter()
        .collect();
        let input = SendInput {
            to: &to,
            subject: subject.as_deref(),
            body: body.as_deref(),
            template: own.as_deref(),
            from: None,
            name: None,
            subscribed: None,
            data: Some(&data),
            headers: None,
            reply: None,
            attachments: Vec::new(),
        };
        let mut plan = self
            .planner
            .plan(project, &input)
            .await
            .map_err(|e| match e {
                SendPlanError::Store(s) => ConfirmationError::Store(s),
                SendPlanError::Invalid(problems) => ConfirmationError::Plan(
                    problems
                        .iter()
                        .map(|p| format!("{}: {}", p.field, p.message))
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                other => ConfirmationError::Plan(other.to_string()),
            })?;
        // The contact is not subscribed yet: the confirmation goes as transactional mail,
        // whatever the project's template says, or it would be suppressed. Its links go
        // straight to their pages (no click redirect): the link is the confirmation itself.
        plan.marketing = false;
        let mut project = project.clone();
        project.track_clicks = false;
        self.sending.send(&project, &plan, None).await?;
        Ok(())
    }

    /// The built-in confirmation's subject and body (templates: `{{email}}` and
    /// `{{confirmUrl}}` are filled by the send) in the contact's language.
    fn built_in(&self, contact: &Contact) -> (String, String) {
        let locale = i18n::for_contact(&contact.data);
        let t = |key: &str| {
            escape(i18n::text(locale, &format!("confirm.{key}")))
                .replace("{{days}}", &self.policy.pending_days.to_string())
        };
        let subject = i18n::text(locale, "confirm.mail_subject").to_string();
        let body = format!(
            "<!doctype html><html lang=\"{locale}\"><body>\
             <p>{}</p><p><a href=\"{{{{confirmUrl}}}}\">{}</a></p><p>{}</p></body></html>",
            t("mail_intro"),
            t("mail_action"),
            t("mail_validity"),
        );
        (subject, body)
    }

    /// Where the confirmation link of `contact_id`'s wait started at `since` stands.
    pub async fn link_state(&self, contact_id: &ContactId, since: i64) -> StoreResult<LinkState> {
        let contact = match self.store.contact_by_id(contact_id).await {
            Ok(c) => c,
            Err(StoreError::NotFound) => return Ok(LinkState::Unknown),
            Err(e) => return Err(e),
        };
        if contact.subscribed {
            return Ok(LinkState::Subscribed(contact));
        }
        match self.store.confirmation(contact_id).await? {
            Some(p) if p.pending_since == since && p.expires_at > now_ms() => {
                Ok(LinkState::Pending(contact))
            }
            _ => Ok(LinkState::Expired(contact)),
        }
    }

    /// Confirms the wait of `contact_id` started at `since`, when it is still pending: the
    /// contact is subscribed (`contact.subscribed`, source `confirmation`), then its wait ends.
    /// Answers where the link stands afterwards (`Subscribed` when it confirmed).
    pub async fn confirm(&self, contact_id: &ContactId, since: i64) -> StoreResult<LinkState> {
        let state = self.link_state(contact_id, since).await?;
        let LinkState::Pending(contact) = state else {
            return Ok(state);
        };
        let change = ContactChange {
            subscribed: Some(true),
            ..ContactChange::default()
        };
        let outcome = self
            .store
            .update_contact(
                &contact.project_id,
                &contact.id,
                &change,
                SubscriptionSource::Confirmation,
            )
            .await?;
        // A crash before this leaves a wait that no read counts, the contact being subscribed;
        // it expires like any other.
        self.store
            .end_confirmation(&contact.project_id, &contact.id)
            .await?;
        Ok(LinkState::Subscribed(outcome.contact))
    }
}
