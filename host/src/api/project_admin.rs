//! Project administration: the onboarding state (`GET /projects/:id/setup-state`, any member)
//! and the reset that wipes a project's data (`POST /users/@me/projects/:id/reset`, `OWNER`).

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::ApiTags;
use super::error::ApiError;
use super::extract::DashboardAuth;
use super::state::AppState;
use super::timestamp::Timestamp;
use super::users::membership;
use crate::store::projects::{ResetCounts, SetupState};
use crate::store::security::Suspension;

/// Which onboarding steps a project has done, in the order a new project takes them.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SetupStateBody {
    /// A sending domain was added.
    pub domain_added: bool,
    /// A sending domain is verified.
    pub domain_verified: bool,
    /// The project has a contact.
    pub contact_added: bool,
    /// The project has a template.
    pub template_created: bool,
    /// An email was handed to the transport (test sends do not count).
    pub email_sent: bool,
    /// A workflow is enabled.
    pub workflow_enabled: bool,
    /// A campaign was sent.
    pub campaign_sent: bool,
    /// Every step is done.
    pub complete: bool,
    /// The first step not done yet (the field name above), or null when complete.
    #[oai(nullable)]
    pub next_step: Option<String>,
}

impl From<SetupState> for SetupStateBody {
    fn from(s: SetupState) -> SetupStateBody {
        let steps = [
            ("domainAdded", s.domain_added),
            ("domainVerified", s.domain_verified),
            ("contactAdded", s.contact_added),
            ("templateCreated", s.template_created),
            ("emailSent", s.email_sent),
            ("workflowEnabled", s.workflow_enabled),
            ("campaignSent", s.campaign_sent),
        ];
        let next_step = steps
            .iter()
            .find(|(_, done)| !done)
            .map(|(name, _)| name.to_string());
        SetupStateBody {
            domain_added: s.domain_added,
            domain_verified: s.domain_verified,
            contact_added: s.contact_added,
            template_created: s.template_created,
            email_sent: s.email_sent,
            workflow_enabled: s.workflow_enabled,
            campaign_sent: s.campaign_sent,
            complete: next_step.is_none(),
            next_step,
        }
    }
}

/// What a reset deleted.
#[derive(Object)]
pub struct ResetBody {
    /// Always true.
    pub success: bool,
    /// Rows deleted, by kind (their children, such as email history and campaign recipients,
    /// went with them).
    pub deleted: DeletedCounts,
}

/// Rows deleted, by kind.
#[derive(Object)]
pub struct DeletedCounts {
    /// Contacts deleted.
    pub contacts: u64,
    /// Events deleted.
    pub events: u64,
    /// Emails deleted.
    pub emails: u64,
    /// Templates deleted.
    pub templates: u64,
    /// Segments deleted.
    pub segments: u64,
    /// Campaigns deleted.
    pub campaigns: u64,
    /// Workflows deleted.
    pub workflows: u64,
    /// Jobs deleted.
    pub jobs: u64,
}

impl From<ResetCounts> for DeletedCounts {
    fn from(c: ResetCounts) -> DeletedCounts {
        DeletedCounts {
            contacts: c.contacts,
            events: c.events,
            emails: c.emails,
            templates: c.templates,
            segments: c.segments,
            campaigns: c.campaigns,
            workflows: c.workflows,
            jobs: c.jobs,
        }
    }
}

/// A suspension of the project's sending.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SuspensionBody {
    /// The suspension's id (`sus_…`).
    pub id: String,
    /// Why, with the figures.
    pub reason: String,
    /// Emails sent in the window when it was decided.
    pub sent: i64,
    /// Of those, hard-bounced.
    pub bounced: i64,
    /// Of those, reported as spam.
    pub complained: i64,
    /// When sending stopped.
    pub created_at: Timestamp,
    /// When an operator lifted it; null while it holds.
    #[oai(nullable)]
    pub lifted_at: Option<Timestamp>,
}

/// The thresholds in force.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ThresholdsBody {
    /// Bounce rate (0..1) at which sending stops.
    pub bounce_rate: f64,
    /// Complaint rate (0..1) at which sending stops.
    pub complaint_rate: f64,
    /// Emails sent in the window before a rate counts.
    pub min_volume: i64,
}

/// A project's sending health.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct SecurityBody {
    /// Whether sending is suspended now.
    pub suspended: bool,
    /// Days the figures cover.
    pub window_days: u64,
    /// Emails handed to the transport in the window (test sends excluded).
    pub sent: i64,
    /// Of those, hard-bounced.
    pub bounced: i64,
    /// Of those, reported as spam.
    pub complained: i64,
    /// `bounced / sent`, 0 when nothing was sent.
    pub bounce_rate: f64,
    /// `complained / sent`, 0 when nothing was sent.
    pub complaint_rate: f64,
    /// When a rate suspends the project.
    pub thresholds: ThresholdsBody,
    /// The latest suspensions, newest first (at most 20).
    pub suspensions: Vec<SuspensionBody>,
}

impl From<Suspension> for SuspensionBody {
    fn from(s: Suspension) -> SuspensionBody {
        SuspensionBody {
            id: s.id,
            reason: s.reason,
            sent: s.sent,
            bounced: s.bounced,
            complained: s.complained,
            created_at: Timestamp(s.created_at),
            lifted_at: s.lifted_at.map(Timestamp),
        }
    }
}

async fn security_of(
    state: &AppState,
    auth: &DashboardAuth,
    id: &str,
) -> Result<Json<SecurityBody>, ApiError> {
    let (project, _) = membership(state, auth, id).await?;
    let guard = state.health_guard();
    let health = guard.health(&project.id).await?;
    let suspensions = state.store().suspensions(&project.id, 20).await?;
    Ok(Json(SecurityBody {
        suspended: suspensions.iter().any(|s| s.lifted_at.is_none()),
        window_days: guard.window.as_secs() / 86_400,
        sent: health.sent,
        bounced: health.bounced,
        complained: health.complained,
        bounce_rate: health.bounce_rate(),
        complaint_rate: health.complaint_rate(),
        thresholds: ThresholdsBody {
            bounce_rate: guard.thresholds.bounce_rate,
            complaint_rate: guard.thresholds.complaint_rate,
            min_volume: guard.thresholds.min_volume,
        },
        suspensions: suspensions.into_iter().map(Into::into).collect(),
    }))
}

/// The project administration endpoints.
#[derive(Default)]
pub struct ProjectAdminApi;

#[OpenApi(tag = "ApiTags::Projects")]
impl ProjectAdminApi {
    /// Onboarding state
    ///
    /// Any member. Which of the first steps the project has done, and the next one.
    #[oai(
        path = "/projects/:id/setup-state",
        method = "get",
        operation_id = "getSetupState"
    )]
    async fn setup_state(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<SetupStateBody>, ApiError> {
        let (project, _) = membership(&state, &auth, &id).await?;
        Ok(Json(state.store().setup_state(&project.id).await?.into()))
    }

    /// Sending health of a project
    ///
    /// Any member. Bounce and complaint rates over the window, the thresholds that suspend
    /// sending, and the latest suspensions.
    #[oai(
        path = "/users/@me/projects/:id/security",
        method = "get",
        operation_id = "getMyProjectSecurity"
    )]
    async fn my_project_security(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<SecurityBody>, ApiError> {
        security_of(&state, &auth, &id).await
    }

    /// Sending health of one project
    ///
    /// The same as `GET /users/@me/projects/:id/security`.
    #[oai(
        path = "/projects/:id/security",
        method = "get",
        operation_id = "getProjectSecurity"
    )]
    async fn project_security(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<SecurityBody>, ApiError> {
        security_of(&state, &auth, &id).await
    }

    /// Reset a project
    ///
    /// `OWNER` only. Irreversible: deletes the project's contacts, events, emails, templates,
    /// segments, campaigns, workflows (with their executions), jobs, custom fields and
    /// idempotency keys in one transaction; keeps the project, its members, API keys, settings
    /// and sending domains.
    #[oai(
        path = "/users/@me/projects/:id/reset",
        method = "post",
        operation_id = "resetProject"
    )]
    async fn reset(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<ResetBody>, ApiError> {
        let (project, role) = membership(&state, &auth, &id).await?;
        if !role.can_delete_project() {
            return Err(ApiError::forbidden("only the project's OWNER may reset it"));
        }
        let deleted = state.store().reset_project(&project.id).await?;
        tracing::warn!(project_id = %project.id, user_id = %auth.user.id, "project reset");
        Ok(Json(ResetBody {
            success: true,
            deleted: deleted.into(),
        }))
    }
}
