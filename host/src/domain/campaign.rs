//! Campaigns: one message to an audience, sent once to each subscribed member of it. The rules
//! of `docs/decisions.md` ("Campaigns") as types: the statuses and which moves they allow, the
//! three audience kinds, and the checks a create or replace body passes. No I/O.

use serde_json::Value;

use super::campaign_ab::AbTest;
use super::email::EmailAddress;
use super::ids::{SegmentId, TopicId};
use super::locale::LocaleVariants;
use super::segment::Violation;
use super::template::fields::{check_from_name, check_name, check_subject};

/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 2000;

/// Marks the subject of a test send.
pub const TEST_SUBJECT_PREFIX: &str = "[Test] ";

/// Where a campaign is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CampaignStatus {
    /// Being written; may change.
    Draft,
    /// Waiting for `scheduledAt`; may change or be cancelled.
    Scheduled,
    /// Its audience is being snapshotted and mailed; may be paused or cancelled.
    Sending,
    /// Paused from `SCHEDULED` or `SENDING`: no batch is taken and its queued emails are held
    /// until it is resumed (or cancelled).
    Paused,
    /// Every recipient's email is final.
    Sent,
    /// Stopped by the user; mail already handed to the transport stays sent.
    Cancelled,
    /// Could not proceed (`failureReason` says why).
    Failed,
}

impl CampaignStatus {
    /// Every status.
    pub const ALL: [CampaignStatus; 7] = [
        CampaignStatus::Draft,
        CampaignStatus::Scheduled,
        CampaignStatus::Sending,
        CampaignStatus::Paused,
        CampaignStatus::Sent,
        CampaignStatus::Cancelled,
        CampaignStatus::Failed,
    ];

    /// The stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignStatus::Draft => "DRAFT",
            CampaignStatus::Scheduled => "SCHEDULED",
            CampaignStatus::Sending => "SENDING",
            CampaignStatus::Paused => "PAUSED",
            CampaignStatus::Sent => "SENT",
            CampaignStatus::Cancelled => "CANCELLED",
            CampaignStatus::Failed => "FAILED",
        }
    }

    /// Reads a stored status.
    pub fn parse(s: &str) -> Option<CampaignStatus> {
        CampaignStatus::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether the content and audience may still change (`PUT`) and a send be asked for.
    pub fn editable(self) -> bool {
        matches!(self, CampaignStatus::Draft | CampaignStatus::Scheduled)
    }

    /// Whether cancel applies.
    pub fn cancellable(self) -> bool {
        matches!(
            self,
            CampaignStatus::Scheduled | CampaignStatus::Sending | CampaignStatus::Paused
        )
    }
}

/// Who a campaign goes to (always only the subscribed ones).
#[derive(Clone, Debug, PartialEq)]
pub enum Audience {
    /// Every contact of the project.
    All,
    /// The members of a segment of the project.
    Segment(SegmentId),
    /// The contacts a filter (the `herald-filter` language) selects; valid when stored.
    Filtered(Value),
}

impl Audience {
    /// `ALL`, `SEGMENT` or `FILTERED`.
    pub fn kind(&self) -> &'static str {
        match self {
            Audience::All => "ALL",
            Audience::Segment(_) => "SEGMENT",
            Audience::Filtered(_) => "FILTERED",
        }
    }
}

/// A campaign's content and audience, checked.
#[derive(Clone, Debug)]
pub struct CampaignContent {
    pub name: String,
    pub description: Option<String>,
    /// A template rendered as plain text per recipient.
    pub subject: String,
    /// An HTML template rendered per recipient.
    pub body: String,
    pub from_email: EmailAddress,
    pub from_name: Option<String>,
    pub reply_to: Option<EmailAddress>,
    pub audience: Audience,
    /// Subject and body by language, picked per recipient like a template's `variants`.
    pub locale_variants: LocaleVariants,
    /// Its A/B test (`campaign_ab`), when it has one.
    pub ab: Option<AbTest>,
    /// The topic it is about: only contacts subscribed to it receive it, and its one-click
    /// unsubscribe leaves that topic only.
    pub topic: Option<TopicId>,
}

/// The fields of a create or replace body, as sent.
#[derive(Clone, Debug, Default)]
pub struct ContentRequest<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub subject: &'a str,
    pub body: &'a str,
    pub from: &'a str,
    pub from_name: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    pub audience_type: &'a str,
    pub segment_id: Option<&'a str>,
    pub audience_filter: Option<&'a Value>,
    pub locale_variants: Option<&'a LocaleVariants>,
    pub topic_id: Option<&'a str>,
}

/// Checks a create or replace body (everything but the template syntax, which is checked on
/// the CPU pool): every problem is reported, each against its field.
pub fn check_content(req: &ContentRequest<'_>) -> Result<CampaignContent, Vec<Violation>> {
    let mut problems = Vec::new();
    let mut keep = |field: &str, r: Result<String, (&'static str, String)>| match r {
        Ok(v) => Some(v),
        Err((code, message)) => {
            problems.push(Violation::new(field, code, message));
            None
        }
    };
    let name = keep("name", check_name(req.name));
    let subject = keep(
        "subject",
        check_subject(req.subject).map(|_| req.subject.to_string()),
    );
    let body = keep(
        "body",
        if req.body.trim().is_empty() {
            Err(("required", "the body is empty".to_string()))
        } else {
            Ok(req.body.to_string())
        },
    );
    let description = match req.description.map(str::trim) {
        None | Some("") => None,
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => keep(
            "description",
            Err((
                "too_long",
                format!("at most {MAX_DESCRIPTION_CHARS} characters"),
            )),
        ),
        Some(d) => Some(d.to_string()),
    };
    let from_name = req
        .from_name
        .filter(|n| !n.trim().is_empty())
        .and_then(|n| keep("fromName", check_from_name(n)));
    let from_email = match EmailAddress::parse(req.from) {
        Ok(e) => Some(e),
        Err(e) => {
            problems.push(Violation::new("from", "invalid_email", e.to_string()));
            None
        }
    };
    let reply_to = match req.reply_to.filter(|r| !r.trim().is_empty()) {
        None => None,
        Some(r) => match EmailAddress::parse(r) {
            Ok(e) => Some(e),
            Err(e) => {
                problems.push(Violation::new("replyTo", "invalid_email", e.to_string()));
                None
            }
        },
    };
    let audience = check_audience(req, &mut problems);
    let locale_variants = req.locale_variants.cloned().unwrap_or_default();
    problems.extend(
        locale_variants
            .violations("localeVariants")
            .into_iter()
            .map(|(field, (code, message))| Violation::new(field, code, message)),
    );
    let topic = match req.topic_id.map(str::trim).filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => {
            let id = TopicId::parse(t);
            if id.is_none() {
                problems.push(Violation::new(
                    "topicId",
                    "not_found",
                    format!("there is no topic `{t}` in this project; GET /topics lists them"),
                ));
            }
            id
        }
    };
    match (name, subject, body, from_email, audience) {
        (Some(name), Some(subject), Some(body), Some(from_email), Some(audience))
            if problems.is_empty() =>
        {
            Ok(CampaignContent {
                name,
                description,
                subject,
                body,
                from_email,
                from_name,
                reply_to,
                audience,
                locale_variants,
                ab: None,
                topic,
            })
        }
        _ => Err(problems),
    }
}

fn check_audience(req: &ContentRequest<'_>, problems: &mut Vec<Violation>) -> Option<Audience> {
    let filter = req.audience_filter.filter(|f| !f.is_null());
    let segment = req.segment_id.filter(|s| !s.is_empty());
    match req.audience_type.trim().to_ascii_uppercase().as_str() {
        "ALL" => Some(Audience::All),
        "SEGMENT" => match segment {
            None => {
                problems.push(Violation::new(
                    "segmentId",
                    "required",
                    "`segmentId` is required when `audienceType` is SEGMENT",
                ));
                None
            }
            Some(s) => match SegmentId::parse(s) {
                Some(id) => Some(Audience::Segment(id)),
                None => {
                    problems.push(Violation::new(
                        "segmentId",
                        "not_found",
                        format!("there is no segment `{s}` in this project"),
                    ));
                    None
                }
            },
        },
        "FILTERED" => match filter {
            None => {
                problems.push(Violation::new(
                    "audienceFilter",
                    "required",
                    "`audienceFilter` is required when `audienceType` is FILTERED",
                ));
                None
            }
            Some(f) => match herald_filter::parse(f, herald_filter::Scope::Contacts) {
                Ok(_) => Some(Audience::Filtered(f.clone())),
                Err(errors) => {
                    problems.extend(errors.into_iter().map(|e| {
                        Violation::new(e.path_under("audienceFilter"), "invalid_filter", e.message)
                    }));
                    None
                }
            },
        },
        other => {
            problems.push(Violation::new(
                "audienceType",
                "invalid",
                format!("`{other}` is not an audience type; use ALL, SEGMENT or FILTERED"),
            ));
            None
        }
    }
}

/// The campaign's stats from its counts (kept with the A/B test's rules, which rank by it).
pub use super::campaign_ab::rate;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request<'a>() -> ContentRequest<'a> {
        ContentRequest {
            name: "Launch",
            subject: "Hi {{firstName ?? \"there\"}}",
            body: "<p>Hello</p>",
            from: "news@example.com",
            audience_type: "ALL",
            ..ContentRequest::default()
        }
    }

    #[test]
    fn a_complete_body_passes() {
        let c = check_content(&request()).unwrap();
        assert_eq!(c.audience, Audience::All);
        assert_eq!(c.from_email.as_str(), "news@example.com");
    }

    #[test]
    fn each_audience_needs_its_own_field() {
        let mut r = request();
        r.audience_type = "SEGMENT";
        let errors = check_content(&r).unwrap_err();
        assert_eq!(errors[0].field, "segmentId");
        r.audience_type = "FILTERED";
        let errors = check_content(&r).unwrap_err();
        assert_eq!(errors[0].field, "audienceFilter");
        let bad = json!({ "logic": "AND", "groups": [ { "filters": [ { "field": "email", "operator": "nope" } ] } ] });
        r.audience_filter = Some(&bad);
        let errors = check_content(&r).unwrap_err();
        assert_eq!(
            errors[0].field,
            "audienceFilter.groups[0].filters[0].operator"
        );
        r.audience_type = "EVERYONE";
        assert_eq!(check_content(&r).unwrap_err()[0].field, "audienceType");
    }

    #[test]
    fn every_problem_is_reported() {
        let r = ContentRequest {
            audience_type: "ALL",
            ..ContentRequest::default()
        };
        let fields: Vec<String> = check_content(&r)
            .unwrap_err()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(fields, ["name", "subject", "body", "from"]);
    }

    #[test]
    fn rates_stay_between_zero_and_one() {
        assert_eq!(rate(1, 0), 0.0);
        assert_eq!(rate(1, 4), 0.25);
        assert_eq!(rate(5, 4), 1.0);
    }
}
