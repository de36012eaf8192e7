//! Sending campaigns: the three jobs that take a campaign from `send` to `SENT`, and test sends.
//!
//! - `campaigns.send` (queued by `POST /campaigns/:id/send`, for now or for `scheduledAt`):
//!   starts a scheduled campaign whose time has come, checks its sender, then snapshots its
//!   audience chunk by chunk ([`Store::snapshot_chunk`]); each chunk queues its own batch job,
//!   so delivery starts while the snapshot goes on. The last step queues the finish job.
//! - `campaigns.batch`: renders the batch's pending recipients in groups of [`GROUP`] on the CPU
//!   pool and writes each group's emails (due for delivery) with their ledger rows in one
//!   transaction ([`Store::commit_campaign_batch`]). Delivery is then the same queue as
//!   `/v1/send`'s (`jobs::deliver`): the same throttle, transport and retries. A group's
//!   rendered emails are held in the render budget until their commit
//!   (`services::render_budget`): the recipients that find no room stay pending for the next
//!   group, which first waits for room (the job is postponed when none comes in time), so a
//!   campaign waits for room rather than fails.
//! - `campaigns.finish`: marks the campaign `SENT` once the snapshot is done, no recipient is
//!   pending and no email of it waits for the transport; until then it looks again every
//!   [`FINISH_POLL_MS`].
//! - `campaigns.ab_winner` (an A/B test's): chooses the winner after the test's duration and
//!   queues the batches of the rest of the audience and the finish job (`ab.rs`, which also
//!   documents sends at each contact's local time).
//!
//! Crash safety: every step is a transaction guarded by the state it read (the checkpoint, a
//! ledger row being `pending`), so a job resumed after a crash, or run twice after a lost
//! lease, continues where the last commit left it and never mails a recipient twice (except the
//! delivery window `jobs::deliver` documents). Cancel is seen by the next group of each batch.
//!
//! Pause (`Store::pause_campaign`) is seen the same way: each job ends on `PAUSED` and leaves
//! its ledger rows pending (never `cancelled`), and the resume (`Store::resume_campaign`)
//! queues the jobs that go on from them, so a pause, like a crash, only moves when a
//! recipient is mailed, never whether or how often.
//!
//! [`Store::snapshot_chunk`]: crate::store::Store::snapshot_chunk
//! [`Store::commit_campaign_batch`]: crate::store::Store::commit_campaign_batch

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::domain::campaign::CampaignStatus;
use crate::domain::contact::Contact;
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, EmailId};
use crate::domain::send::Mailbox;
use crate::domain::time::now_ms;
use crate::jobs::{JobContext, JobError, JobHandler, JobQueue};
use crate::services::render_budget::{RENDER_WAIT, RenderBudgetError};
use crate::services::sending::{SendError, SendPlan, Sending};
use crate::services::sending_domains::{Sender, SenderError, SendingDomains};
use crate::store::campaigns::{
    BATCH_KIND, BatchCommit, BatchPayload, Campaign, FINISH_KIND, FinishPayload, SEND_KIND,
    SendPayload, SnapshotStep, WINNER_KIND, recipient,
};
use crate::store::{Store, StoreError};

mod ab;

use ab::PlanContent;

/// Recipients rendered and written per transaction of a batch.
pub const GROUP: usize = 200;
/// How often the finish job looks whether every email of a campaign is final.
pub const FINISH_POLL_MS: i64 = 2000;
/// How long a batch waits before it looks again for room in the render budget, when none came
/// within [`RENDER_WAIT`].
const NO_ROOM_POLL_MS: i64 = 1000;

/// Why a campaign cannot be sent (or tested) now.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The sender's domain is not verified.
    #[error(transparent)]
    Sender(#[from] SenderError),
    /// The content could not be rendered or built.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Sends campaigns; cheap to clone.
#[derive(Clone)]
pub struct Campaigns {
    store: Store,
    sending: Arc<Sending>,
    sending_domains: Arc<SendingDomains>,
    jobs: JobQueue,
}

impl Campaigns {
    /// The campaign sender over the services it shares with `/v1/send`.
    pub fn new(
        store: Store,
        sending: Arc<Sending>,
        sending_domains: Arc<SendingDomains>,
        jobs: JobQueue,
    ) -> Campaigns {
        Campaigns {
            store,
            sending,
            sending_domains,
            jobs,
        }
    }

    /// The send plan of a campaign: its sender, `content` (a subject, a body and a sender's
    /// name: its own, or an A/B test variant's; with its languages) compiled on the CPU pool, as
    /// marketing mail.
    async fn plan(
        &self,
        c: &Campaign,
        sender: Sender,
        content: PlanContent,
    ) -> Result<SendPlan, CampaignError> {
        let PlanContent {
            subject,
            body,
            from_name,
            locales,
        } = content;
        let content = self
            .sending
            .compile(&c.project_id, subject, body)
            .await
            .map_err(SendError::Render)?;
        let localized = self
            .sending
            .compile_variants(&c.project_id, &locales)
            .await
            .map_err(|(_, e)| SendError::Render(e))?;
        // A topic named by a campaign that is not finished cannot be deleted
        // (`Store::delete_topic`), so a send finds it; only a test send of a finished campaign
        // may find it gone, and then goes as mail about no topic.
        let topic = match &c.content.topic {
            Some(id) => match self.store.topic(&c.project_id, id).await {
                Ok(t) => Some(t),
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        Ok(SendPlan {
            recipients: Vec::new(),
            from: Mailbox {
                name: from_name,
                email: c.content.from_email.clone(),
            },
            sender,
            reply_to: c.content.reply_to.clone(),
            content,
            localized,
            template_id: None,
            marketing: true,
            subscribed: None,
            data: DataPatch::default(),
            topics: Vec::new(),
            topic,
            headers: Vec::new(),
            attachments: Vec::new(),
        })
    }

    /// Sends a test of a campaign to one address: its content as the contact with that address
    /// sees it (or, for an address without a contact, with only the address's variables), the
    /// subject marked `[Test]`, through the same queue and transport; never counted in stats.
    pub async fn send_test(
        &self,
        c: &Campaign,
        to: &EmailAddress,
    ) -> Result<EmailId, CampaignError> {
        let sender = self
            .sending_domains
            .authorize_sender(&c.project_id, &c.content.from_email)
            .await?;
        let plan = Arc::new(
            self.plan(c, sender, PlanContent::own(c).marked_test())
                .await?,
        );
        let project = self.store.project(&c.project_id).await?;
        let existing = self
            .store
            .contacts_with_emails(&c.project_id, std::slice::from_ref(to))
            .await?
            .into_iter()
            .next();
        let known = existing.as_ref().map(|c| c.id.clone());
        let now = now_ms();
        let mut contact = existing.unwrap_or_else(|| Contact {
            id: ContactId::generate(),
            project_id: c.project_id.clone(),
            email: to.clone(),
            subscribed: true,
            data: Default::default(),
            version: 0,
            created_at: now,
            updated_at: now,
            topics: Default::default(),
        });
        // A test goes to the person testing whatever their subscription.
        contact.subscribed = true;
        let (project, plan, contact) = (&project, &plan, &contact);
        let (email, _room) = self
            .sending
            .render_held(1, |room| async move {
                let built = self
                    .sending
                    .build_for_contacts(project, plan, vec![contact.clone()], &room)
                    .await;
                let (_, email) = built.into_iter().next().ok_or_else(|| {
                    SendError::from(StoreError::Corrupt("a test send built no email".into()))
                })?;
                email
            })
            .await?;
        self.store
            .insert_test_email(&c.project_id, &email, known.as_ref())
            .await?;
        self.jobs.wake_deliveries();
        Ok(email.id)
    }

    /// Checks a sending campaign's sender; when its domain is not verified any more, or the
    /// project's sending is suspended, the campaign fails with the reason and `None` is the
    /// answer.
    async fn sender_or_fail(&self, c: &Campaign) -> Result<Option<Sender>, JobError> {
        if let Some(suspension) = self.store.active_suspension(&c.project_id).await? {
            tracing::warn!(campaign_id = %c.id, reason = %suspension.reason, "campaign failed");
            self.store
                .fail_campaign(c.id.as_str(), &suspension.reason)
                .await?;
            return Ok(None);
        }
        match self
            .sending_domains
            .authorize_sender(&c.project_id, &c.content.from_email)
            .await
        {
            Ok(sender) => Ok(Some(sender)),
            Err(SenderError::NotVerified(domain)) => {
                let reason = format!(
                    "the sender's domain {domain} is not verified for this project any more; \
                     verify it and send a copy of the campaign (POST /campaigns/:id/duplicate)"
                );
                tracing::warn!(campaign_id = %c.id, %reason, "campaign failed");
                self.store.fail_campaign(c.id.as_str(), &reason).await?;
                Ok(None)
            }
            Err(SenderError::Store(e)) => Err(e.into()),
        }
    }

    /// `campaigns.send`: start (when scheduled) and snapshot.
    async fn run_send(&self, ctx: JobContext) -> Result<(), JobError> {
        let lease = &ctx.lease;
        let payload: SendPayload = ctx.payload()?;
        let max_attempts = self.jobs.config().max_attempts;
        let done = |why: &str| json!({ "skipped": why });
        let Some(mut c) = self.store.campaign_by_id(&payload.campaign_id).await? else {
            ctx.store
                .complete_job(lease, &done("the campaign was deleted"))
                .await?;
            return Ok(());
        };
        if c.status == CampaignStatus::Scheduled {
            let started = match payload.scheduled_at {
                Some(at) if c.scheduled_at == Some(at) => {
                    self.store
                        .start_scheduled_campaign(c.id.as_str(), at)
                        .await?
                }
                _ => false,
            };
            if !started {
                ctx.store
                    .complete_job(lease, &done("the campaign was rescheduled"))
                    .await?;
                return Ok(());
            }
            c = match self.store.campaign_by_id(c.id.as_str()).await? {
                Some(c) => c,
                None => return Ok(()),
            };
        }
        if c.status != CampaignStatus::Sending {
            let why = format!("the campaign is {}", c.status.as_str());
            ctx.store.complete_job(lease, &done(&why)).await?;
            return Ok(());
        }
        if self.sender_or_fail(&c).await?.is_none() {
            ctx.store
                .complete_job(lease, &done("the sender is not verified"))
                .await?;
            return Ok(());
        }
        loop {
            match self.store.snapshot_chunk(&c, lease, max_attempts).await {
                Ok(SnapshotStep::Took(_)) => {
                    self.jobs.wake();
                    c = match self.store.campaign_by_id(c.id.as_str()).await? {
                        Some(c) if c.status == CampaignStatus::Sending => c,
                        _ => {
                            ctx.store
                                .complete_job(lease, &done("the campaign stopped"))
                                .await?;
                            return Ok(());
                        }
                    };
                }
                Ok(SnapshotStep::Done) => {
                    self.jobs.wake();
                    return Ok(());
                }
                Ok(SnapshotStep::Stopped) => {
                    // Cancelled, failed, or another run is ahead: nothing more to do here.
                    ctx.store
                        .complete_job(lease, &done("the campaign stopped"))
                        .await?;
                    return Ok(());
                }
                Err(StoreError::NotFound) => {
                    let reason = "the campaign's segment was deleted; choose another audience \
                                  and send a copy of the campaign";
                    self.store.fail_campaign(c.id.as_str(), reason).await?;
                    ctx.store.complete_job(lease, &done(reason)).await?;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `campaigns.batch`: render and queue one batch's pending recipients.
    async fn run_batch(&self, ctx: JobContext) -> Result<(), JobError> {
        let lease = &ctx.lease;
        let payload: BatchPayload = ctx.payload()?;
        let Some(c) = self.store.campaign_by_id(&payload.campaign_id).await? else {
            ctx.store
                .complete_job(lease, &json!({ "skipped": "the campaign was deleted" }))
                .await?;
            return Ok(());
        };
        let mut written = 0usize;
        let stopped =
            |written: usize| json!({ "batch": payload.batch, "written": written, "stopped": true });
        // Paused: the rows stay pending; the resume queues this batch again.
        let paused =
            |written: usize| json!({ "batch": payload.batch, "written": written, "paused": true });
        if c.status == CampaignStatus::Paused {
            ctx.store.complete_job(lease, &paused(0)).await?;
            return Ok(());
        }
        if c.status != CampaignStatus::Sending {
            self.store
                .cancel_pending_recipients(&c.id, payload.batch)
                .await?;
            ctx.store.complete_job(lease, &stopped(0)).await?;
            return Ok(());
        }
        let Some(sender) = self.sender_or_fail(&c).await? else {
            self.store
                .cancel_pending_recipients(&c.id, payload.batch)
                .await?;
            ctx.store.complete_job(lease, &stopped(0)).await?;
            return Ok(());
        };
        let plans = match self.plans(&c, sender).await {
            Ok(plans) => plans,
            Err(e) => {
                let reason = format!("the campaign's content cannot be rendered: {e}");
                self.store.fail_campaign(c.id.as_str(), &reason).await?;
                ctx.store.complete_job(lease, &stopped(0)).await?;
                return Ok(());
            }
        };
        let project = self.store.project(&c.project_id).await?;
        let budget = self.sending.render_budget();
        // While an A/B test waits for its winner, only its test group is mailed.
        let tested_only = c.content.ab.is_some() && c.ab_progress.winner.is_none();
        // The room the next group waits for, when the last one ran short of it.
        let mut wait_for_kb = None;
        loop {
            let pending = self
                .store
                .pending_recipients(&c.id, payload.batch, GROUP, tested_only)
                .await?;
            if pending.is_empty() {
                break;
            }
            // Held (with nothing else) until the group's commit.
            let room = match wait_for_kb.take() {
                None => budget.holding(),
                Some(kb) => {
                    let deadline = tokio::time::Instant::now() + RENDER_WAIT;
                    match budget.reserve(kb, deadline).await {
                        Ok(room) => room,
                        Err(_) => {
                            // Another look later, without holding a job slot meanwhile.
                            ctx.store
                                .postpone_job(lease, now_ms() + NO_ROOM_POLL_MS)
                                .await?;
                            return Ok(());
                        }
                    }
                }
            };
            let mut closed: Vec<(ContactId, &'static str)> = Vec::new();
            let (groups, local_due) = ab::by_content(&c, pending, plans.len(), &mut closed);
            let mut built_all = Vec::new();
            for (plan, contacts) in plans.iter().zip(groups) {
                if contacts.is_empty() {
                    continue;
                }
                let built = self
                    .sending
                    .build_for_contacts(&project, plan, contacts, &room)
                    .await;
                built_all.extend(built);
            }
            let mut emails = Vec::with_capacity(built_all.len());
            for (contact, built) in built_all {
                match built {
                    Ok(email) => emails.push(email),
                    // No room for it in the render budget now: pending, for the next group.
                    Err(SendError::RenderBudget(e @ RenderBudgetError::OverBudget { .. }))
                        if !e.message_over_budget() => {}
                    Err(SendError::RenderBudget(RenderBudgetError::NoRoom)) => {}
                    Err(e) => {
                        tracing::warn!(campaign_id = %c.id, contact_id = %contact.id, error = %e, "campaign email could not be built");
                        closed.push((contact.id, recipient::FAILED));
                    }
                }
            }
            if room.is_short() {
                wait_for_kb = Some(room.estimate(GROUP));
                if emails.is_empty() && closed.is_empty() {
                    continue;
                }
            }
            match self
                .store
                .commit_campaign_batch(&c.project_id, &c.id, &emails, &local_due, &closed)
                .await?
            {
                BatchCommit::Wrote(n) => {
                    written += n;
                    self.jobs.wake_deliveries();
                }
                BatchCommit::Paused => {
                    ctx.store.complete_job(lease, &paused(written)).await?;
                    return Ok(());
                }
                BatchCommit::Stopped => {
                    self.store
                        .cancel_pending_recipients(&c.id, payload.batch)
                        .await?;
                    ctx.store.complete_job(lease, &stopped(written)).await?;
                    return Ok(());
                }
            }
        }
        let result = json!({ "batch": payload.batch, "written": written });
        ctx.store.complete_job(lease, &result).await?;
        Ok(())
    }

    /// `campaigns.finish`: `SENT` once every email is final, else look again later.
    async fn run_finish(&self, ctx: JobContext) -> Result<(), JobError> {
        let lease = &ctx.lease;
        let payload: FinishPayload = ctx.payload()?;
        let c = self.store.campaign_by_id(&payload.campaign_id).await?;
        match c {
            Some(c) if c.status == CampaignStatus::Sending => {
                if self.store.finish_campaign_if_done(c.id.as_str()).await? {
                    tracing::info!(campaign_id = %c.id, recipients = c.recipient_count, "campaign sent");
                    ctx.store
                        .complete_job(lease, &json!({ "status": "SENT" }))
                        .await?;
                } else {
                    ctx.store
                        .postpone_job(lease, now_ms() + FINISH_POLL_MS)
                        .await?;
                }
            }
            Some(c) => {
                ctx.store
                    .complete_job(lease, &json!({ "status": c.status.as_str() }))
                    .await?;
            }
            None => {
                ctx.store.complete_job(lease, &Value::Null).await?;
            }
        }
        Ok(())
    }
}

/// Runs the campaign jobs.
pub struct CampaignJobs {
    /// The campaign sender.
    pub campaigns: Campaigns,
}

impl JobHandler for CampaignJobs {
    fn kinds(&self) -> &'static [&'static str] {
        &[SEND_KIND, BATCH_KIND, FINISH_KIND, WINNER_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let kind = ctx.job.kind.clone();
            match kind.as_str() {
                SEND_KIND => self.campaigns.run_send(ctx).await,
                BATCH_KIND => self.campaigns.run_batch(ctx).await,
                WINNER_KIND => self.campaigns.run_winner(ctx).await,
                _ => self.campaigns.run_finish(ctx).await,
            }
        })
    }
}
