//! Project administration: the onboarding state (`GET /projects/:id/setup-state`, any member)
//! and the reset that wipes a project's data (`POST /users/@me/projects/:id/reset`, `OWNER`).

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::ApiTags;
use super::error::ApiError;
use super::extract::DashboardAuth;
use super::state::AppState;
use super::users::membership;
use crate::store::projects::{ResetCounts, SetupState};

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
