//! Topics (`docs/engagement.md`, "Topics and the preference center"): what a project's contacts
//! subscribe to one by one, beside the global `subscribed` flag. A contact's state for a topic is
//! its own choice when it made one, else the topic's default: `OPT_IN` subscribed, `OPT_OUT` not
//! (Resend's `default_subscription`). A topic-scoped send reaches a contact only when it is
//! subscribed to the topic *and* globally subscribed.

use std::collections::BTreeMap;

use super::ids::TopicId;
use super::segment::Violation;
/// A topic's name (1 to 200 characters) and description (at most 2000) follow a segment's rules.
pub use super::segment::{check_description, check_name};

/// Most topics one project may have.
pub const MAX_TOPICS: i64 = 100;

/// The state of a contact that made no choice for a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultSubscription {
    /// Subscribed until it opts out.
    OptIn,
    /// Not subscribed until it opts in.
    OptOut,
}

impl DefaultSubscription {
    /// The wire and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultSubscription::OptIn => "OPT_IN",
            DefaultSubscription::OptOut => "OPT_OUT",
        }
    }

    /// Accepts the wire names in any case.
    pub fn parse(s: &str) -> Option<DefaultSubscription> {
        [DefaultSubscription::OptIn, DefaultSubscription::OptOut]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether a contact without a choice is subscribed.
    pub fn subscribed(self) -> bool {
        self == DefaultSubscription::OptIn
    }
}

/// Whether the preference page lists a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Listed on the preference page, where the contact changes its choice.
    Public,
    /// Not listed: changed only through the API.
    Private,
}

impl Visibility {
    /// The wire and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "PUBLIC",
            Visibility::Private => "PRIVATE",
        }
    }

    /// Accepts the wire names in any case.
    pub fn parse(s: &str) -> Option<Visibility> {
        [Visibility::Public, Visibility::Private]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
    }
}

/// A stored topic.
#[derive(Clone, Debug, PartialEq)]
pub struct Topic {
    pub id: TopicId,
    pub name: String,
    pub description: Option<String>,
    pub default_subscription: DefaultSubscription,
    pub visibility: Visibility,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Topic {
    /// A contact's state for this topic, from its choices (`Contact::topics`).
    pub fn subscribed(&self, choices: &BTreeMap<String, bool>) -> bool {
        effective(choices, self.id.as_str(), self.default_subscription)
    }
}

/// A contact's state for topic `id` with default `default`: its choice if any, else the default.
pub fn effective(choices: &BTreeMap<String, bool>, id: &str, default: DefaultSubscription) -> bool {
    choices
        .get(id)
        .copied()
        .unwrap_or_else(|| default.subscribed())
}

/// One choice a write asks for: the topic (checked to exist), its default and the new state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicChoice {
    pub topic: TopicId,
    pub default: DefaultSubscription,
    pub subscribed: bool,
}

/// A change of a contact's state for a topic that a write made (its event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicChange {
    pub topic: TopicId,
    pub subscribed: bool,
}

/// The changes of state that `choices` make to a contact whose choices were `before` (`None`
/// for a new contact): each topic whose state differs afterwards, once.
pub fn changes(
    before: Option<&BTreeMap<String, bool>>,
    choices: &[TopicChoice],
) -> Vec<TopicChange> {
    let empty = BTreeMap::new();
    let before = before.unwrap_or(&empty);
    let mut after = before.clone();
    let mut touched: Vec<&TopicChoice> = Vec::new();
    for c in choices {
        after.insert(c.topic.as_str().to_string(), c.subscribed);
        touched.retain(|t| t.topic != c.topic);
        touched.push(c);
    }
    touched
        .into_iter()
        .filter_map(|c| {
            let was = effective(before, c.topic.as_str(), c.default);
            let now = effective(&after, c.topic.as_str(), c.default);
            (was != now).then(|| TopicChange {
                topic: c.topic.clone(),
                subscribed: now,
            })
        })
        .collect()
}

/// A default subscription from its wire name.
pub fn check_default(s: &str) -> Result<DefaultSubscription, Violation> {
    DefaultSubscription::parse(s).ok_or_else(|| {
        Violation::new(
            "defaultSubscription",
            "invalid",
            format!(
                "`{s}` is not a default subscription; use OPT_IN (subscribed until the contact \
                 opts out) or OPT_OUT (subscribed only once the contact opts in)"
            ),
        )
    })
}

/// A visibility from its wire name.
pub fn check_visibility(s: &str) -> Result<Visibility, Violation> {
    Visibility::parse(s).ok_or_else(|| {
        Violation::new(
            "visibility",
            "invalid",
            format!(
                "`{s}` is not a visibility; use PUBLIC (listed on the preference page) or PRIVATE"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(id: &TopicId, default: DefaultSubscription, subscribed: bool) -> TopicChoice {
        TopicChoice {
            topic: id.clone(),
            default,
            subscribed,
        }
    }

    #[test]
    fn a_choice_equal_to_the_default_changes_nothing() {
        let t = TopicId::generate();
        assert!(changes(None, &[choice(&t, DefaultSubscription::OptIn, true)]).is_empty());
        let out = changes(None, &[choice(&t, DefaultSubscription::OptOut, true)]);
        assert_eq!(
            out,
            vec![TopicChange {
                topic: t.clone(),
                subscribed: true
            }]
        );
        let mut before = BTreeMap::new();
        before.insert(t.as_str().to_string(), false);
        let out = changes(
            Some(&before),
            &[choice(&t, DefaultSubscription::OptIn, false)],
        );
        assert!(out.is_empty());
        let out = changes(
            Some(&before),
            &[
                choice(&t, DefaultSubscription::OptIn, true),
                choice(&t, DefaultSubscription::OptIn, false),
            ],
        );
        assert!(out.is_empty(), "the last choice of a topic counts");
    }
}
