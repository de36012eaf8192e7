//! The preference center: the signed `manageUrl` page, a plain HTML form that works without
//! JavaScript. It lists the project's `PUBLIC` topics as checkboxes with the contact's state,
//! and the global unsubscribe from all marketing mail; a `POST` of the form saves them (source
//! `link`: `contact.topic.subscribed` / `contact.topic.unsubscribed` and `contact.subscribed` /
//! `contact.unsubscribed` events for what changed). Texts are in the contact's `data.locale`.

use std::collections::BTreeMap;

use poem_openapi::OpenApi;
use poem_openapi::param::Path;
use poem_openapi::payload::{Form, Html};

use super::ApiTags;
use super::error::{ApiError, FormPageError, ServerError};
use super::pages::{PageResponse, change_by_link, contact_of, escape, not_found, page, t, t_email};
use super::state::AppState;
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::topic::{Topic, TopicChoice, Visibility};
use crate::i18n;

/// The form field of a topic's checkbox (`topic.<id>`, sent only when checked).
const TOPIC_FIELD: &str = "topic.";
/// The form field saying a topic was on the page (`shown.<id>`, a hidden field), so that an
/// unchecked box, which a browser does not send, is told from a topic the page did not show.
const SHOWN_FIELD: &str = "shown.";
/// The form field of the global unsubscribe checkbox.
const UNSUBSCRIBE_ALL_FIELD: &str = "unsubscribeAll";

/// The project's topics a contact's preference page lists.
async fn public_topics(state: &AppState, contact: &Contact) -> Result<Vec<Topic>, ApiError> {
    let topics = state.store().list_topics(&contact.project_id).await?;
    Ok(topics
        .into_iter()
        .filter(|t| t.visibility == Visibility::Public)
        .collect())
}

/// `checked` or nothing.
fn checked(on: bool) -> &'static str {
    if on { " checked" } else { "" }
}

/// The preference page of `contact` listing `topics`, after `note` (HTML).
fn manage_page(
    state: &AppState,
    contact: &Contact,
    topics: &[Topic],
    locale: &str,
    note: &str,
) -> String {
    let action = state.links().contact_urls(contact.id.as_str()).manage;
    let state_key = if contact.subscribed {
        "subscribed_state"
    } else {
        "unsubscribed_state"
    };
    let mut fields = String::new();
    if !topics.is_empty() {
        fields.push_str(&format!("<p>{}</p>", t(locale, "topics_heading")));
    }
    for topic in topics {
        let id = escape(topic.id.as_str());
        let description = topic
            .description
            .as_deref()
            .map(|d| format!("<br><small>{}</small>", escape(d)))
            .unwrap_or_default();
        fields.push_str(&format!(
            "<input type=\"hidden\" name=\"{SHOWN_FIELD}{id}\" value=\"1\">\
             <label><input type=\"checkbox\" name=\"{TOPIC_FIELD}{id}\" value=\"on\"{}> {}{description}</label>",
            checked(topic.subscribed(&contact.topics)),
            escape(&topic.name),
        ));
    }
    fields.push_str(&format!(
        "<label><input type=\"checkbox\" name=\"{UNSUBSCRIBE_ALL_FIELD}\" value=\"on\"{}> {}</label>",
        checked(!contact.subscribed),
        t(locale, "unsubscribe_all_label"),
    ));
    page(
        locale,
        &t(locale, "preferences_title"),
        &format!(
            "{note}<p>{}</p><form method=\"post\" action=\"{}\">{fields}\
             <p><button type=\"submit\">{}</button></p></form>",
            t_email(locale, state_key, contact),
            escape(&action),
            t(locale, "save_button"),
        ),
    )
}

/// The preference page of `contact` with its public topics, after the note `page.<note>` if
/// any (`saved_note` after a save, `resubscribed_note` after the subscribe link).
pub(super) async fn preferences_page(
    state: &AppState,
    contact: &Contact,
    topics: Option<Vec<Topic>>,
    note: Option<&str>,
) -> Result<PageResponse, ApiError> {
    let topics = match topics {
        Some(topics) => topics,
        None => public_topics(state, contact).await?,
    };
    let locale = i18n::for_contact(&contact.data);
    let note = note
        .map(|key| format!("<p>{}</p>", t(locale, key)))
        .unwrap_or_default();
    Ok(PageResponse::Ok(Html(manage_page(
        state, contact, &topics, locale, &note,
    ))))
}

/// What a posted form asks of `contact`: its global subscription and a choice for each listed
/// topic that the page showed.
fn change_of(form: &BTreeMap<String, String>, topics: &[Topic]) -> ContactChange {
    let choices = topics
        .iter()
        .filter(|t| form.contains_key(&format!("{SHOWN_FIELD}{}", t.id)))
        .map(|t| TopicChoice {
            topic: t.id.clone(),
            default: t.default_subscription,
            subscribed: form.contains_key(&format!("{TOPIC_FIELD}{}", t.id)),
        })
        .collect();
    ContactChange {
        subscribed: Some(!form.contains_key(UNSUBSCRIBE_ALL_FIELD)),
        topics: choices,
        ..ContactChange::default()
    }
}

/// The preference center.
#[derive(Default)]
pub struct PreferencesApi;

#[OpenApi(tag = "ApiTags::Links")]
impl PreferencesApi {
    /// Preferences page
    ///
    /// The contact's preference center: the project's `PUBLIC` topics as checkboxes with the
    /// contact's state, and the unsubscribe from all marketing mail, in a form that a `POST`
    /// saves (no JavaScript needed). A `GET` changes nothing.
    #[oai(path = "/manage/:token", method = "get", operation_id = "managePage")]
    async fn manage(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        let Some((contact, _)) = contact_of(&state, &token).await? else {
            return Ok(PageResponse::NotFound(Html(not_found())));
        };
        Ok(preferences_page(&state, &contact, None, None).await?)
    }

    /// Save preferences
    ///
    /// The preference form's submit (`application/x-www-form-urlencoded`): `topic.<id>=on` for
    /// each checked topic, `shown.<id>` for each topic the page listed, `unsubscribeAll=on` to
    /// leave all marketing mail. Each listed topic becomes the contact's choice (events
    /// `contact.topic.subscribed` / `contact.topic.unsubscribed`, source `link`, for each that
    /// changes), and the global subscription follows `unsubscribeAll`
    /// (`contact.subscribed` / `contact.unsubscribed`). Answers the page, saved.
    #[oai(
        path = "/manage/:token",
        method = "post",
        operation_id = "savePreferences"
    )]
    async fn save(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
        form: Form<BTreeMap<String, String>>,
    ) -> Result<PageResponse, FormPageError> {
        let Some((contact, _)) = contact_of(&state, &token).await? else {
            return Ok(PageResponse::NotFound(Html(not_found())));
        };
        let topics = public_topics(&state, &contact).await?;
        let change = change_of(&form.0, &topics);
        let contact = change_by_link(&state, &contact, &change).await?;
        Ok(preferences_page(&state, &contact, Some(topics), Some("saved_note")).await?)
    }
}
