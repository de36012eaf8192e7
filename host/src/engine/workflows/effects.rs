//! The effects a step asks for, performed by the host: sending a template, updating the
//! contact, setting context values.
//!
//! Each effect that writes is keyed `wf:<stepRunId>:<index>` in the idempotency keys, written in
//! the same transaction as the effect itself. A retried step run (after a crash, a lost lease or
//! a failed commit) finds the key and reuses the recorded result instead of sending or updating
//! again.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::WorkflowEngine;
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::{ProjectId, TemplateId};
use crate::domain::project::Project;
use crate::domain::send::Mailbox;
use crate::domain::template::CompiledTemplate;
use crate::domain::template::fields::TemplateType;
use crate::domain::workflow::MAX_CONFIG_BYTES;
use crate::plugins::types::Effect;
use crate::services::sending::{Idempotency, SendError, SendPlan};
use crate::services::sending_domains::{Sender, SenderError};
use crate::store::contacts::Effects;
use crate::store::idempotency::IdempotentWrite;
use crate::store::templates::TemplateFields;
use crate::store::{Conflict, StoreError};

/// Why an effect could not be performed.
#[derive(Debug)]
pub enum EffectError {
    /// A transient failure (the database); the step run is retried.
    Retry(String),
    /// It can never succeed as asked (a missing template, bad data); the execution fails.
    Fail(String),
}

impl From<StoreError> for EffectError {
    fn from(e: StoreError) -> EffectError {
        EffectError::Retry(e.to_string())
    }
}

/// What the effects of one round share: its project and, read once for its sends, the project's
/// record and each template with its sender and compiled content. A round is one batch of step
/// runs of one project, run within moments, so an edit of a template applies from the next round
/// on.
pub(crate) struct SendReads {
    project: ProjectId,
    record: Option<Project>,
    templates: HashMap<String, Arc<PreparedTemplate>>,
}

impl SendReads {
    /// Nothing read yet, for the step runs of `project`.
    pub(crate) fn new(project: ProjectId) -> SendReads {
        SendReads {
            project,
            record: None,
            templates: HashMap::new(),
        }
    }
}

/// A template ready to send: its fields, its from address, who may send as it and its content.
struct PreparedTemplate {
    template: TemplateFields,
    from_email: EmailAddress,
    sender: Sender,
    content: CompiledTemplate,
}

/// The endpoint name recorded with the effects' idempotency keys.
const ENDPOINT: &str = "workflow";

impl WorkflowEngine {
    /// Performs `effects` in order for `contact`; set-context effects change `context`.
    /// Answers what each did (for the step run's output).
    ///
    /// On the step run's first attempt no effect of it can have been recorded yet, so the keys
    /// are not looked up first: a write that meets its key anyway (a concurrent run) is refused
    /// by the key's uniqueness and answered from the record.
    pub(crate) async fn apply_effects(
        &self,
        reads: &mut SendReads,
        contact: &Contact,
        run: &str,
        first_attempt: bool,
        effects: &[Effect],
        context: &mut Map<String, Value>,
    ) -> Result<Vec<Value>, EffectError> {
        let project = &reads.project.clone();
        let mut done = Vec::with_capacity(effects.len());
        for (i, effect) in effects.iter().enumerate() {
            let key = format!("wf:{run}:{i}");
            let out = match effect {
                Effect::SetContext { key, value } => {
                    context.insert(key.clone(), value.clone());
                    let size = serde_json::to_vec(context).map_or(0, |v| v.len());
                    if size > MAX_CONFIG_BYTES {
                        return Err(EffectError::Fail(format!(
                            "the execution's context would be {size} bytes; it may be at most {MAX_CONFIG_BYTES}"
                        )));
                    }
                    json!({ "type": "SET_CONTEXT", "key": key })
                }
                _ => {
                    let recorded = if first_attempt {
                        None
                    } else {
                        self.store.idempotent_response(project, &key).await?
                    };
                    if let Some(stored) = recorded {
                        stored.response
                    } else {
                        match effect {
                            Effect::SendEmail { template_id, to } => {
                                self.send(reads, contact, &key, template_id, to.as_deref(), context)
                                    .await?
                            }
                            Effect::UpdateContact { data, subscribed } => {
                                self.update(project, contact, &key, data.as_ref(), *subscribed)
                                    .await?
                            }
                            Effect::SetContext { .. } => unreachable!("handled above"),
                        }
                    }
                }
            };
            done.push(out);
        }
        Ok(done)
    }

    /// Sends a template to the contact (or `to`), with the execution's context as one-off
    /// template variables.
    async fn send(
        &self,
        reads: &mut SendReads,
        contact: &Contact,
        key: &str,
        template_id: &str,
        to: Option<&str>,
        context: &Map<String, Value>,
    ) -> Result<Value, EffectError> {
        let recipient = match to
            .map(str::trim)
            .filter(|t| !t.is_empty() && *t != "contact")
        {
            None => contact.email.clone(),
            Some(address) => EmailAddress::parse(address).map_err(|e| {
                EffectError::Fail(format!("`to` {address:?} is not an address: {e}"))
            })?,
        };
        let project = &reads.project.clone();
        let project_record = match &reads.record {
            Some(p) => p.clone(),
            None => {
                let p = self.store.project(project).await?;
                reads.record = Some(p.clone());
                p
            }
        };
        let prepared = match reads.templates.get(template_id) {
            Some(p) => p.clone(),
            None => {
                let p = Arc::new(self.prepare(project, template_id).await?);
                reads.templates.insert(template_id.to_string(), p.clone());
                p
            }
        };
        let template = &prepared.template;
        let marketing = template.template_type == TemplateType::Marketing;
        let from_email = prepared.from_email.clone();
        let sender = prepared.sender.clone();
        let content = prepared.content.clone();
        let plan = SendPlan {
            recipients: vec![Mailbox {
                name: None,
                email: recipient,
            }],
            from: Mailbox {
                name: template.from_name.clone(),
                email: from_email,
            },
            sender,
            reply_to: template.reply_to.clone(),
            content,
            template_id: Some(template_id.to_string()),
            marketing,
            subscribed: None,
            data: DataPatch {
                transient: context.clone(),
                ..DataPatch::default()
            },
            headers: Vec::new(),
            attachments: Vec::new(),
        };
        let respond = |queued: &[crate::services::sending::QueuedEmail]| {
            json!({
                "type": "SEND_EMAIL",
                "emailId": queued.first().map(|q| q.email_id.as_str()),
                "to": queued.first().map(|q| q.contact.email.as_str()),
                "suppressed": queued.first().is_some_and(|q| q.suppressed),
            })
        };
        let idempotency = Idempotency {
            key,
            endpoint: ENDPOINT,
            request_hash: key,
            respond: &respond,
        };
        match self
            .sending
            .send(&project_record, &plan, Some(idempotency))
            .await
        {
            Ok(queued) => Ok(respond(&queued)),
            Err(SendError::Store(StoreError::Conflict(Conflict::IdempotencyKey))) => {
                self.recorded(project, key).await
            }
            Err(SendError::Store(e)) => Err(e.into()),
            Err(e) => Err(EffectError::Fail(e.to_string())),
        }
    }

    /// Reads a template, its sender and its compiled content, for the sends of a round.
    async fn prepare(
        &self,
        project: &ProjectId,
        template_id: &str,
    ) -> Result<PreparedTemplate, EffectError> {
        let missing = || {
            EffectError::Fail(format!(
                "template {template_id} does not exist in this project"
            ))
        };
        let tid = TemplateId::parse(template_id).ok_or_else(missing)?;
        let template = match self.store.template(project, &tid).await {
            Ok(t) => t.fields,
            Err(StoreError::NotFound) => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        let from_email = template.from_email.clone().ok_or_else(|| {
            EffectError::Fail(format!(
                "template {template_id} has no from address; set one on the template"
            ))
        })?;
        let sender = self
            .sending_domains
            .authorize_sender(project, &from_email)
            .await
            .map_err(|e| match e {
                SenderError::NotVerified(_) => EffectError::Fail(e.to_string()),
                SenderError::Store(s) => s.into(),
            })?;
        let content = CompiledTemplate::compile(&template.subject, &template.body)
            .map_err(|e| EffectError::Fail(format!("template {template_id}: {}", e.describe())))?;
        Ok(PreparedTemplate {
            template,
            from_email,
            sender,
            content,
        })
    }

    /// Updates the contact's data and subscription (source `workflow`).
    async fn update(
        &self,
        project: &ProjectId,
        contact: &Contact,
        key: &str,
        data: Option<&Map<String, Value>>,
        subscribed: Option<bool>,
    ) -> Result<Value, EffectError> {
        let data = match data {
            Some(d) => DataPatch::parse(d.clone())
                .map_err(|e| EffectError::Fail(format!("data.{}: {}", e.key, e.message)))?,
            None => DataPatch::default(),
        };
        let change = ContactChange {
            email: None,
            subscribed,
            data,
        };
        let response = json!({ "type": "UPDATE_CONTACT", "contactId": contact.id.as_str() });
        let recorded = response.clone();
        let respond =
            move |_: &Contact, _: Option<&crate::domain::event::StoredEvent>| recorded.clone();
        let effects = Effects {
            source: SubscriptionSource::Workflow,
            reason: None,
            event: None,
            idempotency: Some(IdempotentWrite {
                key,
                endpoint: ENDPOINT,
                request_hash: key,
                status: 200,
                response: &respond,
            }),
        };
        match self
            .store
            .update_contact_with(project, &contact.id, &change, &effects)
            .await
        {
            Ok(outcome) => Ok(json!({
                "type": "UPDATE_CONTACT",
                "contactId": contact.id.as_str(),
                "updated": outcome.updated,
            })),
            Err(StoreError::Conflict(Conflict::IdempotencyKey)) => {
                self.recorded(project, key).await
            }
            Err(StoreError::NotFound) => Err(EffectError::Fail("the contact was deleted".into())),
            Err(e) => Err(e.into()),
        }
    }

    /// The result recorded under `key` by a concurrent run of the same effect.
    async fn recorded(&self, project: &ProjectId, key: &str) -> Result<Value, EffectError> {
        match self.store.idempotent_response(project, key).await? {
            Some(stored) => Ok(stored.response),
            None => Err(EffectError::Retry(format!(
                "the effect {key} was taken by a concurrent run; retrying"
            ))),
        }
    }
}
