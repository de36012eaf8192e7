//! `/users/@me`: the logged-in user, their projects (create, rename, delete, rotate keys) and
//! the invitations they accept.

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::addresses::MailboxBody;
use super::error::ApiError;
use super::extract::{DashboardAuth, JsonBody};
use super::state::AppState;
use super::templates::authorize_from;
use super::timestamp::Timestamp;
use crate::domain::email::EmailAddress;
use crate::domain::ids::ProjectId;
use crate::domain::keys::KeyPair;
use crate::domain::project::{DefaultSender, DoubleOptIn, Project, ProjectName, Role};
use crate::domain::template::fields::check_from_name;

/// The logged-in user.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct Me {
    /// The user's id.
    pub id: String,
    /// The user's address.
    pub email: String,
    /// Whether the address was confirmed.
    pub email_verified: bool,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A project as its members see it (keys are shown whole only on creation and rotation).
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ProjectBody {
    /// The project's id (`prj_…`); send it as `X-Project-Id` on dashboard calls.
    pub id: String,
    /// Display name.
    pub name: String,
    /// The caller's role: `OWNER`, `ADMIN` or `MEMBER`.
    pub role: String,
    /// Start of the public key.
    pub public_key_hint: String,
    /// Start of the secret key.
    pub secret_key_hint: String,
    /// Whether the project is disabled.
    pub disabled: bool,
    /// Whether emails carry an open-tracking pixel (default true).
    pub track_opens: bool,
    /// Whether emails' links go through click-tracking redirects (default true).
    pub track_clicks: bool,
    /// The sender `/v1/send` uses when neither the request nor the template names a `from`;
    /// null when none is set.
    #[oai(nullable)]
    pub default_from: Option<MailboxBody>,
    /// The transport the project's mail goes through unless its sending domain names one
    /// (docs/transports.md); null: the deployment's default.
    #[oai(nullable)]
    pub transport: Option<String>,
    /// Confirmed opt-in (docs/engagement.md): which asked subscriptions wait for the contact's
    /// confirmation by a mailed link; `OFF` (default) none.
    pub double_opt_in: DoubleOptInMode,
    /// The template of the confirmation mail (its body links to `{{confirmUrl}}`); null: the
    /// built-in one, in the contact's language.
    #[oai(nullable)]
    pub confirmation_template_id: Option<String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
}

fn project_body(p: Project, role: Role) -> ProjectBody {
    ProjectBody {
        id: p.id.into_string(),
        name: p.name,
        role: role.as_str().to_string(),
        public_key_hint: p.public_key_hint,
        secret_key_hint: p.secret_key_hint,
        disabled: p.disabled,
        track_opens: p.track_opens,
        track_clicks: p.track_clicks,
        default_from: p.default_from.map(|d| MailboxBody {
            name: d.name,
            email: d.email.to_string().into(),
        }),
        transport: p.transport,
        double_opt_in: p.double_opt_in.into(),
        confirmation_template_id: p.confirmation_template,
        created_at: Timestamp(p.created_at),
        updated_at: Timestamp(p.updated_at),
    }
}

/// Which asked subscriptions wait for the contact's confirmation (confirmed opt-in).
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DoubleOptInMode {
    /// None: subscriptions take effect at once.
    Off,
    /// Those asked with the public key (`/v1/track` from web pages).
    PublicKey,
    /// Those asked with either key: `/v1/track`, `POST /contacts`, `PATCH /contacts/:id`.
    All,
}

impl From<DoubleOptIn> for DoubleOptInMode {
    fn from(d: DoubleOptIn) -> DoubleOptInMode {
        match d {
            DoubleOptIn::Off => DoubleOptInMode::Off,
            DoubleOptIn::PublicKey => DoubleOptInMode::PublicKey,
            DoubleOptIn::All => DoubleOptInMode::All,
        }
    }
}

impl From<DoubleOptInMode> for DoubleOptIn {
    fn from(d: DoubleOptInMode) -> DoubleOptIn {
        match d {
            DoubleOptInMode::Off => DoubleOptIn::Off,
            DoubleOptInMode::PublicKey => DoubleOptIn::PublicKey,
            DoubleOptInMode::All => DoubleOptIn::All,
        }
    }
}

/// A new project with both keys, shown this once.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct CreatedProject {
    /// The project's id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// The public key (`pk_…`): may only call `POST /v1/track`.
    pub public_key: String,
    /// The secret key (`sk_…`): may call everything. Store it now; it is not shown again.
    pub secret_key: String,
    /// Creation time.
    pub created_at: Timestamp,
}

/// Both new keys after rotation.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RotatedKeys {
    /// The new public key.
    pub public_key: String,
    /// The new secret key.
    pub secret_key: String,
}

/// `{ token }`.
#[derive(Object, Deserialize)]
pub struct AcceptInvitation {
    /// The `token` of the invitation link.
    pub token: String,
}

/// Create a project.
#[derive(Object, Deserialize)]
pub struct CreateProject {
    /// Display name, 1 to 100 characters.
    pub name: String,
}

/// Change a project's settings.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateProject {
    /// New display name.
    #[oai(nullable)]
    pub name: Option<String>,
    /// Whether emails carry an open-tracking pixel.
    #[oai(nullable)]
    pub track_opens: Option<bool>,
    /// Whether emails' links go through click-tracking redirects.
    #[oai(nullable)]
    pub track_clicks: Option<bool>,
    /// The default sender (`{ email, name? }`, on a verified sending domain), used by
    /// `/v1/send` when neither the request nor the template names a `from`; `null` removes it.
    #[oai(nullable)]
    #[serde(default)]
    pub default_from: MaybeUndefined<MailboxBody>,
    /// The transport the project's mail goes through unless its sending domain names one (a
    /// named transport of the settings or a transport plugin); 422 when none is configured by
    /// that name; `null` goes back to the deployment's default.
    #[oai(nullable)]
    #[serde(default)]
    pub transport: MaybeUndefined<String>,
    /// Confirmed opt-in: `OFF`, `PUBLIC_KEY` (subscriptions asked with the public key wait for
    /// the contact's confirmation) or `ALL` (with either key, through `/v1/track`,
    /// `POST /contacts` and `PATCH /contacts/:id`). Turning it on needs a sender for the
    /// confirmation mail (`defaultFrom`, or the confirmation template's `from`).
    #[oai(skip_serializing_if_is_none)]
    pub double_opt_in: Option<DoubleOptInMode>,
    /// The template (`tpl_…`) of the confirmation mail instead of the built-in one: its body
    /// must link to `{{confirmUrl}}`; it is sent as transactional mail. `null` goes back to the
    /// built-in one.
    #[oai(nullable)]
    #[serde(default)]
    pub confirmation_template_id: MaybeUndefined<String>,
}

#[derive(ApiResponse)]
enum CreateProjectResponse {
    /// Created; the caller is its `OWNER`.
    #[oai(status = 201)]
    Created(Json<CreatedProject>),
}

#[derive(ApiResponse)]
enum DeleteProjectResponse {
    /// Deleted with everything in it.
    #[oai(status = 204)]
    NoContent,
}

fn project_name(s: &str) -> Result<ProjectName, ApiError> {
    ProjectName::parse(s).map_err(|m| ApiError::invalid_field("name", "invalid", m))
}

/// Checks the confirmed opt-in settings a project change leaves (before anything is written):
/// the confirmation template, and a sender for the mail (the `defaultFrom` the change leaves).
async fn check_opt_in(
    state: &AppState,
    project: &Project,
    body: &UpdateProject,
    template: Option<&Option<String>>,
) -> Result<(), ApiError> {
    let mode = body
        .double_opt_in
        .map_or(project.double_opt_in, DoubleOptIn::from);
    let named = match template {
        Some(t) => t.clone(),
        None => project.confirmation_template.clone(),
    };
    let mut after = project.clone();
    match &body.default_from {
        MaybeUndefined::Undefined => {}
        MaybeUndefined::Null => after.default_from = None,
        MaybeUndefined::Value(sender) => {
            // Checked and authorized with the rest of the change; here only its presence counts.
            after.default_from = EmailAddress::parse(sender.email.as_str())
                .ok()
                .map(|email| DefaultSender { email, name: None });
        }
    }
    match state
        .confirmations()
        .check_settings(&after, mode, named.as_deref())
        .await?
    {
        Ok(()) => Ok(()),
        Err(p) => Err(ApiError::invalid_field(p.field, p.code, p.message)),
    }
}

pub(super) async fn membership(
    state: &AppState,
    auth: &DashboardAuth,
    id: &str,
) -> Result<(Project, Role), ApiError> {
    let id = ProjectId::parse(id).ok_or_else(|| ApiError::not_found("project"))?;
    state
        .store()
        .project_of_user(&auth.user.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("project"))
}

/// The user and project management endpoints.
#[derive(Default)]
pub struct UsersApi;

#[OpenApi(tag = "ApiTags::Projects")]
impl UsersApi {
    /// The logged-in user
    #[oai(path = "/users/@me", method = "get", operation_id = "getMe")]
    async fn me(&self, auth: DashboardAuth) -> Result<Json<Me>, ApiError> {
        Ok(Json(Me {
            id: auth.user.id.to_string(),
            email: auth.user.email.to_string(),
            email_verified: auth.user.email_verified,
            created_at: Timestamp(auth.user.created_at),
        }))
    }

    /// List my projects
    #[oai(
        path = "/users/@me/projects",
        method = "get",
        operation_id = "listProjects"
    )]
    async fn list(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Vec<ProjectBody>>, ApiError> {
        let projects = state.store().projects_of_user(&auth.user.id).await?;
        Ok(Json(
            projects
                .into_iter()
                .map(|(p, r)| project_body(p, r))
                .collect(),
        ))
    }

    /// Create a project
    ///
    /// Answers the project with both API keys; they are shown whole only here and on rotation.
    #[oai(
        path = "/users/@me/projects",
        method = "post",
        operation_id = "createProject"
    )]
    async fn create(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateProject>,
    ) -> Result<CreateProjectResponse, ApiError> {
        let name = project_name(&body.0.name)?;
        let keys = KeyPair::generate();
        let project = state
            .store()
            .create_project(&name, &auth.user.id, &keys)
            .await?;
        Ok(CreateProjectResponse::Created(Json(CreatedProject {
            id: project.id.into_string(),
            name: project.name,
            public_key: keys.public_key,
            secret_key: keys.secret_key,
            created_at: Timestamp(project.created_at),
        })))
    }

    /// Update project settings
    ///
    /// `OWNER` and `ADMIN` only.
    #[oai(
        path = "/users/@me/projects/:id",
        method = "patch",
        operation_id = "updateProject"
    )]
    async fn update(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        body: JsonBody<UpdateProject>,
    ) -> Result<Json<ProjectBody>, ApiError> {
        let (project, role) = membership(&state, &auth, &id).await?;
        if !role.can_manage() {
            return Err(ApiError::forbidden(
                "only an OWNER or ADMIN may change project settings",
            ));
        }
        let body = body.0;
        let name = body.name.as_deref().map(project_name).transpose()?;
        let transport = super::domains::transport_change(&state, &body.transport)?;
        let template = match &body.confirmation_template_id {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(id) => Some(Some(id.trim().to_string())),
        };
        let opt_in_change = body.double_opt_in.is_some() || template.is_some();
        if opt_in_change {
            check_opt_in(&state, &project, &body, template.as_ref()).await?;
        }
        let mut project = project;
        if let Some(transport) = transport {
            project = state
                .store()
                .set_project_transport(&project.id, transport.as_deref())
                .await
                .map_err(|e| ApiError::from_store(e, "project"))?;
        }
        if let Some(name) = name {
            project = state
                .store()
                .rename_project(&project.id, &name)
                .await
                .map_err(|e| ApiError::from_store(e, "project"))?;
        }
        match &body.default_from {
            MaybeUndefined::Undefined => {}
            MaybeUndefined::Null => {
                project = state
                    .store()
                    .set_project_default_from(&project.id, None)
                    .await
                    .map_err(|e| ApiError::from_store(e, "project"))?;
            }
            MaybeUndefined::Value(sender) => {
                let email = EmailAddress::parse(sender.email.as_str()).map_err(|e| {
                    ApiError::invalid_field("defaultFrom.email", "invalid_email", e.to_string())
                })?;
                let name = match sender.name.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(name) => Some(check_from_name(name).map_err(|(code, message)| {
                        ApiError::invalid_field("defaultFrom.name", code, message)
                    })?),
                };
                authorize_from(&state, &project.id, &email, "defaultFrom.email").await?;
                project = state
                    .store()
                    .set_project_default_from(&project.id, Some(&DefaultSender { email, name }))
                    .await
                    .map_err(|e| ApiError::from_store(e, "project"))?;
            }
        }
        if opt_in_change {
            project = state
                .store()
                .set_project_opt_in(
                    &project.id,
                    body.double_opt_in.map(DoubleOptIn::from),
                    template.as_ref().map(|t| t.as_deref()),
                )
                .await
                .map_err(|e| ApiError::from_store(e, "project"))?;
        }
        if body.track_opens.is_some() || body.track_clicks.is_some() {
            project = state
                .store()
                .set_project_tracking(&project.id, body.track_opens, body.track_clicks)
                .await
                .map_err(|e| ApiError::from_store(e, "project"))?;
        }
        Ok(Json(project_body(project, role)))
    }

    /// Delete a project
    ///
    /// `OWNER` only. Deletes every contact and everything else of the project.
    #[oai(
        path = "/users/@me/projects/:id",
        method = "delete",
        operation_id = "deleteProject"
    )]
    async fn delete(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<DeleteProjectResponse, ApiError> {
        let (project, role) = membership(&state, &auth, &id).await?;
        if !role.can_delete_project() {
            return Err(ApiError::forbidden(
                "only the project's OWNER may delete it",
            ));
        }
        state
            .store()
            .delete_project(&project.id)
            .await
            .map_err(|e| ApiError::from_store(e, "project"))?;
        Ok(DeleteProjectResponse::NoContent)
    }

    /// Rotate both API keys
    ///
    /// `OWNER` and `ADMIN` only. The old keys stop working immediately.
    #[oai(
        path = "/users/@me/projects/:id/regenerate-keys",
        method = "post",
        operation_id = "regenerateKeys"
    )]
    async fn regenerate_keys(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<RotatedKeys>, ApiError> {
        let (project, role) = membership(&state, &auth, &id).await?;
        if !role.can_manage() {
            return Err(ApiError::forbidden(
                "only an OWNER or ADMIN may rotate the keys",
            ));
        }
        let keys = KeyPair::generate();
        state
            .store()
            .rotate_keys(&project.id, &keys)
            .await
            .map_err(|e| ApiError::from_store(e, "project"))?;
        Ok(Json(RotatedKeys {
            public_key: keys.public_key,
            secret_key: keys.secret_key,
        }))
    }

    /// Accept an invitation
    ///
    /// Joins the signed-in user to the project of an invitation mailed to their address (the
    /// link `<dashboard_url>/invitations/accept?token=…` that `POST /projects/:id/members` mails
    /// to an account whose address is not verified yet; a signup link's `invitation` works too).
    /// The token proves the address: it is marked verified, the user joins with the invited role
    /// (a member already keeps their role), and the invitation is used up. Answers the project.
    /// 404 when the token is unknown, used, expired, or was mailed to another address.
    #[oai(
        path = "/users/@me/invitations/accept",
        method = "post",
        operation_id = "acceptInvitation"
    )]
    async fn accept_invitation(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<AcceptInvitation>,
    ) -> Result<Json<ProjectBody>, ApiError> {
        let gone = || {
            ApiError::not_found("invitation").suggest(
                "the link is invalid, already used, expired, or was sent to another address: \
                 log in with the invited address, or ask for a new invitation",
            )
        };
        let project = state
            .store()
            .accept_invitation(&auth.user, &super::auth::token_hash(&body.0.token))
            .await?
            .ok_or_else(gone)?;
        let (project, role) = state
            .store()
            .project_of_user(&auth.user.id, &project)
            .await?
            .ok_or_else(gone)?;
        Ok(Json(project_body(project, role)))
    }
}
