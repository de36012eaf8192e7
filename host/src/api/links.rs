//! The links emails carry, served without authentication (the signed token is the credential):
//! subscription pages that work without JavaScript, the one-click unsubscribe of RFC 8058, the
//! open pixel and click redirects that only ever lead to the links that were in the email. The
//! unsubscribe link of a topic's email (its token names the topic) leaves that topic only. The
//! preference page is `preferences.rs`; what the pages share, `pages.rs`.

use poem_openapi::param::Path;
use poem_openapi::payload::{Binary, Html};
use poem_openapi::{ApiResponse, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ServerError};
use super::pages::{
    PageResponse, change_by_link, contact_of, escape, not_found, page, paragraph_form, t, t_email,
};
use super::preferences::preferences_page;
use super::state::AppState;
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::topic::{Topic, TopicChoice};
use crate::i18n;
use crate::mail::links::LinkTarget;
use crate::store::StoreError;

/// A 1×1 transparent GIF.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

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

/// Answers a page about the contact a token names, after `change` (source `link`) when given,
/// in the contact's language (`data.locale`, see [`i18n`]); a 404 page when the token is not
/// genuine. `render` gets the topic of a topic's unsubscribe token (`None` when that topic is
/// gone or the token is the contact's own).
async fn with_contact(
    state: &AppState,
    token: &str,
    change: Option<bool>,
    render: impl FnOnce(&AppState, &Contact, Option<&Topic>, &str) -> String,
) -> Result<PageResponse, ServerError> {
    let Some((mut contact, topic)) = contact_of(state, token).await? else {
        return Ok(PageResponse::NotFound(Html(not_found())));
    };
    let topic = match topic {
        Some(id) => match state.store().topic(&contact.project_id, &id).await {
            Ok(t) => Some(t),
            Err(StoreError::NotFound) => None,
            Err(e) => return Err(ApiError::from(e).into()),
        },
        None => None,
    };
    if let Some(subscribed) = change {
        // A topic's link changes that topic only; the contact's own link, the subscription.
        let change = match &topic {
            Some(t) => ContactChange {
                topics: vec![TopicChoice {
                    topic: t.id.clone(),
                    default: t.default_subscription,
                    subscribed,
                }],
                ..ContactChange::default()
            },
            None => ContactChange {
                subscribed: Some(subscribed),
                ..ContactChange::default()
            },
        };
        contact = change_by_link(state, &contact, &change).await?;
    }
    let locale = i18n::for_contact(&contact.data);
    Ok(PageResponse::Ok(Html(render(
        state,
        &contact,
        topic.as_ref(),
        locale,
    ))))
}

/// `page.<key>` in `locale` with `{email}` and `{topic}` (the topic's name) filled in.
fn t_topic(locale: &str, key: &str, contact: &Contact, topic: &Topic) -> String {
    t_email(locale, key, contact).replace("{topic}", &escape(&topic.name))
}

/// A link to the contact's preference page.
fn manage_link(state: &AppState, contact: &Contact, locale: &str) -> String {
    format!(
        "<p><a href=\"{}\">{}</a></p>",
        escape(&state.links().contact_urls(contact.id.as_str()).manage),
        t(locale, "manage_link")
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
        with_contact(&state, &token, None, |state, contact, topic, locale| {
            let links = state.links();
            let (action, question) = match topic {
                Some(topic) => (
                    links
                        .contact_urls_about(contact.id.as_str(), Some(topic.id.as_str()))
                        .unsubscribe,
                    t_topic(locale, "unsubscribe_topic_question", contact, topic),
                ),
                None => (
                    links.unsubscribe_url(contact.id.as_str()),
                    t_email(locale, "unsubscribe_question", contact),
                ),
            };
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
        with_contact(
            &state,
            &token,
            Some(false),
            |state, contact, topic, locale| {
                if let Some(topic) = topic {
                    let said = t_topic(locale, "unsubscribed_topic_body", contact, topic);
                    return page(
                        locale,
                        &t(locale, "unsubscribed_title"),
                        &format!("<p>{said}</p>{}", manage_link(state, contact, locale)),
                    );
                }
                let action = state.links().subscribe_url(contact.id.as_str());
                let said = t_email(locale, "unsubscribed_body", contact);
                page(
                    locale,
                    &t(locale, "unsubscribed_title"),
                    &paragraph_form(&said, &action, &t(locale, "subscribe_again_button")),
                )
            },
        )
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
        with_contact(&state, &token, None, |state, contact, _, locale| {
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
        let Some((contact, _)) = contact_of(&state, &token).await? else {
            return Ok(PageResponse::NotFound(Html(not_found())));
        };
        let change = ContactChange {
            subscribed: Some(true),
            ..ContactChange::default()
        };
        let contact = change_by_link(&state, &contact, &change).await?;
        // The preference page, with the topics the contact may choose.
        Ok(preferences_page(&state, &contact, None, Some("resubscribed_note")).await?)
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
