//! `Idempotency-Key`: the first response of a key is kept for 24 hours and replayed for the same
//! request; the key is written in the same transaction as the request's effects, so two racing
//! requests with one key cannot both take effect.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::{Store, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;

/// How long a key is remembered.
pub const TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// An `Idempotency-Key` to store in the same transaction as a request's writes (see
/// [`super::statements::Statements::store_idempotent_response`]). `R` is the response to replay,
/// or what builds it from the writes.
pub struct IdempotentWrite<'a, R> {
    /// The caller's key.
    pub key: &'a str,
    /// The endpoint it was used on.
    pub endpoint: &'a str,
    /// Hash of the request body.
    pub request_hash: &'a str,
    /// The status to replay.
    pub status: u16,
    /// The body to replay, or what builds it.
    pub response: R,
}

/// The most keys one statement of [`super::statements::Statements::store_idempotent_responses`]
/// writes (7 values a row).
pub(super) const MAX_KEYS_PER_WRITE: usize = 500;

/// Forgets expired uses of `n` keys; binds the oldest live creation time, then project and key of
/// each.
pub(super) fn delete_expired_keys_sql(n: usize) -> String {
    format!(
        "DELETE FROM idempotency_keys WHERE created_at < $1 AND (project_id, key) IN (VALUES {})",
        super::dialect::value_rows(2, n, 2)
    )
}

/// Stores `n` keys; binds, a row: project, key, endpoint, request hash, status, response, now.
pub(super) fn insert_keys_sql(n: usize) -> String {
    format!(
        "INSERT INTO idempotency_keys (project_id, key, endpoint, request_hash, status, response, created_at) \
         VALUES {}",
        super::dialect::value_rows(1, n, 7)
    )
}

/// A remembered response.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResponse {
    /// The endpoint the key was used on.
    pub endpoint: String,
    /// Hash of the first request's body.
    pub request_hash: String,
    pub status: u16,
    /// Its body.
    pub response: Value,
}

#[derive(FromRow)]
struct Row {
    endpoint: String,
    request_hash: String,
    status: i32,
    response: Json<Value>,
}

impl Store {
    /// The live response remembered under `key`, if any.
    #[tracing::instrument(level = "debug", skip(self, key))]
    pub async fn idempotent_response(
        &self,
        project: &ProjectId,
        key: &str,
    ) -> StoreResult<Option<StoredResponse>> {
        let row: Option<Row> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT endpoint, request_hash, status, response FROM idempotency_keys \
                 WHERE project_id = $1 AND key = $2 AND created_at >= $3",
            )
            .bind(project.as_str())
            .bind(key)
            .bind(now_ms() - TTL_MS)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.map(|r| StoredResponse {
            endpoint: r.endpoint,
            request_hash: r.request_hash,
            status: u16::try_from(r.status).unwrap_or(200),
            response: r.response.0,
        }))
    }

    /// Forgets keys older than the TTL.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn prune_idempotency_keys(&self) -> StoreResult<u64> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
                .bind(now_ms() - TTL_MS)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n)
    }
}
