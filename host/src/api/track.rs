//! `POST /v1/track` and its dashboard alias `POST /events/track`.

use std::collections::BTreeMap;

use poem::http::StatusCode;
use poem_openapi::param::Header;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::ApiTags;
use super::contacts::parse_data;
use super::error::{ApiError, ErrorCode};
use super::extract::{Caller, JsonBody, ProjectContext, SecretKeyAuth, TrackAuth};
use super::state::AppState;
use super::timestamp::Timestamp;
use super::topics::{TopicSetting, parse_choices};
use crate::domain::contact::ContactUpsert;
use crate::domain::email::EmailAddress;
use crate::domain::event::{EventName, EventNameError, NewEvent, SubscriptionSource};
use crate::store::Conflict;
use crate::store::StoreError;
use crate::store::group_commit::{GroupedUpsert, OwnedClaim};

/// Track an event for a contact.
#[derive(Object, Deserialize, Serialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct TrackRequest {
    /// The contact's address; the contact is created if it does not exist.
    pub email: String,
    /// The event's name (not `contact.subscribed`, `contact.unsubscribed`, `email.*` or `segment.*`).
    pub event: String,
    /// Subscription state; new contacts default to `true`, existing ones keep theirs. With the
    /// public key, `true` never subscribes again a contact who is unsubscribed (opted out,
    /// bounced or complained): it is ignored for them; `false` always unsubscribes. Where the
    /// project's `doubleOptIn` applies, a subscription asked (`true`, or a new contact's
    /// default) leaves the contact unsubscribed and pending, and mails it a confirmation
    /// (docs/engagement.md, "Confirmed opt-in").
    #[oai(nullable)]
    pub subscribed: Option<bool>,
    /// Contact data (custom data rules) and the event's data.
    #[oai(nullable)]
    pub data: Option<BTreeMap<String, Value>>,
    /// Topic choices to make (secret key and dashboard only; an unknown topic is 422 at
    /// `topics[i].id`). Ignored with the public key, which anyone can use: topics change only
    /// through the secret key, the dashboard and the contact's own preference page.
    #[oai(nullable)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<TopicSetting>>,
}

/// What was recorded.
#[derive(Object, Deserialize, Serialize)]
pub struct TrackData {
    /// The contact's id.
    pub contact: String,
    /// The event's id.
    pub event: String,
    /// When the event was recorded.
    pub timestamp: Timestamp,
}

/// `{ success: true, data }`.
#[derive(Object, Deserialize, Serialize)]
pub struct TrackResponse {
    /// Always `true`.
    pub success: bool,
    /// What was recorded.
    pub data: TrackData,
}

#[derive(ApiResponse)]
enum TrackResult {
    /// Recorded (or, with a reused `Idempotency-Key`, the first response replayed).
    #[oai(status = 200)]
    Ok(
        Json<TrackResponse>,
        /// `true` when this is the replay of an earlier request with the same key.
        #[oai(header = "Idempotent-Replayed")]
        Option<String>,
    ),
}

/// The `Idempotency-Key` header of the operations that take one, as the document declares it.
pub type IdempotencyKeyHeader = Header<Option<String>>;

/// Checks the `Idempotency-Key` header.
pub fn idempotency_key(header: &IdempotencyKeyHeader) -> Result<Option<String>, ApiError> {
    let Some(value) = header.0.as_deref() else {
        return Ok(None);
    };
    let key = value.trim();
    if key.is_empty() || key.len() > 255 || key.chars().any(|c| c.is_control()) {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            "invalid",
            "the Idempotency-Key header must be 1 to 255 printable characters",
        ));
    }
    Ok(Some(key.to_string()))
}

/// Hash of a request body for idempotency comparisons.
pub fn request_hash(body: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// The first response stored under an idempotency key, deserialized, when `endpoint` and the
/// request's `hash` match it; 409 `IDEMPOTENCY_KEY_REUSED` otherwise.
pub fn replayed<T: serde::de::DeserializeOwned>(
    stored: crate::store::idempotency::StoredResponse,
    endpoint: &str,
    hash: &str,
) -> Result<T, ApiError> {
    if stored.endpoint != endpoint || stored.request_hash != hash {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key was already used with a different request in the last 24 hours",
        )
        .suggest("use a new key for a new request"));
    }
    serde_json::from_value(stored.response).map_err(ApiError::internal)
}

fn replay_or_conflict(
    stored: crate::store::idempotency::StoredResponse,
    endpoint: &str,
    hash: &str,
) -> Result<TrackResult, ApiError> {
    let body: TrackResponse = replayed(stored, endpoint, hash)?;
    Ok(TrackResult::Ok(Json(body), Some("true".into())))
}

/// The response stored under a track's idempotency key, from what was written.
fn track_response(
    contact: &crate::domain::contact::Contact,
    event: Option<&crate::domain::event::StoredEvent>,
) -> Value {
    serde_json::to_value(TrackResponse {
        success: true,
        data: TrackData {
            contact: contact.id.to_string(),
            event: event.map(|e| e.id.to_string()).unwrap_or_default(),
            timestamp: Timestamp(event.map_or_else(crate::domain::time::now_ms, |e| e.created_at)),
        },
    })
    .unwrap_or(Value::Null)
}

async fn track(
    state: &AppState,
    ctx: &ProjectContext,
    key_header: &IdempotencyKeyHeader,
    body: TrackRequest,
    endpoint: &'static str,
) -> Result<TrackResult, ApiError> {
    let key = idempotency_key(key_header)?;
    // The body's hash is needed only to compare it with a key's first request.
    let hash = if key.is_some() {
        request_hash(&body)
    } else {
        String::new()
    };
    let project = ctx.project_id();
    if let Some(key) = &key
        && let Some(stored) = state.store().idempotent_response(project, key).await?
    {
        return replay_or_conflict(stored, endpoint, &hash);
    }
    let email = EmailAddress::parse(&body.email)
        .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
    let name = EventName::parse_tracked(&body.event).map_err(|e| {
        let suggestion = match e {
            EventNameError::Reserved(_) => {
                "pick another name; the service records these events itself"
            }
            EventNameError::Route(_) => "pick another name, e.g. `viewed-stats` instead of `stats`",
            other => return ApiError::invalid_field("event", "invalid", other.to_string()),
        };
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::ReservedEvent,
            e.to_string(),
        )
        .with_errors(vec![super::error::FieldError::new(
            "event",
            "reserved",
            e.to_string(),
        )])
        .suggest(suggestion)
    })?;
    let topics = match ctx.caller {
        Caller::PublicKey => Vec::new(),
        _ => parse_choices(state, project, "topics", body.topics.as_deref()).await?,
    };
    let patch = parse_data(body.data)?;
    let mut event_data = Map::new();
    for (k, v) in patch.set.iter().chain(patch.transient.iter()) {
        event_data.insert(k.clone(), v.clone());
    }
    let event = NewEvent {
        name,
        data: event_data,
    };
    // With confirmed opt-in, a subscription asked (`subscribed: true`, or a new contact's
    // default) leaves the contact unsubscribed until it confirms.
    let opt_in = super::confirm::opt_in_applies(ctx);
    let asked = body.subscribed;
    let upsert = ContactUpsert {
        email,
        subscribed: if opt_in && asked == Some(true) {
            None
        } else {
            asked
        },
        subscribed_default: !opt_in,
        // The public key is in web pages: anyone may call with it, so it never undoes an
        // opt-out, a bounce or a complaint (its `subscribed: true` is ignored for them).
        resubscribe: !matches!(ctx.caller, Caller::PublicKey),
        data: patch,
        topics,
    };
    let write = GroupedUpsert {
        project: project.clone(),
        upsert,
        source: SubscriptionSource::Track,
        event: Some(event),
        idempotency: key.clone().map(|key| OwnedClaim {
            key,
            endpoint,
            request_hash: hash.clone(),
            status: 200,
            response: track_response,
        }),
    };
    match state.store().upsert_contact_grouped(write).await {
        Ok((outcome, Some(stored))) => {
            if opt_in && (asked == Some(true) || (asked.is_none() && outcome.created)) {
                super::confirm::ask_confirmation(state, ctx, &outcome.contact).await;
            } else if asked == Some(false) {
                super::confirm::cancel_confirmation(state, ctx, &outcome.contact.id).await;
            }
            let body = TrackResponse {
                success: true,
                data: TrackData {
                    contact: outcome.contact.id.to_string(),
                    event: stored.id.to_string(),
                    timestamp: Timestamp(stored.created_at),
                },
            };
            Ok(TrackResult::Ok(Json(body), None))
        }
        Ok((_, None)) => Err(ApiError::internal("tracked event was not recorded")),
        Err(StoreError::Conflict(Conflict::IdempotencyKey)) => {
            let key = key.unwrap_or_default();
            match state.store().idempotent_response(project, &key).await? {
                Some(stored) => replay_or_conflict(stored, endpoint, &hash),
                None => Err(ApiError::conflict(
                    "a request with this Idempotency-Key is in progress; retry",
                )),
            }
        }
        Err(e) => Err(ApiError::from_store(e, "contact")),
    }
}

/// Tracking endpoints.
#[derive(Default)]
pub struct TrackApi;

#[OpenApi(tag = "ApiTags::Events")]
impl TrackApi {
    /// Track an event
    ///
    /// Creates or updates the contact (new contacts are subscribed unless `subscribed` says
    /// otherwise), applies `data` by the custom data rules and records the event. Accepts the
    /// public or the secret key. With `Idempotency-Key`, the same request within 24 hours
    /// returns the first response and records nothing again; another request with the key is
    /// 409 `IDEMPOTENCY_KEY_REUSED`.
    #[oai(path = "/v1/track", method = "post", operation_id = "track")]
    async fn track(
        &self,
        auth: TrackAuth,
        state: poem::web::Data<&AppState>,
        /// Makes the call safe to retry: 1 to 255 printable characters, kept 24 hours per
        /// project. A repeat with the same body answers the first response with
        /// `Idempotent-Replayed: true`; with another body, 409 `IDEMPOTENCY_KEY_REUSED`.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: IdempotencyKeyHeader,
        body: JsonBody<TrackRequest>,
    ) -> Result<TrackResult, ApiError> {
        track(&state, &auth.0, &idempotency_key, body.0, "/v1/track").await
    }

    /// Track an event (dashboard)
    ///
    /// The dashboard's alias of `POST /v1/track`, with the same body, rules and answer.
    #[oai(
        path = "/events/track",
        method = "post",
        operation_id = "trackFromDashboard"
    )]
    async fn track_dashboard(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Makes the call safe to retry: 1 to 255 printable characters, kept 24 hours per
        /// project. A repeat with the same body answers the first response with
        /// `Idempotent-Replayed: true`; with another body, 409 `IDEMPOTENCY_KEY_REUSED`.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: IdempotencyKeyHeader,
        body: JsonBody<TrackRequest>,
    ) -> Result<TrackResult, ApiError> {
        track(&state, &auth.0, &idempotency_key, body.0, "/events/track").await
    }
}
