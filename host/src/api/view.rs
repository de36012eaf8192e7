//! The "view in browser" page (docs/engagement.md, "View in browser"): the email a
//! `{{viewInBrowserUrl}}` link came in, as its contact received it (its rendered HTML, kept
//! after delivery for `sending.view_in_browser_days`), with its tracked links working and
//! without its open pixel, so that viewing it records no open. Served without authentication
//! (the signed token is the credential).

use poem_openapi::param::Path;
use poem_openapi::payload::Html;
use poem_openapi::{ApiResponse, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ServerError};
use super::pages::not_found;
use super::state::AppState;
use crate::domain::message::MessageDraft;
use crate::mail::links::LinkTarget;
use crate::mail::tracking::remove_open_pixel;

/// The page of an email.
#[derive(ApiResponse)]
pub enum ViewResponse {
    /// The email's HTML body.
    #[oai(status = 200)]
    Ok(
        Html<String>,
        /// Never stored by shared caches: the page is the contact's own email.
        #[oai(header = "Cache-Control")]
        String,
    ),
    /// The link is not valid, or the email is no longer kept.
    #[oai(status = 404)]
    NotFound(Html<String>),
}

/// The "view in browser" page.
#[derive(Default)]
pub struct ViewApi;

#[OpenApi(tag = "ApiTags::Links")]
impl ViewApi {
    /// View an email in the browser
    ///
    /// The page `{{viewInBrowserUrl}}` links to: the email as its contact received it (its
    /// HTML body), with its tracked links; opening it records no open. 404 for a link that is
    /// not valid, and once the email is no longer kept (`sending.view_in_browser_days` after
    /// it was sent).
    #[oai(path = "/view/:token", method = "get", operation_id = "viewEmail")]
    async fn view(
        &self,
        state: poem::web::Data<&AppState>,
        /// The signed token from the email.
        token: Path<String>,
    ) -> Result<ViewResponse, ServerError> {
        let Some(LinkTarget::View { email_id }) = state.links().verify(&token) else {
            return Ok(ViewResponse::NotFound(Html(not_found())));
        };
        let Some(draft) = state
            .store()
            .email_draft(&email_id)
            .await
            .map_err(ApiError::from)?
        else {
            return Ok(ViewResponse::NotFound(Html(not_found())));
        };
        let draft: MessageDraft = serde_json::from_str(&draft).map_err(ApiError::internal)?;
        if !draft.view {
            return Ok(ViewResponse::NotFound(Html(not_found())));
        }
        let html = remove_open_pixel(&draft.html, &state.links().open_url(&email_id));
        Ok(ViewResponse::Ok(Html(html), "private, no-store".into()))
    }
}
