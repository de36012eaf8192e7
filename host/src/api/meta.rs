//! Health, readiness and the public `/config`.

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::ApiTags;
use super::state::AppState;

/// Liveness.
#[derive(Object)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// Readiness.
#[derive(Object)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    pub status: String,
    /// `sqlite` or `postgres`.
    pub database: String,
    /// Why the service is not ready.
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

#[derive(ApiResponse)]
enum ReadyResponse {
    /// The database answers.
    #[oai(status = 200)]
    Ready(Json<Readiness>),
    /// The database does not answer.
    #[oai(status = 503)]
    Unavailable(Json<Readiness>),
}

/// What this deployment has enabled. Every flag is true only when the feature works here.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct DeploymentConfig {
    /// Herald's version.
    pub version: String,
    /// Whether `POST /auth/signup` is open.
    pub signup_enabled: bool,
    /// Whether new accounts must confirm their email before logging in.
    pub email_verification_required: bool,
    /// Configured OAuth login providers.
    pub oauth_providers: Vec<String>,
    /// Whether a billing plugin other than `none` is active (`plugins.billing`).
    pub billing_enabled: bool,
    /// Whether `POST /uploads/image` stores images (in the data directory).
    pub uploads_enabled: bool,
    /// Whether uploads are kept in S3-compatible object storage (`uploads.storage = "s3"`).
    pub object_storage_enabled: bool,
    /// Whether the configured mail transport plugin is loaded, so `/v1/send` and workflows
    /// deliver through it.
    pub sending_enabled: bool,
    /// The mail transport plugin (`plugins.transport`): `outbox` (files in the data directory,
    /// nothing leaves the machine), `smtp` (a relay) or an external plugin's name.
    pub transport: String,
    /// Whether mail goes out through an SMTP relay (`plugins.transport = "smtp"` with
    /// `plugins.smtp_host` set).
    pub smtp_enabled: bool,
    /// The database backend.
    pub database: String,
}

/// Health, readiness and configuration.
#[derive(Default)]
pub struct MetaApi;

#[OpenApi(tag = "ApiTags::Meta")]
impl MetaApi {
    /// Liveness probe
    #[oai(path = "/health", method = "get", operation_id = "health")]
    async fn health(&self) -> Json<Health> {
        Json(Health {
            status: "ok".into(),
        })
    }

    /// Readiness probe
    ///
    /// 200 when the database answers, 503 otherwise.
    #[oai(path = "/ready", method = "get", operation_id = "ready")]
    async fn ready(&self, state: poem::web::Data<&AppState>) -> ReadyResponse {
        let database = state.store().db().backend().name().to_string();
        match state.store().db().ping().await {
            Ok(()) => ReadyResponse::Ready(Json(Readiness {
                status: "ready".into(),
                database,
                error: None,
            })),
            Err(err) => {
                // The cause may name hosts, users or paths: it goes to the log, not to callers.
                tracing::error!(error = %err, "readiness check: the database did not answer");
                ReadyResponse::Unavailable(Json(Readiness {
                    status: "unavailable".into(),
                    database,
                    error: Some("the database is unreachable; the server log has the cause".into()),
                }))
            }
        }
    }

    /// Deployment configuration
    ///
    /// Public, no authentication: which optional features this deployment has enabled.
    #[oai(path = "/config", method = "get", operation_id = "getConfig")]
    async fn config(&self, state: poem::web::Data<&AppState>) -> Json<DeploymentConfig> {
        let plugins = &state.settings().plugins;
        Json(DeploymentConfig {
            version: env!("CARGO_PKG_VERSION").into(),
            signup_enabled: state.settings().signup_enabled,
            email_verification_required: state.settings().accounts.require_email_verification,
            oauth_providers: state
                .oauth()
                .providers()
                .map(|p| p.id().to_string())
                .collect(),
            // The active billing plugin says (`none` answers false); a plugin that fails to
            // answer is treated as off.
            billing_enabled: state.plugins().billing_enabled().await.unwrap_or(false),
            uploads_enabled: true,
            object_storage_enabled: state.uploads().backend() == "s3",
            sending_enabled: state.plugins().get(&plugins.transport).is_ok(),
            transport: plugins.transport.clone(),
            smtp_enabled: plugins.transport == "smtp" && plugins.smtp_host.is_some(),
            database: state.store().db().backend().name().into(),
        })
    }
}
