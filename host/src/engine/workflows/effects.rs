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
use crate::domain::ids::{ProjectId, TemplateId, TopicId};
use crate::domain::project::Project;
use crate::domain::send::Mailbox;
use crate::domain::template::CompiledTemplate;
use crate::domain::template::fields::TemplateType;
use crate::domain::topic::Topic;
use crate::domain::workflow::MAX_CONFIG_BYTES;
use crate::plugins::types::Effect;
use crate::services::render_budget::RenderRoom;
use crate::services::sending::{Idempotency, KnownContact, QueuedEmail, SendError, SendPlan};
use crate::services::sending_domains::{Sender, SenderError};
use crate::store::contacts::{Effects, would_change};
use crate::store::executions::{EFFECT_ENDPOINT, EffectWrite};
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
/// What a send-email effect asks: the template, the recipient (`None`: the contact) and the
/// step's own topic.
#[derive(Clone, Copy)]
struct SendAsk<'a> {
    template_id: &'a str,
    to: Option<&'a str>,
    topic_id: Option<&'a str>,
}

struct PreparedTemplate {
    template: TemplateFields,
    /// The template's topic, if it names one.
    topic: Option<Topic>,
    from_email: EmailAddress,
    sender: Sender,
    content: Arc<CompiledTemplate>,
    /// Its languages' content (`SendPlan::localized`).
    localized: Vec<(String, Arc<CompiledTemplate>)>,
}

/// How many of `effects` write (sends and contact updates; context values are not writes).
pub(crate) fn write_count(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| !matches!(e, Effect::SetContext { .. }))
        .count()
}

/// What a step run's output (and the idempotency record) says of a send
/// ([`crate::domain::workflow::send_effect`]): suppressed here when it is marketing mail to an
/// unsubscribed contact; one to an address on the suppression list is marked so where it is
/// committed (`store::executions`), since the list is read there.
fn send_response(queued: &[QueuedEmail]) -> Value {
    let first = queued.first();
    crate::domain::workflow::send_effect(
        first.map(|q| q.email_id.as_str()),
        first.map(|q| q.contact.email.as_str()),
        first
            .filter(|q| q.suppressed)
            .map(|_| crate::domain::workflow::UNSUBSCRIBED),
    )
}

/// A send's failure as an effect's: the database's is retried, the others fail the execution.
fn send_error(e: SendError) -> EffectError {
    use crate::services::render_budget::RenderBudgetError;
    match e {
        SendError::Store(e) => e.into(),
        // No room in the render budget now: the step run is tried again later.
        e @ SendError::RenderBudget(RenderBudgetError::NoRoom | RenderBudgetError::Busy) => {
            EffectError::Retry(e.to_string())
        }
        e => EffectError::Fail(e.to_string()),
    }
}

/// What the idempotency record of an `UPDATE_CONTACT` says.
fn update_record(contact: &Contact) -> Value {
    json!({ "type": "UPDATE_CONTACT", "contactId": contact.id.as_str() })
}

/// A contact's data patch from an effect's `data`.
fn data_patch(data: Option<&Map<String, Value>>) -> Result<DataPatch, EffectError> {
    match data {
        Some(d) => DataPatch::parse(d.clone())
            .map_err(|e| EffectError::Fail(format!("data.{}: {}", e.key, e.message))),
        None => Ok(DataPatch::default()),
    }
}

/// An `UPDATE_CONTACT` left to the round's commit: what the step run's output records (whether
/// it changes the contact as the round read it) and the write.
fn deferred_update(
    contact: &Contact,
    key: String,
    data: Option<&Map<String, Value>>,
    subscribed: Option<bool>,
) -> Result<(Value, EffectWrite), EffectError> {
    let change = ContactChange {
        email: None,
        subscribed,
        data: data_patch(data)?,
        topics: Vec::new(),
    };
    let updated = would_change(contact, &change);
    let write = EffectWrite::UpdateContact {
        contact: contact.id.clone(),
        change: Box::new(change),
        key,
        response: update_record(contact),
    };
    let out = json!({
        "type": "UPDATE_CONTACT",
        "contactId": contact.id.as_str(),
        "updated": updated,
    });
    Ok((out, write))
}

impl WorkflowEngine {
    /// Performs `effects` in order for `known.now`, the contact as the step saw it; `known.stored`
    /// is the same contact as the database holds it (they differ when step runs run on in memory
    /// before this one updated it: their writes come in the same commit, after the check that
    /// `stored` is still so). Set-context effects change `context`.
    /// Answers what each did (for the step run's output) and the writes left to the round's
    /// commit: a step's one write (a send, planned and rendered here, or a contact update) is
    /// made in the same transaction as its step run (see [`EffectWrite`]); a send's rendered
    /// message is held in the render budget until then (the rooms answered, kept with the write). A step with several
    /// writes (a `PLUGIN` step) has them made here, in order, each in a transaction of its own,
    /// so that a send renders the contact as an earlier update left it.
    ///
    /// On the step run's first attempt no effect of it can have been recorded yet, so the keys
    /// are not looked up first: a write that meets its key anyway (a concurrent run) is refused
    /// by the key's uniqueness and answered from the record.
    pub(crate) async fn apply_effects(
        &self,
        reads: &mut SendReads,
        known: KnownContact<'_>,
        run: &str,
        first_attempt: bool,
        effects: &[Effect],
        context: &mut Map<String, Value>,
    ) -> Result<(Vec<Value>, Vec<EffectWrite>, Vec<RenderRoom>), EffectError> {
        let project = &reads.project.clone();
        let contact = known.now;
        let mut done = Vec::with_capacity(effects.len());
        let mut writes = Vec::new();
        let mut rooms = Vec::new();
        // The one write of a step (every built-in step's case) waits for the round's commit;
        // several are written one by one, in order, each in a transaction of its own, so that a
        // send renders the contact as an earlier update left it.
        let writes_alone = write_count(effects) == 1;
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
                            Effect::SendEmail {
                                template_id,
                                to,
                                topic_id,
                            } if writes_alone => {
                                let ask = SendAsk {
                                    template_id,
                                    to: to.as_deref(),
                                    topic_id: topic_id.as_deref(),
                                };
                                let (project, plan) =
                                    self.send_plan(reads, contact, ask, context).await?;
                                // Held in the render budget until the round commits.
                                let ((send, queued), room) = self
                                    .sending
                                    .render_held(1, |room| {
                                        self.sending.prepare_send(
                                            &project,
                                            &plan,
                                            Some(known),
                                            room,
                                        )
                                    })
                                    .await
                                    .map_err(send_error)?;
                                rooms.push(room);
                                let response = send_response(&queued);
                                writes.push(EffectWrite::SendEmail {
                                    send: Box::new(send),
                                    key,
                                    response: response.clone(),
                                });
                                response
                            }
                            Effect::SendEmail {
                                template_id,
                                to,
                                topic_id,
                            } => {
                                let ask = SendAsk {
                                    template_id,
                                    to: to.as_deref(),
                                    topic_id: topic_id.as_deref(),
                                };
                                self.send(reads, contact, &key, ask, context).await?
                            }
                            Effect::UpdateContact { data, subscribed } if writes_alone => {
                                let (out, write) =
                                    deferred_update(contact, key, data.as_ref(), *subscribed)?;
                                writes.push(write);
                                out
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
        Ok((done, writes, rooms))
    }

    /// What sending a template to the contact (or `to`) asks for, with the execution's context
    /// as one-off template variables: the project's record and the send's plan.
    async fn send_plan(
        &self,
        reads: &mut SendReads,
        contact: &Contact,
        ask: SendAsk<'_>,
        context: &Map<String, Value>,
    ) -> Result<(Project, SendPlan), EffectError> {
        let SendAsk {
            template_id,
            to,
            topic_id,
        } = ask;
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
        // The step's own topic, in place of the template's.
        let topic = match topic_id {
            Some(id) => Some(self.step_topic(project, id).await?),
            None => prepared.topic.clone(),
        };
        let plan = SendPlan {
            recipients: vec![Mailbox {
                name: None,
                email: recipient,
            }],
            from: Mailbox {
                name: template.from_name.clone(),
                email: prepared.from_email.clone(),
            },
            sender: prepared.sender.clone(),
            reply_to: template.reply_to.clone(),
            content: prepared.content.clone(),
            localized: prepared.localized.clone(),
            template_id: Some(template_id.to_string()),
            marketing: topic.is_some() || template.template_type == TemplateType::Marketing,
            subscribed: None,
            data: DataPatch {
                transient: context.clone(),
                ..DataPatch::default()
            },
            topics: Vec::new(),
            topic,
            headers: Vec::new(),
            attachments: Vec::new(),
        };
        Ok((project_record, plan))
    }

    /// Sends a template to the contact (or `to`) in a transaction of its own (see
    /// [`WorkflowEngine::send_plan`]).
    async fn send(
        &self,
        reads: &mut SendReads,
        contact: &Contact,
        key: &str,
        ask: SendAsk<'_>,
        context: &Map<String, Value>,
    ) -> Result<Value, EffectError> {
        let (project_record, plan) = self.send_plan(reads, contact, ask, context).await?;
        let idempotency = Idempotency {
            key,
            endpoint: EFFECT_ENDPOINT,
            request_hash: key,
            respond: &send_response,
        };
        match self
            .sending
            .send(&project_record, &plan, Some(idempotency))
            .await
        {
            Ok(queued) => Ok(send_response(&queued)),
            Err(SendError::Store(StoreError::Conflict(Conflict::IdempotencyKey))) => {
                self.recorded(&project_record.id, key).await
            }
            Err(e) => Err(send_error(e)),
        }
    }

    /// The topic a `SEND_EMAIL` step names; one deleted since fails the step.
    async fn step_topic(&self, project: &ProjectId, id: &str) -> Result<Topic, EffectError> {
        let gone = || format!("the step's topic {id} does not exist in this project");
        let Some(topic) = TopicId::parse(id) else {
            return Err(EffectError::Fail(gone()));
        };
        self.topic_or_fail(project, &topic, gone).await
    }

    /// A topic of the project; one that no longer exists fails the step with `gone()`.
    async fn topic_or_fail(
        &self,
        project: &ProjectId,
        id: &TopicId,
        gone: impl FnOnce() -> String,
    ) -> Result<Topic, EffectError> {
        match self.store.topic(project, id).await {
            Ok(t) => Ok(t),
            Err(StoreError::NotFound) => Err(EffectError::Fail(gone())),
            Err(e) => Err(e.into()),
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
        let content = self
            .sending
            .compile(project, template.subject.clone(), template.body.clone())
            .await
            .map_err(|e| EffectError::Fail(format!("template {template_id}: {}", e.describe())))?;
        let localized = self
            .sending
            .compile_variants(project, &template.variants)
            .await
            .map_err(|(tag, e)| {
                EffectError::Fail(format!("template {template_id}, `{tag}`: {}", e.describe()))
            })?;
        let topic = match &template.topic {
            Some(id) => Some(
                self.topic_or_fail(project, id, || {
                    format!("template {template_id}: its topic {id} no longer exists")
                })
                .await?,
            ),
            None => None,
        };
        Ok(PreparedTemplate {
            template,
            topic,
            from_email,
            sender,
            content,
            localized,
        })
    }

    /// Updates the contact's data and subscription (source `workflow`) in a transaction of its
    /// own.
    async fn update(
        &self,
        project: &ProjectId,
        contact: &Contact,
        key: &str,
        data: Option<&Map<String, Value>>,
        subscribed: Option<bool>,
    ) -> Result<Value, EffectError> {
        let data = data_patch(data)?;
        let change = ContactChange {
            email: None,
            subscribed,
            data,
            topics: Vec::new(),
        };
        let response = update_record(contact);
        let recorded = response.clone();
        let respond =
            move |_: &Contact, _: Option<&crate::domain::event::StoredEvent>| recorded.clone();
        let effects = Effects {
            source: SubscriptionSource::Workflow,
            reason: None,
            event: None,
            idempotency: Some(IdempotentWrite {
                key,
                endpoint: EFFECT_ENDPOINT,
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
