//! Projects, their members and their API keys (stored hashed).

use std::sync::LazyLock;

use sqlx::FromRow;

use super::dialect::BeginWrite;
use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ProjectId, UserId};
use crate::domain::keys::{KeyKind, KeyPair, hash_key, key_hint};
use crate::domain::project::{DefaultSender, DoubleOptIn, Project, ProjectName, Role};
use crate::domain::time::now_ms;

/// A project's fields, in [`ProjectRow`]'s order.
const PROJECT_FIELDS: [&str; 14] = [
    "id",
    "name",
    "public_key_hint",
    "secret_key_hint",
    "disabled",
    "track_opens",
    "track_clicks",
    "default_from_email",
    "default_from_name",
    "transport",
    "double_opt_in",
    "confirmation_template_id",
    "created_at",
    "updated_at",
];

/// The columns of a [`ProjectRow`] from the `projects` row named `table` (its alias in a
/// select; the table's own name in the `RETURNING` clause of a write, where SQLite takes no
/// alias), with the reason of the suspension in force, if any.
fn project_columns(table: &str) -> String {
    let mut columns: Vec<String> = PROJECT_FIELDS
        .iter()
        .map(|f| format!("{table}.{f}"))
        .collect();
    columns.push(format!(
        "(SELECT reason {}) AS sending_suspended",
        super::security::in_force(&format!("{table}.id"))
    ));
    columns.join(", ")
}

/// The lookups of projects by API key in flight: by the key's kind and hash.
pub(crate) type KeyLookups = super::rounds::Rounds<(KeyKind, String), Option<Project>>;

/// [`project_columns`] of a select, where `projects` is aliased `p` (built once).
static SELECTED: LazyLock<String> = LazyLock::new(|| project_columns("p"));

/// The column of `projects` that holds the hash of a key of `kind`.
fn key_column(kind: KeyKind) -> &'static str {
    match kind {
        KeyKind::Public => "public_key_hash",
        KeyKind::Secret => "secret_key_hash",
    }
}

/// The project whose hash of a key of `kind` is `$1`, with `$3` hits counted in the rate limit's
/// window `$2` (in the key's bucket: the project's id, with `:pk` for the public key) unless it
/// is disabled, in one statement (PostgreSQL's data-modifying CTE, which
/// runs once whether or not it is read); `hits` is null for a disabled project.
fn counted_by_key(kind: KeyKind) -> String {
    format!(
        "WITH p AS (SELECT {} FROM projects p WHERE p.{} = $1 AND p.deleted_at IS NULL), \
         h AS (INSERT INTO rate_limit_windows (bucket, window_start, hits) \
               SELECT p.id{}, $2, $3 FROM p WHERE NOT p.disabled \
               ON CONFLICT (bucket, window_start) \
               DO UPDATE SET hits = rate_limit_windows.hits + $3 RETURNING hits) \
         SELECT p.*, (SELECT hits FROM h) AS hits FROM p",
        SELECTED.as_str(),
        key_column(kind),
        match kind {
            // The public key's bucket (`services::ratelimit::bucket`).
            KeyKind::Public => " || ':pk'",
            KeyKind::Secret => "",
        }
    )
}

/// [`counted_by_key`] for secret keys (built once).
static COUNTED_BY_SECRET_KEY: LazyLock<String> = LazyLock::new(|| counted_by_key(KeyKind::Secret));

/// [`counted_by_key`] for public keys (built once).
static COUNTED_BY_PUBLIC_KEY: LazyLock<String> = LazyLock::new(|| counted_by_key(KeyKind::Public));

/// [`project_columns`] of a write's `RETURNING` clause (built once).
static RETURNED: LazyLock<String> = LazyLock::new(|| project_columns("projects"));

#[derive(FromRow)]
struct ProjectRow {
    id: String,
    name: String,
    public_key_hint: String,
    secret_key_hint: String,
    disabled: bool,
    track_opens: bool,
    track_clicks: bool,
    default_from_email: Option<String>,
    default_from_name: Option<String>,
    transport: Option<String>,
    double_opt_in: String,
    confirmation_template_id: Option<String>,
    created_at: i64,
    updated_at: i64,
    sending_suspended: Option<String>,
}

impl From<ProjectRow> for Project {
    fn from(r: ProjectRow) -> Project {
        Project {
            id: ProjectId::from_trusted(r.id),
            name: r.name,
            public_key_hint: r.public_key_hint,
            secret_key_hint: r.secret_key_hint,
            disabled: r.disabled,
            track_opens: r.track_opens,
            track_clicks: r.track_clicks,
            default_from: r.default_from_email.map(|email| DefaultSender {
                email: EmailAddress::from_trusted(email),
                name: r.default_from_name,
            }),
            transport: r.transport,
            created_at: r.created_at,
            updated_at: r.updated_at,
            sending_suspended: r.sending_suspended,
            // A name this release does not know (a newer one wrote it) counts as the strictest.
            double_opt_in: DoubleOptIn::parse(&r.double_opt_in).unwrap_or(DoubleOptIn::All),
            confirmation_template: r.confirmation_template_id,
        }
    }
}

#[derive(FromRow)]
struct ProjectWithRole {
    #[sqlx(flatten)]
    project: ProjectRow,
    role: String,
}

pub(super) fn role_of(s: &str) -> StoreResult<Role> {
    Role::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown role {s}")))
}

impl Store {
    /// Creates a project with `owner` as its `OWNER`.
    #[tracing::instrument(level = "debug", skip(self, keys))]
    pub async fn create_project(
        &self,
        name: &ProjectName,
        owner: &UserId,
        keys: &KeyPair,
    ) -> StoreResult<Project> {
        let id = ProjectId::generate();
        let now = now_ms();
        let sql = format!(
            "INSERT INTO projects (id, name, public_key_hash, secret_key_hash, public_key_hint, secret_key_hint, \
             disabled, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, FALSE, $7, $7) \
             RETURNING {}",
            RETURNED.as_str()
        );
        let row: ProjectRow = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: ProjectRow = sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(name.as_str())
                .bind(hash_key(&keys.public_key))
                .bind(hash_key(&keys.secret_key))
                .bind(key_hint(&keys.public_key))
                .bind(key_hint(&keys.secret_key))
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)")
                .bind(id.as_str())
                .bind(owner.as_str())
                .bind(Role::Owner.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            row
        });
        Ok(row.into())
    }

    /// The projects `user` is a member of, oldest first, with the user's role.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn projects_of_user(&self, user: &UserId) -> StoreResult<Vec<(Project, Role)>> {
        let sql = format!(
            "SELECT {}, m.role FROM memberships m JOIN projects p ON p.id = m.project_id \
             WHERE m.user_id = $1 ORDER BY p.id",
            SELECTED.as_str()
        );
        let rows: Vec<ProjectWithRole> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(user.as_str()).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| Ok((r.project.into(), role_of(&r.role)?)))
            .collect()
    }

    /// One project of `user`, with the user's role; `None` when they are not a member.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn project_of_user(
        &self,
        user: &UserId,
        project: &ProjectId,
    ) -> StoreResult<Option<(Project, Role)>> {
        let sql = format!(
            "SELECT {}, m.role FROM memberships m JOIN projects p ON p.id = m.project_id \
             WHERE m.user_id = $1 AND m.project_id = $2",
            SELECTED.as_str()
        );
        let row: Option<ProjectWithRole> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(user.as_str()).bind(project.as_str()).fetch_optional(pool).await?
        });
        row.map(|r| Ok((r.project.into(), role_of(&r.role)?)))
            .transpose()
    }

    /// A project by id (for background work that runs outside a request).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn project(&self, id: &ProjectId) -> StoreResult<Project> {
        let sql = format!(
            "SELECT {} FROM projects p WHERE p.id = $1 AND p.deleted_at IS NULL",
            SELECTED.as_str()
        );
        let row: Option<ProjectRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// The project a presented key belongs to, looked up by the key's kind. Concurrent requests
    /// with one key share a read ([`super::rounds`]): each is answered by a read that started
    /// after it asked, so a regenerated key or a disabled project is seen at once.
    #[tracing::instrument(level = "debug", skip(self, key))]
    pub async fn project_by_key(&self, kind: KeyKind, key: &str) -> StoreResult<Option<Project>> {
        let hash = hash_key(key);
        self.key_lookups
            .join(
                (kind, hash.clone()),
                |_| self.read_project_by_key(kind, &hash),
                |project, _| project.clone(),
            )
            .await
    }

    async fn read_project_by_key(&self, kind: KeyKind, hash: &str) -> StoreResult<Option<Project>> {
        let sql = format!(
            "SELECT {} FROM projects p WHERE p.{} = $1 AND p.deleted_at IS NULL",
            SELECTED.as_str(),
            key_column(kind)
        );
        let row: Option<ProjectRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(hash).fetch_optional(pool).await?
        });
        Ok(row.map(Into::into))
    }

    /// The project a presented key belongs to (by the key's hash), with `n` requests counted
    /// against it in the rate limit's window starting at `window_start` (unix ms): the project,
    /// and the hits so far in that window, these included (`None` for a disabled project, whose
    /// requests are refused before they are counted). `None` for an unknown key. One statement
    /// on PostgreSQL, where the shared counters live.
    #[tracing::instrument(level = "debug", skip(self, hash))]
    pub async fn project_by_key_counted(
        &self,
        kind: KeyKind,
        hash: &str,
        window_start: i64,
        n: i64,
    ) -> StoreResult<Option<(Project, Option<i64>)>> {
        #[derive(FromRow)]
        struct Counted {
            #[sqlx(flatten)]
            project: ProjectRow,
            hits: Option<i64>,
        }
        let pool = match self.db() {
            super::Db::Postgres(pool) => pool,
            // SQLite has no data-modifying CTE: the read, then the count. (A SQLite deployment
            // counts requests in its process and does not call this; the store answers the
            // same on both backends.)
            super::Db::Sqlite { .. } => {
                let Some(project) = self.read_project_by_key(kind, hash).await? else {
                    return Ok(None);
                };
                let hits = match project.disabled {
                    true => None,
                    false => {
                        let bucket = match kind {
                            KeyKind::Public => format!("{}:pk", project.id.as_str()),
                            KeyKind::Secret => project.id.as_str().to_string(),
                        };
                        Some(self.rate_limit_add(&bucket, window_start, n).await?)
                    }
                };
                return Ok(Some((project, hits)));
            }
        };
        let sql = match kind {
            KeyKind::Public => &*COUNTED_BY_PUBLIC_KEY,
            KeyKind::Secret => &*COUNTED_BY_SECRET_KEY,
        };
        let row: Option<Counted> = sqlx::query_as(sql)
            .bind(hash)
            .bind(window_start)
            .bind(n)
            .fetch_optional(pool)
            .await?;
        Ok(row.map(|r| (r.project.into(), r.hits)))
    }

    /// Renames a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn rename_project(
        &self,
        project: &ProjectId,
        name: &ProjectName,
    ) -> StoreResult<Project> {
        let sql = format!(
            "UPDATE projects SET name = $2, updated_at = $3 WHERE id = $1 RETURNING {}",
            RETURNED.as_str()
        );
        let row: Option<ProjectRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(name.as_str())
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// Switches open and click tracking; `None` keeps a setting.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn set_project_tracking(
        &self,
        project: &ProjectId,
        opens: Option<bool>,
        clicks: Option<bool>,
    ) -> StoreResult<Project> {
        let sql = format!(
            "UPDATE projects SET track_opens = COALESCE($2, track_opens), \
             track_clicks = COALESCE($3, track_clicks), updated_at = $4 WHERE id = $1 RETURNING {}",
            RETURNED.as_str()
        );
        let row: Option<ProjectRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(opens)
                .bind(clicks)
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// Sets the project's confirmed opt-in: `double_opt_in` when given, and the confirmation's
    /// template when `template` is given (its inner `None` goes back to the built-in one).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn set_project_opt_in(
        &self,
        project: &ProjectId,
        double_opt_in: Option<DoubleOptIn>,
        template: Option<Option<&str>>,
    ) -> StoreResult<Project> {
        let sql = format!(
            "UPDATE projects SET double_opt_in = COALESCE($2, double_opt_in), \
             confirmation_template_id = CASE WHEN $3 THEN $4 ELSE confirmation_template_id END, \
             updated_at = $5 WHERE id = $1 RETURNING {}",
            RETURNED.as_str()
        );
        let row: Option<ProjectRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(double_opt_in.map(DoubleOptIn::as_str))
                .bind(template.is_some())
                .bind(template.flatten())
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// Sets (or, with `None`, clears) the transport a project's mail goes through.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn set_project_transport(
        &self,
        project: &ProjectId,
        transport: Option<&str>,
    ) -> StoreResult<Project> {
        let sql = format!(
            "UPDATE projects SET transport = $2, updated_at = $3 WHERE id = $1 RETURNING {}",
            RETURNED.as_str()
        );
        let row: Option<ProjectRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(transport)
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// Sets (or, with `None`, clears) a project's default sender.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn set_project_default_from(
        &self,
        project: &ProjectId,
        sender: Option<&DefaultSender>,
    ) -> StoreResult<Project> {
        let sql = format!(
            "UPDATE projects SET default_from_email = $2, default_from_name = $3, updated_at = $4 \
             WHERE id = $1 RETURNING {}",
            RETURNED.as_str()
        );
        let row: Option<ProjectRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(sender.map(|s| s.email.as_str()))
                .bind(sender.and_then(|s| s.name.as_deref()))
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// Replaces both keys of a project at once; the old ones stop working with this commit.
    #[tracing::instrument(level = "debug", skip(self, keys))]
    pub async fn rotate_keys(&self, project: &ProjectId, keys: &KeyPair) -> StoreResult<()> {
        let done = on_db_write!(self.db(), pool => {
            sqlx::query(
                "UPDATE projects SET public_key_hash = $2, secret_key_hash = $3, public_key_hint = $4, \
                 secret_key_hint = $5, updated_at = $6 WHERE id = $1",
            )
            .bind(project.as_str())
            .bind(hash_key(&keys.public_key))
            .bind(hash_key(&keys.secret_key))
            .bind(key_hint(&keys.public_key))
            .bind(key_hint(&keys.secret_key))
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        if done == 0 {
            Err(StoreError::NotFound)
        } else {
            Ok(())
        }
    }

    /// Deletes a project and everything in it. First, in one transaction, the project becomes
    /// unreachable: `deleted_at` is set, its keys are replaced by values no key hashes to, and
    /// its memberships and invitations go (no key, session or invitation reaches it again).
    /// Then its rows go in chunks ([`Store::finish_project_deletion`]); a deletion interrupted
    /// meanwhile is finished by periodic maintenance ([`Store::finish_project_deletions`]).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_project(&self, project: &ProjectId) -> StoreResult<()> {
        let now = now_ms();
        let done = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let n = sqlx::query(
                "UPDATE projects SET deleted_at = $2, \
                 public_key_hash = 'deleted:public:' || id, secret_key_hash = 'deleted:secret:' || id \
                 WHERE id = $1 AND deleted_at IS NULL",
            )
            .bind(project.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n > 0 {
                for table in ["memberships", "project_invitations"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE project_id = $1"))
                        .bind(project.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            n
        });
        if done == 0 {
            return Err(StoreError::NotFound);
        }
        self.finish_project_deletion(project).await
    }

    /// Deletes the rows of a project that [`Store::delete_project`] made unreachable: its
    /// large tables in chunks, then the project's row (the rest by cascade).
    pub async fn finish_project_deletion(&self, project: &ProjectId) -> StoreResult<()> {
        for table in PROJECT_TABLES {
            self.delete_project_rows(table, project).await?;
        }
        self.delete_event_names(project).await?;
        // The cascade reaches rows that writes in flight hold (a contact, its counters), so on
        // PostgreSQL it may be chosen to break a deadlock with one of them.
        super::retrying_deadlocks(|| async {
            Ok(on_db_write!(self.db(), pool => {
                sqlx::query("DELETE FROM projects WHERE id = $1 AND deleted_at IS NOT NULL")
                    .bind(project.as_str())
                    .execute(pool)
                    .await?
                    .rows_affected()
            }))
        })
        .await?;
        self.known_fields.forget_project(project.as_str());
        self.known_events.forget_project(project.as_str());
        Ok(())
    }

    /// Finishes the deletions of projects that started more than a minute ago and were
    /// interrupted (by a restart, a lost connection); answers how many were finished.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn finish_project_deletions(&self) -> StoreResult<usize> {
        let ids: Vec<String> = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT id FROM projects WHERE deleted_at IS NOT NULL AND deleted_at < $1 LIMIT 10",
            )
            .bind(now_ms() - 60_000)
            .fetch_all(pool)
            .await?
        });
        for id in &ids {
            self.finish_project_deletion(&ProjectId::from_trusted(id.clone()))
                .await?;
        }
        Ok(ids.len())
    }
}

/// Rows one write transaction of a chunked delete ([`Store::delete_chunked`]) takes on SQLite.
pub const DELETE_CHUNK: u64 = 500;

/// The tables a project reset empties, and a project deletion empties before the project's row,
/// in chunks: each with an index led by `project_id`, children before their parents so that a
/// chunk's cascade stays small (a workflow's executions, a segment's members, a contact's
/// events go before it).
const PROJECT_TABLES: [&str; 14] = [
    "jobs",
    "idempotency_keys",
    "email_events",
    "emails",
    "campaigns",
    "workflow_executions",
    "workflows",
    "segment_members",
    "segments",
    "events",
    "contacts",
    "contact_fields",
    "templates",
    "topics",
];

/// What a project reset deleted, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetCounts {
    pub contacts: u64,
    pub events: u64,
    pub emails: u64,
    pub templates: u64,
    pub segments: u64,
    pub campaigns: u64,
    pub workflows: u64,
    pub jobs: u64,
}

/// How far a project has come (`GET /projects/:id/setup-state`).
#[derive(Clone, Debug, Default, PartialEq, Eq, FromRow)]
pub struct SetupState {
    pub domain_added: bool,
    pub domain_verified: bool,
    pub contact_added: bool,
    pub template_created: bool,
    pub email_sent: bool,
    pub workflow_enabled: bool,
    pub campaign_sent: bool,
}

impl Store {
    /// Deletes a project's data (contacts, events and their names, emails, templates, topics,
    /// segments, campaigns, workflows, jobs, idempotency keys, custom fields), keeping the project, its members,
    /// keys, settings and sending domains. Children go by cascade. Table by table, each in
    /// chunks of [`DELETE_CHUNK`] rows a transaction on SQLite ([`Store::delete_chunked`]), so
    /// that another project's write never waits long behind it on the one writer; a write the
    /// project makes meanwhile may survive it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn reset_project(&self, project: &ProjectId) -> StoreResult<ResetCounts> {
        let mut deleted = std::collections::HashMap::new();
        for table in PROJECT_TABLES {
            let n = self.delete_project_rows(table, project).await?;
            deleted.insert(table, n);
        }
        self.delete_event_names(project).await?;
        self.known_fields.forget_project(project.as_str());
        self.known_events.forget_project(project.as_str());
        let n = |t: &str| deleted.get(t).copied().unwrap_or(0);
        Ok(ResetCounts {
            contacts: n("contacts"),
            events: n("events"),
            emails: n("emails"),
            templates: n("templates"),
            segments: n("segments"),
            campaigns: n("campaigns"),
            workflows: n("workflows"),
            jobs: n("jobs"),
        })
    }

    /// Deletes a project's tracked event names: at most `event_names_max_per_project` rows, in one
    /// statement (the table has no rowid to chunk by).
    async fn delete_event_names(&self, project: &ProjectId) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM event_names WHERE project_id = $1")
                .bind(project.as_str())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Deletes a project's rows of `table` in chunks. Its cascades reach rows that the
    /// project's own writes in flight hold (a contact, its counters), so on PostgreSQL a
    /// statement may be chosen to break a deadlock with one of them: it is tried again.
    async fn delete_project_rows(&self, table: &str, project: &ProjectId) -> StoreResult<u64> {
        super::retrying_deadlocks(|| async {
            self.delete_chunked(table, "project_id = $1", &[project.as_str()])
                .await
        })
        .await
    }

    /// Deletes the rows of `table` that match `condition` (its binds `$1`… are `binds`) and
    /// answers how many. On SQLite [`DELETE_CHUNK`] rows a statement (its own transaction on the
    /// writer), until fewer are left: the writer is never held for long. On PostgreSQL, whose
    /// writers do not wait for each other, in one statement.
    pub(super) async fn delete_chunked(
        &self,
        table: &str,
        condition: &str,
        binds: &[&str],
    ) -> StoreResult<u64> {
        match self.db() {
            super::Db::Sqlite { writer, .. } => {
                let sql = format!(
                    "DELETE FROM {table} WHERE rowid IN \
                     (SELECT rowid FROM {table} WHERE {condition} LIMIT {DELETE_CHUNK})"
                );
                let mut total = 0;
                loop {
                    let mut q = sqlx::query(&sql);
                    for b in binds {
                        q = q.bind(*b);
                    }
                    let n = q.execute(writer).await?.rows_affected();
                    total += n;
                    if n < DELETE_CHUNK {
                        return Ok(total);
                    }
                }
            }
            super::Db::Postgres(pool) => {
                let sql = format!("DELETE FROM {table} WHERE {condition}");
                let mut q = sqlx::query(&sql);
                for b in binds {
                    q = q.bind(*b);
                }
                Ok(q.execute(pool).await?.rows_affected())
            }
        }
    }

    /// A project's onboarding state, in one statement of index probes.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn setup_state(&self, project: &ProjectId) -> StoreResult<SetupState> {
        let state: SetupState = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT \
                 EXISTS (SELECT 1 FROM domains WHERE project_id = $1) AS domain_added, \
                 EXISTS (SELECT 1 FROM domains WHERE project_id = $1 AND status = 'verified') AS domain_verified, \
                 EXISTS (SELECT 1 FROM contacts WHERE project_id = $1) AS contact_added, \
                 EXISTS (SELECT 1 FROM templates WHERE project_id = $1) AS template_created, \
                 EXISTS (SELECT 1 FROM emails WHERE project_id = $1 AND test = FALSE \
                         AND status NOT IN ('queued', 'suppressed', 'failed')) AS email_sent, \
                 EXISTS (SELECT 1 FROM workflows WHERE project_id = $1 AND enabled = TRUE) AS workflow_enabled, \
                 EXISTS (SELECT 1 FROM campaigns WHERE project_id = $1 AND status = 'SENT') AS campaign_sent",
            )
            .bind(project.as_str())
            .fetch_one(pool)
            .await?
        });
        Ok(state)
    }
}
