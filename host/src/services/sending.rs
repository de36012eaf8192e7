//! Sending (`/v1/send` and a workflow's send step) as a service: plan each recipient's contact
//! upsert from its stored state, render the content with the contact's variables and add
//! tracking into a [`MessageDraft`]; then write the contacts, every email with its draft (due
//! for delivery), the request's attachments (once, for all recipients) and the idempotency key in
//! one transaction, so a failure leaves nothing behind. Marketing mail to an unsubscribed contact
//! is recorded as `suppressed` and never queued. Delivery itself is `jobs::deliver`, which asks
//! this service ([`MessageBuilder`]) to build and DKIM-sign the MIME message at hand-off.
//! Rendering, building and signing run on the [`CpuPool`] (the blocking pool, one task per
//! core), never on an async worker, but for one recipient's small email, whose compiling and
//! rendering are bounded by construction and cost less than the trip to the pool
//! ([`Signers::build_email_inline`], `services::cpu`).
//! The rendered messages of a `/v1/send` and of a campaign group are held in the process's
//! render budget until their commit (`services::render_budget`, [`Sending::render_held`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::domain::contact::{Contact, ContactUpsert};
use crate::domain::email::EmailAddress;
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::{EmailContentId, EmailId, ProjectId};
use crate::domain::locale::LocaleVariants;
use crate::domain::message::{MessageDraft, decode_attachments, encode_attachments};
use crate::domain::project::Project;
use crate::domain::send::{Attachment, MAX_MESSAGE_BYTES, Mailbox};
use crate::domain::template::{CompiledTemplate, RenderFailure, Rendered};
use crate::domain::topic;
use crate::jobs::JobQueue;
use crate::jobs::deliver::{BatchMemo, BuildError, Built, MessageBuilder, ToBuild};
use crate::mail::dkim::{DkimKey, DkimSigner};
use crate::mail::links::{ContactUrls, LinkSigner};
use crate::mail::mime::{self, Outgoing};
use crate::mail::tracking;
use crate::services::compiled_templates::CompiledTemplates;
use crate::services::cpu::{
    CpuPool, INLINE_RENDER, INLINE_SOURCE_BYTES, INLINE_VARIABLE_BYTES, TURN, json_size_within,
};
use crate::services::render_budget::{
    DEFAULT_RENDER_MB, RENDER_WAIT, RenderBudget, RenderBudgetError, RenderRoom,
};
use crate::services::sending_domains::Sender;
use crate::store::contacts::{Plan, field_types, plan_upsert};
use crate::store::domains::SigningDomain;
use crate::store::emails::{EmailContent, NewEmail, PreparedSend};
use crate::store::group_commit::{GroupedSend, OwnedResponse};
use crate::store::{Conflict, Store, StoreError};

pub use super::sends::{QueuedEmail, SendError, SendPlan, variables};

/// The default hand-off memory budget (`sending.hand_off_memory_mb`), in kilobytes.
const DEFAULT_HAND_OFF_KB: u32 = 256 * 1024;

/// How many times a send is planned again when its contacts change under it.
const MAX_ATTEMPTS: usize = 8;

/// How many times a request renders again after waiting for room in the render budget (each
/// time for what the last rendering measured) before it gives up.
const RENDER_ROUNDS: usize = 4;

/// Why marketing mail to an unsubscribed contact is not sent.
pub const UNSUBSCRIBED_REASON: &str =
    "the contact is unsubscribed and the template is a marketing template";

/// Why the mail of a topic to a contact not subscribed to the topic is not sent.
pub const NOT_IN_TOPIC_REASON: &str = "the contact is not subscribed to the email's topic";

/// A recipient's contact that the caller of [`Sending::prepare_send`] has read: `stored` as the
/// database holds it (the send is planned from it, and the commit checks that it is still so),
/// `now` as the caller's own writes, made in the same commit after the send's check, will leave
/// it (a workflow's `UPDATE_CONTACT` run before the `SEND_EMAIL` in the same round): the email
/// is rendered for `now`. Both are the same contact when the caller writes nothing before.
#[derive(Clone, Copy)]
pub struct KnownContact<'a> {
    pub stored: &'a Contact,
    pub now: &'a Contact,
}

/// Sends email: builds each recipient's message and queues it for delivery.
pub struct Sending {
    store: Store,
    signers: Signers,
    jobs: JobQueue,
    cpu: CpuPool,
    /// Compiled subjects and bodies, kept for the sends of the same text.
    compiled: CompiledTemplates,
    /// The pool hand-offs build and sign on: apart from `cpu`, so that a burst of requests
    /// rendering never holds back the deliveries of what was already accepted.
    hand_off_cpu: CpuPool,
    /// The hand-off memory budget, in kilobytes: a message is counted at eight times its stored
    /// size while it is built and handed to the transport (the stored text, the decoded parts,
    /// the message, and the copies in and out of the transport plugin's memory, as measured).
    hand_off_room: Arc<tokio::sync::Semaphore>,
    hand_off_room_kb: u32,
    /// The memory rendered messages may take at once until their commit
    /// (`services::render_budget`).
    render_budget: RenderBudget,
}

/// What signs a message's links and the message itself; cheap to clone into a blocking task.
#[derive(Clone)]
struct Signers {
    links: LinkSigner,
    dkim: DkimSigner,
}

impl Sending {
    /// Sending through `store` and `jobs`, with links signed by `links` and messages signed
    /// with `dkim`'s cached keys; the CPU-heavy work runs on a [`CpuPool`] as wide as the cores.
    pub fn new(store: Store, links: LinkSigner, dkim: DkimSigner, jobs: JobQueue) -> Sending {
        let cpu = CpuPool::sized_to_cores();
        Sending {
            store,
            signers: Signers { links, dkim },
            jobs,
            compiled: CompiledTemplates::new(cpu.clone()),
            cpu,
            hand_off_cpu: CpuPool::sized_to_cores(),
            hand_off_room: Arc::new(tokio::sync::Semaphore::new(DEFAULT_HAND_OFF_KB as usize)),
            hand_off_room_kb: DEFAULT_HAND_OFF_KB,
            render_budget: RenderBudget::new(DEFAULT_RENDER_MB),
        }
    }

    /// Sets the memory that rendered messages waiting for their commit may take at once.
    pub fn with_render_memory(mut self, megabytes: u64) -> Sending {
        self.render_budget = RenderBudget::new(megabytes);
        self
    }

    /// The render budget the messages built here are held in.
    pub fn render_budget(&self) -> &RenderBudget {
        &self.render_budget
    }

    /// Runs `render` with a holding of the render budget for the `messages` it renders, and
    /// answers what it made with the holding (to keep until the messages are committed). First
    /// from the budget's free room; when `render` runs short of room
    /// ([`RenderBudgetError::NoRoom`]), what it made is dropped, its room given back, and it runs
    /// again once as much as it measured is reserved at once (waiting at most [`RENDER_WAIT`] in
    /// all, then [`RenderBudgetError::Busy`]). Never waits while holding room.
    pub async fn render_held<T, F, R>(
        &self,
        messages: usize,
        render: R,
    ) -> Result<(T, RenderRoom), SendError>
    where
        R: Fn(RenderRoom) -> F,
        F: Future<Output = Result<T, SendError>>,
    {
        let deadline = tokio::time::Instant::now() + RENDER_WAIT;
        let mut room = self.render_budget.holding();
        for _ in 0..RENDER_ROUNDS {
            match render(room.clone()).await {
                Err(SendError::RenderBudget(RenderBudgetError::NoRoom)) => {
                    let kb = room.estimate(messages);
                    drop(room);
                    room = self.render_budget.reserve(kb, deadline).await?;
                }
                made => return made.map(|made| (made, room)),
            }
        }
        Err(RenderBudgetError::Busy.into())
    }

    /// Sets the memory that messages being built and handed off at once may take.
    pub fn with_hand_off_memory(mut self, megabytes: u64) -> Sending {
        let kb = u32::try_from(megabytes.saturating_mul(1024))
            .unwrap_or(u32::MAX >> 3)
            .clamp(1024, u32::MAX >> 3);
        self.hand_off_room = Arc::new(tokio::sync::Semaphore::new(kb as usize));
        self.hand_off_room_kb = kb;
        self
    }

    /// The pool this service runs CPU-heavy work on, for the callers' own work to share the
    /// same bound.
    pub fn cpu(&self) -> &CpuPool {
        &self.cpu
    }

    /// `subject` and `body` compiled on this service's pool, or as compiled for an earlier send
    /// of the same text in `project` ([`CompiledTemplates`]). The error names the field and the
    /// position.
    pub async fn compile(
        &self,
        project: &ProjectId,
        subject: String,
        body: String,
    ) -> Result<Arc<CompiledTemplate>, crate::domain::template::TemplateError> {
        self.compiled.compile(project, subject, body).await
    }

    /// Each language's subject and body compiled as [`Sending::compile`] does, in tag order. The
    /// error is the first variant's that does not compile, with its tag.
    pub async fn compile_variants(
        &self,
        project: &ProjectId,
        variants: &LocaleVariants,
    ) -> Result<
        Vec<(String, Arc<CompiledTemplate>)>,
        (String, crate::domain::template::TemplateError),
    > {
        let mut compiled = Vec::with_capacity(variants.0.len());
        for (tag, c) in &variants.0 {
            let content = self
                .compile(project, c.subject.clone(), c.body.clone())
                .await
                .map_err(|e| (tag.clone(), e))?;
            compiled.push((tag.clone(), content));
        }
        Ok(compiled)
    }

    /// Sends: plans each recipient's contact from its stored state, renders, builds and signs
    /// every message, then writes the contacts, their events, the emails, their jobs and the
    /// idempotency key in one transaction; a failure at any point writes nothing. When a
    /// recipient's contact changed between the read and the write, or the database rolled the
    /// write back to break a deadlock, the whole request is planned and rendered again (a few
    /// times, then `ContactBusy`). The rendered messages are held in the render budget until
    /// the commit: a request whose messages take more than all of it fails
    /// ([`RenderBudgetError::OverBudget`]), one that finds no room waits for it
    /// ([`Sending::render_held`]).
    pub async fn send(
        &self,
        project: &Project,
        plan: &SendPlan,
        idempotency: Option<Idempotency<'_>>,
    ) -> Result<Vec<QueuedEmail>, SendError> {
        for _ in 0..MAX_ATTEMPTS {
            match self.try_send(project, plan, idempotency.as_ref()).await {
                Ok(Some(queued)) => {
                    self.jobs.wake_deliveries();
                    return Ok(queued);
                }
                Ok(None) => {}
                // Rolled back to break a deadlock with a concurrent write: nothing was written.
                Err(SendError::Store(StoreError::Conflict(Conflict::Busy))) => {}
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict(Conflict::ContactBusy).into())
    }

    /// Renders, tracks, builds and signs one email per contact of a campaign batch, spread over
    /// the CPU pool (one task per core), each addressed to the contact's address, and counts it
    /// into `room`. Suppressed (never sent) for a contact unsubscribed meanwhile, since campaign
    /// mail is marketing mail. A failure is the recipient's own, reported beside its contact;
    /// once `room` runs short, the contacts left are not rendered
    /// ([`RenderBudgetError::NoRoom`]).
    pub async fn build_for_contacts(
        &self,
        project: &Project,
        plan: &Arc<SendPlan>,
        contacts: Vec<Contact>,
        room: &RenderRoom,
    ) -> Vec<(Contact, Result<NewEmail, SendError>)> {
        let (signers, plan, project, room) = (
            self.signers.clone(),
            plan.clone(),
            Arc::new(project.clone()),
            room.clone(),
        );
        self.cpu
            .map(self.cpu.width(), TURN, contacts, move |c: Contact| {
                if room.is_short() {
                    return (c, Err(RenderBudgetError::NoRoom.into()));
                }
                let to = Mailbox {
                    name: None,
                    email: c.email.clone(),
                };
                let email = signers.build_email(&project, &plan, &c, &to, None);
                (c, held(&room, email))
            })
            .await
    }

    /// One attempt of [`Sending::send`]; `None` when a contact changed meanwhile.
    async fn try_send(
        &self,
        project: &Project,
        plan: &SendPlan,
        idempotency: Option<&Idempotency<'_>>,
    ) -> Result<Option<Vec<QueuedEmail>>, SendError> {
        // The rendered messages are held in the render budget until the commit.
        let ((prepared, queued), _room) = self
            .render_held(plan.recipients.len(), |room| {
                self.prepare_send(project, plan, None, room)
            })
            .await?;
        let idempotency = idempotency.map(|i| OwnedResponse {
            key: i.key.to_string(),
            endpoint: i.endpoint,
            request_hash: i.request_hash.to_string(),
            status: 200,
            response: (i.respond)(&queued),
        });
        // A send to one recipient shares a transaction with the other writes waiting then
        // (`Store::commit_send_grouped`); a send to several is written alone.
        let wrote = self
            .store
            .commit_send_grouped(GroupedSend {
                project: project.id.clone(),
                send: prepared,
                idempotency,
            })
            .await?;
        Ok(wrote.then_some(queued))
    }

    /// Plans each recipient's contact from its stored state and renders, tracks and builds its
    /// email (on the CPU pool), without writing anything: the writes are for
    /// [`Store::commit_send`], or for the commit of a workflow round (the send of a
    /// `SEND_EMAIL` step, written in the same transaction as its step run). Refused while the
    /// project's sending is suspended, as read with `project`. Each rendered message is counted
    /// into `room`, which the caller holds until its commit ([`Sending::render_held`]); the
    /// rendering stops at the first that does not fit.
    ///
    /// `known`: a recipient's contact the caller has read already (not read again; see
    /// [`KnownContact`]).
    pub async fn prepare_send(
        &self,
        project: &Project,
        plan: &SendPlan,
        known: Option<KnownContact<'_>>,
        room: RenderRoom,
    ) -> Result<(PreparedSend, Vec<QueuedEmail>), SendError> {
        if let Some(reason) = &project.sending_suspended {
            return Err(SendError::Suspended(reason.clone()));
        }
        let project_id: &ProjectId = &project.id;
        let known_address = known.as_ref().map(|k| k.stored.email.as_str());
        let addresses: Vec<EmailAddress> = plan
            .recipients
            .iter()
            .filter(|r| Some(r.email.as_str()) != known_address)
            .map(|r| r.email.clone())
            .collect();
        let mut current: HashMap<String, Contact> = if addresses.is_empty() {
            HashMap::new()
        } else {
            self.store
                .contacts_with_emails(project_id, &addresses)
                .await?
                .into_iter()
                .map(|c| (c.email.as_str().to_string(), c))
                .collect()
        };
        if let Some(k) = &known {
            current.insert(k.stored.email.as_str().to_string(), k.stored.clone());
        }
        // One plan per distinct address; a repeated recipient gets one more email to the same
        // contact, as the first of its plans leaves it.
        let mut contacts: Vec<Plan> = Vec::new();
        let mut planned: HashMap<String, Contact> = HashMap::new();
        let mut topic_changes = Vec::new();
        for to in &plan.recipients {
            if planned.contains_key(to.email.as_str()) {
                continue;
            }
            let upsert = ContactUpsert {
                email: to.email.clone(),
                subscribed: plan.subscribed,
                subscribed_default: false,
                resubscribe: true,
                data: plan.data.clone(),
                topics: plan.topics.clone(),
            };
            let p = plan_upsert(project_id, &upsert, current.remove(to.email.as_str()));
            if p.changes() {
                for change in topic::changes(p.based_on().map(|c| &c.topics), &plan.topics) {
                    topic_changes.push((p.contact().id.clone(), change));
                }
            }
            // Rendered for the known contact as the caller's writes will leave it, when the send
            // itself keeps it as stored (a workflow's send always does).
            let rendered = match (&known, &p) {
                (Some(k), Plan::Keep(c)) if c.id == k.stored.id => k.now.clone(),
                _ => p.contact().clone(),
            };
            planned.insert(to.email.as_str().to_string(), rendered);
            contacts.push(p);
        }
        // One copy of the request for the blocking tasks, shared by every recipient's.
        let shared = Arc::new((project.clone(), plan.clone()));
        // The attachments are stored once for every recipient.
        let content = if plan.attachments.is_empty() {
            None
        } else {
            let job = shared.clone();
            let encoded = self
                .cpu
                .run(move || encode_attachments(&job.1.attachments))
                .await;
            Some(EmailContent {
                id: EmailContentId::generate().into_string(),
                attachments: encoded,
            })
        };
        let content_id = content.as_ref().map(|c| c.id.clone());
        // Rendered in turns on one lane of the pool, as one request's work.
        let recipients: Vec<(Contact, Mailbox)> = plan
            .recipients
            .iter()
            .map(|to| (planned[to.email.as_str()].clone(), to.clone()))
            .collect();
        // One recipient's small email is built here rather than sent to the pool and back.
        let inline = match recipients.as_slice() {
            [recipient] => self
                .signers
                .build_email_inline((project, plan), recipient, content_id.as_deref())
                .map(|email| held(&room, email)),
            _ => None,
        };
        let built = match inline {
            Some(email) => recipients
                .into_iter()
                .map(|(c, _)| c)
                .zip([email])
                .collect(),
            None => {
                let (signers, job, shared_id) =
                    (self.signers.clone(), shared.clone(), content_id.clone());
                self.cpu
                    .map(1, TURN, recipients, move |(c, to): (Contact, Mailbox)| {
                        if room.is_short() {
                            return (c, Err(RenderBudgetError::NoRoom.into()));
                        }
                        let email =
                            signers.build_email(&job.0, &job.1, &c, &to, shared_id.as_deref());
                        (c, held(&room, email))
                    })
                    .await
            }
        };
        let mut queued = Vec::with_capacity(plan.recipients.len());
        let mut emails = Vec::with_capacity(plan.recipients.len());
        for (contact, email) in built {
            let email = email?;
            queued.push(QueuedEmail {
                contact,
                email_id: email.id.clone(),
                suppressed: email.suppressed.is_some(),
            });
            emails.push(email);
        }
        let prepared = PreparedSend {
            contacts,
            field_types: field_types(&plan.data.set)
                .into_iter()
                .map(|(k, t)| (k.to_string(), t))
                .collect(),
            source: SubscriptionSource::Send,
            topic_changes,
            content,
            emails,
        };
        Ok((prepared, queued))
    }
}

/// A rendered email counted into the render budget's `room`: what it holds until its commit
/// (its draft, subject and links); refused when the room has none for it.
fn held(room: &RenderRoom, email: Result<NewEmail, SendError>) -> Result<NewEmail, SendError> {
    let email = email?;
    let bytes = email.draft.as_ref().map_or(0, String::len)
        + email.subject.len()
        + email.links.iter().map(String::len).sum::<usize>();
    room.take(bytes)?;
    Ok(email)
}

/// A contact's links in an email of `plan`: the unsubscribe link leaves the plan's topic only
/// when it has one.
fn contact_urls(links: &LinkSigner, plan: &SendPlan, contact: &Contact) -> ContactUrls {
    links.contact_urls_about(
        contact.id.as_str(),
        plan.topic.as_ref().map(|t| t.id.as_str()),
    )
}

/// A recipient of one email: the email's id, its contact, its address, its contact's links and
/// the email's "view in browser" URL.
struct Recipient<'a> {
    id: EmailId,
    contact: &'a Contact,
    to: &'a Mailbox,
    urls: ContactUrls,
    view: String,
}

impl Signers {
    /// A new email to `contact` at `to`, and the variables it renders with: the contact's
    /// ([`variables`]) and the email's `viewInBrowserUrl` (the signed page of its new id).
    fn recipient<'a>(
        &self,
        plan: &SendPlan,
        contact: &'a Contact,
        to: &'a Mailbox,
    ) -> (Recipient<'a>, Value) {
        let id = EmailId::generate();
        let urls = contact_urls(&self.links, plan, contact);
        let mut vars = variables(contact, &plan.data.transient, &urls);
        let view = self.links.view_url(id.as_str());
        if let Value::Object(vars) = &mut vars {
            vars.insert("viewInBrowserUrl".into(), Value::String(view.clone()));
        }
        let email = Recipient {
            id,
            contact,
            to,
            urls,
            view,
        };
        (email, vars)
    }

    /// Renders and tracks one recipient's email into the draft its delivery builds and signs;
    /// renders only, and records why, when it is marketing mail to an unsubscribed contact
    /// (never sent). `content` names the request's stored attachments.
    fn build_email(
        &self,
        project: &Project,
        plan: &SendPlan,
        contact: &Contact,
        to: &Mailbox,
        content: Option<&str>,
    ) -> Result<NewEmail, SendError> {
        let (email, vars) = self.recipient(plan, contact, to);
        let rendered = plan.content_for(contact).render(&vars)?;
        self.finish_email(project, plan, email, rendered, content)
    }

    /// [`Signers::build_email`] where it is asked for, on an async worker, when the work is
    /// small by construction (`services::cpu`): a template of at most [`INLINE_SOURCE_BYTES`],
    /// data of at most [`INLINE_VARIABLE_BYTES`], a rendering within [`INLINE_RENDER`].
    /// `None` when the email is not that small: build it on the CPU pool.
    fn build_email_inline(
        &self,
        (project, plan): (&Project, &SendPlan),
        (contact, to): &(Contact, Mailbox),
        content: Option<&str>,
    ) -> Option<Result<NewEmail, SendError>> {
        let content_of = plan.content_for(contact);
        if content_of.source_bytes() > INLINE_SOURCE_BYTES {
            return None;
        }
        let data = contact.data.iter().chain(&plan.data.transient);
        if !json_size_within(data, INLINE_VARIABLE_BYTES) {
            return None;
        }
        let (email, vars) = self.recipient(plan, contact, to);
        let rendered = match content_of.render_within(&vars, INLINE_RENDER) {
            Ok(rendered) => rendered,
            Err(RenderFailure::OverLimits(_)) => return None,
            Err(RenderFailure::Failed(e)) => return Some(Err(e.into())),
        };
        Some(self.finish_email(project, plan, email, rendered, content))
    }

    /// The rest of [`Signers::build_email`] once the content is rendered: tracking, the draft.
    /// Linear in the rendered content.
    fn finish_email(
        &self,
        project: &Project,
        plan: &SendPlan,
        Recipient {
            id,
            contact,
            to,
            urls,
            view,
        }: Recipient<'_>,
        rendered: Rendered,
        content: Option<&str>,
    ) -> Result<NewEmail, SendError> {
        let links = &self.links;
        let Rendered {
            subject,
            html,
            text,
        } = rendered;
        let kind = if plan.marketing {
            "marketing"
        } else {
            "transactional"
        };
        let refused = if !plan.marketing {
            None
        } else if !contact.subscribed {
            Some(UNSUBSCRIBED_REASON)
        } else if plan
            .topic
            .as_ref()
            .is_some_and(|t| !t.subscribed(&contact.topics))
        {
            Some(NOT_IN_TOPIC_REASON)
        } else {
            None
        };
        if let Some(reason) = refused {
            return Ok(NewEmail {
                id: id.clone(),
                contact_id: contact.id.clone(),
                template_id: plan.template_id.clone(),
                kind,
                from_address: plan.from.email.to_string(),
                to_address: to.email.to_string(),
                subject,
                message_id: format!("{id}@{}", plan.from.email.domain()),
                envelope_from: plan.from.email.to_string(),
                signed_by: None,
                links: Vec::new(),
                draft: None,
                content_id: None,
                suppressed: Some(reason.to_string()),
            });
        }
        // Kept for the "view in browser" page when the content links to it.
        let viewable = html.contains(&view);
        let keep = [
            urls.unsubscribe.as_str(),
            urls.subscribe.as_str(),
            urls.manage.as_str(),
            view.as_str(),
        ];
        let (mut html, tracked) = if project.track_clicks {
            tracking::rewrite_links(&html, &keep, |i| links.click_url(id.as_str(), i))
        } else {
            (html, Vec::new())
        };
        if project.track_opens {
            html = tracking::add_open_pixel(&html, &links.open_url(id.as_str()));
        }
        let (domain, signing) = match &plan.sender {
            Sender::Verified(s) => (s.name.clone(), Some(s)),
            Sender::Unverified => (plan.from.email.domain().to_string(), None),
        };
        let message_id = format!("{id}@{domain}");
        let envelope_from = match signing {
            Some(s) => format!("bounces+{id}@bounces.{}", s.name),
            None => plan.from.email.to_string(),
        };
        let draft = MessageDraft {
            from_name: plan.from.name.clone(),
            from: plan.from.email.to_string(),
            to_name: to.name.clone(),
            to: to.email.to_string(),
            reply_to: plan.reply_to.as_ref().map(|r| r.to_string()),
            subject: subject.clone(),
            html,
            text,
            message_id: message_id.clone(),
            headers: plan.headers.clone(),
            list_unsubscribe: plan.marketing.then(|| urls.unsubscribe.clone()),
            dkim_domain: signing.map(|s| s.name.clone()),
            view: viewable,
        };
        let attachment_bytes: usize = plan.attachments.iter().map(|a| a.content.len()).sum();
        let size = draft.estimated_size(attachment_bytes);
        if size > MAX_MESSAGE_BYTES {
            return Err(SendError::TooLarge {
                to: to.email.to_string(),
                size,
            });
        }
        Ok(NewEmail {
            id,
            contact_id: contact.id.clone(),
            template_id: plan.template_id.clone(),
            kind,
            from_address: plan.from.email.to_string(),
            to_address: to.email.to_string(),
            subject,
            message_id,
            envelope_from,
            signed_by: signing.map(|s| s.name.clone()),
            links: tracked,
            draft: Some(serde_json::to_string(&draft).map_err(|e| {
                SendError::Store(StoreError::Corrupt(format!(
                    "a draft could not be stored: {e}"
                )))
            })?),
            content_id: content.map(str::to_string),
            suppressed: None,
        })
    }
}

/// Builds and signs a draft's MIME message (at hand-off, on the CPU pool).
fn assemble(
    draft: &MessageDraft,
    attachments: &[Attachment],
    signing: Option<&SigningDomain>,
    dkim: &DkimSigner,
) -> Result<Vec<u8>, String> {
    let (from, to, reply_to) = (
        draft.from_mailbox(),
        draft.to_mailbox(),
        draft.reply_to_address(),
    );
    let outgoing = Outgoing {
        from: &from,
        to: &to,
        reply_to: reply_to.as_ref(),
        subject: &draft.subject,
        html: &draft.html,
        text: &draft.text,
        message_id: &draft.message_id,
        headers: &draft.headers,
        attachments,
        list_unsubscribe: draft.list_unsubscribe.as_deref(),
    };
    let mut raw = mime::build(&outgoing)
        .map_err(|e| e.to_string())?
        .formatted();
    if let Some(s) = signing {
        let headers = mime::signed_header_names(&outgoing);
        dkim.sign(
            &mut raw,
            &s.name,
            &s.selector,
            DkimKey::RsaPem(&s.private_key),
            &headers,
        )
        .map_err(|e| e.to_string())?;
        if let Some(ed) = &s.ed25519 {
            dkim.sign(
                &mut raw,
                &s.name,
                &ed.selector,
                DkimKey::Ed25519Pkcs8(&ed.private_key),
                &headers,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    if raw.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "the message is {} bytes; a message may be at most {MAX_MESSAGE_BYTES}",
            raw.len()
        ));
    }
    Ok(raw)
}

/// A message of a batch ready to be built: what its build reads, and its room in the memory
/// budget.
struct ToAssemble {
    draft: MessageDraft,
    attachments: Option<String>,
    signing: Option<Arc<SigningDomain>>,
    room: tokio::sync::OwnedSemaphorePermit,
}

impl Sending {
    /// Reads what one message of a batch needs to be built, after taking its room in the memory
    /// budget (waiting for it when `wait`).
    async fn before_build(
        &self,
        project_id: &str,
        to_build: ToBuild,
        wait: bool,
        memo: &BatchMemo,
    ) -> Result<ToAssemble, BuildError> {
        let ToBuild { draft, content_id } = to_build;
        // Room in the memory budget first, before anything large is read.
        let content_bytes = match &content_id {
            Some(id) => self
                .store
                .email_content_size(id)
                .await
                .map_err(|e| BuildError::Retry(e.to_string()))?,
            None => 0,
        };
        let kb = (draft.len() as u64 + content_bytes).saturating_mul(8) / 1024 + 1;
        let kb = u32::try_from(kb)
            .unwrap_or(u32::MAX)
            .min(self.hand_off_room_kb);
        let room = if wait {
            self.hand_off_room
                .clone()
                .acquire_many_owned(kb)
                .await
                .map_err(|e| BuildError::Retry(e.to_string()))?
        } else {
            self.hand_off_room
                .clone()
                .try_acquire_many_owned(kb)
                .map_err(|_| BuildError::NoRoom)?
        };
        let draft: MessageDraft = serde_json::from_str(&draft)
            .map_err(|e| BuildError::Permanent(format!("the stored draft is unreadable: {e}")))?;
        let attachments = match content_id {
            Some(id) => Some(
                self.store
                    .email_content(&id)
                    .await
                    .map_err(|e| BuildError::Retry(e.to_string()))?
                    .ok_or_else(|| {
                        BuildError::Permanent("the email's attachments are gone".into())
                    })?,
            ),
            None => None,
        };
        let signing = match &draft.dkim_domain {
            Some(name) => {
                let project = ProjectId::from_trusted(project_id.to_string());
                let domain = memo
                    .signing(name, self.store.signing_domain(&project, name))
                    .await
                    .map_err(|e| BuildError::Retry(e.to_string()))?;
                Some(domain.ok_or_else(|| {
                    BuildError::Permanent(format!(
                        "the sending domain {name} is no longer verified; the email was not \
                         sent unsigned"
                    ))
                })?)
            }
            None => None,
        };
        Ok(ToAssemble {
            draft,
            attachments,
            signing,
            room,
        })
    }
}

impl MessageBuilder for Sending {
    fn build_batch<'a>(
        &'a self,
        project_id: &'a str,
        drafts: Vec<ToBuild>,
    ) -> BoxFuture<'a, Vec<Result<Built, BuildError>>> {
        Box::pin(async move {
            let memo = BatchMemo::default();
            let mut drafts = drafts.into_iter();
            let mut read: Vec<Result<ToAssemble, BuildError>> = Vec::new();
            if let Some(first) = drafts.next() {
                read.push(self.before_build(project_id, first, true, &memo).await);
            }
            let rest = drafts.map(|d| self.before_build(project_id, d, false, &memo));
            read.extend(futures::future::join_all(rest).await);

            // The MIME building and signing over as many lanes as the pool has slots, each lane
            // in one task: the hand-off pool serves deliveries alone and a batch is bounded, so
            // first come first built (turns would interleave the batches and delay them all).
            let dkim = self.signers.dkim.clone();
            self.hand_off_cpu
                .map(
                    self.hand_off_cpu.width(),
                    Duration::MAX,
                    read,
                    move |read: Result<ToAssemble, BuildError>| {
                        let a = read?;
                        let raw = match &a.attachments {
                            Some(stored) => decode_attachments(stored),
                            None => Ok(Vec::new()),
                        }
                        .and_then(|attachments| {
                            assemble(&a.draft, &attachments, a.signing.as_deref(), &dkim)
                        })
                        .map_err(BuildError::Permanent)?;
                        Ok(Built {
                            raw,
                            room: Some(a.room),
                        })
                    },
                )
                .await
        })
    }
}

/// An `Idempotency-Key` to store with the emails, and how to build the response it replays.
pub struct Idempotency<'a> {
    /// The caller's key.
    pub key: &'a str,
    /// The endpoint it was used on.
    pub endpoint: &'static str,
    /// Hash of the request.
    pub request_hash: &'a str,
    /// The response for the queued emails.
    pub respond: &'a (dyn Fn(&[QueuedEmail]) -> Value + Sync),
}
