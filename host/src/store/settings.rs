//! Deployment-wide values that every instance must share (for example the JWT signing secret).

use super::on_db_write;
use super::{Store, StoreResult};

impl Store {
    /// Returns the stored value of `key`, storing `generate()` first if there is none. Safe when
    /// several instances race: the first insert wins and everyone reads it back.
    #[tracing::instrument(level = "debug", skip(self, generate))]
    pub async fn setting_or_init(
        &self,
        key: &str,
        generate: impl FnOnce() -> String,
    ) -> StoreResult<String> {
        let candidate = generate();
        let value: String = on_db_write!(self.db(), pool => {
            sqlx::query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                .bind(key)
                .bind(&candidate)
                .execute(pool)
                .await?;
            sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
                .bind(key)
                .fetch_one(pool)
                .await?
        });
        Ok(value)
    }
}
