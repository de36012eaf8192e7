//! Content per language: a template's `variants`, a subject and a body for each BCP 47 tag, and
//! which of them a contact gets.
//!
//! A contact's language is its `data.locale` (the spec's soft-reserved key). Its tag is matched
//! against the variants' tags without regard to case (`_` read as `-`), first whole, then with
//! its last subtag dropped, again and again: `fr-CA` finds `fr-CA`, else `fr`; `zh-Hant-TW` finds
//! `zh-Hant-TW`, `zh-Hant`, then `zh`. When none matches, or the contact has no locale, the
//! template's own subject and body are used. A more specific variant never stands in for a
//! less specific tag: a contact in `fr` does not get `fr-CA`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::template::fields::{Violation, check_subject};

/// The most variants one template may carry.
pub const MAX_VARIANTS: usize = 50;

/// One language's subject and body (both templates, like the template's own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocaleContent {
    pub subject: String,
    pub body: String,
}

/// Content by language tag, as written, in tag order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LocaleVariants(pub BTreeMap<String, LocaleContent>);

impl LocaleVariants {
    /// Whether there is no variant.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems of these variants apart from their template syntax, each with the path of
    /// its field under `field` (`variants`, `variants.fr.subject`): too many, a tag that is not
    /// well formed or repeats another in another case, a subject not on one line or too long, an
    /// empty body. Too many is the only problem named when there are too many.
    pub fn violations(&self, field: &str) -> Vec<(String, Violation)> {
        let mut problems = Vec::new();
        if self.0.len() > MAX_VARIANTS {
            problems.push((
                field.to_string(),
                (
                    "too_many",
                    format!(
                        "at most {MAX_VARIANTS} languages; this has {}",
                        self.0.len()
                    ),
                ),
            ));
            return problems;
        }
        let mut seen: Vec<(String, &str)> = Vec::new();
        for (tag, content) in &self.0 {
            let here = format!("{field}.{tag}");
            if !well_formed(tag) {
                problems.push((
                    here.clone(),
                    (
                        "invalid_locale",
                        format!(
                            "`{tag}` is not a language tag; use a BCP 47 tag such as `fr`, \
                             `pt-BR` or `zh-Hant`"
                        ),
                    ),
                ));
                continue;
            }
            let normal = normalize(tag);
            if let Some((_, other)) = seen.iter().find(|(s, _)| *s == normal) {
                problems.push((
                    here.clone(),
                    (
                        "duplicate",
                        format!("`{tag}` is the same language as `{other}`; keep one of them"),
                    ),
                ));
            }
            seen.push((normal, tag));
            if let Err(v) = check_subject(&content.subject) {
                problems.push((format!("{here}.subject"), v));
            }
            if content.body.is_empty() {
                problems.push((
                    format!("{here}.body"),
                    ("required", "the body is empty".into()),
                ));
            }
        }
        problems
    }
}

impl LocaleVariants {
    /// The template syntax errors of each variant, with the path of the field under `field`
    /// (`variants.fr.body`) and the message with its position. Compiles every variant: run it
    /// off the async workers.
    pub fn syntax_errors(&self, field: &str) -> Vec<(String, String)> {
        self.0
            .iter()
            .flat_map(|(tag, c)| {
                super::template::check(Some(&c.subject), Some(&c.body))
                    .into_iter()
                    .map(move |e| (format!("{field}.{tag}.{}", e.field), e.describe()))
            })
            .collect()
    }
}

/// Whether `tag` is a well-formed language tag as far as matching needs: subtags of 1 to 8
/// letters or digits separated by `-` (or `_`), the first of 2 to 8 letters.
pub fn well_formed(tag: &str) -> bool {
    let mut parts = tag.split(['-', '_']);
    let Some(primary) = parts.next() else {
        return false;
    };
    (2..=8).contains(&primary.len())
        && primary.chars().all(|c| c.is_ascii_alphabetic())
        && parts.all(|p| (1..=8).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// A tag as compared: lower case, `-` between subtags.
fn normalize(tag: &str) -> String {
    tag.trim().replace('_', "-").to_ascii_lowercase()
}

/// The tags tried for `tag`, most specific first: the tag, then without its last subtag, down to
/// its primary language. Empty when the tag is not well formed.
pub fn fallbacks(tag: &str) -> Vec<String> {
    let tag = normalize(tag);
    if !well_formed(&tag) {
        return Vec::new();
    }
    let mut tried = vec![tag.clone()];
    let mut rest = tag.as_str();
    while let Some(cut) = rest.rfind('-') {
        rest = &rest[..cut];
        tried.push(rest.to_string());
    }
    tried
}

/// The position in `tags` of the one `tag` falls back to first (see [`fallbacks`]).
pub fn pick<'a>(tag: &str, tags: impl Iterator<Item = &'a str> + Clone) -> Option<usize> {
    fallbacks(tag)
        .iter()
        .find_map(|wanted| tags.clone().position(|t| normalize(t) == *wanted))
}

/// The language of a contact: `locale` of this send's one-off data, else of its stored data;
/// only a string counts.
pub fn of_contact<'a>(
    transient: &'a Map<String, Value>,
    data: &'a Map<String, Value>,
) -> Option<&'a str> {
    transient
        .get("locale")
        .or_else(|| data.get("locale"))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(subject: &str) -> LocaleContent {
        LocaleContent {
            subject: subject.into(),
            body: "<p>b</p>".into(),
        }
    }

    #[test]
    fn a_tag_falls_back_subtag_by_subtag_and_never_to_a_more_specific_one() {
        let tags = ["fr", "pt-BR", "zh-Hant", "de-CH"];
        let pick = |tag: &str| pick(tag, tags.iter().copied()).map(|i| tags[i]);
        assert_eq!(pick("fr-CA"), Some("fr"));
        assert_eq!(pick("FR_ca"), Some("fr"));
        assert_eq!(pick("pt-br"), Some("pt-BR"));
        assert_eq!(pick("pt"), None);
        assert_eq!(pick("zh-Hant-TW"), Some("zh-Hant"));
        assert_eq!(pick("de"), None);
        assert_eq!(pick("en"), None);
        assert_eq!(pick(""), None);
        assert_eq!(pick("not a tag"), None);
        assert_eq!(
            fallbacks("zh-Hant-TW"),
            ["zh-hant-tw", "zh-hant", "zh"].map(String::from)
        );
    }

    #[test]
    fn variants_name_each_broken_field() {
        let mut v = LocaleVariants::default();
        v.0.insert("fr".into(), content("Bonjour"));
        v.0.insert("FR".into(), content("Salut"));
        v.0.insert("x".into(), content("?"));
        v.0.insert("de".into(), content("a\nb"));
        v.0.insert(
            "pt-BR".into(),
            LocaleContent {
                subject: "Olá".into(),
                body: String::new(),
            },
        );
        let fields: Vec<String> = v
            .violations("variants")
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(
            fields,
            [
                "variants.de.subject",
                "variants.fr",
                "variants.pt-BR.body",
                "variants.x",
            ]
        );
    }

    #[test]
    fn the_one_off_locale_comes_before_the_stored_one() {
        let stored: Map<String, Value> = serde_json::from_str(r#"{"locale":"de"}"#).unwrap();
        let once: Map<String, Value> = serde_json::from_str(r#"{"locale":"fr"}"#).unwrap();
        assert_eq!(of_contact(&once, &stored), Some("fr"));
        assert_eq!(of_contact(&Map::new(), &stored), Some("de"));
        let number: Map<String, Value> = serde_json::from_str(r#"{"locale":3}"#).unwrap();
        assert_eq!(of_contact(&Map::new(), &number), None);
    }
}
