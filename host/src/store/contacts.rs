//! Contacts and the per-project types of their custom fields.
//!
//! Writes use optimistic concurrency: a contact is read, changed in memory by the domain rules,
//! and written back with `WHERE version = <read version>`; a lost race re-reads and retries. This
//! keeps the patch logic in Rust, identical on both backends, and holds no lock while thinking.

use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::{BeginWrite, like_escape};
use super::{Store, StoreError, StoreResult};
use crate::domain::contact::{Contact, ContactChange, ContactUpsert, UpsertOutcome};
use crate::domain::custom_data::FieldType;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::pagination::{Page, PageRequest, encode_cursor};
use crate::domain::time::now_ms;
use crate::{on_db, on_db_write};

const COLUMNS: &str = "id, project_id, email, subscribed, data, version, created_at, updated_at";
const MAX_ATTEMPTS: usize = 16;

#[derive(FromRow)]
struct ContactRow {
    id: String,
    project_id: String,
    email: String,
    subscribed: bool,
    data: Json<Map<String, Value>>,
    version: i64,
    created_at: i64,
    updated_at: i64,
}

impl From<ContactRow> for Contact {
    fn from(r: ContactRow) -> Contact {
        Contact {
            id: ContactId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            email: EmailAddress::from_trusted(r.email),
            subscribed: r.subscribed,
            data: r.data.0,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The field types first seen in `set`, as rows for `contact_fields`.
fn field_types(set: &Map<String, Value>) -> Vec<(&str, &'static str)> {
    set.iter()
        .filter_map(|(k, v)| FieldType::infer(v).map(|t| (k.as_str(), t.as_str())))
        .collect()
}

/// `INSERT … ON CONFLICT DO NOTHING` for the inferred types (the first type seen is kept).
fn field_types_sql(n: usize) -> String {
    let mut sql =
        String::from("INSERT INTO contact_fields (project_id, key, type, created_at) VALUES ");
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("($1, ${}, ${}, $2)", 3 + 2 * i, 4 + 2 * i));
    }
    sql.push_str(" ON CONFLICT (project_id, key) DO NOTHING");
    sql
}

macro_rules! write_contact {
    ($pool:ident, $project:expr, $types:expr, $query:expr) => {{
        let mut tx = $pool.begin_write().await?;
        let row: Option<ContactRow> = $query.fetch_optional(&mut *tx).await?;
        if row.is_some() && !$types.is_empty() {
            let sql = field_types_sql($types.len());
            let mut q = sqlx::query(&sql).bind($project.as_str()).bind(now_ms());
            for (k, t) in $types.iter() {
                q = q.bind(*k).bind(*t);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        row
    }};
}

impl Store {
    /// One contact of a project.
    pub async fn contact(&self, project: &ProjectId, id: &ContactId) -> StoreResult<Contact> {
        let sql = format!("SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND id = $2");
        let row: Option<ContactRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    /// A contact of a project by address.
    pub async fn contact_by_email(
        &self,
        project: &ProjectId,
        email: &EmailAddress,
    ) -> StoreResult<Option<Contact>> {
        let sql = format!("SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND email = $2");
        let row: Option<ContactRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(email.as_str()).fetch_optional(pool).await?
        });
        Ok(row.map(Into::into))
    }

    /// A page of a project's contacts, newest first, optionally filtered by a case-insensitive
    /// substring of the address.
    pub async fn list_contacts(
        &self,
        project: &ProjectId,
        page: &PageRequest,
        search: Option<&str>,
    ) -> StoreResult<Page<Contact>> {
        let pattern = search.map(|s| format!("%{}%", like_escape(&s.to_lowercase())));
        let mut filter = String::from("project_id = $1");
        if pattern.is_some() {
            filter.push_str(" AND email LIKE $2 ESCAPE '\\'");
        }
        let mut sql = format!("SELECT {COLUMNS} FROM contacts WHERE {filter}");
        let next = if pattern.is_some() { 3 } else { 2 };
        if page.after.is_some() {
            sql.push_str(&format!(" AND id < ${next}"));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) FROM contacts WHERE {filter}");

        let (rows, total): (Vec<ContactRow>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            if let Some(p) = &pattern {
                q = q.bind(p);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() {
                let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
                if let Some(p) = &pattern {
                    c = c.bind(p);
                }
                c.fetch_one(pool).await?
            } else {
                0
            };
            (rows, total)
        });
        let mut items: Vec<Contact> = rows.into_iter().map(Into::into).collect();
        let has_more = items.len() > page.limit as usize;
        items.truncate(page.limit as usize);
        let next_cursor = if has_more {
            items.last().map(|c| encode_cursor(c.id.as_str()))
        } else {
            None
        };
        Ok(Page {
            items,
            next_cursor,
            has_more,
            total,
        })
    }

    /// Creates the contact of `upsert.email` or applies the upsert to the existing one.
    pub async fn upsert_contact(
        &self,
        project: &ProjectId,
        upsert: &ContactUpsert,
    ) -> StoreResult<UpsertOutcome> {
        let types = field_types(&upsert.data.set);
        for _ in 0..MAX_ATTEMPTS {
            match self.contact_by_email(project, &upsert.email).await? {
                None => {
                    let mut data = Map::new();
                    upsert.data.apply(&mut data);
                    let subscribed = upsert.subscribed.unwrap_or(upsert.subscribed_default);
                    let now = now_ms();
                    let id = ContactId::generate();
                    let sql = format!(
                        "INSERT INTO contacts ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, 0, $6, $6) \
                         ON CONFLICT (project_id, email) DO NOTHING RETURNING {COLUMNS}"
                    );
                    let row = on_db_write!(self.db(), pool => write_contact!(pool, project, types,
                        sqlx::query_as(&sql)
                            .bind(id.as_str())
                            .bind(project.as_str())
                            .bind(upsert.email.as_str())
                            .bind(subscribed)
                            .bind(Json(&data))
                            .bind(now)));
                    if let Some(row) = row {
                        return Ok(UpsertOutcome {
                            contact: row.into(),
                            created: true,
                            updated: false,
                            subscription_changed_from: None,
                        });
                    }
                }
                Some(current) => {
                    let change = ContactChange {
                        email: None,
                        subscribed: upsert.subscribed,
                        data: upsert.data.clone(),
                    };
                    if let Some(outcome) =
                        self.try_change(project, current, &change, &types).await?
                    {
                        return Ok(outcome);
                    }
                }
            }
        }
        Err(StoreError::Conflict(
            "contact is being changed concurrently; retry",
        ))
    }

    /// Applies `change` to a contact.
    pub async fn update_contact(
        &self,
        project: &ProjectId,
        id: &ContactId,
        change: &ContactChange,
    ) -> StoreResult<UpsertOutcome> {
        let types = field_types(&change.data.set);
        for _ in 0..MAX_ATTEMPTS {
            let current = self.contact(project, id).await?;
            if let Some(done) = self.try_change(project, current, change, &types).await? {
                return Ok(done);
            }
        }
        Err(StoreError::Conflict(
            "contact is being changed concurrently; retry",
        ))
    }

    /// One optimistic attempt; `None` when another writer got there first.
    async fn try_change(
        &self,
        project: &ProjectId,
        current: Contact,
        change: &ContactChange,
        types: &[(&str, &'static str)],
    ) -> StoreResult<Option<UpsertOutcome>> {
        let mut data = current.data.clone();
        let data_changed = change.data.apply(&mut data);
        let subscribed = change.subscribed.unwrap_or(current.subscribed);
        let email = change.email.as_ref().unwrap_or(&current.email);
        let sub_changed = subscribed != current.subscribed;
        if !data_changed && !sub_changed && *email == current.email {
            return Ok(Some(UpsertOutcome {
                contact: current,
                created: false,
                updated: false,
                subscription_changed_from: None,
            }));
        }
        let sql = format!(
            "UPDATE contacts SET email = $3, subscribed = $4, data = $5, version = version + 1, updated_at = $6 \
             WHERE project_id = $1 AND id = $2 AND version = $7 RETURNING {COLUMNS}"
        );
        let now = now_ms().max(current.updated_at);
        let result = on_db_write!(self.db(), pool => {
            let attempt: Result<Option<ContactRow>, sqlx::Error> = async {
                Ok(write_contact!(pool, project, types,
                    sqlx::query_as(&sql)
                        .bind(project.as_str())
                        .bind(current.id.as_str())
                        .bind(email.as_str())
                        .bind(subscribed)
                        .bind(Json(&data))
                        .bind(now)
                        .bind(current.version)))
            }.await;
            attempt
        });
        let row = result.map_err(|e| StoreError::unique(e, "email"))?;
        Ok(row.map(|r| UpsertOutcome {
            contact: r.into(),
            created: false,
            updated: true,
            subscription_changed_from: sub_changed.then_some(current.subscribed),
        }))
    }

    /// Deletes a contact of a project.
    pub async fn delete_contact(&self, project: &ProjectId, id: &ContactId) -> StoreResult<()> {
        let done = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM contacts WHERE project_id = $1 AND id = $2")
                .bind(project.as_str())
                .bind(id.as_str())
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
}

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

impl Store {
    /// How many contacts a project has.
    pub async fn count_contacts(&self, project: &ProjectId) -> StoreResult<i64> {
        let n: i64 = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM contacts WHERE project_id = $1")
                .bind(project.as_str())
                .fetch_one(pool)
                .await?
        });
        Ok(n)
    }

    /// The project's custom fields with their types and usage, by key.
    pub async fn custom_fields(&self, project: &ProjectId) -> StoreResult<Vec<CustomField>> {
        let counts_sql = super::dialect::data_key_counts_sql(self.db().backend());
        type Rows = (Vec<(String, String)>, Vec<(String, i64)>);
        let (types, counts): Rows = on_db!(self.db(), pool => {
            let types = sqlx::query_as("SELECT key, type FROM contact_fields WHERE project_id = $1 ORDER BY key")
                .bind(project.as_str())
                .fetch_all(pool)
                .await?;
            let counts = sqlx::query_as(counts_sql).bind(project.as_str()).fetch_all(pool).await?;
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
