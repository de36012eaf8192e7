//! The schema's migrations: what `herald migrate` applies and what `herald migrate --check`
//! reports.
//!
//! Rolling upgrades: migrations only add (new tables, new nullable or defaulted columns, new
//! indexes; `tests/api/http/upgrades.rs` refuses a destructive statement), so the previous
//! release keeps serving on a schema that the next release has migrated. A database that has
//! migrations this binary does not know is therefore served, not refused: they belong to a
//! newer release running beside it.

use sqlx::migrate::Migrator;

use super::{Db, POSTGRES_MIGRATOR, SQLITE_MIGRATOR, StoreResult};

/// One migration of this binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationInfo {
    /// Its version (the file's number).
    pub version: i64,
    /// Its description (the file's name after the number).
    pub description: String,
}

/// Where a database stands against this binary's migrations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationStatus {
    /// Applied already.
    pub applied: Vec<MigrationInfo>,
    /// What `herald migrate` (or `herald serve`) would apply, in order.
    pub pending: Vec<MigrationInfo>,
    /// Versions applied to the database that this binary does not know: a newer release
    /// migrated it (a rolling upgrade in progress, or this binary is the older one).
    pub newer: Vec<i64>,
}

impl Db {
    /// This backend's migrations, tolerant of versions applied by a newer release.
    fn migrator(&self) -> Migrator {
        let of = match self {
            Db::Sqlite { .. } => &SQLITE_MIGRATOR,
            Db::Postgres(_) => &POSTGRES_MIGRATOR,
        };
        Migrator {
            // `sqlx::migrate!` embeds them: a borrowed list, cheap to clone.
            migrations: of.migrations.clone(),
            ignore_missing: true,
            locking: of.locking,
            no_tx: of.no_tx,
        }
    }

    /// Applies every pending migration of this backend (under the migrator's lock, so that
    /// instances starting together apply each once).
    pub async fn migrate(&self) -> StoreResult<()> {
        let migrator = self.migrator();
        match self {
            Db::Sqlite { writer, .. } => migrator.run(writer).await?,
            Db::Postgres(pool) => {
                // A migration may take longer than the serving pool's statement timeout (an
                // index over a large table): it runs on a connection without one.
                let mut conn = pool.acquire().await?;
                sqlx::query("SET statement_timeout = 0")
                    .execute(&mut *conn)
                    .await?;
                let ran = migrator.run(&mut *conn).await;
                sqlx::query("RESET statement_timeout")
                    .execute(&mut *conn)
                    .await?;
                ran?
            }
        }
        Ok(())
    }

    /// Where the database stands against this binary's migrations; writes nothing.
    pub async fn migration_status(&self) -> StoreResult<MigrationStatus> {
        let exists_sql = match self {
            Db::Sqlite { .. } => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
            }
            Db::Postgres(_) => {
                "SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE tablename = '_sqlx_migrations' \
                 AND schemaname = current_schema()"
            }
        };
        let exists: i64 = super::on_db!(self, pool => {
            sqlx::query_scalar(exists_sql).fetch_one(pool).await?
        });
        let applied: Vec<i64> = if exists > 0 {
            super::on_db!(self, pool => {
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
                    .fetch_all(pool)
                    .await?
            })
        } else {
            Vec::new()
        };
        let migrator = self.migrator();
        let mut status = MigrationStatus::default();
        for m in migrator
            .iter()
            .filter(|m| !m.migration_type.is_down_migration())
        {
            let info = MigrationInfo {
                version: m.version,
                description: m.description.to_string(),
            };
            if applied.contains(&m.version) {
                status.applied.push(info);
            } else {
                status.pending.push(info);
            }
        }
        status.newer = applied
            .into_iter()
            .filter(|v| !migrator.version_exists(*v))
            .collect();
        Ok(status)
    }
}
