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
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::pagination::{Page, PageRequest, encode_cursor};
use crate::domain::time::now_ms;
use crate::{on_db, on_db_write};

const COLUMNS: &str = "id, project_id, email, subscribed, data, version, created_at, updated_at";
const MAX_ATTEMPTS: usize = 16;

#[derive(FromRow)]
pub(crate) struct ContactRow {
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
pub(crate) fn field_types(set: &Map<String, Value>) -> Vec<(&str, &'static str)> {
    set.iter()
        .filter_map(|(k, v)| FieldType::infer(v).map(|t| (k.as_str(), t.as_str())))
        .collect()
}

/// `INSERT … ON CONFLICT DO NOTHING` for the inferred types (the first type seen is kept).
pub(crate) fn field_types_sql(n: usize) -> String {
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

/// Recorded in the same transaction as a contact write.
#[derive(Default)]
pub struct Effects<'a> {
    /// Where a change of `subscribed` came from (for `contact.subscribed`/`unsubscribed`).
    pub source: SubscriptionSource,
    /// Why `subscribed` changed, when known (e.g. a bounce).
    pub reason: Option<&'a str>,
    /// An event about the contact to record (e.g. a tracked one).
    pub event: Option<&'a NewEvent>,
    /// Makes the write idempotent under a key.
    pub idempotency: Option<IdempotencyClaim<'a>>,
}

/// Builds the response stored with an idempotency key from what was written.
pub type Respond = dyn Fn(&Contact, Option<&StoredEvent>) -> Value + Sync;

/// An idempotency key claimed by a write.
pub struct IdempotencyClaim<'a> {
    /// The caller's key.
    pub key: &'a str,
    /// The endpoint it was used on.
    pub endpoint: &'a str,
    /// Hash of the request body.
    pub request_hash: &'a str,
    /// The status to replay.
    pub status: u16,
    /// The body to replay.
    pub respond: &'a Respond,
}

/// Events to insert with a write, their ids and time chosen before the transaction.
fn plan_events(
    project: &ProjectId,
    contact: &ContactId,
    subscription: Option<bool>,
    effects: &Effects<'_>,
) -> (Vec<StoredEvent>, Option<StoredEvent>) {
    let now = now_ms();
    let stored = |e: &NewEvent| StoredEvent {
        id: EventId::generate(),
        project_id: project.clone(),
        contact_id: Some(contact.clone()),
        contact_email: None,
        name: e.name.as_str().to_string(),
        data: e.data.clone(),
        created_at: now,
    };
    let mut all = Vec::new();
    let tracked = effects.event.map(stored);
    if let Some(t) = &tracked {
        all.push(t.clone());
    }
    if let Some(subscribed) = subscription {
        all.push(stored(&NewEvent::subscription(
            subscribed,
            effects.source,
            effects.reason,
        )));
    }
    (all, tracked)
}

/// Runs one contact write transaction: the contact statement (which must return the row, or
/// nothing when an optimistic check failed), the inferred field types, the events with their
/// outbox rows and the idempotency key. Evaluates to `Option<ContactRow>`.
macro_rules! contact_tx {
    ($pool:ident, $project:expr, $types:expr, $events:expr, $idem:expr, $query:expr) => {{
        let mut tx = $pool.begin_write().await?;
        let row: Option<ContactRow> = $query.fetch_optional(&mut *tx).await?;
        match row {
            None => {
                tx.rollback().await?;
                None
            }
            Some(row) => {
                if !$types.is_empty() {
                    let sql = field_types_sql($types.len());
                    let mut q = sqlx::query(&sql).bind($project.as_str()).bind(now_ms());
                    for (k, t) in $types.iter() {
                        q = q.bind(*k).bind(*t);
                    }
                    q.execute(&mut *tx).await?;
                }
                for e in $events.iter() {
                    sqlx::query(INSERT_EVENT)
                        .bind(e.id.as_str())
                        .bind(e.project_id.as_str())
                        .bind(e.contact_id.as_ref().map(|c| c.as_str()))
                        .bind(&e.name)
                        .bind(Json(&e.data))
                        .bind(e.created_at)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(INSERT_OUTBOX)
                        .bind(e.id.as_str())
                        .bind(e.project_id.as_str())
                        .bind(e.created_at)
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some((claim, body)) = $idem {
                    let claim: &IdempotencyClaim<'_> = claim;
                    sqlx::query("DELETE FROM idempotency_keys WHERE project_id = $1 AND key = $2 AND created_at < $3")
                        .bind($project.as_str())
                        .bind(claim.key)
                        .bind(now_ms() - super::idempotency::TTL_MS)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO idempotency_keys (project_id, key, endpoint, request_hash, status, response, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    )
                    .bind($project.as_str())
                    .bind(claim.key)
                    .bind(claim.endpoint)
                    .bind(claim.request_hash)
                    .bind(i32::from(claim.status))
                    .bind(Json(body))
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| StoreError::unique(e, IDEMPOTENCY_CONFLICT))?;
                }
                tx.commit().await?;
                Some(row)
            }
        }
    }};
}

/// The conflict reported when an idempotency key was taken concurrently.
pub const IDEMPOTENCY_CONFLICT: &str = "idempotency_key";

pub(crate) const INSERT_EVENT: &str = "INSERT INTO events (id, project_id, contact_id, name, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)";
pub(crate) const INSERT_OUTBOX: &str = "INSERT INTO event_outbox (event_id, project_id, available_at, attempts) VALUES ($1, $2, $3, 0)";

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
        self.upsert_contact_with(project, upsert, &Effects::default())
            .await
            .map(|(o, _)| o)
    }

    /// [`Store::upsert_contact`] that also records `effects` in the same transaction; answers the
    /// stored tracked event when there is one.
    pub async fn upsert_contact_with(
        &self,
        project: &ProjectId,
        upsert: &ContactUpsert,
        effects: &Effects<'_>,
    ) -> StoreResult<(UpsertOutcome, Option<StoredEvent>)> {
        let types = field_types(&upsert.data.set);
        for _ in 0..MAX_ATTEMPTS {
            match self.contact_by_email(project, &upsert.email).await? {
                None => {
                    let mut data = Map::new();
                    upsert.data.apply(&mut data);
                    let subscribed = upsert.subscribed.unwrap_or(upsert.subscribed_default);
                    let now = now_ms();
                    let id = ContactId::generate();
                    let (events, tracked) = plan_events(project, &id, None, effects);
                    let contact = Contact {
                        id: id.clone(),
                        project_id: project.clone(),
                        email: upsert.email.clone(),
                        subscribed,
                        data: data.clone(),
                        version: 0,
                        created_at: now,
                        updated_at: now,
                    };
                    let idem = effects
                        .idempotency
                        .as_ref()
                        .map(|c| (c, (c.respond)(&contact, tracked.as_ref())));
                    let sql = format!(
                        "INSERT INTO contacts ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, 0, $6, $6) \
                         ON CONFLICT (project_id, email) DO NOTHING RETURNING {COLUMNS}"
                    );
                    let row = on_db_write!(self.db(), pool => contact_tx!(pool, project, types, events, idem,
                        sqlx::query_as(&sql)
                            .bind(id.as_str())
                            .bind(project.as_str())
                            .bind(upsert.email.as_str())
                            .bind(subscribed)
                            .bind(Json(&data))
                            .bind(now)));
                    if let Some(row) = row {
                        let outcome = UpsertOutcome {
                            contact: row.into(),
                            created: true,
                            updated: false,
                            subscription_changed_from: None,
                        };
                        return Ok((outcome, tracked));
                    }
                }
                Some(current) => {
                    let change = ContactChange {
                        email: None,
                        subscribed: upsert.subscribed,
                        data: upsert.data.clone(),
                    };
                    if let Some(done) = self
                        .try_change(project, current, &change, &types, effects)
                        .await?
                    {
                        return Ok(done);
                    }
                }
            }
        }
        Err(StoreError::Conflict(
            "contact is being changed concurrently; retry",
        ))
    }

    /// Applies `change` to a contact, recording a subscription change with `source`.
    pub async fn update_contact(
        &self,
        project: &ProjectId,
        id: &ContactId,
        change: &ContactChange,
        source: SubscriptionSource,
    ) -> StoreResult<UpsertOutcome> {
        let types = field_types(&change.data.set);
        let effects = Effects {
            source,
            ..Effects::default()
        };
        for _ in 0..MAX_ATTEMPTS {
            let current = self.contact(project, id).await?;
            if let Some((done, _)) = self
                .try_change(project, current, change, &types, &effects)
                .await?
            {
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
        effects: &Effects<'_>,
    ) -> StoreResult<Option<(UpsertOutcome, Option<StoredEvent>)>> {
        let mut data = current.data.clone();
        let data_changed = change.data.apply(&mut data);
        let subscribed = change.subscribed.unwrap_or(current.subscribed);
        let email = change
            .email
            .clone()
            .unwrap_or_else(|| current.email.clone());
        let sub_changed = subscribed != current.subscribed;
        let changed = data_changed || sub_changed || email != current.email;
        let (events, tracked) = plan_events(
            project,
            &current.id,
            sub_changed.then_some(subscribed),
            effects,
        );
        if !changed && events.is_empty() && effects.idempotency.is_none() {
            let outcome = UpsertOutcome {
                contact: current,
                created: false,
                updated: false,
                subscription_changed_from: None,
            };
            return Ok(Some((outcome, tracked)));
        }
        let now = now_ms().max(current.updated_at);
        let after = if changed {
            Contact {
                email: email.clone(),
                subscribed,
                data: data.clone(),
                version: current.version + 1,
                updated_at: now,
                ..current.clone()
            }
        } else {
            current.clone()
        };
        let idem = effects
            .idempotency
            .as_ref()
            .map(|c| (c, (c.respond)(&after, tracked.as_ref())));
        let update_sql = format!(
            "UPDATE contacts SET email = $3, subscribed = $4, data = $5, version = version + 1, updated_at = $6 \
             WHERE project_id = $1 AND id = $2 AND version = $7 RETURNING {COLUMNS}"
        );
        let check_sql = format!(
            "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND id = $2 AND version = $3"
        );
        let result: Result<Option<ContactRow>, StoreError> = on_db_write!(self.db(), pool => {
            async {
                Ok(if changed {
                    contact_tx!(pool, project, types, events, idem,
                        sqlx::query_as(&update_sql)
                            .bind(project.as_str())
                            .bind(current.id.as_str())
                            .bind(email.as_str())
                            .bind(subscribed)
                            .bind(Json(&data))
                            .bind(now)
                            .bind(current.version))
                } else {
                    contact_tx!(pool, project, types, events, idem,
                        sqlx::query_as(&check_sql)
                            .bind(project.as_str())
                            .bind(current.id.as_str())
                            .bind(current.version))
                })
            }
            .await
        });
        let row = match result {
            Err(StoreError::Database(e)) => return Err(StoreError::unique(e, "email")),
            other => other?,
        };
        Ok(row.map(|r| {
            let outcome = UpsertOutcome {
                contact: r.into(),
                created: false,
                updated: changed,
                subscription_changed_from: sub_changed.then_some(current.subscribed),
            };
            (outcome, tracked)
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

/// How often a value of a field occurs.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueCount {
    /// The value.
    pub value: Value,
    /// Contacts with it.
    pub count: i64,
}

impl Store {
    /// The contacts of a project among `emails` (normalised), as `(id, email)`.
    pub async fn contacts_by_emails(
        &self,
        project: &ProjectId,
        emails: &[EmailAddress],
    ) -> StoreResult<Vec<(String, String)>> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id, email FROM contacts WHERE project_id = $1 AND email IN ({})",
            super::dialect::placeholders(2, emails.len())
        );
        let rows: Vec<(String, String)> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            for e in emails {
                q = q.bind(e.as_str());
            }
            q.fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Distinct values of `subscribed`, most common first.
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

    /// Distinct values of the custom field at `keys` (a dotted path split), most common first.
    pub async fn data_values(
        &self,
        project: &ProjectId,
        keys: &[String],
        limit: i64,
    ) -> StoreResult<Vec<ValueCount>> {
        let rows: Vec<(String, i64)> = match self.db() {
            super::Db::Sqlite { pool, .. } => {
                sqlx::query_as(
                    "SELECT data -> $2 AS v, COUNT(*) AS n FROM contacts WHERE project_id = $1 \
                     AND json_type(data, $2) IS NOT NULL AND json_type(data, $2) != 'null' \
                     GROUP BY v ORDER BY n DESC, v LIMIT $3",
                )
                .bind(project.as_str())
                .bind(super::dialect::sqlite_json_path(keys))
                .bind(limit)
                .fetch_all(pool)
                .await?
            }
            super::Db::Postgres(pool) => sqlx::query_as(
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
    pub async fn delete_data_field(
        &self,
        project: &ProjectId,
        keys: &[String],
    ) -> StoreResult<u64> {
        let now = now_ms();
        let n = match self.db() {
            super::Db::Sqlite { writer, .. } => {
                let mut tx = writer.begin_write().await?;
                let n = sqlx::query(
                    "UPDATE contacts SET data = json_remove(data, $2), version = version + 1, updated_at = $3 \
                     WHERE project_id = $1 AND json_type(data, $2) IS NOT NULL",
                )
                .bind(project.as_str())
                .bind(super::dialect::sqlite_json_path(keys))
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if keys.len() == 1 {
                    sqlx::query("DELETE FROM contact_fields WHERE project_id = $1 AND key = $2")
                        .bind(project.as_str())
                        .bind(&keys[0])
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                n
            }
            super::Db::Postgres(pool) => {
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
                    sqlx::query("DELETE FROM contact_fields WHERE project_id = $1 AND key = $2")
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
