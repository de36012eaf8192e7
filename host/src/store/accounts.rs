//! Dashboard users and their login sessions.

use sqlx::FromRow;

use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::email::EmailAddress;
use crate::domain::ids::{SessionId, UserId};
use crate::domain::project::User;
use crate::domain::time::now_ms;

#[derive(FromRow)]
struct UserRow {
    id: String,
    email: String,
    email_verified: bool,
    created_at: i64,
}

impl From<UserRow> for User {
    fn from(r: UserRow) -> User {
        User {
            id: UserId::from_trusted(r.id),
            email: EmailAddress::from_trusted(r.email),
            email_verified: r.email_verified,
            created_at: r.created_at,
        }
    }
}

#[derive(FromRow)]
struct UserWithHash {
    #[sqlx(flatten)]
    user: UserRow,
    password_hash: String,
}

impl Store {
    /// Creates a user; [`StoreError::Conflict`] when the address is taken.
    #[tracing::instrument(level = "debug", skip(self, password_hash))]
    pub async fn create_user(
        &self,
        email: &EmailAddress,
        password_hash: &str,
    ) -> StoreResult<User> {
        let id = UserId::generate();
        let now = now_ms();
        let row: UserRow = on_db_write!(self.db(), pool => {
            sqlx::query_as(
                "INSERT INTO users (id, email, password_hash, email_verified, created_at, updated_at) \
                 VALUES ($1, $2, $3, FALSE, $4, $4) RETURNING id, email, email_verified, created_at",
            )
            .bind(id.as_str())
            .bind(email.as_str())
            .bind(password_hash)
            .bind(now)
            .fetch_one(pool)
            .await
            .map_err(|e| StoreError::unique(e, super::Conflict::Email))?
        });
        Ok(row.into())
    }

    /// A user and their password hash, by address.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn user_with_password(
        &self,
        email: &EmailAddress,
    ) -> StoreResult<Option<(User, String)>> {
        let row: Option<UserWithHash> = on_db!(self.db(), pool => {
            sqlx::query_as("SELECT id, email, email_verified, created_at, password_hash FROM users WHERE email = $1")
                .bind(email.as_str())
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|r| (r.user.into(), r.password_hash)))
    }

    /// How many users exist (zero means `herald init` may run).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_users(&self) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM users").fetch_one(pool).await?
        });
        Ok(n)
    }

    /// Opens a session that lasts `ttl_ms`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn create_session(&self, user: &UserId, ttl_ms: i64) -> StoreResult<SessionId> {
        let id = SessionId::generate();
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            sqlx::query("INSERT INTO sessions (id, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)")
                .bind(id.as_str())
                .bind(user.as_str())
                .bind(now)
                .bind(now + ttl_ms)
                .execute(pool)
                .await?;
        });
        Ok(id)
    }

    /// The user of a live session.
    #[tracing::instrument(level = "debug", skip(self, session))]
    pub async fn session_user(&self, session: &SessionId) -> StoreResult<Option<User>> {
        let row: Option<UserRow> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT u.id, u.email, u.email_verified, u.created_at FROM sessions s \
                 JOIN users u ON u.id = s.user_id WHERE s.id = $1 AND s.expires_at > $2",
            )
            .bind(session.as_str())
            .bind(now_ms())
            .fetch_optional(pool)
            .await?
        });
        Ok(row.map(Into::into))
    }

    /// Ends a session (logout); also removes expired sessions of everyone.
    #[tracing::instrument(level = "debug", skip(self, session))]
    pub async fn delete_session(&self, session: &SessionId) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM sessions WHERE id = $1 OR expires_at <= $2")
                .bind(session.as_str())
                .bind(now_ms())
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

/// What an account token is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenPurpose {
    /// Proves the account's address (`POST /auth/verify-email`).
    VerifyEmail,
    /// Sets a new password (`POST /auth/reset-password`).
    ResetPassword,
}

impl TokenPurpose {
    fn as_str(self) -> &'static str {
        match self {
            TokenPurpose::VerifyEmail => "verify_email",
            TokenPurpose::ResetPassword => "reset_password",
        }
    }
}

impl Store {
    /// Forgets account tokens and project invitations that expired over a day ago (used tokens
    /// too, once expired); answers how many rows went.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_account_links(&self) -> StoreResult<u64> {
        let before = now_ms() - 86_400_000;
        let n = on_db_write!(self.db(), pool => {
            let tokens = sqlx::query("DELETE FROM account_tokens WHERE expires_at < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected();
            let invitations = sqlx::query("DELETE FROM project_invitations WHERE expires_at < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected();
            tokens + invitations
        });
        Ok(n)
    }

    /// A user by address.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn user_by_email(&self, email: &EmailAddress) -> StoreResult<Option<User>> {
        Ok(self.user_with_password(email).await?.map(|(user, _)| user))
    }

    /// Keeps a token mailed to `email` for `user` (only its hash), usable once until `ttl_ms`
    /// from now. Earlier unused tokens of the same purpose stop working: only the latest mail's
    /// link does.
    #[tracing::instrument(level = "debug", skip(self, token_hash))]
    pub async fn create_account_token(
        &self,
        user: &UserId,
        purpose: TokenPurpose,
        token_hash: &str,
        email: &EmailAddress,
        ttl_ms: i64,
    ) -> StoreResult<()> {
        use super::dialect::BeginWrite;
        let now = now_ms();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query("DELETE FROM account_tokens WHERE user_id = $1 AND purpose = $2 AND used_at IS NULL")
                .bind(user.as_str())
                .bind(purpose.as_str())
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO account_tokens (token_hash, user_id, purpose, email, expires_at, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(token_hash)
            .bind(user.as_str())
            .bind(purpose.as_str())
            .bind(email.as_str())
            .bind(now + ttl_ms)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Uses a verification token: marks the address it was sent to as verified, if it is still
    /// the user's. `None` when the token is unknown, used or expired.
    #[tracing::instrument(level = "debug", skip(self, token_hash))]
    pub async fn verify_email_with_token(&self, token_hash: &str) -> StoreResult<Option<User>> {
        use super::dialect::BeginWrite;
        let now = now_ms();
        let user = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let used: Option<(String, String)> = sqlx::query_as(USE_TOKEN)
                .bind(token_hash)
                .bind(TokenPurpose::VerifyEmail.as_str())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            let Some((user_id, email)) = used else {
                return Ok(None);
            };
            let row: Option<UserRow> = sqlx::query_as(
                "UPDATE users SET email_verified = TRUE, updated_at = $3 WHERE id = $1 AND email = $2 \
                 RETURNING id, email, email_verified, created_at",
            )
            .bind(&user_id)
            .bind(&email)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            tx.commit().await?;
            row
        });
        Ok(user.map(Into::into))
    }

    /// Uses a reset token: sets the new password hash and ends every session of the user, in one
    /// transaction. `None` when the token is unknown, used or expired.
    #[tracing::instrument(level = "debug", skip(self, token_hash, password_hash))]
    pub async fn reset_password_with_token(
        &self,
        token_hash: &str,
        password_hash: &str,
    ) -> StoreResult<Option<User>> {
        use super::dialect::BeginWrite;
        let now = now_ms();
        let user = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let used: Option<(String, String)> = sqlx::query_as(USE_TOKEN)
                .bind(token_hash)
                .bind(TokenPurpose::ResetPassword.as_str())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            let Some((user_id, _)) = used else {
                return Ok(None);
            };
            // Receiving the mail proves the address too.
            let row: UserRow = sqlx::query_as(
                "UPDATE users SET password_hash = $2, email_verified = TRUE, updated_at = $3 WHERE id = $1 \
                 RETURNING id, email, email_verified, created_at",
            )
            .bind(&user_id)
            .bind(password_hash)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM sessions WHERE user_id = $1")
                .bind(&user_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Some(row)
        });
        Ok(user.map(Into::into))
    }
}

/// Marks an unused, unexpired token used; binds token hash, purpose, now; answers its user and
/// the address it was sent to.
const USE_TOKEN: &str = "UPDATE account_tokens SET used_at = $3 WHERE token_hash = $1 AND purpose = $2 \
     AND used_at IS NULL AND expires_at > $3 RETURNING user_id, email";

/// How [`Store::link_identity`] linked an identity to an existing account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linked {
    /// The account's address was verified: linked beside its password and sessions.
    Linked,
    /// The address was not verified: the provider's proof took the account over (no password,
    /// no sessions, no other identity left).
    TookOver,
}

/// The password hash of an account made by OAuth sign-in: not a PHC string, so no password
/// matches it until the user sets one (password reset).
const NO_PASSWORD: &str = "!oauth";

impl Store {
    /// The user an OAuth identity is linked to.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn user_by_identity(
        &self,
        provider: &str,
        subject: &str,
    ) -> StoreResult<Option<User>> {
        let row: Option<UserRow> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT u.id, u.email, u.email_verified, u.created_at FROM oauth_identities i \
                 JOIN users u ON u.id = i.user_id WHERE i.provider = $1 AND i.subject = $2",
            )
            .bind(provider)
            .bind(subject)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.map(Into::into))
    }

    /// Links an OAuth identity to an existing user whose address the provider verified, and
    /// marks the address verified, in one transaction. When the account's address was not
    /// verified (anyone could have signed up with it), the provider's proof wins: the account's
    /// password is removed (only a password reset mailed to the address sets one again), every
    /// session and every other linked identity of the account ends, and [`Linked::TookOver`] is
    /// answered; otherwise [`Linked::Linked`]. [`StoreError::NotFound`] when the user is gone.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn link_identity(
        &self,
        provider: &str,
        subject: &str,
        user: &User,
    ) -> StoreResult<Linked> {
        let now = now_ms();
        let lock = format!(
            "SELECT email_verified FROM users WHERE id = $1{}",
            super::dialect::for_update(self.db().backend())
        );
        let linked = on_db_write!(self.db(), pool => {
            use super::dialect::BeginWrite;
            let mut tx = pool.begin_write().await?;
            let verified: Option<bool> = sqlx::query_scalar(&lock)
                .bind(user.id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(verified) = verified else {
                return Err(StoreError::NotFound);
            };
            if !verified {
                sqlx::query(
                    "UPDATE users SET password_hash = $2, email_verified = TRUE, updated_at = $3 WHERE id = $1",
                )
                .bind(user.id.as_str())
                .bind(NO_PASSWORD)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM sessions WHERE user_id = $1")
                    .bind(user.id.as_str())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM oauth_identities WHERE user_id = $1")
                    .bind(user.id.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(
                "INSERT INTO oauth_identities (provider, subject, user_id, email, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, subject) DO NOTHING",
            )
            .bind(provider)
            .bind(subject)
            .bind(user.id.as_str())
            .bind(user.email.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            if verified { Linked::Linked } else { Linked::TookOver }
        });
        Ok(linked)
    }

    /// Creates a user (address verified, no password) with its OAuth identity, in one
    /// transaction; [`StoreError::Conflict`] when the address is taken.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn create_user_with_identity(
        &self,
        email: &EmailAddress,
        provider: &str,
        subject: &str,
    ) -> StoreResult<User> {
        let id = UserId::generate();
        let now = now_ms();
        let row: UserRow = on_db_write!(self.db(), pool => {
            use super::dialect::BeginWrite;
            let mut tx = pool.begin_write().await?;
            let row: UserRow = sqlx::query_as(
                "INSERT INTO users (id, email, password_hash, email_verified, created_at, updated_at) \
                 VALUES ($1, $2, $3, TRUE, $4, $4) RETURNING id, email, email_verified, created_at",
            )
            .bind(id.as_str())
            .bind(email.as_str())
            .bind(NO_PASSWORD)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| StoreError::unique(e, super::Conflict::Email))?;
            sqlx::query(
                "INSERT INTO oauth_identities (provider, subject, user_id, email, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(provider)
            .bind(subject)
            .bind(id.as_str())
            .bind(email.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            row
        });
        Ok(row.into())
    }
}
