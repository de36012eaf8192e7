//! `POST /webhooks/notify`: notifications of the mail infrastructure (deliveries, bounces,
//! complaints, opens, clicks, inbound mail). The active transport plugin authenticates and parses
//! them; each event updates its email and the activity feed, and a hard bounce or a complaint
//! unsubscribes the contact. An event applies only to an email sent to the address it names
//! (otherwise it is ignored), so a message id quoted in someone else's mail changes nothing. The receiver is off until `plugins.notify_secret` is set, and a call
//! the plugin does not accept changes nothing.

use poem::http::{HeaderMap, StatusCode};
use poem::web::{Data, Json};
use poem::{Body, handler};
use serde::Serialize;

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::domain::event::SubscriptionSource;
use crate::plugins::DeliveryEventKind;
use crate::store::emails::status;

/// What a notification did.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifyResult {
    /// Events in the notification.
    pub received: usize,
    /// Events applied to an email of this service.
    pub applied: usize,
    /// Events about no email of this service.
    pub ignored: usize,
}

/// Herald's email id from a message id as providers report it (`<eml_…@domain>`, `eml_…`).
fn email_id(message_id: &str) -> Option<String> {
    let id = message_id.trim().trim_matches(['<', '>']);
    let id = id.split('@').next().unwrap_or(id);
    crate::domain::ids::EmailId::parse(id).map(|e| e.into_string())
}

/// Receives a notification.
#[handler]
pub async fn notify(
    state: Data<&AppState>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Json<NotifyResult>, ApiError> {
    if state.settings().plugins.notify_secret.is_none() {
        return Err(ApiError::forbidden(
            "notifications are refused until the deployment sets plugins.notify_secret",
        )
        .suggest("set plugins.notify_secret and send it in the x-herald-secret header"));
    }
    let body = body
        .into_vec()
        .await
        .map_err(|e| ApiError::bad_request(format!("the body could not be read: {e}")))?;
    let headers: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let events = match state
        .plugins()
        .parse_notification(None, headers, body)
        .await?
    {
        Ok(events) => events,
        Err(message) if message.contains("authenticat") => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                message,
            ));
        }
        Err(message) => return Err(ApiError::bad_request(message)),
    };
    let mut result = NotifyResult {
        received: events.len(),
        applied: 0,
        ignored: 0,
    };
    for event in events {
        let Some(id) = event.message_id.as_deref().and_then(email_id) else {
            result.ignored += 1;
            continue;
        };
        let kind = match event.kind {
            DeliveryEventKind::Delivered => status::DELIVERED,
            DeliveryEventKind::BouncedHard => status::BOUNCED,
            DeliveryEventKind::BouncedSoft => "soft_bounced",
            DeliveryEventKind::Complained => status::COMPLAINED,
            DeliveryEventKind::Opened => status::OPENED,
            DeliveryEventKind::Clicked => status::CLICKED,
            DeliveryEventKind::Inbound => "inbound",
        };
        let recorded = state
            .store()
            .record_email_event(&id, kind, event.detail.as_deref(), Some(&event.email))
            .await?;
        let Some(recorded) = recorded else {
            result.ignored += 1;
            continue;
        };
        result.applied += 1;
        let source = match event.kind {
            DeliveryEventKind::BouncedHard => SubscriptionSource::Bounce,
            DeliveryEventKind::Complained => SubscriptionSource::Complaint,
            _ => continue,
        };
        if let Some(contact) = &recorded.contact_id {
            let reason = event.detail.clone().unwrap_or_else(|| kind.to_string());
            state
                .store()
                .unsubscribe_contact(&recorded.project_id, contact, source, Some(&reason))
                .await
                .map_err(|e| ApiError::from_store(e, "contact"))?;
        }
    }
    Ok(Json(result))
}
