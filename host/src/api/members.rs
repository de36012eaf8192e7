//! `/projects/:id/members`: a project's team. Any member lists it; `OWNER` and `ADMIN` invite,
//! change roles and remove; only an `OWNER` grants `OWNER` or changes an owner; anyone may leave.
//! The last `OWNER` can be neither demoted nor removed (409): ownership moves by making another
//! member `OWNER` first.
//!
//! Only an account whose address is verified joins at once: anyone can sign up with any address,
//! so an unverified account is mailed a pending invitation that it accepts from the address
//! (`POST /users/@me/invitations/accept`). Team mail is limited per inviter per hour and per
//! project per day (429 beyond).

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::error::ApiError;
use super::extract::{DashboardAuth, JsonBody};
use super::state::AppState;
use super::timestamp::Timestamp;
use super::users::membership;
use crate::domain::email::EmailAddress;
use crate::domain::ids::UserId;
use crate::domain::project::Role;
use crate::services::ratelimit::hit_long;
use crate::store::members::{Invitation, Member};

/// A member of the project.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct MemberBody {
    /// The user's id (`usr_…`).
    pub user_id: String,
    /// The user's address.
    pub email: String,
    /// `OWNER`, `ADMIN` or `MEMBER`.
    pub role: String,
    /// When they joined.
    pub joined_at: Timestamp,
}

impl From<Member> for MemberBody {
    fn from(m: Member) -> MemberBody {
        MemberBody {
            user_id: m.user_id.to_string(),
            email: m.email,
            role: m.role.as_str().to_string(),
            joined_at: Timestamp(m.created_at),
        }
    }
}

/// An invitation mailed to an address without an account, or whose account's address is not
/// verified.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct InvitationBody {
    /// The invited address.
    pub email: String,
    /// The role the invitee gets on signing up through the link or accepting it.
    pub role: String,
    /// When it was sent.
    pub invited_at: Timestamp,
    /// When its link stops working.
    pub expires_at: Timestamp,
}

impl From<Invitation> for InvitationBody {
    fn from(i: Invitation) -> InvitationBody {
        InvitationBody {
            email: i.email,
            role: i.role.as_str().to_string(),
            invited_at: Timestamp(i.created_at),
            expires_at: Timestamp(i.expires_at),
        }
    }
}

/// `{ members, invitations }`.
#[derive(Object)]
pub struct TeamBody {
    /// Members, in the order they joined.
    pub members: Vec<MemberBody>,
    /// Pending invitations, oldest first.
    pub invitations: Vec<InvitationBody>,
}

/// `{ email, role? }`.
#[derive(Object, Deserialize)]
pub struct InviteMember {
    /// The address to add or invite.
    pub email: String,
    /// `OWNER`, `ADMIN` or `MEMBER` (any case; default `MEMBER`).
    #[oai(nullable)]
    #[serde(default)]
    pub role: Option<String>,
}

/// `{ role }`.
#[derive(Object, Deserialize)]
pub struct ChangeRole {
    /// `OWNER`, `ADMIN` or `MEMBER` (any case).
    pub role: String,
}

#[derive(ApiResponse)]
enum InviteResponse {
    /// The address has an account whose address is verified: it is a member now, and was told
    /// by mail.
    #[oai(status = 201)]
    Added(Json<MemberBody>),
    /// The address has no account: an invitation with a single-use signup link was mailed
    /// (`<dashboard_url>/signup?invitation=…`); the membership is created when that person signs
    /// up through it. Or the address's account has not verified it: the mailed single-use link
    /// (`<dashboard_url>/invitations/accept?token=…`) is accepted by that account signed in,
    /// `POST /users/@me/invitations/accept`.
    #[oai(status = 202)]
    Invited(Json<InvitationBody>),
}

#[derive(ApiResponse)]
enum RemovedResponse {
    /// Removed.
    #[oai(status = 204)]
    NoContent,
}

fn role(field: &str, value: &str) -> Result<Role, ApiError> {
    Role::parse(&value.to_ascii_uppercase()).ok_or_else(|| {
        ApiError::invalid_field(field, "invalid", "the role must be OWNER, ADMIN or MEMBER")
    })
}

fn managers_only() -> ApiError {
    ApiError::forbidden("only an OWNER or ADMIN may manage the project's members")
}

fn owners_only() -> ApiError {
    ApiError::forbidden("only an OWNER may make someone OWNER or change an OWNER's role")
}

/// The team endpoints.
#[derive(Default)]
pub struct MembersApi;

#[OpenApi(tag = "ApiTags::Projects")]
impl MembersApi {
    /// List members and invitations
    ///
    /// Any member of the project.
    #[oai(
        path = "/projects/:id/members",
        method = "get",
        operation_id = "listMembers"
    )]
    async fn list(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<TeamBody>, ApiError> {
        let (project, _) = membership(&state, &auth, &id).await?;
        let members = state.store().members(&project.id).await?;
        let invitations = state.store().invitations(&project.id).await?;
        Ok(Json(TeamBody {
            members: members.into_iter().map(Into::into).collect(),
            invitations: invitations.into_iter().map(Into::into).collect(),
        }))
    }

    /// Add or invite a member
    ///
    /// `OWNER` and `ADMIN` (only an `OWNER` grants `OWNER`). An address whose account has
    /// verified it becomes a member at once (201) and is told by mail. Another gets an invitation
    /// mail with a single-use link valid `accounts.invitation_days` (202), replacing an earlier
    /// one: a signup link without an account, else a link whose token the account, signed in,
    /// accepts with `POST /users/@me/invitations/accept`. 409 when the user is a member already.
    /// Each call that mails counts against `accounts.invitations_per_inviter_per_hour` (the
    /// caller, across projects) and `accounts.invitations_per_project_per_day` (429 beyond).
    #[oai(
        path = "/projects/:id/members",
        method = "post",
        operation_id = "inviteMember"
    )]
    async fn invite(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        req: &poem::Request,
        body: JsonBody<InviteMember>,
    ) -> Result<InviteResponse, ApiError> {
        // The recipient has no language on record: mail in the inviter's (their team's).
        let locale = crate::i18n::for_request(req);
        let (project, caller) = membership(&state, &auth, &id).await?;
        if !caller.can_manage() {
            return Err(managers_only());
        }
        let email = EmailAddress::parse(&body.0.email)
            .map_err(|e| ApiError::invalid_field("email", "invalid_email", e.to_string()))?;
        let role = match body.0.role.as_deref() {
            Some(r) => role("role", r)?,
            None => Role::Member,
        };
        if role == Role::Owner && caller != Role::Owner {
            return Err(owners_only());
        }
        let existing = state.store().user_by_email(&email).await?;
        if let Some(user) = &existing
            && state.store().member(&project.id, &user.id).await?.is_some()
        {
            return Err(ApiError::from_store(
                crate::store::StoreError::Conflict(crate::store::Conflict::Member),
                "member",
            ));
        }
        count_team_mail(&state, &auth.user.id, &project.id).await?;
        let dashboard = state.settings().dashboard_url();
        let inviter = auth.user.email.as_str();
        if let Some(user) = existing.as_ref().filter(|u| u.email_verified) {
            let member = state
                .store()
                .add_member(&project.id, user, role)
                .await
                .map_err(|e| ApiError::from_store(e, "member"))?;
            let vars = serde_json::json!({
                "project": project.name.as_str(), "inviter": inviter,
                "role": role.as_str(), "link": dashboard,
            });
            state
                .account_mail()
                .send("added-to-project", email.as_str(), locale, &vars)
                .await?;
            return Ok(InviteResponse::Added(Json(member.into())));
        }
        let days = state.settings().accounts.invitation_days.max(1);
        let (token, hash) = super::auth::new_token();
        let invitation = state
            .store()
            .invite(
                &project.id,
                &email,
                role,
                &auth.user.id,
                &hash,
                (days * 86_400_000) as i64,
            )
            .await?;
        // An account that has not verified its address proves it by accepting signed in.
        let (template, link) = match existing {
            Some(_) => (
                "invitation-accept",
                format!("{dashboard}/invitations/accept?token={token}"),
            ),
            None => (
                "invitation",
                format!("{dashboard}/signup?invitation={token}"),
            ),
        };
        let vars = serde_json::json!({
            "project": project.name.as_str(), "inviter": inviter, "role": role.as_str(),
            "link": link, "days": days,
        });
        state
            .account_mail()
            .send(template, email.as_str(), locale, &vars)
            .await?;
        Ok(InviteResponse::Invited(Json(invitation.into())))
    }

    /// Change a member's role
    ///
    /// `OWNER` and `ADMIN`; only an `OWNER` grants `OWNER` or changes an `OWNER`'s role. The
    /// last `OWNER` cannot be demoted (409).
    #[oai(
        path = "/projects/:id/members/:userId",
        method = "patch",
        operation_id = "changeMemberRole"
    )]
    async fn change_role(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        /// The member's user id.
        #[oai(name = "userId")]
        user_id: Path<String>,
        body: JsonBody<ChangeRole>,
    ) -> Result<Json<MemberBody>, ApiError> {
        let (project, caller) = membership(&state, &auth, &id).await?;
        if !caller.can_manage() {
            return Err(managers_only());
        }
        let role = role("role", &body.0.role)?;
        let target = member_of(&state, &project.id, &user_id).await?;
        if (role == Role::Owner || target.role == Role::Owner) && caller != Role::Owner {
            return Err(owners_only());
        }
        let member = state
            .store()
            .change_member_role(&project.id, &target.user_id, role)
            .await
            .map_err(|e| ApiError::from_store(e, "member"))?;
        Ok(Json(member.into()))
    }

    /// Remove a member
    ///
    /// `OWNER` and `ADMIN` remove others (only an `OWNER` removes an `OWNER`); any member may
    /// remove themselves. The last `OWNER` cannot be removed (409).
    #[oai(
        path = "/projects/:id/members/:userId",
        method = "delete",
        operation_id = "removeMember"
    )]
    async fn remove(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        /// The member's user id.
        #[oai(name = "userId")]
        user_id: Path<String>,
    ) -> Result<RemovedResponse, ApiError> {
        let (project, caller) = membership(&state, &auth, &id).await?;
        let target = member_of(&state, &project.id, &user_id).await?;
        let leaving = target.user_id == auth.user.id;
        if !leaving {
            if !caller.can_manage() {
                return Err(managers_only());
            }
            if target.role == Role::Owner && caller != Role::Owner {
                return Err(owners_only());
            }
        }
        state
            .store()
            .remove_member(&project.id, &target.user_id)
            .await
            .map_err(|e| ApiError::from_store(e, "member"))?;
        Ok(RemovedResponse::NoContent)
    }
}

/// Counts one team mail of `inviter` for `project` against the hourly per-inviter and daily
/// per-project limits (429 naming the limit beyond either).
async fn count_team_mail(
    state: &AppState,
    inviter: &UserId,
    project: &crate::domain::ids::ProjectId,
) -> Result<(), ApiError> {
    let accounts = &state.settings().accounts;
    let (per_inviter, per_project) = (
        accounts.invitations_per_inviter_per_hour,
        accounts.invitations_per_project_per_day,
    );
    let limits = [
        (
            format!("mail:inviter:{inviter}"),
            3_600_000,
            per_inviter,
            format!(
                "too many invitations by you: at most {per_inviter} an hour across projects \
                 (`accounts.invitations_per_inviter_per_hour`)"
            ),
        ),
        (
            format!("mail:project:{project}"),
            86_400_000,
            per_project,
            format!(
                "too many invitations for this project: at most {per_project} a day (UTC) \
                 (`accounts.invitations_per_project_per_day`)"
            ),
        ),
    ];
    for (bucket, window_ms, limit, message) in limits {
        let decision = hit_long(state.store(), &bucket, window_ms, limit).await?;
        if !decision.allowed {
            return Err(super::auth::too_many_attempts(message, decision.reset_secs));
        }
    }
    Ok(())
}

/// A member of the project by user id; 404 otherwise.
async fn member_of(
    state: &AppState,
    project: &crate::domain::ids::ProjectId,
    user_id: &str,
) -> Result<Member, ApiError> {
    let id = UserId::parse(user_id).ok_or_else(|| ApiError::not_found("member"))?;
    state
        .store()
        .member(project, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("member"))
}
