//! The links emails carry, served without authentication (the signed token is the credential):
//! subscription pages that work without JavaScript, the one-click unsubscribe of RFC 8058, the
//! open pixel and click redirects that only ever lead to the links that were in the email.

use poem_openapi::param::Path;
use poem_openapi::payload::{Binary, Html};
use poem_openapi::{ApiResponse, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ServerError};
use super::state::AppState;
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::ContactId;
use crate::i18n;
use crate::mail::links::LinkTarget;
use crate::store::StoreError;

/// A 1×1 transparent GIF.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

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

/// The open pixel.
#[derive(ApiResponse)]
pub enum PixelResponse {
    /// A transparent GIF, never cached.
    #[oai(status = 200, content_type = "image/gif")]
    Gif(Binary<Vec<u8>>, #[oai(header = "Cache-Control")] String),
}

/// A click redirect.
#[derive(ApiResponse)]
pub enum RedirectResponse {
    /// To the link that was in the email.
    #[oai(status = 302)]
    Found(#[oai(header = "Location")] String),
    /// The link is not valid.
    #[oai(status = 404)]
    NotFound(Html<String>),
}

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

pub(super) fn page(locale: &str, title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"{locale}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}}\
         button{{font-size:1rem;padding:.6rem 1.2rem;cursor:pointer}}</style></head>\
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
fn form(action: &str, label: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}\"><button type=\"submit\">{label}</button></form>",
        escape(action),
    )
}

/// The contact a subscription token names, if the token is genuine and the contact exists.
async fn contact_of(state: &AppState, token: &str) -> Result<Option<Contact>, ApiError> {
    let Some(LinkTarget::Contact { contact_id }) = state.links().verify(token) else {
        return Ok(None);
    };
    let Some(id) = ContactId::parse(&contact_id) else {
        return Ok(None);
    };
    match state.store().contact_by_id(&id).await {
        Ok(c) => Ok(Some(c)),
        Err(StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Answers a page about the contact a token names, after setting its subscription to `change`
/// (source `link`) when given, in the contact's language (`data.locale`, see [`i18n`]); a 404
/// page when the token is not genuine.
async fn with_contact(
    state: &AppState,
    token: &str,
    change: Option<bool>,
    render: impl FnOnce(&AppState, &Contact, &str) -> String,
) -> Result<PageResponse, ServerError> {
    let Some(mut contact) = contact_of(state, token).await? else {
        return Ok(PageResponse::NotFound(Html(not_found())));
    };
    if let Some(subscribed) = change {
        let change = ContactChange {
            subscribed: Some(subscribed),
            ..ContactChange::default()
        };
        contact = state
            .store()
            .update_contact(
                &contact.project_id,
                &contact.id,
                &change,
                SubscriptionSource::Link,
            )
            .await
            .map_err(|e| ApiError::from_store(e, "contact"))?
            .contact;
    }
    let locale = i18n::for_contact(&contact.data);
    Ok(PageResponse::Ok(Html(render(state, &contact, locale))))
}

/// The contact's address, escaped and bold.
fn strong(contact: &Contact) -> String {
    format!("<strong>{}</strong>", escape(contact.email.as_str()))
}

/// A paragraph (already HTML) and a one-button form.
pub(super) fn paragraph_form(html: &str, action: &str, label: &str) -> String {
    format!("<p>{html}</p>{}", form(action, label))
}

/// The preferences page, after `note` (HTML).
fn manage_page(state: &AppState, contact: &Contact, locale: &str, note: &str) -> String {
    let links = state.links();
    let (state_key, action) = if contact.subscribed {
        (
            "subscribed_state",
            form(
                &links.unsubscribe_url(contact.id.as_str()),
                &t(locale, "unsubscribe_button"),
            ),
        )
    } else {
        (
            "unsubscribed_state",
            form(
                &links.subscribe_url(contact.id.as_str()),
                &t(locale, "subscribe_again_button"),
            ),
        )
    };
    page(
        locale,
        &t(locale, "preferences_title"),
        &format!(
            "{note}<p>{}</p>{action}",
            t_email(locale, state_key, contact)
        ),
    )
}

/// The subscription pages and tracking links.
#[derive(Default)]
pub struct LinksApi;

#[OpenApi(tag = "ApiTags::Links")]
impl LinksApi {
    /// Unsubscribe page
    ///
    /// Shows a button that unsubscribes (a GET changes nothing, so link scanners cannot
    /// unsubscribe anyone).
    #[oai(
        path = "/unsubscribe/:token",
        method = "get",
        operation_id = "unsubscribePage"
    )]
    async fn unsubscribe_page(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        with_contact(&state, &token, None, |state, contact, locale| {
            let action = state.links().unsubscribe_url(contact.id.as_str());
            let question = t_email(locale, "unsubscribe_question", contact);
            page(
                locale,
                &t(locale, "unsubscribe_title"),
                &paragraph_form(&question, &action, &t(locale, "unsubscribe_button")),
            )
        })
        .await
    }

    /// Unsubscribe
    ///
    /// The form's submit and the one-click unsubscribe of RFC 8058 (`List-Unsubscribe-Post:
    /// List-Unsubscribe=One-Click`): unsubscribes the contact (event `contact.unsubscribed` with
    /// source `link`).
    #[oai(
        path = "/unsubscribe/:token",
        method = "post",
        operation_id = "unsubscribe"
    )]
    async fn unsubscribe(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        with_contact(&state, &token, Some(false), |state, contact, locale| {
            let action = state.links().subscribe_url(contact.id.as_str());
            let said = t_email(locale, "unsubscribed_body", contact);
            page(
                locale,
                &t(locale, "unsubscribed_title"),
                &paragraph_form(&said, &action, &t(locale, "subscribe_again_button")),
            )
        })
        .await
    }

    /// Subscribe page
    #[oai(
        path = "/subscribe/:token",
        method = "get",
        operation_id = "subscribePage"
    )]
    async fn subscribe_page(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        with_contact(&state, &token, None, |state, contact, locale| {
            let action = state.links().subscribe_url(contact.id.as_str());
            let question = t_email(locale, "subscribe_question", contact);
            page(
                locale,
                &t(locale, "subscribe_title"),
                &paragraph_form(&question, &action, &t(locale, "subscribe_button")),
            )
        })
        .await
    }

    /// Subscribe
    ///
    /// Subscribes the contact (event `contact.subscribed` with source `link`).
    #[oai(
        path = "/subscribe/:token",
        method = "post",
        operation_id = "subscribe"
    )]
    async fn subscribe(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        with_contact(&state, &token, Some(true), |state, contact, locale| {
            let note = format!("<p>{}</p>", t(locale, "resubscribed_note"));
            manage_page(state, contact, locale, &note)
        })
        .await
    }

    /// Preferences page
    ///
    /// Shows the contact's subscription state with a button to change it.
    #[oai(path = "/manage/:token", method = "get", operation_id = "managePage")]
    async fn manage(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PageResponse, ServerError> {
        with_contact(&state, &token, None, |state, contact, locale| {
            manage_page(state, contact, locale, "")
        })
        .await
    }

    /// Open pixel
    ///
    /// Records that the email was opened (when the project tracks opens) and answers a
    /// transparent GIF, also for unknown tokens. The first open is recorded at once; later ones
    /// are counted and added to the email's `opens` within about a second.
    #[oai(path = "/t/o/:token", method = "get", operation_id = "trackOpen")]
    async fn open(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<PixelResponse, ServerError> {
        if let Some(LinkTarget::Open { email_id }) = state.links().verify(&token) {
            state.engagement().open(&email_id).await;
        }
        Ok(PixelResponse::Gif(
            Binary(PIXEL.to_vec()),
            "no-store, no-cache, must-revalidate, max-age=0".into(),
        ))
    }

    /// Click redirect
    ///
    /// Records the click and redirects to the link that was in the email. Tokens are signed, so
    /// the redirect can never lead anywhere else. The first click is recorded at once; later
    /// ones are counted and added to the email's `clicks` within about a second.
    #[oai(path = "/t/c/:token", method = "get", operation_id = "trackClick")]
    async fn click(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<RedirectResponse, ServerError> {
        let Some(LinkTarget::Click { email_id, index }) = state.links().verify(&token) else {
            return Ok(RedirectResponse::NotFound(Html(not_found())));
        };
        let Some(url) = state.engagement().click(&email_id, index).await? else {
            return Ok(RedirectResponse::NotFound(Html(not_found())));
        };
        Ok(RedirectResponse::Found(url))
    }
}
