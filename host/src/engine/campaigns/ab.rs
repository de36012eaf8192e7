//! A/B tests and sends at each contact's local time, in the campaign jobs.
//!
//! A batch renders with one plan per content: the campaign's own, or each variant's of its
//! A/B test. Until the winner is chosen a batch mails only its test group's rows (each with
//! the variant drawn for it at the snapshot); the rest of the audience stays pending. The
//! `campaigns.ab_winner` job, queued for the end of the test's duration when the snapshot is
//! done (and again by a resume while no winner is chosen), reads each variant's counts from the
//! emails of its test group, chooses the winner (`domain::campaign_ab::choose_winner`: the
//! highest rate, the first on a tie) and, in one transaction guarded by there being no winner
//! yet, records it and queues the batches that mail the rest with the winner's content, and the
//! finish job. Every step is a row, so any instance takes it on after a crash, and each
//! recipient still gets one email (the ledger row's move out of `pending`).
//!
//! A send at local time gives each email the due time of its contact's time zone
//! (`data.timezone`), so the shared delivery queue hands it off then; a pause holds it like any
//! other queued email.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::{CampaignError, Campaigns};
use crate::domain::campaign::{CampaignStatus, TEST_SUBJECT_PREFIX};
use crate::domain::campaign_ab::{choose_winner, contact_zone, local_due};
use crate::domain::contact::Contact;
use crate::domain::ids::ContactId;
use crate::domain::locale::LocaleVariants;
use crate::jobs::{JobContext, JobError};
use crate::services::sending::SendPlan;
use crate::services::sending_domains::Sender;
use crate::store::campaigns::{
    Campaign, PendingRecipient, WinnerPayload, recipient, winner_result,
};

/// What a plan renders: a subject, a body, the sender's name and the languages.
pub(super) struct PlanContent {
    pub subject: String,
    pub body: String,
    pub from_name: Option<String>,
    /// Subject and body by language: the campaign's own `localeVariants` (an A/B variant has
    /// none; a campaign cannot have both).
    pub locales: LocaleVariants,
}

impl PlanContent {
    /// The campaign's own content.
    pub(super) fn own(c: &Campaign) -> PlanContent {
        PlanContent {
            subject: c.content.subject.clone(),
            body: c.content.body.clone(),
            from_name: c.content.from_name.clone(),
            locales: c.content.locale_variants.clone(),
        }
    }

    /// The content of a test send: every subject, in every language, marked `[Test]`.
    pub(super) fn marked_test(mut self) -> PlanContent {
        self.subject.insert_str(0, TEST_SUBJECT_PREFIX);
        for v in self.locales.0.values_mut() {
            v.subject.insert_str(0, TEST_SUBJECT_PREFIX);
        }
        self
    }
}

/// A batch's pending recipients by the plan each is mailed with (its test variant, else the
/// winner, else the campaign's own content), with the due time of each at its local time
/// (a send at local time only); deleted contacts go to `closed` as skipped.
pub(super) fn by_content(
    c: &Campaign,
    pending: Vec<PendingRecipient>,
    plans: usize,
    closed: &mut Vec<(ContactId, &'static str)>,
) -> (Vec<Vec<Contact>>, HashMap<ContactId, i64>) {
    let mut groups: Vec<Vec<Contact>> = (0..plans).map(|_| Vec::new()).collect();
    let mut due = HashMap::new();
    for (id, contact, variant) in pending {
        let Some(contact) = contact else {
            closed.push((id, recipient::SKIPPED));
            continue;
        };
        if let Some(wall) = c.local_send_at {
            let zone = contact_zone(contact.data.get("timezone"));
            due.insert(contact.id.clone(), local_due(wall, zone));
        }
        let plan = variant.or(c.ab_progress.winner).unwrap_or(0);
        groups[plan.min(plans.saturating_sub(1))].push(contact);
    }
    (groups, due)
}

impl Campaigns {
    /// The plans a batch renders with, compiled once per batch: the campaign's own content,
    /// or each variant's of its A/B test in order (a variant without a sender's name has the
    /// campaign's).
    pub(super) async fn plans(
        &self,
        c: &Campaign,
        sender: Sender,
    ) -> Result<Vec<Arc<SendPlan>>, CampaignError> {
        let contents = match &c.content.ab {
            None => vec![PlanContent::own(c)],
            Some(test) => test
                .variants
                .iter()
                .map(|v| PlanContent {
                    subject: v.subject.clone(),
                    body: v.body.clone(),
                    from_name: v.from_name.clone().or_else(|| c.content.from_name.clone()),
                    locales: LocaleVariants::default(),
                })
                .collect(),
        };
        let mut plans = Vec::with_capacity(contents.len());
        for content in contents {
            plans.push(Arc::new(self.plan(c, sender.clone(), content).await?));
        }
        Ok(plans)
    }

    /// `campaigns.ab_winner`: chooses the winner and queues the rest's batches. A campaign not
    /// sending any more (a paused one is given the job again by its resume), or whose winner
    /// is chosen, ends the job.
    pub(super) async fn run_winner(&self, ctx: JobContext) -> Result<(), JobError> {
        let lease = &ctx.lease;
        let payload: WinnerPayload = ctx.payload()?;
        let skipped = |why: String| json!({ "skipped": why });
        let c = self.store.campaign_by_id(&payload.campaign_id).await?;
        let (c, test) = match c {
            Some(c) if c.status == CampaignStatus::Sending && c.ab_progress.winner.is_none() => {
                match c.content.ab.clone() {
                    Some(test) => (c, test),
                    None => {
                        let why = "the campaign has no A/B test".to_string();
                        ctx.store.complete_job(lease, &skipped(why)).await?;
                        return Ok(());
                    }
                }
            }
            Some(c) => {
                let why = match c.ab_progress.winner {
                    Some(w) => format!("the winner is variant {w} already"),
                    None => format!("the campaign is {}", c.status.as_str()),
                };
                ctx.store.complete_job(lease, &skipped(why)).await?;
                return Ok(());
            }
            None => {
                let why = "the campaign was deleted".to_string();
                ctx.store.complete_job(lease, &skipped(why)).await?;
                return Ok(());
            }
        };
        let tallies = self.store.ab_variant_tallies(&c).await?;
        let counts: Vec<_> = tallies.iter().map(|t| t.counts).collect();
        let winner = choose_winner(test.winner_metric, &counts);
        let result = winner_result(winner, &tallies);
        let max_attempts = self.jobs.config().max_attempts;
        if self
            .store
            .choose_ab_winner(&c, winner, lease, &result, max_attempts)
            .await?
        {
            tracing::info!(campaign_id = %c.id, winner, metric = test.winner_metric.as_str(), "A/B test winner chosen");
            self.jobs.wake();
        } else {
            // Paused, cancelled or decided meanwhile: nothing more for this job.
            let why = "the campaign moved while its winner was being chosen".to_string();
            ctx.store.complete_job(lease, &skipped(why)).await?;
        }
        Ok(())
    }
}
