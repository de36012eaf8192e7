//! A project's contact count, custom fields and the distinct values of contacts' columns and
//! data fields.

use serde_json::Value;

use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;
use crate::store::dialect::BeginWrite;
use crate::store::on_db;
use crate::store::{Store, StoreResult};

/// A custom field of a project: its inferred type and how many contacts have it.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomField {
    /// The key in `data`.
    pub key: String,
    /// The type inferred from the first non-null value.
    pub field_type: String,
    /// Contacts that have the key.
    pub contacts: i64,
}

/// A project's contact count as `contact_counts` keeps it (migration 0016); binds the project.
pub(in crate::store) const CONTACT_COUNT: &str =
    "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM contact_counts WHERE project_id = $1";

impl Store {
    /// How many contacts a project has (kept by triggers as contacts come and go, so this reads
    /// at most 16 rows).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn count_contacts(&self, project: &ProjectId) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar(CONTACT_COUNT)
                .bind(project.as_str())
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// The project's custom fields with their types and usage, by key.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn custom_fields(&self, project: &ProjectId) -> StoreResult<Vec<CustomField>> {
        type Rows = (Vec<(String, String)>, Vec<(String, i64)>);
        let (types, counts): Rows = on_db!(self.db(), pool => {
            let types = sqlx::query_as("SELECT key, type FROM contact_fields WHERE project_id = $1 ORDER BY key")
                .bind(project.as_str())
                .fetch_all(pool)
                .await?;
            let counts = sqlx::query_as(DATA_KEY_COUNTS).bind(project.as_str()).fetch_all(pool).await?;
            (types, counts)
        });
        let counts: std::collections::HashMap<String, i64> = counts.into_iter().collect();
        Ok(types
            .into_iter()
            .map(|(key, field_type)| CustomField {
                contacts: counts.get(&key).copied().unwrap_or(0),
                key,
                field_type,
            })
            .collect())
    }
}

/// `(key, contacts having it)` for every top-level custom data key of a project, as the triggers
/// of migration `contact_key_counts` keep them (a few rows per key, whatever the contacts).
const DATA_KEY_COUNTS: &str = "SELECT key, CAST(SUM(n) AS BIGINT) FROM contact_key_counts \
     WHERE project_id = $1 GROUP BY key";

/// A standard column of contacts whose values [`Store::column_values`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContactColumn {
    Email,
    CreatedAt,
    UpdatedAt,
}

/// How often a value of a field occurs.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueCount {
    pub value: Value,
    /// Contacts with it.
    pub count: i64,
}

impl Store {
    /// Distinct values of `subscribed`, most common first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn subscribed_values(&self, project: &ProjectId) -> StoreResult<Vec<ValueCount>> {
        let rows: Vec<(bool, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as("SELECT subscribed, COUNT(*) FROM contacts WHERE project_id = $1 GROUP BY subscribed ORDER BY COUNT(*) DESC")
                .bind(project.as_str())
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: Value::Bool(v),
                count,
            })
            .collect())
    }

    /// Distinct values of a standard column of contacts, most common first: `email` in address
    /// order (each is one contact's), `createdAt` and `updatedAt` then newest first, as RFC 3339
    /// dates (as the API writes them).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn column_values(
        &self,
        project: &ProjectId,
        column: ContactColumn,
        limit: i64,
    ) -> StoreResult<Vec<ValueCount>> {
        // The column's name is one of two constants, never the caller's text.
        let name = match column {
            ContactColumn::Email => {
                // An address is one contact's (unique in a project): each counts 1, in address
                // order, read from the (project, email) index without grouping every contact.
                let rows: Vec<String> = on_db!(self.db(), pool => {
                    sqlx::query_scalar("SELECT email FROM contacts WHERE project_id = $1 ORDER BY email LIMIT $2")
                        .bind(project.as_str())
                        .bind(limit)
                        .fetch_all(pool)
                        .await?
                });
                return Ok(rows
                    .into_iter()
                    .map(|v| ValueCount {
                        value: Value::String(v),
                        count: 1,
                    })
                    .collect());
            }
            ContactColumn::CreatedAt => "created_at",
            ContactColumn::UpdatedAt => "updated_at",
        };
        let sql = format!(
            "SELECT {name} AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
             GROUP BY {name} ORDER BY n DESC, v DESC LIMIT $2"
        );
        let rows: Vec<(i64, i64)> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(limit).fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: Value::String(crate::domain::time::to_rfc3339(v)),
                count,
            })
            .collect())
    }

    /// Distinct values of the custom field at `keys` (a field path's keys, unescaped), most
    /// common first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn data_values(
        &self,
        project: &ProjectId,
        keys: &[String],
        limit: i64,
    ) -> StoreResult<Vec<ValueCount>> {
        let rows: Vec<(String, i64)> = match self.db() {
            crate::store::Db::Sqlite { pool, .. } => {
                sqlx::query_as(
                    "SELECT data -> $2 AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
                     AND json_type(data, $2) IS NOT NULL AND json_type(data, $2) != 'null' \
                     GROUP BY v ORDER BY n DESC, v LIMIT $3",
                )
                .bind(project.as_str())
                .bind(crate::store::dialect::sqlite_json_path(keys))
                .bind(limit)
                .fetch_all(pool)
                .await?
            }
            crate::store::Db::Postgres(pool) => sqlx::query_as(
                "SELECT (data #> $2)::text AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
                     AND data #> $2 IS NOT NULL AND jsonb_typeof(data #> $2) != 'null' \
                     GROUP BY v ORDER BY n DESC, v LIMIT $3",
            )
            .bind(project.as_str())
            .bind(keys)
            .bind(limit)
            .fetch_all(pool)
            .await?,
        };
        Ok(rows
            .into_iter()
            .map(|(v, count)| ValueCount {
                value: serde_json::from_str(&v).unwrap_or(Value::String(v)),
                count,
            })
            .collect())
    }

    /// Removes the custom field at `keys` from every contact of a project; answers how many
    /// contacts had it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_data_field(
        &self,
        project: &ProjectId,
        keys: &[String],
    ) -> StoreResult<u64> {
        if let Some(key) = keys.first() {
            self.known_fields.forget(project.as_str(), key);
        }
        let now = now_ms();
        let forget_type = "DELETE FROM contact_fields WHERE project_id = $1 AND key = $2";
        let n = match self.db() {
            // SQLite: its one writer is held a chunk at a time. The chunks walk the project's
            // contacts by id (a window of `DELETE_CHUNK` ids after the last one), so the whole
            // delete reads each contact once. The field's type goes in the first transaction:
            // a contact written with the field meanwhile registers it again.
            crate::store::Db::Sqlite { writer, .. } => {
                let chunk = crate::store::projects::DELETE_CHUNK;
                let window = format!(
                    "SELECT id FROM contacts WHERE project_id = $1 AND id > $2 ORDER BY id LIMIT {chunk}"
                );
                let last_id = format!("SELECT MAX(id) FROM ({window})");
                let update = format!(
                    "UPDATE contacts SET data = json_remove(data, $3), version = version + 1, \
                     updated_at = $4 WHERE project_id = $1 AND id IN ({window}) \
                     AND json_type(data, $3) IS NOT NULL"
                );
                let path = crate::store::dialect::sqlite_json_path(keys);
                let (mut total, mut after, mut first) = (0u64, String::new(), true);
                loop {
                    let mut tx = writer.begin_write().await?;
                    if first && keys.len() == 1 {
                        sqlx::query(forget_type)
                            .bind(project.as_str())
                            .bind(&keys[0])
                            .execute(&mut *tx)
                            .await?;
                    }
                    first = false;
                    let end: Option<String> = sqlx::query_scalar(&last_id)
                        .bind(project.as_str())
                        .bind(&after)
                        .fetch_one(&mut *tx)
                        .await?;
                    let Some(end) = end else {
                        tx.commit().await?;
                        break total;
                    };
                    total += sqlx::query(&update)
                        .bind(project.as_str())
                        .bind(&after)
                        .bind(&path)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    tx.commit().await?;
                    after = end;
                }
            }
            crate::store::Db::Postgres(pool) => {
                let mut tx = pool.begin_write().await?;
                let n = sqlx::query(
                    "UPDATE contacts SET data = data #- $2, version = version + 1, updated_at = $3 \
                     WHERE project_id = $1 AND data #> $2 IS NOT NULL",
                )
                .bind(project.as_str())
                .bind(keys)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if keys.len() == 1 {
                    sqlx::query(forget_type)
                        .bind(project.as_str())
                        .bind(&keys[0])
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                n
            }
        };
        Ok(n)
    }
}
