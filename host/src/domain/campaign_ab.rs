//! A/B tests of campaigns and sends at each contact's local time, as rules without I/O: the
//! checks of a test's fields, the deterministic draw of the test group, the choice of the
//! winner, and the due time of a contact's email read in its time zone.
//!
//! The test group is drawn a snapshot chunk at a time: of the `m` contacts a chunk takes after
//! `t` others, `floor((t + m) · f) − floor(t · f)` enter the test (so the whole audience of `n`
//! gives exactly `floor(n · f)`), those with the lowest hash of (campaign id, contact id), and
//! they are dealt to the variants in turn, continuing the count of the chunks before (so the
//! variants' groups differ by at most one). The draw is written with the chunk's ledger rows, in
//! the transaction that takes them: a crash or a second worker never draws a contact twice.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::segment::Violation;
use super::template::fields::{check_from_name, check_subject};

/// Fewest variants of a test.
pub const MIN_VARIANTS: usize = 2;
/// Most variants of a test.
pub const MAX_VARIANTS: usize = 4;
/// Shortest test duration, in seconds.
pub const MIN_TEST_SECONDS: i64 = 1;
/// Longest test duration, in seconds (30 days).
pub const MAX_TEST_SECONDS: i64 = 30 * 24 * 3600;

/// What decides the winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WinnerMetric {
    /// Opened (or clicked) emails per email sent.
    OpenRate,
    /// Clicked emails per email sent.
    ClickRate,
}

impl WinnerMetric {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WinnerMetric::OpenRate => "OPEN_RATE",
            WinnerMetric::ClickRate => "CLICK_RATE",
        }
    }

    /// Reads a metric in any case.
    pub fn parse(s: &str) -> Option<WinnerMetric> {
        match s.trim().to_ascii_uppercase().as_str() {
            "OPEN_RATE" => Some(WinnerMetric::OpenRate),
            "CLICK_RATE" => Some(WinnerMetric::ClickRate),
            _ => None,
        }
    }
}

/// One variant's content: what differs from the campaign's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Variant {
    /// A template rendered as plain text per recipient.
    pub subject: String,
    /// An HTML template rendered per recipient.
    pub body: String,
    /// The sender's display name; `None`: the campaign's.
    #[serde(default)]
    pub from_name: Option<String>,
}

/// A campaign's A/B test, checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbTest {
    /// 2 to 4 variants, in order (the first wins a tie).
    pub variants: Vec<Variant>,
    /// The share of the audience in the test group, strictly between 0 and 1.
    pub test_fraction: f64,
    pub winner_metric: WinnerMetric,
    /// How long after the test group is taken the winner is chosen, in seconds.
    pub test_duration_seconds: i64,
}

impl AbTest {
    /// The test's duration in milliseconds.
    pub fn duration_ms(&self) -> i64 {
        self.test_duration_seconds * 1000
    }
}

/// One variant of a request, as sent.
#[derive(Clone, Debug, Default)]
pub struct VariantRequest<'a> {
    pub subject: &'a str,
    pub body: &'a str,
    pub from_name: Option<&'a str>,
}

/// The A/B fields of a create or replace body, as sent.
#[derive(Clone, Debug, Default)]
pub struct AbRequest<'a> {
    pub variants: Option<Vec<VariantRequest<'a>>>,
    pub test_fraction: Option<f64>,
    pub winner_metric: Option<&'a str>,
    pub test_duration: Option<i64>,
}

/// Checks the A/B fields of a body (everything but the variants' template syntax): `None` when
/// none is given; every problem is reported against its field (`variants[1].body`).
pub fn check_ab(req: &AbRequest<'_>) -> Result<Option<AbTest>, Vec<Violation>> {
    let mut problems = Vec::new();
    let Some(requested) = &req.variants else {
        let given = [
            ("testFraction", req.test_fraction.is_some()),
            ("winnerMetric", req.winner_metric.is_some()),
            ("testDuration", req.test_duration.is_some()),
        ];
        for (field, _) in given.iter().filter(|(_, given)| *given) {
            problems.push(Violation::new(
                "variants",
                "required",
                format!("`{field}` belongs to an A/B test: give 2 to 4 `variants` with it, or leave it out"),
            ));
        }
        return if problems.is_empty() {
            Ok(None)
        } else {
            Err(problems)
        };
    };
    if !(MIN_VARIANTS..=MAX_VARIANTS).contains(&requested.len()) {
        problems.push(Violation::new(
            "variants",
            "invalid_count",
            format!(
                "an A/B test has {MIN_VARIANTS} to {MAX_VARIANTS} variants, not {}",
                requested.len()
            ),
        ));
    }
    let mut variants = Vec::with_capacity(requested.len());
    for (i, v) in requested.iter().enumerate() {
        let field = |name: &str| format!("variants[{i}].{name}");
        if let Err((code, message)) = check_subject(v.subject) {
            problems.push(Violation::new(field("subject"), code, message));
        }
        if v.body.trim().is_empty() {
            problems.push(Violation::new(
                field("body"),
                "required",
                "the body is empty",
            ));
        }
        let from_name = match v.from_name.filter(|n| !n.trim().is_empty()) {
            None => None,
            Some(n) => match check_from_name(n) {
                Ok(n) => Some(n),
                Err((code, message)) => {
                    problems.push(Violation::new(field("fromName"), code, message));
                    None
                }
            },
        };
        variants.push(Variant {
            subject: v.subject.to_string(),
            body: v.body.to_string(),
            from_name,
        });
    }
    let test_fraction = match req.test_fraction {
        None => {
            problems.push(Violation::new(
                "testFraction",
                "required",
                "an A/B test needs `testFraction`, the share of the audience tested (e.g. 0.2)",
            ));
            0.0
        }
        Some(f) if f.is_finite() && f > 0.0 && f < 1.0 => f,
        Some(f) => {
            problems.push(Violation::new(
                "testFraction",
                "out_of_range",
                format!("`testFraction` is a share strictly between 0 and 1 (e.g. 0.2), not {f}"),
            ));
            0.0
        }
    };
    let winner_metric = match req.winner_metric {
        None => {
            problems.push(Violation::new(
                "winnerMetric",
                "required",
                "an A/B test needs `winnerMetric`: OPEN_RATE or CLICK_RATE",
            ));
            None
        }
        Some(m) => {
            let metric = WinnerMetric::parse(m);
            if metric.is_none() {
                problems.push(Violation::new(
                    "winnerMetric",
                    "invalid",
                    format!("`{m}` is not a winner metric; use OPEN_RATE or CLICK_RATE"),
                ));
            }
            metric
        }
    };
    let test_duration_seconds = match req.test_duration {
        None => {
            problems.push(Violation::new(
                "testDuration",
                "required",
                "an A/B test needs `testDuration`, in seconds (e.g. 14400 for 4 hours)",
            ));
            0
        }
        Some(s) if (MIN_TEST_SECONDS..=MAX_TEST_SECONDS).contains(&s) => s,
        Some(s) => {
            problems.push(Violation::new(
                "testDuration",
                "out_of_range",
                format!(
                    "`testDuration` is {MIN_TEST_SECONDS} to {MAX_TEST_SECONDS} seconds (30 days), not {s}"
                ),
            ));
            0
        }
    };
    match winner_metric {
        Some(winner_metric) if problems.is_empty() => Ok(Some(AbTest {
            variants,
            test_fraction,
            winner_metric,
            test_duration_seconds,
        })),
        _ => Err(problems),
    }
}

/// A stable 64-bit hash of (campaign, contact): FNV-1a, then SplitMix64's finalizer so that
/// ids differing in their last characters spread over the whole range.
pub fn draw_hash(campaign: &str, contact: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in campaign.bytes().chain([0u8]).chain(contact.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// How many of the first `taken` contacts of an audience the test group holds.
fn tests_among(taken: i64, fraction: f64) -> i64 {
    // The small epsilon keeps 0.2 · 1000 at 200 whatever the float's last bit.
    (taken as f64 * fraction + 1e-9).floor() as i64
}

/// The test group's draw of a chunk of `ids` taken after `taken_before` other contacts of the
/// audience: each test member with its variant (0-based); the others are not listed.
pub fn draw_test_group<'a>(
    campaign: &str,
    ids: &'a [String],
    taken_before: i64,
    test: &AbTest,
) -> Vec<(&'a str, usize)> {
    let before = tests_among(taken_before, test.test_fraction);
    let after = tests_among(taken_before + ids.len() as i64, test.test_fraction);
    let mut ranked: Vec<(u64, &str)> = ids
        .iter()
        .map(|id| (draw_hash(campaign, id), id.as_str()))
        .collect();
    ranked.sort_unstable();
    let n = test.variants.len().max(1) as i64;
    ranked
        .into_iter()
        .take((after - before).max(0) as usize)
        .enumerate()
        .map(|(j, (_, id))| (id, ((before + j as i64) % n) as usize))
        .collect()
}

/// A rate from counts: per email sent, between 0 and 1 (0 when nothing was sent).
pub fn rate(part: i64, sent: i64) -> f64 {
    if sent <= 0 {
        0.0
    } else {
        (part as f64 / sent as f64).clamp(0.0, 1.0)
    }
}

/// One variant's counts in the test group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VariantCounts {
    /// Emails handed to the transport.
    pub sent: i64,
    /// Opened (or clicked).
    pub opened: i64,
    pub clicked: i64,
}

impl VariantCounts {
    /// Its rate of `metric`, between 0 and 1.
    pub fn rate(&self, metric: WinnerMetric) -> f64 {
        match metric {
            WinnerMetric::OpenRate => rate(self.opened, self.sent),
            WinnerMetric::ClickRate => rate(self.clicked, self.sent),
        }
    }
}

/// The winner (0-based) by `metric` of the variants' counts, in variant order: the highest
/// rate; on a tie (also when nothing was sent) the first of the tied.
pub fn choose_winner(metric: WinnerMetric, counts: &[VariantCounts]) -> usize {
    let mut best = 0;
    for (i, c) in counts.iter().enumerate().skip(1) {
        if c.rate(metric) > counts[best].rate(metric) {
            best = i;
        }
    }
    best
}

/// The most a time zone is ahead of UTC (Kiribati, UTC+14): a send at local time starts this
/// long before the wall-clock time read as UTC.
pub const MAX_AHEAD_MS: i64 = 14 * 3600 * 1000;

/// The zone of a contact's `timezone` value (an IANA name such as `Europe/Paris`); `None`
/// when it is absent or not a known zone (the send then reads UTC).
pub fn contact_zone(value: Option<&serde_json::Value>) -> Option<Tz> {
    value?.as_str()?.trim().parse::<Tz>().ok()
}

/// When an email at local time `wall_ms` (the wall-clock date and time, as unix ms read in
/// UTC) is due for a contact in `zone` (`None`: UTC). A wall-clock time the zone skips (a
/// change to summer time) is read one hour later; one it has twice, the first time.
pub fn local_due(wall_ms: i64, zone: Option<Tz>) -> i64 {
    let Some(zone) = zone else {
        return wall_ms;
    };
    let Some(wall) = DateTime::from_timestamp_millis(wall_ms).map(|t| t.naive_utc()) else {
        return wall_ms;
    };
    let local = zone.from_local_datetime(&wall).earliest().or_else(|| {
        zone.from_local_datetime(&(wall + chrono::Duration::hours(1)))
            .earliest()
    });
    local.map(|t| t.timestamp_millis()).unwrap_or(wall_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ab(n: usize, f: f64) -> AbTest {
        AbTest {
            variants: (0..n)
                .map(|i| Variant {
                    subject: format!("S{i}"),
                    body: "<p>B</p>".into(),
                    from_name: None,
                })
                .collect(),
            test_fraction: f,
            winner_metric: WinnerMetric::OpenRate,
            test_duration_seconds: 60,
        }
    }

    #[test]
    fn the_draw_takes_the_exact_share_split_evenly_across_chunks() {
        let test = ab(3, 0.2);
        let ids: Vec<String> = (0..1000).map(|i| format!("con_{i:05}")).collect();
        let mut per_variant = [0usize; 3];
        let mut drawn = Vec::new();
        for (k, chunk) in ids.chunks(333).enumerate() {
            for (id, v) in draw_test_group("cmp_1", chunk, (k * 333) as i64, &test) {
                per_variant[v] += 1;
                drawn.push(id.to_string());
            }
        }
        assert_eq!(drawn.len(), 200);
        assert_eq!(per_variant.iter().sum::<usize>(), 200);
        assert!(
            per_variant.iter().all(|&n| (66..=67).contains(&n)),
            "{per_variant:?}"
        );
        // The same chunk draws the same contacts again; another campaign draws others.
        let again: Vec<_> = draw_test_group("cmp_1", &ids[..333], 0, &test);
        let other: Vec<_> = draw_test_group("cmp_2", &ids[..333], 0, &test);
        assert_eq!(again, draw_test_group("cmp_1", &ids[..333], 0, &test));
        assert_ne!(again, other);
        drawn.sort();
        drawn.dedup();
        assert_eq!(drawn.len(), 200);
    }

    #[test]
    fn the_winner_has_the_highest_rate_and_a_tie_goes_to_the_first() {
        let c = |sent, opened, clicked| VariantCounts {
            sent,
            opened,
            clicked,
        };
        let counts = [c(100, 10, 1), c(100, 30, 0), c(100, 30, 5)];
        assert_eq!(choose_winner(WinnerMetric::OpenRate, &counts), 1);
        assert_eq!(choose_winner(WinnerMetric::ClickRate, &counts), 2);
        assert_eq!(choose_winner(WinnerMetric::OpenRate, &[c(0, 0, 0); 3]), 0);
    }

    #[test]
    fn every_problem_of_a_test_is_reported_against_its_field() {
        let req = AbRequest {
            variants: Some(vec![
                VariantRequest {
                    subject: "A",
                    body: "<p>A</p>",
                    from_name: None,
                },
                VariantRequest {
                    subject: "B\nC",
                    body: " ",
                    from_name: Some("Bad\u{7}"),
                },
            ]),
            test_fraction: Some(1.0),
            winner_metric: Some("REPLY_RATE"),
            test_duration: Some(0),
        };
        let fields: Vec<String> = check_ab(&req)
            .unwrap_err()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            fields,
            [
                "variants[1].subject",
                "variants[1].body",
                "variants[1].fromName",
                "testFraction",
                "winnerMetric",
                "testDuration"
            ]
        );
        let none = AbRequest {
            test_fraction: Some(0.2),
            ..AbRequest::default()
        };
        assert_eq!(check_ab(&none).unwrap_err()[0].field, "variants");
        assert_eq!(check_ab(&AbRequest::default()).unwrap(), None);
    }

    #[test]
    fn a_local_time_is_due_at_the_zone_s_instant() {
        let wall = DateTime::parse_from_rfc3339("2026-12-08T09:00:00Z")
            .unwrap()
            .timestamp_millis();
        let hour = 3_600_000;
        let zone = |v: &str| contact_zone(Some(&serde_json::json!(v)));
        assert_eq!(local_due(wall, zone("Asia/Tokyo")), wall - 9 * hour);
        assert_eq!(local_due(wall, zone("America/New_York")), wall + 5 * hour);
        assert_eq!(local_due(wall, zone("Mars/Olympus")), wall);
        assert_eq!(local_due(wall, None), wall);
        // 02:30 on 2026-03-29 does not exist in Paris: read as 03:30 summer time (01:30 UTC).
        let gap = DateTime::parse_from_rfc3339("2026-03-29T02:30:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(local_due(gap, zone("Europe/Paris")), gap - hour);
    }
}
