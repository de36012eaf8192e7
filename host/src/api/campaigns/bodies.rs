//! The bodies of `/campaigns`: what the endpoints read (create and replace, send, test) and
//! answer (a campaign, a page, stats, an audience preview), with the statuses and audience
//! types as the API spells them.

use std::collections::BTreeMap;

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Enum, Object};
use serde::Deserialize;
use serde_json::Value;

use super::ab::{AbTestBody, AbWinnerMetric, CampaignVariant, VariantStats};
use crate::api::formats::{EmailText, OneOf};
use crate::api::templates::{LocaleVariant, locale_variant_bodies};
use crate::api::timestamp::Timestamp;
use crate::domain::campaign::{Audience, CampaignStatus, rate};
use crate::store::campaigns::{AudienceCounts, Campaign, CampaignCounts};

/// Where a campaign is in its life.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum CampaignState {
    /// Being written.
    Draft,
    /// Waiting for `scheduledAt`.
    Scheduled,
    /// Being sent.
    Sending,
    /// Paused (`POST /campaigns/:id/pause`): no new batch is taken and the emails not yet
    /// handed to the transport are held until `POST /campaigns/:id/resume`.
    Paused,
    /// Every recipient's email is final.
    Sent,
    /// Stopped; mail already handed to the transport stays sent.
    Cancelled,
    /// Could not proceed; `failureReason` says why.
    Failed,
}

impl From<CampaignStatus> for CampaignState {
    fn from(s: CampaignStatus) -> CampaignState {
        match s {
            CampaignStatus::Draft => CampaignState::Draft,
            CampaignStatus::Scheduled => CampaignState::Scheduled,
            CampaignStatus::Sending => CampaignState::Sending,
            CampaignStatus::Paused => CampaignState::Paused,
            CampaignStatus::Sent => CampaignState::Sent,
            CampaignStatus::Cancelled => CampaignState::Cancelled,
            CampaignStatus::Failed => CampaignState::Failed,
        }
    }
}

impl From<CampaignState> for CampaignStatus {
    fn from(s: CampaignState) -> CampaignStatus {
        match s {
            CampaignState::Draft => CampaignStatus::Draft,
            CampaignState::Scheduled => CampaignStatus::Scheduled,
            CampaignState::Sending => CampaignStatus::Sending,
            CampaignState::Paused => CampaignStatus::Paused,
            CampaignState::Sent => CampaignStatus::Sent,
            CampaignState::Cancelled => CampaignStatus::Cancelled,
            CampaignState::Failed => CampaignStatus::Failed,
        }
    }
}

/// Who a campaign goes to.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum AudienceType {
    /// Every subscribed contact of the project.
    All,
    /// The subscribed members of `segmentId`.
    Segment,
    /// The subscribed contacts `audienceFilter` selects.
    Filtered,
}

pub(super) fn audience_type(a: &Audience) -> AudienceType {
    match a {
        Audience::All => AudienceType::All,
        Audience::Segment(_) => AudienceType::Segment,
        Audience::Filtered(_) => AudienceType::Filtered,
    }
}

/// A campaign.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignBody {
    /// Its id (`cmp_…`).
    pub id: String,
    pub name: String,
    /// Null when none.
    #[oai(nullable)]
    pub description: Option<String>,
    /// The subject, a template rendered per recipient.
    pub subject: String,
    /// The HTML body, a template rendered per recipient.
    pub body: String,
    /// The sender address.
    pub from: EmailText,
    /// The sender's display name; null when none.
    #[oai(nullable)]
    pub from_name: Option<String>,
    /// The reply-to address; null when none.
    #[oai(nullable)]
    pub reply_to: Option<EmailText>,
    /// `ALL`, `SEGMENT` or `FILTERED`.
    pub audience_type: AudienceType,
    /// The audience's segment (`SEGMENT`); null otherwise.
    #[oai(nullable)]
    pub segment_id: Option<String>,
    /// The audience's filter (`FILTERED`); null otherwise.
    #[oai(nullable)]
    pub audience_filter: Option<Value>,
    /// `ALL`, `SEGMENT` or `FILTERED` (the audience type, as the create answer names it).
    #[oai(rename = "type")]
    pub campaign_type: AudienceType,
    pub status: CampaignState,
    /// When a scheduled send starts; null unless scheduled.
    #[oai(nullable)]
    pub scheduled_at: Option<Timestamp>,
    /// When sending started; null before.
    #[oai(nullable)]
    pub started_at: Option<Timestamp>,
    /// When it became `SENT`, `CANCELLED` or `FAILED`; null before.
    #[oai(nullable)]
    pub finished_at: Option<Timestamp>,
    /// Why it failed; null unless `FAILED`.
    #[oai(nullable)]
    pub failure_reason: Option<String>,
    /// Subject and body by language (BCP 47 tag), picked for each recipient's `data.locale`
    /// like a template's `variants`; `{}` when none.
    pub locale_variants: BTreeMap<String, LocaleVariant>,
    /// The topic it is about (`top_…`): only contacts subscribed to it (and globally
    /// subscribed) receive it, and its one-click unsubscribe leaves that topic only; null when
    /// none.
    #[oai(nullable)]
    pub topic_id: Option<String>,
    /// Recipients snapshotted so far (the final count once sending is done).
    pub recipient_count: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Its A/B test, with where it stands; null without one.
    #[oai(nullable)]
    pub ab_test: Option<AbTestBody>,
    /// A send at each contact's local time (`inContactTimeZone`): the date and time of
    /// `scheduledFor` as written in UTC, which each contact gets it at in its own time zone
    /// (`scheduledAt` is then the start, 14 hours earlier, when UTC+14 reaches it); null
    /// otherwise.
    #[oai(nullable)]
    pub local_scheduled_for: Option<Timestamp>,
}

impl From<Campaign> for CampaignBody {
    fn from(c: Campaign) -> CampaignBody {
        let ab_test = AbTestBody::of(&c);
        let local_scheduled_for = c.local_send_at.map(Timestamp);
        let content = c.content;
        let kind = audience_type(&content.audience);
        let (segment_id, audience_filter) = match content.audience {
            Audience::All => (None, None),
            Audience::Segment(s) => (Some(s.into_string()), None),
            Audience::Filtered(f) => (None, Some(f)),
        };
        CampaignBody {
            id: c.id.into_string(),
            name: content.name,
            description: content.description,
            subject: content.subject,
            body: content.body,
            from: EmailText(content.from_email.to_string()),
            from_name: content.from_name,
            reply_to: content.reply_to.map(|r| EmailText(r.to_string())),
            audience_type: kind,
            segment_id,
            audience_filter,
            campaign_type: kind,
            status: c.status.into(),
            scheduled_at: c.scheduled_at.map(Timestamp),
            started_at: c.started_at.map(Timestamp),
            finished_at: c.finished_at.map(Timestamp),
            failure_reason: c.failure_reason,
            locale_variants: locale_variant_bodies(content.locale_variants),
            topic_id: content.topic.map(|t| t.into_string()),
            recipient_count: c.recipient_count,
            created_at: Timestamp(c.created_at),
            updated_at: Timestamp(c.updated_at),
            ab_test,
            local_scheduled_for,
        }
    }
}

/// The summary the create answer wraps.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignSummary {
    pub id: String,
    pub name: String,
    pub subject: String,
    /// The audience type.
    #[oai(rename = "type")]
    pub campaign_type: AudienceType,
    /// `DRAFT`.
    pub status: CampaignState,
    /// Null until the campaign is scheduled.
    #[oai(nullable)]
    pub scheduled_at: Option<Timestamp>,
}

/// `{ success: true, data }`: the create answer.
#[derive(Object)]
pub struct CreatedCampaignBody {
    /// Always true.
    pub success: bool,
    pub data: CampaignSummary,
}

/// `POST /campaigns` and `PUT /campaigns/:id` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CampaignRequest {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    #[serde(default)]
    pub description: Option<String>,
    /// 1 to 998 characters on one line; may use variables.
    pub subject: String,
    /// HTML with variables; not empty.
    pub body: String,
    /// A sender address on a verified domain of the project.
    pub from: EmailText,
    /// The sender's display name.
    #[oai(nullable)]
    #[serde(default)]
    pub from_name: Option<String>,
    /// A reply-to address.
    #[oai(nullable)]
    #[serde(default)]
    pub reply_to: Option<EmailText>,
    /// `ALL`, `SEGMENT` or `FILTERED` (read in any case).
    pub audience_type: OneOf<AudienceType>,
    /// Required when `audienceType` is `SEGMENT`: a segment of the project.
    #[oai(nullable)]
    #[serde(default)]
    pub segment_id: Option<String>,
    /// Required when `audienceType` is `FILTERED`: a filter (the segment filter language).
    #[oai(nullable)]
    #[serde(default)]
    pub audience_filter: Option<Value>,
    /// Subject and body by language (`{ "fr": { "subject": …, "body": … } }`, at most 50),
    /// each recipient getting the one of its `data.locale` (`fr-CA` falls back to `fr`, then
    /// to `subject` and `body`). (A/B `variants` are another field.)
    #[oai(nullable)]
    #[serde(default)]
    pub locale_variants: Option<BTreeMap<String, LocaleVariant>>,
    /// An A/B test: 2 to 4 variants of the subject, body and sender's name. The test group
    /// (`testFraction` of the audience) is split evenly across them; after `testDuration` the
    /// winner by `winnerMetric` goes to the rest. The campaign's own `subject`, `body` and
    /// `fromName` are then only used by test sends. With it, `testFraction`, `winnerMetric` and
    /// `testDuration` are required.
    #[oai(nullable)]
    #[serde(default)]
    pub variants: Option<Vec<CampaignVariant>>,
    /// The share of the audience in the A/B test group, strictly between 0 and 1 (e.g. 0.2).
    #[oai(nullable)]
    #[serde(default)]
    pub test_fraction: Option<f64>,
    /// `OPEN_RATE` or `CLICK_RATE` (read in any case): what decides the A/B test's winner.
    #[oai(skip_serializing_if_is_none)]
    #[serde(default)]
    pub winner_metric: Option<OneOf<AbWinnerMetric>>,
    /// Seconds from the moment the A/B test group is taken until the winner is chosen, 1 to
    /// 2592000 (30 days).
    #[oai(nullable)]
    #[serde(default)]
    pub test_duration: Option<i64>,
    /// A topic of the project (`top_…`): only the audience's contacts subscribed to it receive
    /// the campaign, and its one-click unsubscribe leaves that topic only.
    #[oai(nullable)]
    #[serde(default)]
    pub topic_id: Option<String>,
}

/// `POST /campaigns/:id/send` body (optional).
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct SendCampaign {
    /// When to send; omitted or null sends now; a time in the past is 422.
    #[oai(nullable)]
    #[serde(default)]
    pub scheduled_for: Option<Timestamp>,
    /// True: each contact gets it at the date and time of `scheduledFor` (as written in UTC)
    /// in its own time zone (`data.timezone`, an IANA name such as `Europe/Paris`; UTC for a
    /// contact without a valid one). Needs `scheduledFor`; not with an A/B test (422).
    #[oai(nullable)]
    #[serde(default)]
    pub in_contact_time_zone: Option<bool>,
}

/// `POST /campaigns/:id/test` body.
#[derive(Object, Deserialize)]
pub struct TestCampaign {
    /// The address to send the test to.
    pub email: String,
}

/// What a test send queued.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TestSent {
    /// Always true.
    pub success: bool,
    /// The test email (see `GET /emails/:id`).
    pub email_id: String,
    /// Where it goes.
    pub to: String,
}

/// One page of campaigns.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignPage {
    /// Newest first.
    pub data: Vec<CampaignBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    pub has_more: bool,
    /// Matching campaigns in all (first page only; 0 on later pages).
    pub total: i64,
}

/// A campaign's counts: distinct emails, test sends excluded; a click also counts as an open;
/// rates are per email sent, between 0 and 1.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignStats {
    pub campaign_id: String,
    /// Contacts in the recipients ledger.
    pub recipients: i64,
    /// Emails handed to the transport.
    pub sent: i64,
    /// Emails the recipient's server accepted (as the transport reports it).
    pub delivered: i64,
    pub opened: i64,
    pub clicked: i64,
    pub bounced: i64,
    pub complained: i64,
    /// Recipients who unsubscribed after their email was sent.
    pub unsubscribed: i64,
    /// Emails never handed to the transport: the contact unsubscribed between the snapshot and
    /// the hand-off, or the campaign was cancelled first.
    pub suppressed: i64,
    /// Emails that could not be delivered.
    pub failed: i64,
    /// Emails still waiting for the transport.
    pub queued: i64,
    pub open_rate: f64,
    pub click_rate: f64,
    pub bounce_rate: f64,
    /// An A/B test's variants, each with its test group's counts (the rest of the audience,
    /// mailed the winner, counts in the totals above); empty without a test, and in the
    /// analytics lists (see `GET /campaigns/:id/stats`).
    pub variants: Vec<VariantStats>,
}

impl CampaignStats {
    /// The stats of a campaign from its ledger size and email counts.
    pub fn new(campaign_id: String, recipients: i64, c: CampaignCounts) -> CampaignStats {
        CampaignStats {
            campaign_id,
            recipients,
            sent: c.sent,
            delivered: c.delivered,
            opened: c.opened,
            clicked: c.clicked,
            bounced: c.bounced,
            complained: c.complained,
            unsubscribed: c.unsubscribed,
            suppressed: c.suppressed,
            failed: c.failed,
            queued: c.queued,
            open_rate: rate(c.opened, c.sent),
            click_rate: rate(c.clicked, c.sent),
            bounce_rate: rate(c.bounced, c.sent),
            variants: Vec::new(),
        }
    }
}

/// Answer of `POST /campaigns`.
#[derive(ApiResponse)]
pub enum CreatedCampaign {
    /// Created in `DRAFT`.
    #[oai(status = 201)]
    Created(Json<CreatedCampaignBody>),
}

/// Answer of `POST /campaigns/:id/duplicate`.
#[derive(ApiResponse)]
pub enum DuplicatedCampaign {
    /// The copy, in `DRAFT`.
    #[oai(status = 201)]
    Created(Json<CampaignBody>),
}

/// Answer of `DELETE /campaigns/:id`.
#[derive(ApiResponse)]
pub enum DeletedCampaign {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

/// Why contacts of the audience would not be mailed, each contact counted once.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct AudienceExclusions {
    /// Contacts with `subscribed: false` (a campaign is marketing mail), pending ones aside.
    pub unsubscribed: i64,
    /// Contacts waiting for the confirmation of their subscription (confirmed opt-in,
    /// `subscriptionPending`): unsubscribed until they confirm, so not mailed.
    pub pending: i64,
    /// Subscribed contacts whose address is on the project's suppression list
    /// (`GET /suppressions`): a send records their email as suppressed and never hands it off.
    /// Subscribed contacts not subscribed to the campaign's topic (0 without a topic).
    pub not_in_topic: i64,
    /// Subscribed contacts (to the topic too) whose address is on the project's suppression
    /// list (`GET /suppressions`): a send records their email as suppressed and never hands it
    /// off.
    pub suppressed: i64,
}

/// `POST /campaigns/:id/audience`: who a send of the campaign would mail now.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct AudiencePreview {
    /// Contacts a send now would mail: in the audience, subscribed and not suppressed.
    pub recipients: i64,
    /// The other contacts of the audience, by the first rule that keeps each out.
    pub excluded: AudienceExclusions,
}

impl From<AudienceCounts> for AudiencePreview {
    fn from(c: AudienceCounts) -> AudiencePreview {
        AudiencePreview {
            recipients: c.recipients,
            excluded: AudienceExclusions {
                unsubscribed: c.unsubscribed,
                pending: c.pending,
                not_in_topic: c.not_in_topic,
                suppressed: c.suppressed,
            },
        }
    }
}
