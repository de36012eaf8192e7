//! Fixed-window request counters shared by every instance on one PostgreSQL database.

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

    /// Drops windows that ended before `before` (unix ms).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn rate_limit_prune(&self, before: i64) -> StoreResult<u64> {
        let done = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM rate_limit_windows WHERE window_start < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done)
    }
}
