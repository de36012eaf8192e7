//! `POST /webhooks/notify` and `POST /webhooks/notify/:transport`: notifications of the mail
//! infrastructure (deliveries, bounces, complaints, opens, clicks, inbound mail). The
//! transport's plugin (the default transport's, or the one the path names) authenticates and
//! parses them; each event updates its email and the activity feed, and a hard bounce or a
//! complaint unsubscribes the contact. An event applies only to an email sent to the address it
//! names (otherwise it is ignored), so a message id quoted in someone else's mail changes
//! nothing. The notifications of `smtp`, `outbox` and external plugins are refused until
//! `plugins.notify_secret` is set (they check it); the built-in provider transports verify their
//! provider's signature themselves. A call the plugin does not accept changes nothing.

use poem::http::StatusCode;
use poem::{Request, RequestBody};
use poem_openapi::param::{Header, Path};
use poem_openapi::payload::{Json, ParsePayload, Payload};
use poem_openapi::registry::{MetaMediaType, MetaRequest, MetaSchema, MetaSchemaRef};
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, Object, OpenApi};

use super::ApiTags;
use super::error::{ApiError, ErrorCode};
use super::extract::header_pairs;
use super::state::AppState;
use crate::plugins::PluginError;

/// A notification as the provider sends it, in whatever format and content type the active
/// transport plugin understands (JSON, `message/rfc822` bounce reports, form posts…).
pub struct NotificationBody(pub Vec<u8>);

impl Payload for NotificationBody {
    const CONTENT_TYPE: &'static str = "*/*";

    fn check_content_type(_content_type: &str) -> bool {
        true
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "binary")))
    }
}

impl ParsePayload for NotificationBody {
    const IS_REQUIRED: bool = true;

    async fn from_request(_request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        Ok(NotificationBody(body.take()?.into_vec().await?))
    }
}

/// Documented as a request body of any content type, and read whatever the content type (or
/// none): the plugin decides what it accepts.
impl<'a> ApiExtractor<'a> for NotificationBody {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];

    type ParamType = ();
    type ParamRawType = ();

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: None,
            content: vec![MetaMediaType {
                content_type: <Self as Payload>::CONTENT_TYPE,
                schema: <Self as Payload>::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        <Self as ParsePayload>::from_request(request, body).await
    }
}

/// What a notification did.
#[derive(Object)]
pub struct NotifyResult {
    /// Events in the notification.
    pub received: usize,
    /// Events applied to an email of this service.
    pub applied: usize,
    /// Events about no email of this service.
    pub ignored: usize,
}

/// The internal receiver of the mail infrastructure's notifications.
#[derive(Default)]
pub struct NotifyApi;

#[OpenApi(tag = "ApiTags::Internal")]
impl NotifyApi {
    /// Receive delivery notifications
    ///
    /// For the mail infrastructure, not for applications: the default transport's plugin
    /// authenticates the call (`smtp` and `outbox` compare `x-herald-secret` with
    /// `plugins.notify_secret`; a provider's plugin verifies the provider's signature) and parses
    /// the body into delivery events. Each event applies to the email it names (`Message-ID` /
    /// `X-Herald-Message-Id`) when its recipient is that email's; a hard bounce or a complaint
    /// unsubscribes the contact. For `smtp`, `outbox` and external plugins, refused (403) until
    /// the deployment sets `plugins.notify_secret`; a call the plugin does not authenticate is
    /// refused (401) and one it cannot read (400), and either changes nothing.
    #[oai(
        path = "/webhooks/notify",
        method = "post",
        operation_id = "receiveNotification"
    )]
    async fn notify(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        /// The shared secret of the built-in transports (a plugin may authenticate otherwise).
        #[oai(name = "x-herald-secret")]
        _secret: Header<Option<String>>,
        body: NotificationBody,
    ) -> Result<Json<NotifyResult>, ApiError> {
        receive(&state, req, None, body.0).await
    }

    /// Receive a transport's delivery notifications
    ///
    /// As `POST /webhooks/notify`, for the transport the path names (the URL to give a
    /// provider, e.g. `/webhooks/notify/postmark`): that transport's plugin authenticates and
    /// parses the call; it sees the request's headers and, as the pseudo-header `:query`, its
    /// raw query string. `404` when no transport has that name.
    #[oai(
        path = "/webhooks/notify/:transport",
        method = "post",
        operation_id = "receiveTransportNotification"
    )]
    async fn notify_transport(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        /// The transport's name (`smtp`, `ses`, `postmark`…).
        transport: Path<String>,
        /// The shared secret of the built-in transports (a plugin may authenticate otherwise).
        #[oai(name = "x-herald-secret")]
        _secret: Header<Option<String>>,
        body: NotificationBody,
    ) -> Result<Json<NotifyResult>, ApiError> {
        receive(&state, req, Some(&transport.0), body.0).await
    }
}

/// Authenticates, parses and applies one notification for the transport `transport` (default:
/// `plugins.transport`).
async fn receive(
    state: &AppState,
    req: &Request,
    transport: Option<&str>,
    body: Vec<u8>,
) -> Result<Json<NotifyResult>, ApiError> {
    let plugins = state.plugins();
    let needs_secret = match (plugins.notifications_need_secret(transport), transport) {
        (Ok(needs), _) => needs,
        (Err(PluginError::NotFound(_) | PluginError::WrongWorld { .. }), Some(name)) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                format!("no transport named `{name}`"),
            )
            .suggest(
                "post to /webhooks/notify/<transport> with the name of a configured transport",
            ));
        }
        (Err(err), _) => return Err(err.into()),
    };
    if needs_secret && state.settings().plugins.notify_secret.is_none() {
        return Err(ApiError::forbidden(
            "notifications are refused until the deployment sets plugins.notify_secret",
        )
        .suggest("set plugins.notify_secret and send it in the x-herald-secret header"));
    }
    let events = match plugins
        .parse_notification(transport, notification_headers(req), body)
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
    let received = events.len();
    let applied = state
        .delivery_events()
        .apply(events)
        .await
        .map_err(|e| ApiError::from_store(e, "contact"))?;
    Ok(Json(NotifyResult {
        received,
        applied: applied.applied,
        ignored: applied.ignored,
    }))
}

/// The request's headers as the plugin sees them, with the raw query string (when the URL has
/// one) as the pseudo-header `:query`: a provider may put its secret in the URL it calls.
fn notification_headers(req: &Request) -> Vec<(String, String)> {
    let mut headers = header_pairs(req);
    headers.retain(|(name, _)| !name.starts_with(':'));
    if let Some(query) = req.uri().query() {
        headers.push((":query".to_string(), query.to_string()));
    }
    headers
}
