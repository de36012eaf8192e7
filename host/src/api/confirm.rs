//! The confirmation link of confirmed opt-in (docs/engagement.md, "Confirmed opt-in"): its page
//! shows a button and changes nothing, so that mail scanners following links confirm nobody;
//! the form's `POST` confirms. Served without authentication (the signed token is the
//! credential), in the contact's language, without JavaScript.

use poem_openapi::param::Path;
use poem_openapi::payload::Html;
use poem_openapi::{ApiResponse, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ServerError};
use super::extract::{Caller, ProjectContext};
use super::pages::{escape, not_found, page, paragraph_form, text_email};
use super::state::AppState;
use crate::domain::contact::Contact;
use crate::domain::ids::ContactId;
use crate::i18n;
use crate::mail::links::LinkTarget;
use crate::services::confirmation::LinkState;

/// A confirmation page.
#[derive(ApiResponse)]
pub enum ConfirmPageResponse {
    /// The page: the button (pending), or that the contact is subscribed.
    #[oai(status = 200)]
    Ok(Html<String>),
    /// The link is not valid (or its contact is gone).
    #[oai(status = 404)]
    NotFound(Html<String>),
    /// The link expired or was replaced by a newer one: it confirms nothing.
    #[oai(status = 410)]
    Gone(Html<String>),
}

/// After a write that asked a subscription for `contact` where the project's confirmed opt-in
/// applies: makes it pending and mails its confirmation (not within the resend interval). The
/// write has committed, so a failure is logged, not answered: the next subscription asked
/// mails again.
pub(super) async fn ask_confirmation(state: &AppState, ctx: &ProjectContext, contact: &Contact) {
    if let Err(err) = state.confirmations().ask(&ctx.project, contact).await {
        tracing::warn!(error = %err, contact_id = %contact.id, "could not mail the confirmation of a subscription");
    }
}

/// Whether the project's confirmed opt-in applies to a subscription this caller asks.
pub(super) fn opt_in_applies(ctx: &ProjectContext) -> bool {
    ctx.project
        .double_opt_in
        .applies(matches!(ctx.caller, Caller::PublicKey))
}

/// Ends a pending contact's wait after a write that refused its subscription (`subscribed:
/// false`), when the project has confirmed opt-in at all; logged on failure, as above.
pub(super) async fn cancel_confirmation(
    state: &AppState,
    ctx: &ProjectContext,
    contact: &ContactId,
) {
    if ctx.project.double_opt_in == crate::domain::project::DoubleOptIn::Off {
        return;
    }
    if let Err(err) = state.confirmations().cancel(&ctx.project, contact).await {
        tracing::warn!(error = %err, contact_id = %contact, "could not end a pending subscription");
    }
}

/// The page for a link's state: the button while the contact is pending; that it is
/// subscribed (after the `POST`, or otherwise); or that the link expired.
fn answer(state: &AppState, token: &str, link: LinkState) -> ConfirmPageResponse {
    match link {
        LinkState::Unknown => ConfirmPageResponse::NotFound(Html(not_found())),
        LinkState::Pending(contact) => {
            let locale = i18n::for_contact(&contact.data);
            let action = format!("{}/confirm/{token}", state.links().base());
            let question = text_email(locale, "confirm.page_question", &contact);
            ConfirmPageResponse::Ok(Html(page(
                locale,
                &escape(i18n::text(locale, "confirm.page_title")),
                &paragraph_form(
                    &question,
                    &action,
                    &escape(i18n::text(locale, "confirm.page_button")),
                ),
            )))
        }
        LinkState::Subscribed(contact) => {
            let locale = i18n::for_contact(&contact.data);
            let said = text_email(locale, "confirm.done_body", &contact);
            ConfirmPageResponse::Ok(Html(page(
                locale,
                &escape(i18n::text(locale, "confirm.done_title")),
                &format!("<p>{said}</p>"),
            )))
        }
        LinkState::Expired(contact) => {
            let locale = i18n::for_contact(&contact.data);
            ConfirmPageResponse::Gone(Html(page(
                locale,
                &escape(i18n::text(locale, "confirm.expired_title")),
                &format!(
                    "<p>{}</p>",
                    escape(i18n::text(locale, "confirm.expired_body"))
                ),
            )))
        }
    }
}

/// The page of a confirmation token: after confirming its wait when `confirm` (the `POST`),
/// else as it stands (the `GET`, which changes nothing); a 404 page for a token that is not
/// genuine.
async fn respond(
    state: &AppState,
    token: &str,
    confirm: bool,
) -> Result<ConfirmPageResponse, ServerError> {
    let Some((contact, since)) = target(state, token) else {
        return Ok(ConfirmPageResponse::NotFound(Html(not_found())));
    };
    let confirmations = state.confirmations();
    let link = if confirm {
        confirmations.confirm(&contact, since).await
    } else {
        confirmations.link_state(&contact, since).await
    }
    .map_err(|e| ApiError::from_store(e, "contact"))?;
    Ok(answer(state, token, link))
}

/// The contact and wait a confirmation token names, if it is genuine.
fn target(state: &AppState, token: &str) -> Option<(ContactId, i64)> {
    match state.links().verify(token)? {
        LinkTarget::Confirm { contact_id, since } => Some((ContactId::parse(&contact_id)?, since)),
        _ => None,
    }
}

/// The confirmation pages.
#[derive(Default)]
pub struct ConfirmApi;

#[OpenApi(tag = "ApiTags::Links")]
impl ConfirmApi {
    /// Confirmation page
    ///
    /// The link of a confirmation mail (confirmed opt-in): shows a button that confirms the
    /// subscription, and changes nothing itself, so link scanners confirm nobody. 410 when the
    /// link expired (`contacts.pending_days`) or a newer confirmation replaced it; a contact
    /// already subscribed is told so.
    #[oai(path = "/confirm/:token", method = "get", operation_id = "confirmPage")]
    async fn confirm_page(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the confirmation mail.
        token: Path<String>,
    ) -> Result<ConfirmPageResponse, ServerError> {
        respond(&state, &token, false).await
    }

    /// Confirm a subscription
    ///
    /// The form's submit: subscribes the pending contact (event `contact.subscribed` with
    /// source `confirmation`) and ends its pending state. 410 when the link expired or was
    /// replaced; confirming twice answers the same page.
    #[oai(
        path = "/confirm/:token",
        method = "post",
        operation_id = "confirmSubscription"
    )]
    async fn confirm(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the confirmation mail.
        token: Path<String>,
    ) -> Result<ConfirmPageResponse, ServerError> {
        respond(&state, &token, true).await
    }
}
