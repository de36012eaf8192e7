//! The languages of what Herald shows by itself: the subscription pages it serves to recipients
//! (in the contact's `data.locale`) and the account mail it sends (in the language of the request
//! that causes it, from `Accept-Language`). Translations are TOML files under `host/locales/`,
//! embedded in the binary; `en` is complete and the fallback for any key a file leaves out.
//!
//! A tag is matched exactly (`pt-BR`), then without its last subtag down to its primary language
//! (`pt`), then falls back to `en`, as templates' `variants` are (`domain::locale`); tags that
//! are not well formed fall back to `en` too.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The fallback language, complete by construction (a unit test checks every other file
/// against it).
pub const DEFAULT: &str = "en";

/// The built-in translations: tag and file. To add a language, add `host/locales/<tag>.toml`
/// and its line here.
const LOCALES: &[(&str, &str)] = &[
    ("en", include_str!("../locales/en.toml")),
    ("fr", include_str!("../locales/fr.toml")),
    ("de", include_str!("../locales/de.toml")),
];

/// Flattened keys (`page.unsubscribe_title`, `mail.reset-password.subject`) to text.
type Catalog = HashMap<String, String>;

fn flatten(prefix: &str, table: &toml::Table, out: &mut Catalog) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(t) => flatten(&path, t, out),
            toml::Value::String(s) => {
                out.insert(path, s.clone());
            }
            other => panic!("host/locales: {path} must be a string, not {other}"),
        }
    }
}

fn catalogs() -> &'static HashMap<&'static str, Catalog> {
    static CATALOGS: OnceLock<HashMap<&'static str, Catalog>> = OnceLock::new();
    CATALOGS.get_or_init(|| {
        LOCALES
            .iter()
            .map(|(tag, source)| {
                let table: toml::Table = source
                    .parse()
                    .unwrap_or_else(|e| panic!("host/locales/{tag}.toml: {e}"));
                let mut catalog = Catalog::new();
                flatten("", &table, &mut catalog);
                (*tag, catalog)
            })
            .collect()
    })
}

/// The built-in language that matches `tag`: the exact tag, then the tag without its last
/// subtag, down to its primary language (`domain::locale::fallbacks`); `None` when none exists
/// or the tag is not well formed.
pub fn matching(tag: &str) -> Option<&'static str> {
    let tags = LOCALES.iter().map(|(t, _)| *t);
    crate::domain::locale::pick(tag, tags.clone()).and_then(|i| tags.clone().nth(i))
}

/// The language for a contact's `data.locale` (any JSON value; only a string can match).
pub fn for_contact(data: &Map<String, Value>) -> &'static str {
    data.get("locale")
        .and_then(Value::as_str)
        .and_then(matching)
        .unwrap_or(DEFAULT)
}

/// The language for an `Accept-Language` header: the built-in language matching the
/// preferred tag that has one (by `q`, then order), `en` when none does.
pub fn for_accept_language(header: Option<&str>) -> &'static str {
    let Some(header) = header else {
        return DEFAULT;
    };
    let mut ranges: Vec<(f32, usize, &str)> = header
        .split(',')
        .enumerate()
        .filter_map(|(i, item)| {
            let mut parts = item.split(';');
            let tag = parts.next()?.trim();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .next()
                .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())?;
            (q > 0.0 && tag != "*").then_some((q, i, tag))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges
        .into_iter()
        .find_map(|(_, _, tag)| matching(tag))
        .unwrap_or(DEFAULT)
}

/// The language of an HTTP request, from its `Accept-Language`.
pub fn for_request(req: &poem::Request) -> &'static str {
    for_accept_language(
        req.headers()
            .get(poem::http::header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    )
}

/// The text of `key` in `locale`, in English when the language leaves it out; the key itself
/// when even English lacks it (a unit test keeps that from happening for the keys in use).
pub fn text(locale: &str, key: &str) -> &'static str {
    let all = catalogs();
    all.get(locale)
        .and_then(|c| c.get(key))
        .or_else(|| all.get(DEFAULT).and_then(|c| c.get(key)))
        .map(String::as_str)
        .unwrap_or_else(|| {
            tracing::warn!(key, "missing translation key");
            "?"
        })
}

/// Every key under `prefix.` (without the prefix) with its text in `locale`, English filling
/// the gaps.
pub fn section(locale: &str, prefix: &str) -> Map<String, Value> {
    let all = catalogs();
    let prefix = format!("{prefix}.");
    let mut out = Map::new();
    for tag in [DEFAULT, locale] {
        if let Some(catalog) = all.get(tag) {
            for (key, value) in catalog {
                if let Some(rest) = key.strip_prefix(&prefix) {
                    out.insert(rest.to_string(), Value::String(value.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_parses_and_has_exactly_the_english_keys() {
        let all = catalogs();
        let en = &all[DEFAULT];
        for (tag, _) in LOCALES {
            let catalog = &all[tag];
            for key in en.keys() {
                assert!(catalog.contains_key(key), "{tag}.toml lacks {key}");
            }
            for key in catalog.keys() {
                assert!(
                    en.contains_key(key),
                    "{tag}.toml has {key}, en.toml does not"
                );
            }
        }
    }

    #[test]
    fn tags_match_exactly_then_by_language_then_fall_back() {
        assert_eq!(matching("fr"), Some("fr"));
        assert_eq!(matching("fr-FR"), Some("fr"));
        assert_eq!(matching("FR_ca"), Some("fr"));
        assert_eq!(matching("de-AT-1996"), Some("de"));
        assert_eq!(matching("pt-BR"), None);
        assert_eq!(matching(""), None);
        assert_eq!(matching("f"), None);
        assert_eq!(matching("fr-<script>"), None);
        let data = |v: Value| {
            let mut m = Map::new();
            m.insert("locale".into(), v);
            m
        };
        assert_eq!(for_contact(&data(Value::from("fr-FR"))), "fr");
        assert_eq!(for_contact(&data(Value::from("xx-YY"))), "en");
        assert_eq!(for_contact(&data(Value::from(7))), "en");
        assert_eq!(for_contact(&Map::new()), "en");
    }

    #[test]
    fn accept_language_takes_the_preferred_known_language() {
        assert_eq!(for_accept_language(None), "en");
        assert_eq!(for_accept_language(Some("de")), "de");
        assert_eq!(for_accept_language(Some("pt-BR, fr;q=0.8, de;q=0.9")), "de");
        assert_eq!(for_accept_language(Some("fr;q=0, *")), "en");
        assert_eq!(for_accept_language(Some("de-CH;q=0.5, fr-BE")), "fr");
        assert_eq!(for_accept_language(Some("garbage;q=x")), "en");
    }

    #[test]
    fn missing_keys_fall_back_to_english() {
        assert_eq!(text("fr", "page.unsubscribe_title"), "Se désabonner");
        assert_eq!(text("xx", "page.unsubscribe_title"), "Unsubscribe");
        let mail = section("de", "mail.reset-password");
        assert_eq!(mail["subject"], "Setzen Sie Ihr Passwort zurück");
    }
}
