//! `Idempotency-Key`: the first response of a key is kept for 24 hours and replayed for the same
//! request; the key is written in the same transaction as the request's effects, so two racing
//! requests with one key cannot both take effect.

use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

use super::{Store, StoreResult};
use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;
use crate::{on_db, on_db_write};

/// How long a key is remembered.
pub const TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// Inside the transaction `$tx`, forgets an expired use of the key and stores the response
/// (`$status`, `$body` a `Serialize` value) under it; a live key taken meanwhile fails the write
/// with `Conflict(IDEMPOTENCY_CONFLICT)`, so the whole transaction rolls back.
macro_rules! store_idempotent_response {
    ($tx:ident, $project:expr, $key:expr, $endpoint:expr, $hash:expr, $status:expr, $body:expr) => {{
        let now = $crate::domain::time::now_ms();
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE project_id = $1 AND key = $2 AND created_at < $3",
        )
        .bind($project)
        .bind($key)
        .bind(now - $crate::store::idempotency::TTL_MS)
        .execute(&mut *$tx)
        .await?;
        sqlx::query(
            "INSERT INTO idempotency_keys (project_id, key, endpoint, request_hash, status, response, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind($project)
        .bind($key)
        .bind($endpoint)
        .bind($hash)
        .bind(i32::from($status))
        .bind(sqlx::types::Json($body))
        .bind(now)
        .execute(&mut *$tx)
        .await
        .map_err(|e| {
            $crate::store::StoreError::unique(e, $crate::store::contacts::IDEMPOTENCY_CONFLICT)
        })?;
    }};
}
pub(crate) use store_idempotent_response;

/// A remembered response.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResponse {
    /// The endpoint the key was used on.
    pub endpoint: String,
    /// Hash of the first request's body.
    pub request_hash: String,
    /// Its status.
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
