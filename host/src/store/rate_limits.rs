//! Fixed-window counters in the database: the per-minute request counters shared by every
//! instance on one PostgreSQL database, and, on both backends, the long-windowed limits of mail
//! to arbitrary addresses (buckets under [`LONG_PREFIX`], windows of up to a day), which must
//! survive a restart.

/// The bucket prefix of the long-windowed counters (windows up to [`LONG_WINDOW_MAX_MS`]).
pub const LONG_PREFIX: &str = "mail:";
/// The longest window of a long-windowed counter: a day.
pub const LONG_WINDOW_MAX_MS: i64 = 86_400_000;

use super::on_db_write;
use super::{Store, StoreResult};

impl Store {
    /// Counts `n` requests of `bucket` in the window starting at `window_start` (unix ms) and
    /// returns the hits so far, these included.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn rate_limit_add(
        &self,
        bucket: &str,
        window_start: i64,
        n: i64,
    ) -> StoreResult<i64> {
        let hits: i64 = on_db_write!(self.db(), pool => {
            sqlx::query_scalar(
                "INSERT INTO rate_limit_windows (bucket, window_start, hits) VALUES ($1, $2, $3) \
                 ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limit_windows.hits + $3 \
                 RETURNING hits",
            )
            .bind(bucket)
            .bind(window_start)
            .bind(n)
            .fetch_one(pool)
            .await?
        });
        Ok(hits)
    }

    /// Drops windows that started before `before` (unix ms), except the long-windowed ones
    /// (buckets under [`LONG_PREFIX`]), which go once they started before `long_before`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn rate_limit_prune(&self, before: i64, long_before: i64) -> StoreResult<u64> {
        let long = format!("{LONG_PREFIX}%");
        let done = on_db_write!(self.db(), pool => {
            sqlx::query(
                "DELETE FROM rate_limit_windows WHERE window_start < $1 \
                 AND (bucket NOT LIKE $2 OR window_start < $3)",
            )
            .bind(before)
            .bind(&long)
            .bind(long_before)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done)
    }
}
