//! The A/B test and local-time parts of `/campaigns`: the variant bodies, the test's state on
//! a campaign, each variant's stats, and the checks of a body's A/B fields (the rules are
//! `domain::campaign_ab`'s).

use poem_openapi::{Enum, Object};
use serde::Deserialize;

use super::CampaignRequest;
use crate::api::error::{ApiError, FieldError};
use crate::api::formats::OneOf;
use crate::api::state::AppState;
use crate::api::timestamp::Timestamp;
use crate::domain::campaign::rate;
use crate::domain::campaign_ab::{AbRequest, AbTest, VariantRequest, WinnerMetric, check_ab};
use crate::store::campaigns::{Campaign, VariantTally};

/// One variant of an A/B test: what differs from the campaign's own content.
#[derive(Object, Deserialize, Clone)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CampaignVariant {
    /// 1 to 998 characters on one line; may use variables.
    pub subject: String,
    /// HTML with variables; not empty.
    pub body: String,
    /// The sender's display name; null: the campaign's `fromName`.
    #[oai(nullable)]
    #[serde(default)]
    pub from_name: Option<String>,
}

/// What decides an A/B test's winner.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AbWinnerMetric {
    /// Opened (or clicked) emails per email sent.
    OpenRate,
    /// Clicked emails per email sent.
    ClickRate,
}

impl From<WinnerMetric> for AbWinnerMetric {
    fn from(m: WinnerMetric) -> AbWinnerMetric {
        match m {
            WinnerMetric::OpenRate => AbWinnerMetric::OpenRate,
            WinnerMetric::ClickRate => AbWinnerMetric::ClickRate,
        }
    }
}

/// Where an A/B test stands.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AbTestStatus {
    /// The campaign has not started sending.
    Pending,
    /// The test group is being mailed, or the test's duration is running (`decideAt`).
    Testing,
    /// The winner is chosen (`winner`) and goes to the rest of the audience.
    WinnerChosen,
}

/// A campaign's A/B test: its settings and where it stands.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct AbTestBody {
    pub status: AbTestStatus,
    /// 2 to 4 variants, in order (`winner` is an index into them).
    pub variants: Vec<CampaignVariant>,
    /// The share of the audience in the test group, split evenly across the variants.
    pub test_fraction: f64,
    pub winner_metric: AbWinnerMetric,
    /// Seconds from the moment the test group is taken until the winner is chosen.
    pub test_duration: i64,
    /// When the winner is chosen; null until the whole test group is taken.
    #[oai(nullable)]
    pub decide_at: Option<Timestamp>,
    /// The winning variant (0-based); null until chosen.
    #[oai(nullable)]
    pub winner: Option<i64>,
    /// When the winner was chosen; null before.
    #[oai(nullable)]
    pub decided_at: Option<Timestamp>,
}

impl AbTestBody {
    /// The test of campaign `c`, when it has one.
    pub fn of(c: &Campaign) -> Option<AbTestBody> {
        let test = c.content.ab.as_ref()?;
        let p = c.ab_progress;
        let status = match (p.winner, c.started_at) {
            (Some(_), _) => AbTestStatus::WinnerChosen,
            (None, Some(_)) => AbTestStatus::Testing,
            (None, None) => AbTestStatus::Pending,
        };
        Some(AbTestBody {
            status,
            variants: variant_bodies(test),
            test_fraction: test.test_fraction,
            winner_metric: test.winner_metric.into(),
            test_duration: test.test_duration_seconds,
            decide_at: p.decide_at.map(Timestamp),
            winner: p.winner.map(|w| w as i64),
            decided_at: p.decided_at.map(Timestamp),
        })
    }
}

fn variant_bodies(test: &AbTest) -> Vec<CampaignVariant> {
    test.variants
        .iter()
        .map(|v| CampaignVariant {
            subject: v.subject.clone(),
            body: v.body.clone(),
            from_name: v.from_name.clone(),
        })
        .collect()
}

/// One variant's counts in the test group: distinct emails, a click also counts as an open;
/// rates per email sent, between 0 and 1.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct VariantStats {
    /// Its index (0-based) in `variants`.
    pub variant: i64,
    /// Contacts of the test group drawn for it.
    pub recipients: i64,
    pub sent: i64,
    pub opened: i64,
    pub clicked: i64,
    pub open_rate: f64,
    pub click_rate: f64,
    /// Whether it was chosen as the winner.
    pub winner: bool,
}

/// Each variant's stats of campaign `c` from its tallies.
pub fn variant_stats(c: &Campaign, tallies: &[VariantTally]) -> Vec<VariantStats> {
    tallies
        .iter()
        .enumerate()
        .map(|(i, t)| VariantStats {
            variant: i as i64,
            recipients: t.recipients,
            sent: t.counts.sent,
            opened: t.counts.opened,
            clicked: t.counts.clicked,
            open_rate: rate(t.counts.opened, t.counts.sent),
            click_rate: rate(t.counts.clicked, t.counts.sent),
            winner: c.ab_progress.winner == Some(i),
        })
        .collect()
}

/// Checks the A/B fields of a create or replace body, the variants' template syntax on the
/// CPU pool: the test (or `None`) and every problem against its field.
pub(super) async fn check_ab_request(
    state: &AppState,
    req: &CampaignRequest,
) -> (Option<AbTest>, Vec<FieldError>) {
    let variants = req.variants.as_ref().map(|vs| {
        vs.iter()
            .map(|v| VariantRequest {
                subject: &v.subject,
                body: &v.body,
                from_name: v.from_name.as_deref(),
            })
            .collect()
    });
    let checked = check_ab(&AbRequest {
        variants,
        test_fraction: req.test_fraction,
        winner_metric: req.winner_metric.as_ref().map(OneOf::as_str),
        test_duration: req.test_duration,
    });
    let (test, mut errors) = match checked {
        Ok(test) => (test, Vec::new()),
        Err(problems) => (
            None,
            problems
                .iter()
                .map(|p| FieldError::new(&p.field, p.code, p.message.clone()))
                .collect(),
        ),
    };
    let contents = req
        .variants
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| (format!("variants[{i}]."), v.subject.clone(), v.body.clone()))
        .collect();
    errors.extend(super::syntax_errors(state, contents).await);
    (test.filter(|_| errors.is_empty()), errors)
}

/// The wall-clock time of a send at each contact's local time (`inContactTimeZone`), which
/// needs `scheduledFor` and is not combined with an A/B test; `None` for one time for all.
pub(super) fn local_send_at(
    c: &Campaign,
    scheduled_for: Option<i64>,
    in_contact_time_zone: bool,
) -> Result<Option<i64>, ApiError> {
    if !in_contact_time_zone {
        return Ok(None);
    }
    let Some(wall) = scheduled_for else {
        return Err(ApiError::invalid_field(
            "scheduledFor",
            "required",
            "`inContactTimeZone` reads `scheduledFor` as each contact's local time; give `scheduledFor`",
        ));
    };
    if c.content.ab.is_some() {
        return Err(ApiError::invalid_field(
            "inContactTimeZone",
            "not_with_ab_test",
            "an A/B test mails its test group first and its winner to everyone else after \
             `testDuration`, at one time for all; send it without `inContactTimeZone`, or remove \
             its `variants` (PUT /campaigns/:id)",
        ));
    }
    Ok(Some(wall))
}

/// 422 for an A/B test given to a campaign scheduled at each contact's local time (the two are
/// not combined).
pub(super) fn not_at_local_time(
    current: &Campaign,
    content: &crate::domain::campaign::CampaignContent,
) -> Result<(), ApiError> {
    if content.ab.is_some() && current.local_send_at.is_some() {
        return Err(ApiError::invalid_field(
            "variants",
            "not_at_local_time",
            "the campaign is scheduled at each contact's local time, which an A/B test is not \
             combined with; schedule it again without `inContactTimeZone` first",
        ));
    }
    Ok(())
}
