//! Writes of many contacts at once, each in one transaction with the job checkpoint or result
//! that records it, so that a job interrupted at any point neither loses nor repeats a chunk.

use std::collections::HashMap;

use serde_json::{Map, Value};
use sqlx::types::Json;

use super::contacts::{COLUMNS, ContactRow, field_types};
use super::dialect::{BeginWrite, for_update, placeholders};
use super::jobs::Lease;
use super::statements::Statements;
use super::{Conflict, Store, StoreError, StoreResult, on_db_write};
use crate::domain::contact::{Contact, ContactUpsert};
use crate::domain::event::{NewEvent, StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, EventId, ProjectId};
use crate::domain::time::now_ms;

/// What happened to one row of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOutcome {
    /// A new contact.
    Created,
    /// An existing contact changed.
    Updated,
    /// An existing contact, already as asked.
    Unchanged,
}

/// A bulk action on contacts by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkAction {
    /// Set `subscribed` to true.
    Subscribe,
    /// Set `subscribed` to false.
    Unsubscribe,
    /// Delete.
    Delete,
}

/// Which ids a bulk action touched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BulkOutcome {
    /// Ids of the project that were found (changed or already as asked).
    pub found: Vec<String>,
    /// Of those, the ones that changed.
    pub changed: usize,
    /// Ids not found in the project.
    pub not_found: Vec<String>,
}

/// A subscription event of a contact, stored at `now`.
fn subscription_event(
    project: &ProjectId,
    contact: &str,
    subscribed: bool,
    source: SubscriptionSource,
    now: i64,
) -> StoredEvent {
    let event = NewEvent::subscription(subscribed, source, None);
    StoredEvent {
        id: EventId::generate(),
        project_id: project.clone(),
        contact_id: Some(ContactId::from_trusted(contact.to_string())),
        contact_email: None,
        name: event.name.as_str().to_string(),
        data: event.data,
        created_at: now,
    }
}

impl Store {
    /// Refreshes the planner's statistics of `contacts` during a bulk load (PostgreSQL's advice
    /// after large changes), so that chunk lookups keep using the `(project_id, email)` index
    /// while the table grows. SQLite's planner needs no statistics for that and this is a no-op.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn refresh_contact_statistics(&self) -> StoreResult<()> {
        if let super::Db::Postgres(pool) = self.db() {
            sqlx::query("ANALYZE contacts").execute(pool).await?;
        }
        Ok(())
    }

    /// Upserts a chunk of imported rows and saves the job's checkpoint in the same transaction.
    /// `None` when the worker no longer owns the job (nothing was written).
    #[tracing::instrument(level = "debug", skip(self, rows, checkpoint), fields(rows = rows.len()))]
    pub async fn import_chunk(
        &self,
        project: &ProjectId,
        lease: &Lease,
        rows: &[ContactUpsert],
        checkpoint: impl Fn(&[RowOutcome]) -> Value,
        progress: i32,
    ) -> StoreResult<Option<Vec<RowOutcome>>> {
        // A contact that a concurrent write creates between the chunk's read and its insert
        // fails the insert on its address (PostgreSQL; SQLite's one writer cannot interleave):
        // the chunk is then read and written again at once, instead of failing the job's attempt.
        // Each time, the addresses that failed it exist and are read (and locked) the next time,
        // so the tries end, at most one more than the chunk's addresses.
        let most = rows.len() + 1;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .import_chunk_once(project, lease, rows, &checkpoint, progress)
                .await
            {
                Err(StoreError::Conflict(Conflict::Email)) if attempt < most => {
                    tracing::debug!(attempt, "an import chunk met an address created meanwhile");
                }
                other => return other,
            }
        }
    }

    async fn import_chunk_once(
        &self,
        project: &ProjectId,
        lease: &Lease,
        rows: &[ContactUpsert],
        checkpoint: &impl Fn(&[RowOutcome]) -> Value,
        progress: i32,
    ) -> StoreResult<Option<Vec<RowOutcome>>> {
        let mut emails: Vec<&str> = rows.iter().map(|r| r.email.as_str()).collect();
        emails.sort_unstable();
        emails.dedup();
        let lock = for_update(self.db().backend());
        let select_sql = format!(
            "SELECT {COLUMNS} FROM contacts WHERE project_id = $1 AND email IN ({}){lock}",
            placeholders(2, emails.len())
        );
        let mut all_set = Map::new();
        for r in rows {
            for (k, v) in &r.data.set {
                all_set.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let types = self
            .known_fields
            .unknown(project.as_str(), &field_types(&all_set));
        let now = now_ms();

        let outcome = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let existing: Vec<ContactRow> = if emails.is_empty() {
                Vec::new()
            } else {
                let mut q = sqlx::query_as::<_, ContactRow>(&select_sql).bind(project.as_str());
                for e in &emails {
                    q = q.bind(*e);
                }
                q.fetch_all(&mut *tx).await?
            };
            let mut current: HashMap<String, (Contact, bool)> =
                existing.into_iter().map(|r| { let c: Contact = r.into(); (c.email.to_string(), (c, false)) }).collect();
            let mut fresh: Vec<String> = Vec::new();
            let mut outcomes = Vec::with_capacity(rows.len());
            let mut events: Vec<StoredEvent> = Vec::new();
            for row in rows {
                let key = row.email.to_string();
                match current.get_mut(&key) {
                    Some((contact, dirty)) => {
                        let was = contact.subscribed;
                        let data_changed = row.data.apply(&mut contact.data);
                        let subscribed = row.subscribed.unwrap_or(contact.subscribed);
                        contact.subscribed = subscribed;
                        if subscribed != was && !fresh.contains(&key) {
                            events.push(subscription_event(project, contact.id.as_str(), subscribed, SubscriptionSource::Import, now));
                        }
                        let changed = data_changed || subscribed != was;
                        *dirty |= changed;
                        outcomes.push(if fresh.contains(&key) {
                            RowOutcome::Created
                        } else if changed {
                            RowOutcome::Updated
                        } else {
                            RowOutcome::Unchanged
                        });
                    }
                    None => {
                        let mut data = Map::new();
                        row.data.apply(&mut data);
                        let contact = Contact {
                            id: ContactId::generate(),
                            project_id: project.clone(),
                            email: row.email.clone(),
                            subscribed: row.subscribed.unwrap_or(row.subscribed_default),
                            data,
                            version: 0,
                            created_at: now,
                            updated_at: now,
                            topics: Default::default(),
                        };
                        current.insert(key.clone(), (contact, false));
                        fresh.push(key);
                        outcomes.push(RowOutcome::Created);
                    }
                }
            }
            if !fresh.is_empty() {
                let mut sql = format!("INSERT INTO contacts ({COLUMNS}) VALUES ");
                for i in 0..fresh.len() {
                    let b = i * 6;
                    if i > 0 {
                        sql.push_str(", ");
                    }
                    sql.push_str(&format!("(${}, ${}, ${}, ${}, ${}, 0, ${}, ${}, '{{}}')", b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 6));
                }
                let mut q = sqlx::query(&sql);
                for key in &fresh {
                    let (c, _) = &current[key];
                    q = q.bind(c.id.as_str()).bind(project.as_str()).bind(c.email.as_str()).bind(c.subscribed).bind(Json(&c.data)).bind(now);
                }
                q.execute(&mut *tx).await.map_err(|e| StoreError::unique(e, Conflict::Email))?;
            }
            for (key, (c, dirty)) in &current {
                if !dirty || fresh.contains(key) {
                    continue;
                }
                sqlx::query("UPDATE contacts SET subscribed = $3, data = $4, version = version + 1, updated_at = $5 WHERE project_id = $1 AND id = $2")
                    .bind(project.as_str())
                    .bind(c.id.as_str())
                    .bind(c.subscribed)
                    .bind(Json(&c.data))
                    .bind(now.max(c.updated_at))
                    .execute(&mut *tx)
                    .await?;
            }
            let max_data = self.limits.contact_data_max_bytes;
            for (key, (c, dirty)) in &current {
                if *dirty || fresh.contains(key) {
                    let size = serde_json::to_vec(&c.data).map_or(usize::MAX, |v| v.len());
                    if size > max_data {
                        return Err(StoreError::Cap(super::CapReached::ContactData {
                            size,
                            max: max_data,
                        }));
                    }
                }
            }
            tx.insert_field_types(project.as_str(), &types, now, Some(self.limits.contact_fields_max)).await?;
            tx.insert_events(&events).await?;
            if tx.checkpoint_job(lease, &checkpoint(&outcomes), progress, now).await? {
                tx.commit().await?;
                Some(outcomes)
            } else {
                tx.rollback().await?;
                None
            }
        });
        if outcome.is_some() {
            self.known_fields.remember(project.as_str(), &types);
        }
        Ok(outcome)
    }

    /// Applies a bulk action to the project's contacts among `ids` and completes the job with
    /// `result(outcome)` in the same transaction. `None` when the worker no longer owns the job.
    #[tracing::instrument(level = "debug", skip(self, ids, result), fields(ids = ids.len()))]
    pub async fn bulk_contacts(
        &self,
        project: &ProjectId,
        lease: &Lease,
        action: BulkAction,
        ids: &[String],
        result: impl FnOnce(&BulkOutcome) -> Value,
    ) -> StoreResult<Option<BulkOutcome>> {
        let lock = for_update(self.db().backend());
        let select_sql = format!(
            "SELECT id, subscribed FROM contacts WHERE project_id = $1 AND id IN ({}){lock}",
            placeholders(2, ids.len())
        );
        let now = now_ms();
        let outcome = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let mut q = sqlx::query_as::<_, (String, bool)>(&select_sql).bind(project.as_str());
            for id in ids {
                q = q.bind(id);
            }
            let found: Vec<(String, bool)> = q.fetch_all(&mut *tx).await?;
            let found_ids: std::collections::HashSet<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
            let not_found: Vec<String> = ids.iter().filter(|id| !found_ids.contains(id.as_str())).cloned().collect();
            let mut events = Vec::new();
            let changed: Vec<&str> = match action {
                BulkAction::Delete => found.iter().map(|(id, _)| id.as_str()).collect(),
                BulkAction::Subscribe | BulkAction::Unsubscribe => {
                    let target = action == BulkAction::Subscribe;
                    found.iter().filter(|(_, s)| *s != target).map(|(id, _)| id.as_str()).collect()
                }
            };
            if !changed.is_empty() {
                // Delete binds the project and the ids; the updates also bind the new state.
                let sql = match action {
                    BulkAction::Delete => {
                        format!("DELETE FROM contacts WHERE project_id = $1 AND id IN ({})", placeholders(2, changed.len()))
                    }
                    _ => format!(
                        "UPDATE contacts SET subscribed = $2, version = version + 1, updated_at = {now} WHERE project_id = $1 AND id IN ({})",
                        placeholders(3, changed.len())
                    ),
                };
                if action == BulkAction::Delete {
                    super::segments::release_memberships(&mut tx, project, &changed).await?;
                }
                let mut q = sqlx::query(&sql).bind(project.as_str());
                if action != BulkAction::Delete {
                    q = q.bind(action == BulkAction::Subscribe);
                }
                for id in &changed {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
                if action != BulkAction::Delete {
                    for id in &changed {
                        events.push(subscription_event(project, id, action == BulkAction::Subscribe, SubscriptionSource::Bulk, now));
                    }
                }
            }
            tx.insert_events(&events).await?;
            let outcome = BulkOutcome {
                found: found.iter().map(|(id, _)| id.clone()).collect(),
                changed: changed.len(),
                not_found,
            };
            if tx.complete_job(lease, &result(&outcome), now).await? {
                tx.commit().await?;
                Some(outcome)
            } else {
                tx.rollback().await?;
                None
            }
        });
        Ok(outcome)
    }
}
