//! `/analytics/*`: email milestones over time, campaigns ranked and broken down, and the most
//! tracked event names. The definitions are those of `docs/decisions.md` ("Stats and
//! analytics"): distinct emails, dated by when each milestone first happened, test sends never
//! counted, a click also an open, rates per email sent between 0 and 1.

use chrono::{NaiveTime, TimeZone, Timelike};
use chrono_tz::Tz;
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Enum, Object, OpenApi};

use super::ApiTags;
use super::campaigns::{CampaignState, CampaignStats};
use super::error::ApiError;
use super::extract::SecretKeyAuth;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::segment::total_pages;
use crate::domain::time::now_ms;
use crate::store::analytics::bucket;
use crate::store::campaigns::CampaignCounts;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Most buckets of an hourly series (31 days).
pub const MAX_HOURS: usize = 744;
/// Most buckets of a daily series.
pub const MAX_DAYS: usize = 366;

/// The width of a time series bucket.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
pub enum Interval {
    /// One bucket per hour of the time zone.
    Hour,
    /// One bucket per calendar day of the time zone.
    Day,
}

/// One bucket of a time series.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TimeseriesPoint {
    /// The bucket's start.
    pub time: Timestamp,
    /// The bucket's start as a local date (`2026-11-01`) or date and hour (`2026-11-01T13:00`)
    /// in the series' time zone.
    pub label: String,
    pub sent: i64,
    pub delivered: i64,
    pub opened: i64,
    pub clicked: i64,
    pub bounced: i64,
    pub complained: i64,
}

/// A time series of email milestones, zero-filled.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct Timeseries {
    pub interval: Interval,
    /// The IANA time zone the buckets follow.
    pub timezone: String,
    /// The first bucket's start.
    pub from: Timestamp,
    /// The end of the range (exclusive).
    pub to: Timestamp,
    /// One point per bucket, oldest first.
    pub data: Vec<TimeseriesPoint>,
}

/// What campaigns are ranked by.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "camelCase")]
pub enum CampaignMetric {
    Sent,
    Delivered,
    Opened,
    Clicked,
    Bounced,
    Complained,
    Unsubscribed,
    OpenRate,
    ClickRate,
    BounceRate,
}

impl CampaignMetric {
    fn of(self, s: &CampaignStats) -> f64 {
        match self {
            CampaignMetric::Sent => s.sent as f64,
            CampaignMetric::Delivered => s.delivered as f64,
            CampaignMetric::Opened => s.opened as f64,
            CampaignMetric::Clicked => s.clicked as f64,
            CampaignMetric::Bounced => s.bounced as f64,
            CampaignMetric::Complained => s.complained as f64,
            CampaignMetric::Unsubscribed => s.unsubscribed as f64,
            CampaignMetric::OpenRate => s.open_rate,
            CampaignMetric::ClickRate => s.click_rate,
            CampaignMetric::BounceRate => s.bounce_rate,
        }
    }
}

/// A campaign with its stats.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignBreakdown {
    pub id: String,
    pub name: String,
    pub status: CampaignState,
    /// When it started sending; null when it has not.
    #[oai(nullable)]
    pub started_at: Option<Timestamp>,
    /// The ranking metric's value (top-campaigns only; 0 in the breakdown).
    pub value: f64,
    pub stats: CampaignStats,
}

/// Campaigns ranked by a metric.
#[derive(Object)]
pub struct TopCampaigns {
    pub metric: CampaignMetric,
    /// Best first; ties by newest campaign.
    pub data: Vec<CampaignBreakdown>,
}

/// One page of the per-campaign breakdown.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CampaignStatsPage {
    /// Campaigns that have started sending, newest first.
    pub data: Vec<CampaignBreakdown>,
    pub total: i64,
    pub page: u32,
    pub page_size: u32,
    pub total_pages: i64,
}

/// An event name and how often it was tracked.
#[derive(Object)]
pub struct EventCount {
    pub name: String,
    pub count: i64,
}

/// The most tracked event names of a range.
#[derive(Object)]
pub struct TopEvents {
    pub from: Timestamp,
    pub to: Timestamp,
    /// Most tracked first.
    pub data: Vec<EventCount>,
}

fn timezone(name: Option<&str>) -> Result<Tz, ApiError> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok(Tz::UTC),
        Some(n) => n.parse::<Tz>().map_err(|_| {
            ApiError::invalid_field(
                "timezone",
                "invalid",
                format!("`{n}` is not an IANA time zone; use a name such as Europe/Paris or UTC"),
            )
        }),
    }
}

/// `[from, to)` with the defaults: `to` now, `from` `default_ms` before it.
fn range(
    from: Option<Timestamp>,
    to: Option<Timestamp>,
    default_ms: i64,
) -> Result<(i64, i64), ApiError> {
    let to = to.map_or_else(now_ms, |t| t.0);
    let from = from.map_or(to - default_ms, |t| t.0);
    if from >= to {
        return Err(ApiError::invalid_field(
            "from",
            "invalid_range",
            "`from` must be before `to`",
        ));
    }
    Ok((from, to))
}

/// The starts of the buckets covering `[from, to)` in `tz`, with their labels.
fn bucket_starts(
    from: i64,
    to: i64,
    interval: Interval,
    tz: Tz,
) -> Result<Vec<(i64, String)>, ApiError> {
    let local = |ms: i64| tz.timestamp_millis_opt(ms).single();
    let first =
        local(from).ok_or_else(|| ApiError::invalid_field("from", "invalid", "out of range"))?;
    let (max, step_label) = match interval {
        Interval::Hour => (MAX_HOURS, "31 days with interval=hour"),
        Interval::Day => (MAX_DAYS, "366 days with interval=day"),
    };
    let too_long = || {
        ApiError::invalid_field(
            "from",
            "range_too_long",
            format!("the range may span at most {step_label}; narrow `from` and `to`"),
        )
    };
    let mut out = Vec::new();
    match interval {
        Interval::Hour => {
            let start = first
                .with_minute(0)
                .and_then(|t| t.with_second(0))
                .and_then(|t| t.with_nanosecond(0))
                .map_or(from, |t| t.timestamp_millis());
            let mut at = start;
            while at < to {
                if out.len() >= max {
                    return Err(too_long());
                }
                let label =
                    local(at).map_or_else(String::new, |t| t.format("%Y-%m-%dT%H:%M").to_string());
                out.push((at, label));
                at += HOUR_MS;
            }
        }
        Interval::Day => {
            let mut date = first.date_naive();
            loop {
                let midnight = date.and_time(NaiveTime::MIN);
                let start = tz
                    .from_local_datetime(&midnight)
                    .earliest()
                    .or_else(|| {
                        tz.from_local_datetime(&(midnight + chrono::Duration::hours(1)))
                            .earliest()
                    })
                    .map_or(from, |t| t.timestamp_millis());
                if start >= to {
                    break;
                }
                if out.len() >= max {
                    return Err(too_long());
                }
                out.push((start, date.format("%Y-%m-%d").to_string()));
                match date.succ_opt() {
                    Some(next) => date = next,
                    None => break,
                }
            }
        }
    }
    Ok(out)
}

/// The widest slot (a day, an hour, 15 or 1 minutes) that every bucket start falls on.
fn slot_ms(starts: &[i64]) -> i64 {
    let base = starts.first().copied().unwrap_or(0);
    [DAY_MS, HOUR_MS, 900_000, 60_000]
        .into_iter()
        .find(|slot| starts.iter().all(|s| (s - base) % slot == 0))
        .unwrap_or(1)
}

fn breakdown(
    c: crate::store::campaigns::Campaign,
    counts: CampaignCounts,
    metric: Option<CampaignMetric>,
) -> CampaignBreakdown {
    let stats = CampaignStats::new(c.id.as_str().to_string(), c.recipient_count, counts);
    CampaignBreakdown {
        value: metric.map_or(0.0, |m| m.of(&stats)),
        id: c.id.into_string(),
        name: c.content.name,
        status: c.status.into(),
        started_at: c.started_at.map(Timestamp),
        stats,
    }
}

/// The analytics endpoints.
#[derive(Default)]
pub struct AnalyticsApi;

#[OpenApi(tag = "ApiTags::Analytics")]
impl AnalyticsApi {
    /// Email time series
    ///
    /// Emails sent, delivered, opened (a click counts as an open), clicked, bounced and
    /// complained of, per hour or per calendar day of `timezone` (default UTC), over
    /// `[from, to)`: by default the last 30 days (`day`) or 24 hours (`hour`). Every bucket is
    /// present, zero-filled; each email counts once per milestone, in the bucket of the first
    /// time it reached it; test sends never count. At most 744 hourly or 366 daily buckets.
    #[oai(
        path = "/analytics/timeseries",
        method = "get",
        operation_id = "analyticsTimeseries"
    )]
    async fn timeseries(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Start of the range (default: 30 days or 24 hours before `to`).
        from: Query<Option<Timestamp>>,
        /// End of the range, exclusive (default: now).
        to: Query<Option<Timestamp>>,
        /// `hour` or `day` (default `day`).
        interval: Query<Option<Interval>>,
        /// An IANA time zone name (default `UTC`).
        timezone: Query<Option<String>>,
    ) -> Result<Json<Timeseries>, ApiError> {
        let interval = interval.0.unwrap_or(Interval::Day);
        let tz = self::timezone(timezone.0.as_deref())?;
        let default = match interval {
            Interval::Hour => DAY_MS,
            Interval::Day => 30 * DAY_MS,
        };
        let (from, to) = range(from.0, to.0, default)?;
        let starts = bucket_starts(from, to, interval, tz)?;
        let first = starts.first().map_or(from, |s| s.0);
        let times: Vec<i64> = starts.iter().map(|s| s.0).collect();
        let slot = slot_ms(&times);
        let slots = state
            .store()
            .milestone_slots(auth.0.project_id(), first, to, slot)
            .await?;
        let rows = bucket(&slots, first, slot, &times);
        let data = starts
            .into_iter()
            .zip(rows)
            .map(|((time, label), r)| TimeseriesPoint {
                time: Timestamp(time),
                label,
                sent: r[0],
                delivered: r[1],
                opened: r[2],
                clicked: r[3],
                bounced: r[4],
                complained: r[5],
            })
            .collect();
        Ok(Json(Timeseries {
            interval,
            timezone: tz.name().to_string(),
            from: Timestamp(first),
            to: Timestamp(to),
            data,
        }))
    }

    /// Top campaigns
    ///
    /// The campaigns that started sending in `[from, to)` (default: the last 90 days), ranked
    /// by `metric` (default `openRate`), best first, up to `limit` (1 to 50, default 10).
    #[oai(
        path = "/analytics/top-campaigns",
        method = "get",
        operation_id = "analyticsTopCampaigns"
    )]
    async fn top_campaigns(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// What to rank by (default `openRate`).
        metric: Query<Option<CampaignMetric>>,
        /// How many, 1 to 50 (default 10).
        #[oai(validator(minimum(value = "1"), maximum(value = "50")))]
        limit: Query<Option<u32>>,
        /// Campaigns that started at or after this (default: 90 days before `to`).
        from: Query<Option<Timestamp>>,
        /// Campaigns that started before this (default: now).
        to: Query<Option<Timestamp>>,
    ) -> Result<Json<TopCampaigns>, ApiError> {
        let project = auth.0.project_id();
        let metric = metric.0.unwrap_or(CampaignMetric::OpenRate);
        let (from, to) = range(from.0, to.0, 90 * DAY_MS)?;
        let started = state
            .store()
            .campaigns_started_between(project, from, to)
            .await?;
        let mut data: Vec<CampaignBreakdown> = Vec::with_capacity(started.len());
        for chunk in started.chunks(500) {
            let ids: Vec<&str> = chunk.iter().map(|c| c.id.as_str()).collect();
            let mut counts = state.store().campaign_counts(project, &ids).await?;
            for c in chunk {
                let n = counts.remove(c.id.as_str()).unwrap_or_default();
                data.push(breakdown(c.clone(), n, Some(metric)));
            }
        }
        // Stable: equal values keep the newest-first order.
        data.sort_by(|a, b| b.value.total_cmp(&a.value));
        data.truncate(limit.0.unwrap_or(10) as usize);
        Ok(Json(TopCampaigns { metric, data }))
    }

    /// Per-campaign stats
    ///
    /// Every campaign that has started sending, newest first, with its stats; `page` from 1,
    /// `pageSize` 1 to 100 (default 20).
    #[oai(
        path = "/analytics/campaign-stats",
        method = "get",
        operation_id = "analyticsCampaignStats"
    )]
    async fn campaign_stats(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The page, from 1 (default 1).
        #[oai(validator(minimum(value = "1")))]
        page: Query<Option<u32>>,
        /// Campaigns per page, 1 to 100 (default 20).
        #[oai(
            name = "pageSize",
            validator(minimum(value = "1"), maximum(value = "100"))
        )]
        page_size: Query<Option<u32>>,
    ) -> Result<Json<CampaignStatsPage>, ApiError> {
        let project = auth.0.project_id();
        let (page, page_size) = (page.0.unwrap_or(1), page_size.0.unwrap_or(20));
        let (campaigns, total) = state
            .store()
            .started_campaigns_page(project, page, page_size)
            .await?;
        let ids: Vec<&str> = campaigns.iter().map(|c| c.id.as_str()).collect();
        let mut counts = state.store().campaign_counts(project, &ids).await?;
        let data = campaigns
            .into_iter()
            .map(|c| {
                let n = counts.remove(c.id.as_str()).unwrap_or_default();
                breakdown(c, n, None)
            })
            .collect();
        Ok(Json(CampaignStatsPage {
            data,
            total,
            page,
            page_size,
            total_pages: total_pages(total, page_size),
        }))
    }

    /// Top events
    ///
    /// The project's own event names (not the service's `contact.*`, `email.*` and
    /// `segment.*`) by how often they were tracked in `[from, to)` (default: the last 30
    /// days), most first, up to `limit` (1 to 100, default 10).
    #[oai(
        path = "/analytics/top-events",
        method = "get",
        operation_id = "analyticsTopEvents"
    )]
    async fn top_events(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Start of the range (default: 30 days before `to`).
        from: Query<Option<Timestamp>>,
        /// End of the range, exclusive (default: now).
        to: Query<Option<Timestamp>>,
        /// How many, 1 to 100 (default 10).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
    ) -> Result<Json<TopEvents>, ApiError> {
        let (from, to) = range(from.0, to.0, 30 * DAY_MS)?;
        let rows = state
            .store()
            .top_event_names(auth.0.project_id(), from, to, limit.0.unwrap_or(10))
            .await?;
        Ok(Json(TopEvents {
            from: Timestamp(from),
            to: Timestamp(to),
            data: rows
                .into_iter()
                .map(|(name, count)| EventCount { name, count })
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn days_follow_the_time_zone_across_a_dst_change() {
        let tz: Tz = "Europe/Paris".parse().unwrap();
        // Paris leaves summer time on 2026-10-25: that day has 25 hours.
        let starts = bucket_starts(
            ms("2026-10-24T12:00:00Z"),
            ms("2026-10-26T12:00:00Z"),
            Interval::Day,
            tz,
        )
        .unwrap();
        let times: Vec<i64> = starts.iter().map(|s| s.0).collect();
        assert_eq!(
            times,
            [
                ms("2026-10-23T22:00:00Z"),
                ms("2026-10-24T22:00:00Z"),
                ms("2026-10-25T23:00:00Z")
            ]
        );
        assert_eq!(starts[1].1, "2026-10-25");
        assert_eq!(slot_ms(&times), HOUR_MS);
    }

    #[test]
    fn hours_of_a_half_hour_zone_and_caps() {
        let tz: Tz = "Asia/Kolkata".parse().unwrap();
        let starts = bucket_starts(
            ms("2026-11-01T00:10:00Z"),
            ms("2026-11-01T02:00:00Z"),
            Interval::Hour,
            tz,
        )
        .unwrap();
        assert_eq!(starts[0].0, ms("2026-10-31T23:30:00Z"));
        assert_eq!(starts[0].1, "2026-11-01T05:00");
        assert_eq!(starts.len(), 3);
        assert_eq!(slot_ms(&[starts[0].0, starts[1].0]), HOUR_MS);
        assert!(
            bucket_starts(0, 40 * DAY_MS, Interval::Hour, Tz::UTC).is_err(),
            "more than 744 hours"
        );
        assert_eq!(
            bucket_starts(0, 3 * DAY_MS, Interval::Day, Tz::UTC)
                .unwrap()
                .len(),
            3
        );
    }
}
