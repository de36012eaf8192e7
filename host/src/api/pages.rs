//! What the signed pages share (`links.rs`, `preferences.rs`): the page frame, its texts in the
//! contact's language (`i18n`), escaping, one-button forms, and the contact (and topic) a
//! subscription token names.

use poem_openapi::ApiResponse;
use poem_openapi::payload::Html;

use super::error::ApiError;
use super::state::AppState;
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::{ContactId, TopicId};
use crate::i18n;
use crate::mail::links::LinkTarget;
use crate::store::StoreError;

/// A subscription page.
#[derive(ApiResponse)]
pub enum PageResponse {
    /// The page.
    #[oai(status = 200)]
    Ok(Html<String>),
    /// The link is not valid (or its contact is gone).
    #[oai(status = 404)]
    NotFound(Html<String>),
}

/// `s` escaped for HTML text and attribute values.
pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The text of `page.<key>` in `locale`, escaped.
pub(super) fn t(locale: &str, key: &str) -> String {
    escape(i18n::text(locale, &format!("page.{key}")))
}

/// The text of `<key>` (a full key: `confirm.page_title`) in `locale`, escaped, with `{email}`
/// standing for the contact's address (bold).
pub(super) fn text_email(locale: &str, key: &str, contact: &Contact) -> String {
    escape(i18n::text(locale, key)).replace("{email}", &strong(contact))
}

/// The text of `page.<key>` in `locale`, escaped, with `{email}` standing for the contact's
/// address (bold).
pub(super) fn t_email(locale: &str, key: &str, contact: &Contact) -> String {
    t(locale, key).replace("{email}", &strong(contact))
}

/// A whole page.
pub(super) fn page(locale: &str, title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"{locale}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}}\
         button{{font-size:1rem;padding:.6rem 1.2rem;cursor:pointer}}\
         label{{display:block;margin:.6rem 0}}</style></head>\
         <body><h1>{title}</h1>{body}</body></html>"
    )
}

/// The page for a link that is not valid; in English, as no contact tells the language.
pub(super) fn not_found() -> String {
    let locale = i18n::DEFAULT;
    page(
        locale,
        &t(locale, "not_found_title"),
        &format!("<p>{}</p>", t(locale, "not_found_body")),
    )
}

/// A one-button form; `label` is HTML already.
pub(super) fn form(action: &str, label: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}\"><button type=\"submit\">{label}</button></form>",
        escape(action),
    )
}

/// The contact's address, escaped and bold.
pub(super) fn strong(contact: &Contact) -> String {
    format!("<strong>{}</strong>", escape(contact.email.as_str()))
}

/// A paragraph (already HTML) and a one-button form.
pub(super) fn paragraph_form(html: &str, action: &str, label: &str) -> String {
    format!("<p>{html}</p>{}", form(action, label))
}

/// The contact a subscription token names, with the topic when it is a topic's unsubscribe
/// token; `None` when the token is not genuine or the contact is gone.
pub(super) async fn contact_of(
    state: &AppState,
    token: &str,
) -> Result<Option<(Contact, Option<TopicId>)>, ApiError> {
    let (contact_id, topic) = match state.links().verify(token) {
        Some(LinkTarget::Contact { contact_id }) => (contact_id, None),
        Some(LinkTarget::Topic {
            contact_id,
            topic_id,
        }) => match TopicId::parse(&topic_id) {
            Some(topic) => (contact_id, Some(topic)),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some(id) = ContactId::parse(&contact_id) else {
        return Ok(None);
    };
    match state.store().contact_by_id(&id).await {
        Ok(c) => Ok(Some((c, topic))),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `contact` after `change`, made through its own signed link (source `link`).
pub(super) async fn change_by_link(
    state: &AppState,
    contact: &Contact,
    change: &ContactChange,
) -> Result<Contact, ApiError> {
    Ok(state
        .store()
        .update_contact(
            &contact.project_id,
            &contact.id,
            change,
            SubscriptionSource::Link,
        )
        .await
        .map_err(|e| ApiError::from_store(e, "contact"))?
        .contact)
}
