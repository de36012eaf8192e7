//! The HTTP API: typed poem-openapi handlers by resource. Handlers parse requests into domain
//! types, call the store, and map results to response types; they hold no SQL and no rules.

pub mod auth;
pub mod contact_fields;
pub mod contact_jobs;
pub mod contacts;
pub mod domains;
pub mod error;
pub mod events;
pub mod extract;
pub mod meta;
pub mod track;
pub mod users;
pub mod verify;

use poem_openapi::{OpenApiService, Tags};

/// Groups of endpoints in the reference.
#[derive(Tags)]
pub enum ApiTags {
    /// Contacts and their custom data.
    Contacts,
    /// Tracking and reading events.
    Events,
    /// Sending domains and their DNS records.
    Domains,
    /// Dashboard login.
    Auth,
    /// The logged-in user and their projects.
    Projects,
    /// Health, readiness and deployment configuration.
    Meta,
    /// Email address verification.
    Verification,
}

/// Every API of the service.
pub type Apis = (
    meta::MetaApi,
    auth::AuthApi,
    users::UsersApi,
    contacts::ContactsApi,
    contact_fields::ContactFieldsApi,
    contact_jobs::ContactJobsApi,
    track::TrackApi,
    events::EventsApi,
    domains::DomainsApi,
    verify::VerifyApi,
);

/// The OpenAPI service that serves every endpoint and generates the spec.
pub fn service() -> OpenApiService<Apis, ()> {
    OpenApiService::new(
        (
            meta::MetaApi,
            auth::AuthApi,
            users::UsersApi,
            contacts::ContactsApi,
            contact_fields::ContactFieldsApi,
            contact_jobs::ContactJobsApi,
            track::TrackApi,
            events::EventsApi,
            domains::DomainsApi,
            verify::VerifyApi,
        ),
        "Herald",
        env!("CARGO_PKG_VERSION"),
    )
    .description(
        "Self-hostable email delivery and contact engagement. Authenticate with \
         `Authorization: Bearer <sk_… or pk_…>`; errors use the bodies described in ErrorBody \
         and PublicErrorBody.",
    )
}

/// The generated OpenAPI document, as committed in `openapi/openapi.json`.
pub fn openapi_json() -> String {
    service().spec()
}
