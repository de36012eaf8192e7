//! The HTTP API: typed poem-openapi handlers by resource. Handlers parse requests into domain
//! types, call the store, and map results to response types; they hold no SQL and no rules.

pub mod activity;
pub mod auth;
pub mod contact_fields;
pub mod contact_jobs;
pub mod contacts;
pub mod domains;
pub mod emails;
pub mod error;
pub mod events;
pub mod executions;
pub mod extract;
pub mod links;
pub mod meta;
pub mod notify;
pub mod segments;
pub mod send;
pub mod server;
pub mod state;
pub mod templates;
pub mod timestamp;
pub mod track;
pub mod usage;
pub mod users;
pub mod verify;
pub mod workflows;

use poem_openapi::{OpenApiService, Tags};

pub use state::AppState;

/// Groups of endpoints in the reference.
#[derive(Tags)]
pub enum ApiTags {
    /// Contacts and their custom data.
    Contacts,
    /// Tracking and reading events.
    Events,
    /// Sending email.
    Sending,
    /// The activity feed of emails.
    Activity,
    /// Pages and redirects that emails link to (no authentication: the link is signed).
    Links,
    /// Sending domains and their DNS records.
    Domains,
    /// Email templates: subject and HTML body with variables.
    Templates,
    /// Segments: named sets of contacts, by a filter or a stored list.
    Segments,
    /// Workflows: a trigger event, steps and the transitions between them, and the executions
    /// that run them per contact.
    Workflows,
    /// Dashboard login.
    Auth,
    /// The logged-in user and their projects.
    Projects,
    /// Health, readiness and deployment configuration.
    Meta,
    /// Email address verification.
    Verification,
    /// Receivers for the mail infrastructure (provider notifications), not for applications.
    Internal,
}

/// Every API of the service, in groups (a tuple of APIs is itself an API; poem-openapi takes
/// tuples of up to 16). Each API is a unit struct, so `service()` builds this with `default()`:
/// a new API is added here only.
pub type Apis = (
    (
        meta::MetaApi,
        auth::AuthApi,
        users::UsersApi,
        notify::NotifyApi,
    ),
    (
        contacts::ContactsApi,
        contact_fields::ContactFieldsApi,
        contact_jobs::ContactJobsApi,
        track::TrackApi,
        events::EventsApi,
        verify::VerifyApi,
    ),
    (
        domains::DomainsApi,
        send::SendApi,
        emails::EmailsApi,
        links::LinksApi,
        activity::ActivityApi,
        templates::TemplatesApi,
        segments::SegmentsApi,
        executions::ExecutionsApi,
        workflows::WorkflowsApi,
    ),
);

/// The OpenAPI service that serves every endpoint and generates the spec.
pub fn service() -> OpenApiService<Apis, ()> {
    OpenApiService::new(Apis::default(), "Herald", env!("CARGO_PKG_VERSION")).description(
        "Self-hostable email delivery and contact engagement. Authenticate with \
         `Authorization: Bearer <sk_… or pk_…>`; errors use the bodies described in ErrorBody \
         and PublicErrorBody.",
    )
}

/// The generated OpenAPI document, as committed in `openapi/openapi.json`.
pub fn openapi_json() -> String {
    service().spec()
}
