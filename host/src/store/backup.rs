//! Backup and restore of an embedded SQLite deployment: a consistent copy of the live database
//! (`VACUUM INTO`, which reads one snapshot while the server keeps writing), and a restore that
//! refuses to replace the database of a running server. A serving process holds a shared lock
//! on `<database>.lock` for its whole life; a restore needs it exclusively.
//!
//! PostgreSQL deployments use `pg_dump` and `pg_restore` (see `docs/operating.md`, "Backup and
//! restore").

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

use super::{Db, SQLITE_MIGRATOR, StoreError};

/// The database file of a `sqlite://` URL; `None` for any other database.
pub fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//");
    let path = path.split('?').next().unwrap_or(path);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Held by a serving process: a shared lock on `<database>.lock`.
#[derive(Debug)]
pub struct ServeLock {
    _file: File,
}

impl ServeLock {
    /// Takes the shared lock of the database at `database`; fails while a restore holds it.
    pub fn acquire(database: &Path) -> std::io::Result<ServeLock> {
        if let Some(parent) = database.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path(database))?;
        match file.try_lock_shared() {
            Ok(()) => Ok(ServeLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(std::io::Error::other(format!(
                "{} is being restored; start the server once the restore is done",
                database.display()
            ))),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

/// Why a backup or a restore was refused.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The target exists already.
    #[error("{0} exists; choose a new file (a backup never overwrites one)")]
    Exists(PathBuf),
    /// A server is running on the database.
    #[error(
        "a Herald server is running on {0}; stop it first (a restore never replaces the database \
         of a running deployment)"
    )]
    Running(PathBuf),
    /// The file is not a Herald database this binary can run.
    #[error("{path} is not a Herald backup: {why}")]
    NotABackup { path: PathBuf, why: String },
    /// Reading or writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Db {
    /// Writes a consistent copy of this SQLite database to `to` (a new file) while the service
    /// keeps running; answers the copy's size in bytes.
    pub async fn backup_to(&self, to: &Path) -> Result<u64, BackupError> {
        let Db::Sqlite { pool, .. } = self else {
            return Err(BackupError::NotABackup {
                path: to.to_path_buf(),
                why: "only SQLite deployments are backed up by herald; use pg_dump for PostgreSQL"
                    .into(),
            });
        };
        if to.exists() {
            return Err(BackupError::Exists(to.to_path_buf()));
        }
        if let Some(parent) = to.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        sqlx::query("VACUUM INTO $1")
            .bind(to.to_string_lossy().as_ref())
            .execute(pool)
            .await
            .map_err(StoreError::from)?;
        Ok(std::fs::metadata(to)?.len())
    }
}

/// The highest migration a backup has applied, after checking it is a Herald database.
async fn migration_level(path: &Path) -> Result<i64, BackupError> {
    let not_a_backup = |why: String| BackupError::NotABackup {
        path: path.to_path_buf(),
        why,
    };
    if !path.is_file() {
        return Err(not_a_backup("no such file".into()));
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(true);
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .map_err(|e| not_a_backup(e.to_string()))?;
    let level: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| not_a_backup(format!("it has no Herald migrations ({e})")))?;
    let _ = conn.close().await;
    level.ok_or_else(|| not_a_backup("no migration was ever applied".into()))
}

/// Restores the backup `from` as the database at `database`: refused while a server runs on
/// it; the database it replaces is kept beside it as `<name>.before-restore-<unix time>`.
/// Answers where the replaced database went, if there was one.
pub async fn restore(from: &Path, database: &Path) -> Result<Option<PathBuf>, BackupError> {
    let level = migration_level(from).await?;
    let known = SQLITE_MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    if level > known {
        return Err(BackupError::NotABackup {
            path: from.to_path_buf(),
            why: format!(
                "it comes from a newer Herald (migration {level}; this one knows up to {known})"
            ),
        });
    }
    if let Some(parent) = database.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(database))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Err(BackupError::Running(database.to_path_buf())),
        Err(TryLockError::Error(e)) => return Err(e.into()),
    }
    let mut kept = None;
    if database.exists() {
        let stamp = chrono::Utc::now().timestamp();
        let mut name = database.as_os_str().to_owned();
        name.push(format!(".before-restore-{stamp}"));
        let aside = PathBuf::from(name);
        std::fs::rename(database, &aside)?;
        kept = Some(aside);
    }
    for suffix in ["-wal", "-shm"] {
        let mut name = database.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
    let mut temp = database.as_os_str().to_owned();
    temp.push(".restoring");
    let temp = PathBuf::from(temp);
    std::fs::copy(from, &temp)?;
    std::fs::rename(&temp, database)?;
    drop(lock);
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sqlite_urls_name_a_file() {
        assert_eq!(
            sqlite_path("sqlite:///var/lib/herald/herald.db"),
            Some(PathBuf::from("/var/lib/herald/herald.db"))
        );
        assert_eq!(
            sqlite_path("sqlite://data/herald.db?mode=rwc"),
            Some(PathBuf::from("data/herald.db"))
        );
        assert_eq!(sqlite_path("postgres://localhost/herald"), None);
        assert_eq!(sqlite_path("sqlite::memory:"), None);
    }
}
