//! The statements that writes of several tables share inside their own transaction: an event
//! (its outbox row follows by trigger), the inferred types of custom fields, a job's insert,
//! completion and checkpoint under its lease, and an idempotency key with its response. They are
//! methods of any open transaction, written once for both backends; the SQL text of each stays
//! in its table's module.

use serde_json::{Map, Value};
use sqlx::postgres::PgQueryResult;
use sqlx::sqlite::SqliteQueryResult;
use sqlx::types::Json;
use sqlx::{Database, Encode, Executor, IntoArguments, Transaction, Type};

use super::dialect::backend_of;
use super::jobs::rows::{Lease, NewJob, queue_of};
use super::jobs::sql::{
    CHECKPOINT_JOB, COMPLETE_JOB, chain_jobs_sql, complete_jobs_sql, insert_jobs_sql,
};
use super::{CapReached, Conflict, StoreError, StoreResult};
use crate::domain::event::StoredEvent;
use crate::domain::ids::JobId;

/// How many rows a statement changed, on either backend.
pub(crate) trait RowsAffected {
    /// The count.
    fn rows(&self) -> u64;
}

impl RowsAffected for SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

/// Shared statements, run inside the caller's transaction.
pub(crate) trait Statements {
    /// Inserts events in one statement per [`super::events::MAX_EVENTS_PER_INSERT`] (none: no
    /// statement).
    async fn insert_events(&mut self, events: &[StoredEvent]) -> sqlx::Result<()>;

    /// Adds `contacts` to a segment of `project` at `entered_at` (`Some`; those already members
    /// are left as they are) or removes them (`None`); answers the contacts added or removed, in
    /// no particular order.
    async fn write_members(
        &mut self,
        project: &str,
        segment: &str,
        contacts: &[&str],
        entered_at: Option<i64>,
    ) -> sqlx::Result<Vec<String>>;

    /// Records the first type seen of each custom field key (`(key, type)` pairs); with `max`,
    /// [`CapReached::ContactFields`] when that takes the project past `max` fields (the
    /// transaction must then be rolled back).
    async fn insert_field_types(
        &mut self,
        project: &str,
        types: &[(&str, &str)],
        now: i64,
        max: Option<u64>,
    ) -> StoreResult<()>;

    /// Records a tracked event name of a project in `event_names`; [`CapReached::EventNames`]
    /// when it is new and takes the project past `max` names (the transaction must then be
    /// rolled back).
    async fn insert_event_name(
        &mut self,
        project: &str,
        name: &str,
        now: i64,
        max: u64,
    ) -> StoreResult<()>;

    /// Queues a job; answers its id. A job of a singleton kind already queued or running (see
    /// [`Statements::insert_job_once`]) is an error.
    async fn insert_job(&mut self, job: &NewJob, now: i64) -> sqlx::Result<JobId>;

    /// Queues a job unless a unique index refuses it: for a singleton kind (one that may be
    /// queued or running only once, `segments.reevaluate`) already there, answers `None`.
    async fn insert_job_once(&mut self, job: &NewJob, now: i64) -> sqlx::Result<Option<JobId>>;

    /// Queues jobs in one statement (a singleton kind already queued or running is skipped, as
    /// by [`Statements::insert_job_once`]); answers the id given to each, in order (a skipped
    /// one's is stored nowhere).
    async fn insert_jobs(&mut self, jobs: &[&NewJob], now: i64) -> sqlx::Result<Vec<JobId>>;

    /// Completes jobs, each with its result, in one statement; answers the ids of those whose
    /// lease held (the others are left as they are).
    async fn complete_jobs(
        &mut self,
        jobs: &[(&Lease, &Value)],
        now: i64,
    ) -> sqlx::Result<Vec<String>>;

    /// Hands running jobs on, each to the work its payload names (see `jobs::chain_jobs_sql`), in
    /// one statement; answers the ids of those whose lease held.
    async fn chain_jobs(
        &mut self,
        jobs: &[(&Lease, &Value)],
        now: i64,
    ) -> sqlx::Result<Vec<String>>;

    /// Completes a job with `result`; false when the lease was lost.
    async fn complete_job(&mut self, lease: &Lease, result: &Value, now: i64)
    -> sqlx::Result<bool>;

    /// Saves a job's checkpoint and progress; false when the lease was lost.
    async fn checkpoint_job(
        &mut self,
        lease: &Lease,
        checkpoint: &Value,
        progress: i32,
        now: i64,
    ) -> sqlx::Result<bool>;

    /// Writes a planned contact change (insert or update; nothing for `Keep`). False when an
    /// insert met a contact created with the same address since the read.
    async fn write_contact_plan(&mut self, plan: &super::contacts::plan::Plan)
    -> StoreResult<bool>;

    /// Writes planned contact changes: the inserts in one statement, then the updates in one
    /// (per [`super::contacts::MAX_CONTACTS_PER_WRITE`]). False when an insert met a contact
    /// created with the same address since the read (others may be written: roll back).
    async fn write_contacts(
        &mut self,
        writes: &super::contacts::rows::ContactWrites,
    ) -> StoreResult<bool>;

    /// Inserts an email (its status: `queued` or `suppressed`), a suppressed one with its
    /// history entry (a queued one's is read off the email: `emails::QUEUED_ENTRY`).
    async fn insert_email(
        &mut self,
        email: &super::emails::insert::EmailInsert<'_>,
    ) -> sqlx::Result<()>;

    /// Writes `contacts` as [`Statements::write_contacts`] does, then inserts `emails` as
    /// [`Statements::insert_emails`] does; on PostgreSQL, when the contacts are new ones only and
    /// each kind fits one statement, both in one statement, whose emails are inserted only when
    /// every contact was. `false` when a new contact's address was taken meanwhile (part of the
    /// writes may be done: roll back).
    async fn write_contacts_and_emails(
        &mut self,
        contacts: &super::contacts::rows::ContactWrites,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> StoreResult<bool>;

    /// Inserts emails, the suppressed ones with their history entries, in one statement per
    /// table on SQLite and one for both on PostgreSQL (per
    /// [`super::emails::MAX_EMAILS_PER_INSERT`]). An email whose recipient is on its project's
    /// suppression list is written suppressed ([`listed_emails`]).
    async fn insert_emails(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<()>;

    /// [`listed_emails`] inside this transaction: the emails of `emails` to a listed address,
    /// as they are to be written.
    async fn listed_emails(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<Vec<(usize, super::emails::insert::NewEmail)>>;

    /// [`listed_reasons`] inside this transaction: the emails of `emails` to a listed address,
    /// by index, with the entry's reason (`HARD_BOUNCE`, `COMPLAINT`, `MANUAL`).
    async fn listed_reasons(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<Vec<(usize, String)>>;

    /// Forgets an expired use of `write.key` and stores `response` under it; a live key taken
    /// meanwhile fails with `Conflict(IdempotencyKey)`, so the whole transaction rolls back.
    async fn store_idempotent_response<R: Sync>(
        &mut self,
        project: &str,
        write: &super::idempotency::IdempotentWrite<'_, R>,
        response: &Value,
    ) -> StoreResult<()>;

    /// [`Statements::store_idempotent_response`] of several keys (project, key, response), in
    /// one statement of each kind.
    async fn store_idempotent_responses<R: Sync>(
        &mut self,
        keys: &[(&str, &super::idempotency::IdempotentWrite<'_, R>, &Value)],
    ) -> StoreResult<()>;
}

/// Binds the 9 values of a contact insert (`contacts::insert_contacts_sql`, a row).
macro_rules! bind_new_contact {
    ($q:expr, $c:expr) => {{
        let c = $c;
        $q.bind(c.id.as_str())
            .bind(c.project_id.as_str())
            .bind(c.email.as_str())
            .bind(c.subscribed)
            .bind(Json(&c.data))
            .bind(c.version)
            .bind(c.created_at)
            .bind(c.updated_at)
            .bind(Json(&c.topics))
    }};
}

/// Binds the 21 values of an email insert (`emails::insert_emails_sql`, a row), `links` being
/// the email's tracked links as JSON.
macro_rules! bind_email {
    ($q:expr, $w:expr, $links:expr) => {{
        let (w, e) = ($w, $w.email);
        $q.bind(e.id.as_str())
            .bind(w.project)
            .bind(w.contact_id)
            .bind(e.template_id.as_deref())
            .bind(e.kind)
            .bind(e.from_address.as_str())
            .bind(e.to_address.as_str())
            .bind(e.subject.as_str())
            .bind(w.status)
            .bind(e.message_id.as_str())
            .bind(e.envelope_from.as_str())
            .bind(e.signed_by.as_deref())
            .bind(Json($links))
            .bind(e.draft.as_deref())
            .bind(e.suppressed.as_deref())
            .bind(w.now)
            .bind(w.now)
            .bind(w.campaign_id)
            .bind(w.test)
            .bind(w.due_at)
            .bind(e.content_id.as_deref())
    }};
}

impl<DB> Statements for Transaction<'_, DB>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Map<String, Value>>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q std::collections::BTreeMap<String, bool>>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> i32: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> Option<String>: sqlx::Decode<'r, DB> + Type<DB>,
    for<'r> (Option<String>,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, String, String): sqlx::FromRow<'r, DB::Row>,
{
    async fn insert_events(&mut self, events: &[StoredEvent]) -> sqlx::Result<()> {
        for chunk in events.chunks(super::events::MAX_EVENTS_PER_INSERT) {
            let sql = in_order::<DB>(super::events::insert_events_sql(chunk.len()));
            let mut q = sqlx::query(&sql);
            for e in chunk {
                q = q
                    .bind(e.id.as_str())
                    .bind(e.project_id.as_str())
                    .bind(e.contact_id.as_ref().map(|c| c.as_str()))
                    .bind(e.name.as_str())
                    .bind(Json(&e.data))
                    .bind(e.created_at);
            }
            q.execute(&mut **self).await?;
        }
        Ok(())
    }

    async fn write_members(
        &mut self,
        project: &str,
        segment: &str,
        contacts: &[&str],
        entered_at: Option<i64>,
    ) -> sqlx::Result<Vec<String>> {
        let mut written = Vec::with_capacity(contacts.len());
        for chunk in contacts.chunks(super::segments::members::MEMBERS_PER_STATEMENT) {
            let sql = in_order::<DB>(match entered_at {
                Some(_) => super::segments::members::add_members_sql(chunk.len()),
                None => super::segments::members::remove_members_sql(chunk.len()),
            });
            let mut q = sqlx::query_scalar(&sql);
            match entered_at {
                Some(at) => {
                    for contact in chunk {
                        q = q.bind(segment).bind(*contact).bind(project).bind(at);
                    }
                }
                None => {
                    q = q.bind(project).bind(segment);
                    for contact in chunk {
                        q = q.bind(*contact);
                    }
                }
            }
            written.extend(q.fetch_all(&mut **self).await?);
        }
        Ok(written)
    }

    async fn insert_field_types(
        &mut self,
        project: &str,
        types: &[(&str, &str)],
        now: i64,
        max: Option<u64>,
    ) -> StoreResult<()> {
        if types.is_empty() {
            return Ok(());
        }
        let sql = in_order::<DB>(format!(
            "{} RETURNING key",
            super::contacts::rows::field_types_sql(types.len())
        ));
        let mut q = sqlx::query_scalar::<_, String>(&sql);
        for (k, t) in types {
            q = q.bind(project).bind(*k).bind(*t).bind(now);
        }
        let added = q.fetch_all(&mut **self).await?;
        // Counted only when fields were added (rare: the instance remembers the known ones).
        if let Some(max) = max
            && let Some(field) = added.first()
            && past_cap(self, "contact_fields", project, max).await?
        {
            return Err(StoreError::Cap(CapReached::ContactFields {
                field: field.clone(),
                max,
            }));
        }
        Ok(())
    }

    async fn insert_event_name(
        &mut self,
        project: &str,
        name: &str,
        now: i64,
        max: u64,
    ) -> StoreResult<()> {
        let added = sqlx::query(
            "INSERT INTO event_names (project_id, name, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (project_id, name) DO NOTHING",
        )
        .bind(project)
        .bind(name)
        .bind(now)
        .execute(&mut **self)
        .await?
        .rows();
        if added > 0 && past_cap(self, "event_names", project, max).await? {
            return Err(StoreError::Cap(CapReached::EventNames {
                name: name.to_string(),
                max,
            }));
        }
        Ok(())
    }

    async fn insert_job(&mut self, job: &NewJob, now: i64) -> sqlx::Result<JobId> {
        self.insert_job_once(job, now).await?.ok_or_else(|| {
            sqlx::Error::Protocol(format!("a {} job is already queued or running", job.kind))
        })
    }

    async fn insert_job_once(&mut self, job: &NewJob, now: i64) -> sqlx::Result<Option<JobId>> {
        let id = JobId::generate();
        let n = insert_job_rows(self, &[(job, &id)], now).await?;
        Ok((n == 1).then_some(id))
    }

    async fn insert_jobs(&mut self, jobs: &[&NewJob], now: i64) -> sqlx::Result<Vec<JobId>> {
        let ids: Vec<JobId> = jobs.iter().map(|_| JobId::generate()).collect();
        let rows: Vec<(&NewJob, &JobId)> = jobs.iter().copied().zip(&ids).collect();
        insert_job_rows(self, &rows, now).await?;
        Ok(ids)
    }

    async fn complete_jobs(
        &mut self,
        jobs: &[(&Lease, &Value)],
        now: i64,
    ) -> sqlx::Result<Vec<String>> {
        let sql = in_order::<DB>(complete_jobs_sql(jobs.len()));
        leased_update(self, &sql, jobs, now, 2).await
    }

    async fn chain_jobs(
        &mut self,
        jobs: &[(&Lease, &Value)],
        now: i64,
    ) -> sqlx::Result<Vec<String>> {
        let sql = in_order::<DB>(chain_jobs_sql(jobs.len()));
        leased_update(self, &sql, jobs, now, 1).await
    }

    async fn complete_job(
        &mut self,
        lease: &Lease,
        result: &Value,
        now: i64,
    ) -> sqlx::Result<bool> {
        let n = sqlx::query(COMPLETE_JOB)
            .bind(lease.job.as_str())
            .bind(lease.worker.as_str())
            .bind(Json(result))
            .bind(now)
            .execute(&mut **self)
            .await?
            .rows();
        Ok(n == 1)
    }

    async fn checkpoint_job(
        &mut self,
        lease: &Lease,
        checkpoint: &Value,
        progress: i32,
        now: i64,
    ) -> sqlx::Result<bool> {
        let n = sqlx::query(CHECKPOINT_JOB)
            .bind(lease.job.as_str())
            .bind(lease.worker.as_str())
            .bind(Json(checkpoint))
            .bind(progress)
            .bind(now)
            .execute(&mut **self)
            .await?
            .rows();
        Ok(n == 1)
    }

    async fn write_contact_plan(
        &mut self,
        plan: &super::contacts::plan::Plan,
    ) -> StoreResult<bool> {
        let mut writes = super::contacts::rows::ContactWrites::default();
        writes.add(plan);
        self.write_contacts(&writes).await
    }

    async fn write_contacts(
        &mut self,
        writes: &super::contacts::rows::ContactWrites,
    ) -> StoreResult<bool> {
        use super::contacts::rows::{
            MAX_CONTACTS_PER_WRITE, insert_contacts_sql, update_contacts_sql,
        };
        for chunk in writes.inserts.chunks(MAX_CONTACTS_PER_WRITE) {
            let sql = in_order::<DB>(insert_contacts_sql(chunk.len()));
            let mut q = sqlx::query_as::<_, (String,)>(&sql);
            for c in chunk {
                q = bind_new_contact!(q, c);
            }
            if q.fetch_all(&mut **self).await?.len() < chunk.len() {
                return Ok(false);
            }
        }
        for chunk in writes.updates.chunks(MAX_CONTACTS_PER_WRITE) {
            let sql = in_order::<DB>(update_contacts_sql(chunk.len()));
            let mut q = sqlx::query(&sql);
            for c in chunk {
                q = q
                    .bind(c.id.as_str())
                    .bind(c.project_id.as_str())
                    .bind(c.email.as_str())
                    .bind(c.subscribed)
                    .bind(Json(&c.data))
                    .bind(c.version)
                    .bind(c.updated_at)
                    .bind(Json(&c.topics));
            }
            q.execute(&mut **self)
                .await
                .map_err(|e| StoreError::unique(e, Conflict::Email))?;
        }
        Ok(true)
    }

    async fn write_contacts_and_emails(
        &mut self,
        contacts: &super::contacts::rows::ContactWrites,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> StoreResult<bool> {
        use super::contacts::rows::MAX_CONTACTS_PER_WRITE;
        use super::emails::insert::MAX_EMAILS_PER_INSERT;
        let inserts = &contacts.inserts;
        let together = backend_of::<DB>() == super::Backend::Postgres
            && contacts.updates.is_empty()
            && (1..=MAX_CONTACTS_PER_WRITE).contains(&inserts.len())
            && (1..=MAX_EMAILS_PER_INSERT).contains(&emails.len());
        if !together {
            if !self.write_contacts(contacts).await? {
                return Ok(false);
            }
            self.insert_emails(emails).await?;
            return Ok(true);
        }
        let inserts: Vec<_> = inserts.iter().collect();
        let listed = listed_emails::<DB>(&mut **self, emails).await?;
        let rows = with_listed(emails, &listed);
        insert_contacts_with_emails(&mut **self, &inserts, &rows).await
    }

    async fn insert_email(
        &mut self,
        w: &super::emails::insert::EmailInsert<'_>,
    ) -> sqlx::Result<()> {
        self.insert_emails(std::slice::from_ref(w)).await
    }

    async fn insert_emails(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<()> {
        use super::emails::insert::{
            MAX_EMAILS_PER_INSERT, insert_activity_sql, insert_emails_sql,
            insert_emails_with_activity_sql,
        };
        // Those to a listed address are written suppressed.
        let listed = listed_emails::<DB>(&mut **self, emails).await?;
        let rows = with_listed(emails, &listed);
        let emails = rows.as_slice();
        // One statement a chunk on PostgreSQL (the emails with their history); two on SQLite,
        // whose `WITH` takes no insert.
        let together = backend_of::<DB>() == super::Backend::Postgres;
        for chunk in emails.chunks(MAX_EMAILS_PER_INSERT) {
            let (links, ids) = links_and_history_ids(chunk);
            let sql = if together {
                insert_emails_with_activity_sql(chunk.len())
            } else {
                in_order::<DB>(insert_emails_sql(chunk.len()))
            };
            let mut q = sqlx::query(&sql);
            for ((w, links), id) in chunk.iter().zip(&links).zip(&ids) {
                if together {
                    q = q.bind(id.as_deref());
                }
                q = bind_email!(q, w, links);
            }
            q.execute(&mut **self).await?;
            if together {
                continue;
            }
            // A queued email's history starts with no row (`emails::QUEUED_ENTRY`).
            let entries: Vec<_> = chunk
                .iter()
                .zip(&ids)
                .filter_map(|(w, id)| id.as_deref().map(|id| (w, id)))
                .collect();
            if entries.is_empty() {
                continue;
            }
            let sql = in_order::<DB>(insert_activity_sql(entries.len()));
            let mut q = sqlx::query(&sql);
            for (w, id) in entries {
                q = q
                    .bind(id)
                    .bind(w.project)
                    .bind(w.email.id.as_str())
                    .bind(w.contact_id)
                    .bind(w.status)
                    .bind(w.email.suppressed.as_deref())
                    .bind(w.now);
            }
            q.execute(&mut **self).await?;
        }
        Ok(())
    }

    async fn listed_emails(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<Vec<(usize, super::emails::insert::NewEmail)>> {
        listed_emails::<DB>(&mut **self, emails).await
    }

    async fn listed_reasons(
        &mut self,
        emails: &[super::emails::insert::EmailInsert<'_>],
    ) -> sqlx::Result<Vec<(usize, String)>> {
        listed_reasons::<DB>(&mut **self, emails).await
    }

    async fn store_idempotent_response<R: Sync>(
        &mut self,
        project: &str,
        write: &super::idempotency::IdempotentWrite<'_, R>,
        response: &Value,
    ) -> StoreResult<()> {
        self.store_idempotent_responses(&[(project, write, response)])
            .await
    }

    async fn store_idempotent_responses<R: Sync>(
        &mut self,
        keys: &[(&str, &super::idempotency::IdempotentWrite<'_, R>, &Value)],
    ) -> StoreResult<()> {
        use super::idempotency::{
            MAX_KEYS_PER_WRITE, TTL_MS, delete_expired_keys_sql, insert_keys_sql,
        };
        let now = crate::domain::time::now_ms();
        for chunk in keys.chunks(MAX_KEYS_PER_WRITE) {
            let sql = in_order::<DB>(delete_expired_keys_sql(chunk.len()));
            let mut q = sqlx::query(&sql).bind(now - TTL_MS);
            for (project, write, _) in chunk {
                q = q.bind(*project).bind(write.key);
            }
            q.execute(&mut **self).await?;
            let sql = in_order::<DB>(insert_keys_sql(chunk.len()));
            let mut q = sqlx::query(&sql);
            for (project, write, response) in chunk {
                q = q
                    .bind(*project)
                    .bind(write.key)
                    .bind(write.endpoint)
                    .bind(write.request_hash)
                    .bind(i32::from(write.status))
                    .bind(Json(*response))
                    .bind(now);
            }
            q.execute(&mut **self)
                .await
                .map_err(|e| StoreError::unique(e, Conflict::IdempotencyKey))?;
        }
        Ok(())
    }
}

/// Whether `project` has more than `max` rows in `table` (a fixed identifier: `contact_fields`
/// or `event_names`), counted inside `tx`: the write just took it past its cap.
async fn past_cap<DB>(
    tx: &mut Transaction<'_, DB>,
    table: &'static str,
    project: &str,
    max: u64,
) -> sqlx::Result<bool>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE project_id = $1");
    let count: i64 = sqlx::query_scalar(&sql)
        .bind(project)
        .fetch_one(&mut **tx)
        .await?;
    Ok(count as u64 > max)
}

/// `true` when `insert_contacts_with_emails_sql` wrote, `false` when it refused a taken address
/// (having written nothing; a transaction it ran in must be rolled back).
fn address_not_taken<R>(done: sqlx::Result<R>) -> StoreResult<bool> {
    match done {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(db))
            if db.code().as_deref() == Some(super::emails::insert::ADDRESS_TAKEN) =>
        {
            Ok(false)
        }
        Err(err) => Err(err.into()),
    }
}

/// PostgreSQL: new contacts, and emails with the suppressed ones' history entries, in one
/// statement (`insert_contacts_with_emails_sql`), in the caller's transaction or, given the
/// pool, on its own: all of it or, when an address was taken meanwhile (`false`) or the
/// statement failed, nothing.
pub(super) async fn insert_contacts_with_emails<'c, DB, E>(
    executor: E,
    contacts: &[&crate::domain::contact::Contact],
    emails: &[super::emails::insert::EmailInsert<'_>],
) -> StoreResult<bool>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Map<String, Value>>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q std::collections::BTreeMap<String, bool>>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
{
    let (links, ids) = links_and_history_ids(emails);
    let sql = super::emails::insert::insert_contacts_with_emails_sql(contacts.len(), emails.len());
    let mut q = sqlx::query(&sql);
    for c in contacts {
        q = bind_new_contact!(q, c);
    }
    for ((w, links), id) in emails.iter().zip(&links).zip(&ids) {
        q = q.bind(id.as_deref());
        q = bind_email!(q, w, links);
    }
    address_not_taken(q.bind(contacts.len() as i64).execute(executor).await)
}

/// The emails of `emails` whose recipient is on its project's suppression list, read through
/// `conn` (the caller's transaction, so the list is read where the emails are committed), by
/// index, each as it is written instead: `suppressed` with the entry's reason
/// ([`suppressed_copy`]). An email suppressed already (marketing mail to an unsubscribed
/// contact) is left as it is.
pub(super) async fn listed_emails<DB>(
    conn: &mut DB::Connection,
    emails: &[super::emails::insert::EmailInsert<'_>],
) -> sqlx::Result<Vec<(usize, super::emails::insert::NewEmail)>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> (String, String, String): sqlx::FromRow<'r, DB::Row>,
{
    Ok(listed_reasons::<DB>(conn, emails)
        .await?
        .into_iter()
        .map(|(i, reason)| (i, suppressed_copy(emails[i].email, &reason)))
        .collect())
}

/// `email` as it is written when its recipient is listed for `reason`: `suppressed` with the
/// reason (`domain::suppression::suppressed_reason`), without a draft, never due.
pub(super) fn suppressed_copy(
    email: &super::emails::insert::NewEmail,
    reason: &str,
) -> super::emails::insert::NewEmail {
    let mut email = email.clone();
    email.suppressed = Some(crate::domain::suppression::suppressed_reason(reason));
    email.draft = None;
    email
}

/// The emails of `emails` (not suppressed already) whose recipient is on its project's
/// suppression list, read through `conn`, by index, with the entry's reason
/// ([`listed_addresses`]).
pub(super) async fn listed_reasons<DB>(
    conn: &mut DB::Connection,
    emails: &[super::emails::insert::EmailInsert<'_>],
) -> sqlx::Result<Vec<(usize, String)>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> (String, String, String): sqlx::FromRow<'r, DB::Row>,
{
    let mut projects: Vec<&str> = Vec::new();
    let mut addresses: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for w in emails.iter().filter(|w| w.email.suppressed.is_none()) {
        if !projects.contains(&w.project) {
            projects.push(w.project);
        }
        addresses.insert(w.email.to_address.as_str());
    }
    let addresses: Vec<&str> = addresses.into_iter().collect();
    let found = listed_addresses::<DB>(conn, &projects, &addresses).await?;
    if found.is_empty() {
        return Ok(Vec::new());
    }
    Ok(emails
        .iter()
        .enumerate()
        .filter(|(_, w)| w.email.suppressed.is_none())
        .filter_map(|(i, w)| {
            let key = (w.project.to_string(), w.email.to_address.clone());
            found.get(&key).map(|reason| (i, reason.clone()))
        })
        .collect())
}

/// `emails` with those [`listed_emails`] found replaced by their suppressed selves.
pub(super) fn with_listed<'b>(
    emails: &[super::emails::insert::EmailInsert<'b>],
    listed: &'b [(usize, super::emails::insert::NewEmail)],
) -> Vec<super::emails::insert::EmailInsert<'b>> {
    let mut rows = emails.to_vec();
    for (i, email) in listed {
        rows[*i] = super::emails::insert::EmailInsert {
            email,
            status: super::emails::status::SUPPRESSED,
            due_at: None,
            ..rows[*i]
        };
    }
    rows
}

/// What an insert of `emails` binds beside them: each one's tracked links as JSON, and a fresh
/// id for each one's history entry (none for a queued one, which gets no entry:
/// `emails::QUEUED_ENTRY`).
fn links_and_history_ids(
    emails: &[super::emails::insert::EmailInsert<'_>],
) -> (Vec<Value>, Vec<Option<String>>) {
    let links = emails
        .iter()
        .map(|w| Value::from(w.email.links.clone()))
        .collect();
    let ids = emails
        .iter()
        .map(|w| {
            (w.status != super::emails::insert::QUEUED_ENTRY)
                .then(|| crate::domain::ids::ActivityId::generate().into_string())
        })
        .collect();
    (links, ids)
}

/// `sql` with its placeholders anonymous where `DB` is SQLite and they qualify
/// ([`super::dialect::bound_in_order`]).
fn in_order<DB: Database>(sql: String) -> String {
    super::dialect::bound_in_order(backend_of::<DB>(), sql)
}

/// Runs `sql` (binding each job's id, worker and value, then now `nows` times) over `jobs`;
/// answers the ids it returned. Nothing runs for no jobs.
async fn leased_update<DB>(
    tx: &mut Transaction<'_, DB>,
    sql: &str,
    jobs: &[(&Lease, &Value)],
    now: i64,
    nows: usize,
) -> sqlx::Result<Vec<String>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = sqlx::query_scalar::<_, String>(sql);
    for (lease, value) in jobs {
        q = q
            .bind(lease.job.as_str())
            .bind(lease.worker.as_str())
            .bind(Json(*value));
    }
    for _ in 0..nows {
        q = q.bind(now);
    }
    q.fetch_all(&mut **tx).await
}

/// Inserts `jobs`, each under its id, in one statement; answers how many were inserted (a
/// singleton kind already queued or running is not). Nothing runs for no jobs.
async fn insert_job_rows<DB>(
    tx: &mut Transaction<'_, DB>,
    jobs: &[(&NewJob, &JobId)],
    now: i64,
) -> sqlx::Result<u64>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> i32: Encode<'q, DB> + Type<DB>,
{
    if jobs.is_empty() {
        return Ok(0);
    }
    let queues: Vec<String> = jobs
        .iter()
        .map(|(j, _)| queue_of(j.project_id.as_ref().map(|p| p.as_str()), &j.kind))
        .collect();
    let sql = in_order::<DB>(insert_jobs_sql(jobs.len()));
    let mut q = sqlx::query(&sql);
    for ((job, id), queue) in jobs.iter().zip(&queues) {
        q = q
            .bind(id.as_str())
            .bind(job.project_id.as_ref().map(|p| p.as_str()))
            .bind(job.kind.as_str())
            .bind(Json(&job.payload))
            .bind(job.input.as_deref())
            .bind(job.max_attempts)
            .bind(job.run_at)
            .bind(now)
            .bind(now)
            .bind(queue.as_str());
    }
    Ok(q.execute(&mut **tx).await?.rows())
}

/// Which of `addresses` are on the suppression list of one of `projects`, read through `conn`:
/// (project, address) to the entry's reason. One select per
/// [`super::suppressions::MAX_LISTED_PER_SELECT`] addresses.
pub(super) async fn listed_addresses<DB>(
    conn: &mut DB::Connection,
    projects: &[&str],
    addresses: &[&str],
) -> sqlx::Result<std::collections::HashMap<(String, String), String>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> (String, String, String): sqlx::FromRow<'r, DB::Row>,
{
    use super::suppressions::{MAX_LISTED_PER_SELECT, listed_sql};
    let mut found = std::collections::HashMap::new();
    for chunk in addresses.chunks(MAX_LISTED_PER_SELECT) {
        let sql = in_order::<DB>(listed_sql(projects.len(), chunk.len()));
        let mut q = sqlx::query_as::<_, (String, String, String)>(&sql);
        for project in projects {
            q = q.bind(*project);
        }
        for address in chunk {
            q = q.bind(*address);
        }
        for (project, email, reason) in q.fetch_all(&mut *conn).await? {
            found.insert((project, email), reason);
        }
    }
    Ok(found)
}
