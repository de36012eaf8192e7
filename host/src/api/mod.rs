//! The HTTP API: typed poem-openapi handlers by resource. Handlers parse requests into domain
//! types, call the store, and map results to response types; they hold no SQL and no rules.

pub mod activity;
pub mod addresses;
pub mod analytics;
pub mod auth;
pub mod billing;
pub mod campaigns;
pub mod confirm;
pub mod contact_fields;
pub mod contact_history;
pub mod contact_jobs;
pub mod contacts;
pub mod csrf;
pub mod dashboard;
pub mod domains;
pub mod emails;
pub mod error;
pub mod events;
pub mod executions;
pub mod extract;
pub mod formats;
pub mod links;
pub mod listener;
pub mod members;
pub mod meta;
pub mod metrics;
pub mod notify;
pub mod nul;
pub mod oauth;
pub mod pages;
pub mod preferences;
pub mod project_admin;
pub mod segment_preview;
pub mod segments;
pub mod send;
pub mod server;
pub mod state;
pub mod suppressions;
pub mod template_preview;
pub mod templates;
pub mod timestamp;
pub mod topics;
pub mod track;
pub mod uploads;
pub mod usage;
pub mod users;
pub mod verify;
pub mod view;
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
    /// Topics: what contacts subscribe to one by one, beside the global subscription.
    Topics,
    /// Campaigns: one message to an audience, sent once to each subscribed member.
    Campaigns,
    /// Analytics: email milestones over time, campaigns ranked and broken down, top events.
    Analytics,
    /// Workflows: a trigger event, steps and the transitions between them, and the executions
    /// that run them per contact.
    Workflows,
    /// Dashboard login.
    Auth,
    /// The logged-in user and their projects.
    Projects,
    /// Health, readiness and deployment configuration.
    Meta,
    /// Image uploads for template bodies.
    Uploads,
    /// Email address verification.
    Verification,
    /// Receivers for the mail infrastructure (provider notifications), not for applications.
    Internal,
}

/// Every API of the service, in groups (a tuple of APIs is itself an API; poem-openapi takes
/// tuples of up to 16). Each API is a unit struct, so `service()` builds this with `default()`
/// (which the standard library gives tuples of at most 12: a full group starts a new one):
/// a new API is added here only.
pub type Apis = (
    (
        meta::MetaApi,
        auth::AuthApi,
        users::UsersApi,
        members::MembersApi,
        project_admin::ProjectAdminApi,
        notify::NotifyApi,
        billing::BillingApi,
        billing::PaymentsWebhookApi,
        oauth::OAuthApi,
    ),
    (
        contacts::ContactsApi,
        contact_fields::ContactFieldsApi,
        contact_jobs::ContactJobsApi,
        track::TrackApi,
        events::EventsApi,
        verify::VerifyApi,
        suppressions::SuppressionsApi,
        topics::TopicsApi,
        preferences::PreferencesApi,
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
        campaigns::CampaignsApi,
        analytics::AnalyticsApi,
        uploads::UploadsApi,
    ),
    (
        confirm::ConfirmApi,
        view::ViewApi,
        template_preview::TemplatePreviewApi,
        contact_history::ContactHistoryApi,
        segment_preview::SegmentPreviewApi,
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

/// The OpenAPI document, as served at `/openapi.json` and committed in `openapi/openapi.json`:
/// the one poem-openapi generates, with what it cannot express added (see [`with_project_header`]).
pub fn openapi_json() -> String {
    let generated = service().spec();
    match serde_json::from_str::<serde_json::Value>(&generated) {
        Ok(mut document) => {
            with_project_header(&mut document);
            with_header_spelling(&mut document);
            with_transport_statuses(&mut document);
            with_plain_enum_refs(&mut document);
            serde_json::to_string_pretty(&document).unwrap_or(generated)
        }
        Err(_) => generated,
    }
}

/// Writes response header names as the server sends them (poem-openapi upper-cases them):
/// `Idempotent-Replayed`, `Set-Cookie`, `Cache-Control`, `Location`.
fn with_header_spelling(document: &mut serde_json::Value) {
    let spelled = |name: &str| -> String {
        name.split('-')
            .map(|part| {
                let lower = part.to_ascii_lowercase();
                let mut chars = lower.chars();
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("-")
    };
    let Some(paths) = document.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    let responses = paths
        .values_mut()
        .filter_map(|p| p.as_object_mut())
        .flat_map(|p| p.values_mut())
        .filter_map(|op| op.get_mut("responses").and_then(|r| r.as_object_mut()))
        .flat_map(|r| r.values_mut());
    for response in responses {
        if let Some(headers) = response.get_mut("headers").and_then(|h| h.as_object_mut()) {
            let named: serde_json::Map<String, serde_json::Value> = std::mem::take(headers)
                .into_iter()
                .map(|(name, header)| (spelled(&name), header))
                .collect();
            *headers = named;
        }
    }
}

/// The statuses and headers every operation answers from outside its handler, which
/// poem-openapi cannot attach to operations: 413 and 415 where there is a body (the body limit
/// and its content type, checked before the handler), 502 `PLUGIN_ERROR` where a plugin is
/// called (sending domains, workflow steps, notifications), `X-Request-Id` on every response,
/// the `RateLimit-*` headers wherever a limit applies (the per-project limit of key- and
/// session-authenticated project calls; the login and signup limits) and `Retry-After` on 429
/// and on the error shape's 503.
fn with_transport_statuses(document: &mut serde_json::Value) {
    use serde_json::{Value, json};
    let header = |description: &str, kind: &str| json!({ "description": description, "deprecated": false, "schema": { "type": kind } });
    let request_id = header(
        "The request's id (`req_…`), also in error bodies.",
        "string",
    );
    let rate_headers = [
        (
            "RateLimit-Limit",
            header("Requests allowed per minute for this project.", "integer"),
        ),
        (
            "RateLimit-Remaining",
            header("Requests left in the current minute.", "integer"),
        ),
        (
            "RateLimit-Reset",
            header("Seconds until the current minute's window ends.", "integer"),
        ),
    ];
    let retry_after = header("Seconds to wait before retrying.", "integer");
    let Some(paths) = document.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let calls_plugins = ["/domains", "/workflows", "/webhooks/notify"]
            .iter()
            .any(|p| path.starts_with(p));
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut().filter_map(Value::as_object_mut) {
            let limited = operation
                .get("security")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .any(|s| s.contains_key("SecretKey") || s.contains_key("PublicKey"))
                || matches!(
                    operation.get("operationId").and_then(Value::as_str),
                    Some("login" | "signup")
                );
            let body_types: Vec<String> = operation
                .get("requestBody")
                .and_then(|b| b["content"].as_object())
                .map(|c| c.keys().cloned().collect())
                .unwrap_or_default();
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let error_content = responses
                .get("422")
                .or_else(|| responses.get("400"))
                .and_then(|r| r.get("content"))
                .cloned();
            let mut add = |status: &str, description: &str| {
                if let Some(content) = &error_content
                    && !responses.contains_key(status)
                {
                    responses.insert(
                        status.to_string(),
                        json!({ "description": description, "content": content }),
                    );
                }
            };
            if !body_types.is_empty() {
                add(
                    "413",
                    "The body is larger than the limit (`max_body_bytes`; 16 MB on `/v1/send`): `PAYLOAD_TOO_LARGE`.",
                );
            }
            if !body_types.is_empty() && !body_types.iter().any(|t| t == "*/*") {
                add(
                    "415",
                    &format!(
                        "The body is not {}: `INVALID_REQUEST_BODY`.",
                        body_types
                            .iter()
                            .map(|t| format!("`{t}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                );
            }
            if calls_plugins {
                add(
                    "502",
                    "A plugin failed (trapped, timed out or answered nonsense): `PLUGIN_ERROR`.",
                );
            }
            let mut statuses: Vec<(String, Value)> =
                std::mem::take(responses).into_iter().collect();
            statuses.sort_by(|a, b| a.0.cmp(&b.0));
            for (status, response) in statuses.iter_mut() {
                let Some(response) = response.as_object_mut() else {
                    continue;
                };
                // A 503 of the error shape (not `/ready`'s own) carries `Retry-After` too.
                let unavailable = status == "503"
                    && response
                        .get("description")
                        .and_then(Value::as_str)
                        .is_some_and(|d| d == error::UNAVAILABLE_DESCRIPTION);
                let headers = response
                    .entry("headers")
                    .or_insert_with(|| Value::Object(Default::default()));
                let Some(headers) = headers.as_object_mut() else {
                    continue;
                };
                headers.insert("X-Request-Id".into(), request_id.clone());
                if limited {
                    for (name, h) in &rate_headers {
                        headers.insert((*name).into(), h.clone());
                    }
                }
                if status == "429" || unavailable {
                    headers.insert("Retry-After".into(), retry_after.clone());
                }
            }
            responses.extend(statuses);
        }
    }
}

/// Refers to an enum (a string schema) directly where poem-openapi wraps the reference in
/// `allOf: [{$ref}, {description}]` to describe the field: generators take `allOf` of objects
/// only. The field's description stays beside the reference.
fn with_plain_enum_refs(document: &mut serde_json::Value) {
    use serde_json::Value;
    let enums: std::collections::BTreeSet<String> = document["components"]["schemas"]
        .as_object()
        .map(|schemas| {
            schemas
                .iter()
                .filter(|(_, s)| s.get("type").and_then(Value::as_str) != Some("object"))
                .map(|(name, _)| format!("#/components/schemas/{name}"))
                .collect()
        })
        .unwrap_or_default();
    fn walk(value: &mut Value, enums: &std::collections::BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                let plain = match map.get("allOf").and_then(Value::as_array) {
                    Some(parts) if parts.len() == 2 => parts[0]
                        .get("$ref")
                        .and_then(Value::as_str)
                        .filter(|r| enums.contains(*r))
                        .filter(|_| {
                            parts[1]
                                .as_object()
                                .is_some_and(|o| o.keys().all(|k| k == "description"))
                        })
                        .map(str::to_string),
                    _ => None,
                };
                if let Some(reference) = plain {
                    map.remove("allOf");
                    map.insert("$ref".into(), Value::String(reference));
                }
                for v in map.values_mut() {
                    walk(v, enums);
                }
            }
            Value::Array(items) => {
                for v in items {
                    walk(v, enums);
                }
            }
            _ => {}
        }
    }
    walk(document, &enums);
}

/// Declares the `X-Project-Id` header on every operation a dashboard session may call for a
/// project (those that accept both the secret key and the session): the session's extractor
/// reads it, and a security scheme cannot declare a second header.
fn with_project_header(document: &mut serde_json::Value) {
    let parameter = serde_json::json!({
        "name": extract::PROJECT_HEADER,
        "in": "header",
        "required": false,
        "deprecated": false,
        "description": "With the dashboard session cookie: the project (`prj_…`) the call acts on; \
                        the user must be a member. Required with the cookie, ignored with a key.",
        "schema": { "type": "string" },
    });
    let Some(paths) = document.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    for operation in paths
        .values_mut()
        .filter_map(|p| p.as_object_mut())
        .flat_map(|p| p.values_mut())
    {
        let schemes: Vec<&str> = operation["security"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_object())
            .flat_map(|s| s.keys().map(String::as_str))
            .collect();
        if !(schemes.contains(&"DashboardSession") && schemes.contains(&"SecretKey")) {
            continue;
        }
        let Some(operation) = operation.as_object_mut() else {
            continue;
        };
        let parameters = operation
            .entry("parameters")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let Some(list) = parameters.as_array_mut() {
            list.push(parameter.clone());
        }
    }
}
