//! A project's team: its members with their roles, and invitations for addresses without an
//! account or whose account's address is not verified. Every change that could leave a project without an `OWNER` locks the project's
//! owners first (PostgreSQL `FOR UPDATE`; SQLite's single writer), so two concurrent demotions
//! cannot both pass the check.

use sqlx::FromRow;

use super::dialect::BeginWrite;
use super::projects::role_of;
use super::{Conflict, Store, StoreError, StoreResult, on_db, on_db_write};
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ProjectId, UserId};
use crate::domain::project::{Role, User};
use crate::domain::time::now_ms;

/// A member of a project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub user_id: UserId,
    pub email: String,
    pub role: Role,
    /// When they joined, unix ms.
    pub created_at: i64,
}

/// A pending invitation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invitation {
    pub email: String,
    pub role: Role,
    /// Sent, unix ms.
    pub created_at: i64,
    /// The link stops working then, unix ms.
    pub expires_at: i64,
}

#[derive(FromRow)]
struct MemberRow {
    user_id: String,
    email: String,
    role: String,
    created_at: i64,
}

impl TryFrom<MemberRow> for Member {
    type Error = StoreError;
    fn try_from(r: MemberRow) -> StoreResult<Member> {
        Ok(Member {
            user_id: UserId::from_trusted(r.user_id),
            email: r.email,
            role: role_of(&r.role)?,
            created_at: r.created_at,
        })
    }
}

const MEMBER_COLUMNS: &str = "m.user_id, u.email, m.role, m.created_at";

/// Locks the project's owners and answers how many there are; binds the project.
fn owners_sql(backend: super::Backend) -> String {
    format!(
        "SELECT user_id FROM memberships WHERE project_id = $1 AND role = 'OWNER'{}",
        super::dialect::for_update(backend)
    )
}

impl Store {
    /// The members of a project, in the order they joined.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn members(&self, project: &ProjectId) -> StoreResult<Vec<Member>> {
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM memberships m JOIN users u ON u.id = m.user_id \
             WHERE m.project_id = $1 ORDER BY m.created_at, m.user_id"
        );
        let rows: Vec<MemberRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?
        });
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// One member of a project; `None` when the user is not in it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn member(&self, project: &ProjectId, user: &UserId) -> StoreResult<Option<Member>> {
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM memberships m JOIN users u ON u.id = m.user_id \
             WHERE m.project_id = $1 AND m.user_id = $2"
        );
        let row: Option<MemberRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(user.as_str()).fetch_optional(pool).await?
        });
        row.map(TryInto::try_into).transpose()
    }

    /// The pending (unexpired) invitations of a project, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn invitations(&self, project: &ProjectId) -> StoreResult<Vec<Invitation>> {
        let rows: Vec<(String, String, i64, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT email, role, created_at, expires_at FROM project_invitations \
                 WHERE project_id = $1 AND expires_at > $2 ORDER BY created_at, email",
            )
            .bind(project.as_str())
            .bind(now_ms())
            .fetch_all(pool)
            .await?
        });
        rows.into_iter()
            .map(|(email, role, created_at, expires_at)| {
                Ok(Invitation {
                    email,
                    role: role_of(&role)?,
                    created_at,
                    expires_at,
                })
            })
            .collect()
    }

    /// Adds an existing user to a project, and drops a pending invitation of their address to
    /// it (one made while the address was not verified); [`Conflict::Member`] when they are in
    /// it already.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn add_member(
        &self,
        project: &ProjectId,
        user: &User,
        role: Role,
    ) -> StoreResult<Member> {
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query("INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)")
                .bind(project.as_str())
                .bind(user.id.as_str())
                .bind(role.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(|e| StoreError::unique(e, Conflict::Member))?;
            sqlx::query("DELETE FROM project_invitations WHERE project_id = $1 AND email = $2")
                .bind(project.as_str())
                .bind(user.email.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(Member {
            user_id: user.id.clone(),
            email: user.email.to_string(),
            role,
            created_at: now,
        })
    }

    /// Keeps an invitation of `email` to a project (only the hash of its link's token), replacing
    /// a pending one of the same address.
    #[tracing::instrument(level = "debug", skip(self, token_hash))]
    pub async fn invite(
        &self,
        project: &ProjectId,
        email: &EmailAddress,
        role: Role,
        invited_by: &UserId,
        token_hash: &str,
        ttl_ms: i64,
    ) -> StoreResult<Invitation> {
        let now = now_ms();
        // One statement, so that two invitations of one address at once both land, the later
        // replacing the earlier (a delete and an insert had the second fail on the address).
        on_db_write!(self.db(), pool => {
            sqlx::query(
                "INSERT INTO project_invitations (token_hash, project_id, email, role, invited_by, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (project_id, email) DO UPDATE SET token_hash = excluded.token_hash, \
                 role = excluded.role, invited_by = excluded.invited_by, \
                 created_at = excluded.created_at, expires_at = excluded.expires_at",
            )
            .bind(token_hash)
            .bind(project.as_str())
            .bind(email.as_str())
            .bind(role.as_str())
            .bind(invited_by.as_str())
            .bind(now)
            .bind(now + ttl_ms)
            .execute(pool)
            .await?;
        });
        Ok(Invitation {
            email: email.to_string(),
            role,
            created_at: now,
            expires_at: now + ttl_ms,
        })
    }

    /// Changes a member's role; [`Conflict::LastOwner`] when it would demote the last `OWNER`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn change_member_role(
        &self,
        project: &ProjectId,
        user: &UserId,
        role: Role,
    ) -> StoreResult<Member> {
        let owners = owners_sql(self.db().backend());
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM memberships m JOIN users u ON u.id = m.user_id \
             WHERE m.project_id = $1 AND m.user_id = $2"
        );
        let row: MemberRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let owners: Vec<String> = sqlx::query_scalar(&owners).bind(project.as_str()).fetch_all(&mut *tx).await?;
            if role != Role::Owner && owners.len() == 1 && owners[0] == user.as_str() {
                return Err(StoreError::Conflict(Conflict::LastOwner));
            }
            let n = sqlx::query("UPDATE memberships SET role = $3 WHERE project_id = $1 AND user_id = $2")
                .bind(project.as_str())
                .bind(user.as_str())
                .bind(role.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            let row: MemberRow = sqlx::query_as(&sql).bind(project.as_str()).bind(user.as_str()).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            row
        });
        row.try_into()
    }

    /// Removes a member; [`Conflict::LastOwner`] when they are the last `OWNER`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn remove_member(&self, project: &ProjectId, user: &UserId) -> StoreResult<()> {
        let owners = owners_sql(self.db().backend());
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let owners: Vec<String> = sqlx::query_scalar(&owners).bind(project.as_str()).fetch_all(&mut *tx).await?;
            if owners.len() == 1 && owners[0] == user.as_str() {
                return Err(StoreError::Conflict(Conflict::LastOwner));
            }
            let n = sqlx::query("DELETE FROM memberships WHERE project_id = $1 AND user_id = $2")
                .bind(project.as_str())
                .bind(user.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Accepts, for the signed-in `user`, the invitation whose link carries the token hashed
    /// `token_hash`: in one transaction the invitation is used up, the user's address is marked
    /// verified (the link reached it) and the user joins the project with the invited role (a
    /// user who is a member already keeps their role). `None` when the token is unknown,
    /// expired or used, or was sent to another address than the user's.
    #[tracing::instrument(level = "debug", skip(self, token_hash))]
    pub async fn accept_invitation(
        &self,
        user: &User,
        token_hash: &str,
    ) -> StoreResult<Option<ProjectId>> {
        let now = now_ms();
        let project = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let invitation: Option<(String, String)> = sqlx::query_as(
                "DELETE FROM project_invitations WHERE token_hash = $1 AND email = $2 AND expires_at > $3 \
                 RETURNING project_id, role",
            )
            .bind(token_hash)
            .bind(user.email.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((project, role)) = invitation else {
                return Ok(None);
            };
            sqlx::query("UPDATE users SET email_verified = TRUE, updated_at = $3 WHERE id = $1 AND email = $2")
                .bind(user.id.as_str())
                .bind(user.email.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (project_id, user_id) DO NOTHING",
            )
            .bind(&project)
            .bind(user.id.as_str())
            .bind(&role)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            project
        });
        Ok(Some(ProjectId::from_trusted(project)))
    }

    /// Creates a user who signed up through an invitation link, joins them to the inviting
    /// project with the invited role and marks their address verified (the link reached it), in
    /// one transaction. `None` when the token is unknown, expired, or was sent to another
    /// address; [`Conflict::Email`] when the address has an account.
    #[tracing::instrument(level = "debug", skip(self, password_hash, token_hash))]
    pub async fn create_invited_user(
        &self,
        email: &EmailAddress,
        password_hash: &str,
        token_hash: &str,
    ) -> StoreResult<Option<(User, ProjectId)>> {
        let id = UserId::generate();
        let now = now_ms();
        let created = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let invitation: Option<(String, String)> = sqlx::query_as(
                "DELETE FROM project_invitations WHERE token_hash = $1 AND email = $2 AND expires_at > $3 \
                 RETURNING project_id, role",
            )
            .bind(token_hash)
            .bind(email.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((project, role)) = invitation else {
                return Ok(None);
            };
            let created_at: i64 = sqlx::query_scalar(
                "INSERT INTO users (id, email, password_hash, email_verified, created_at, updated_at) \
                 VALUES ($1, $2, $3, TRUE, $4, $4) RETURNING created_at",
            )
            .bind(id.as_str())
            .bind(email.as_str())
            .bind(password_hash)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| StoreError::unique(e, Conflict::Email))?;
            sqlx::query("INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)")
                .bind(&project)
                .bind(id.as_str())
                .bind(&role)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            (created_at, project)
        });
        let (created_at, project) = created;
        Ok(Some((
            User {
                id,
                email: email.clone(),
                email_verified: true,
                created_at,
            },
            ProjectId::from_trusted(project),
        )))
    }
}
