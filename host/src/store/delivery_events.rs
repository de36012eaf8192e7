//! Delivery events written in groups. What the mail infrastructure reports about an email (a
//! bounce the SMTP server received, a provider's webhook: `services::delivery_events`) is a few
//! small writes: the email's status and history entry; after a hard bounce or a complaint the
//! contact's unsubscription with its event and the address's suppression entry; after a soft
//! bounce its count (which may list the address); after a delivery that count forgotten.
//! Written one transaction each, on SQLite's one writer the commits were the cost.
//!
//! Here a caller's events are written in one transaction. On SQLite the callers waiting while
//! the writer is busy share it (up to [`MAX_BATCH`] callers), as `group_commit` does for contact
//! writes: one writer task, no timer (an idle server writes each caller at once, a loaded one
//! larger groups), a caller answered once its group committed. When a group fails, each of its
//! callers is written again in a transaction of its own, so that a failure is answered only to
//! the caller it belongs to. On PostgreSQL each caller's transaction runs on its own connection,
//! concurrently with the others (one writer would make them wait on each other's statements,
//! and grouped transactions would lock emails and contacts of many callers at once). The writes of one event are [`EventStatements`], written once for both
//! backends; `Store::record_email_event` (opens and clicks) and `Store::add_suppressions` use
//! them too.

use sqlx::{Database, Encode, Executor, IntoArguments, Transaction, Type};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::contacts::{Attempt, ContactRow, Current, Effects, Request, Target, write_contact_in};
use super::dialect::{BeginWrite, backend_of, bound_in_order, for_update};
use super::emails::RecordedEvent;
use super::emails::insert_activity_sql;
use super::emails::status;
use super::statements::{RowsAffected, Statements};
use super::suppressions::{NewSuppression, insert_sql as insert_suppressions_sql};
use super::{Store, StoreError, StoreResult, on_db_write};
use crate::domain::custom_data::DataPatch;
use crate::domain::event::SubscriptionSource;
use crate::domain::ids::{ActivityId, ContactId, ProjectId};
use crate::domain::suppression::{SoftBounceRule, SuppressionReason};
use crate::domain::time::now_ms;

impl Store {
    /// Records what happened to an email (`delivered`, `opened`, `clicked`, `bounced`,
    /// `soft_bounced`, `complained`): a history entry, the first time of the kind, and the status
    /// when it moves forward (never back). Opens and clicks after the first are only counted
    /// (no history entry), so repeated hits add no rows. With `recipient`, the email must have
    /// been sent to that address (a provider's notification names it). `None` when there is no
    /// such email.
    #[tracing::instrument(level = "debug", skip(self, detail))]
    pub async fn record_email_event(
        &self,
        email_id: &str,
        kind: &str,
        detail: Option<&str>,
        recipient: Option<&str>,
    ) -> StoreResult<Option<RecordedEvent>> {
        let now = now_ms();
        let recorded = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let recorded = tx
                .record_email_event_in(email_id, kind, detail, recipient, now)
                .await?;
            if recorded.is_some() {
                tx.commit().await?;
            }
            recorded
        });
        Ok(recorded)
    }

    /// Adds `entries` to `project`'s list in one transaction; an address listed already keeps
    /// its entry. Answers how many were added.
    #[tracing::instrument(level = "debug", skip_all, fields(project = %project, entries = entries.len()))]
    pub async fn add_suppressions(
        &self,
        project: &ProjectId,
        entries: &[NewSuppression<'_>],
    ) -> StoreResult<u64> {
        if entries.is_empty() {
            return Ok(0);
        }
        let now = now_ms();
        let added = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let added = tx.insert_suppressions(project.as_str(), entries, now).await?;
            tx.commit().await?;
            added
        });
        Ok(added)
    }

    /// Removes `email` from `project`'s list (the address may be mailed again), with the soft
    /// bounces counted for it; `false` when it was not listed.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_suppression(&self, project: &ProjectId, email: &str) -> StoreResult<bool> {
        let n = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let n = sqlx::query("DELETE FROM suppressions WHERE project_id = $1 AND email = $2")
                .bind(project.as_str())
                .bind(email)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.clear_soft_bounces(project.as_str(), email).await?;
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }
}

/// The most callers one transaction takes.
pub const MAX_BATCH: usize = 64;

/// One event to write about an email.
#[derive(Clone, Debug)]
pub struct EventWrite {
    /// The email it is about.
    pub email_id: String,
    /// Its kind, as the email's history names it (`status::BOUNCED`, `soft_bounced`, …).
    pub kind: &'static str,
    /// What the report said (the bounce's diagnostic, the clicked URL).
    pub detail: Option<String>,
    /// The recipient the report names, lower-case: the event applies only when the email was
    /// sent to it.
    pub recipient: String,
    /// What follows for the address and its contact.
    pub then: Then,
}

/// What follows an event for its address and contact, once it applied to its email.
#[derive(Clone, Copy, Debug)]
pub enum Then {
    /// Nothing (opens, clicks, inbound).
    Nothing,
    /// A delivery: the address's soft bounces are forgotten.
    ClearSoftBounces,
    /// A soft bounce: counted towards the rule, which may list the address.
    CountSoftBounce(SoftBounceRule),
    /// A hard bounce or a complaint: the contact is unsubscribed (from `source`) and the
    /// address listed (for `reason`).
    Suppress {
        source: SubscriptionSource,
        reason: SuppressionReason,
    },
}

/// What writing one event did.
#[derive(Clone, Debug, Default)]
pub struct EventWritten {
    /// The email's project and contact, and whether the event was its first of the kind; `None`
    /// when there is no such email or it was not sent to the reported recipient.
    pub recorded: Option<RecordedEvent>,
    /// Whether the soft-bounce rule listed the address.
    pub listed: bool,
}

/// The writes of one event, run inside the caller's transaction, for both backends.
pub(crate) trait EventStatements {
    /// Records `kind` on email `email_id` at `now` (see `Store::record_email_event`).
    async fn record_email_event_in(
        &mut self,
        email_id: &str,
        kind: &str,
        detail: Option<&str>,
        recipient: Option<&str>,
        now: i64,
    ) -> sqlx::Result<Option<RecordedEvent>>;

    /// Adds `entries` to `project`'s list (an address listed already keeps its entry); answers
    /// how many were added.
    async fn insert_suppressions(
        &mut self,
        project: &str,
        entries: &[NewSuppression<'_>],
        now: i64,
    ) -> sqlx::Result<u64>;

    /// Counts a soft bounce of email `email_id` to `email` towards `rule`, forgetting those
    /// older than its window; when that makes `rule.limit`, lists the address as a hard bounce
    /// (with the last report's detail `last`) and forgets the count. Answers whether it did.
    async fn count_soft_bounce(
        &mut self,
        project: &str,
        email: &str,
        email_id: &str,
        last: Option<&str>,
        rule: SoftBounceRule,
        now: i64,
    ) -> sqlx::Result<bool>;

    /// Forgets the soft bounces counted for `email` in `project`.
    async fn clear_soft_bounces(&mut self, project: &str, email: &str) -> sqlx::Result<()>;
}

/// The most entries one insert of suppressions writes (6 values a row; `Store::add_suppressions`
/// takes up to 1,000 at once).
const MAX_SUPPRESSIONS_PER_INSERT: usize = 500;

impl<DB> EventStatements for Transaction<'_, DB>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, Option<String>, String, String, bool): sqlx::FromRow<'r, DB::Row>,
{
    async fn record_email_event_in(
        &mut self,
        email_id: &str,
        kind: &str,
        detail: Option<&str>,
        recipient: Option<&str>,
        now: i64,
    ) -> sqlx::Result<Option<RecordedEvent>> {
        let column = match kind {
            status::DELIVERED => Some("delivered_at"),
            status::OPENED => Some("opened_at"),
            status::CLICKED => Some("clicked_at"),
            status::BOUNCED => Some("bounced_at"),
            status::COMPLAINED => Some("complained_at"),
            _ => None,
        };
        let counter = match kind {
            status::OPENED => Some("open_count"),
            status::CLICKED => Some("click_count"),
            _ => None,
        };
        let first_sql = match column {
            Some(c) => format!("{c} IS NULL"),
            None => "TRUE".to_string(),
        };
        let select = format!(
            "SELECT project_id, contact_id, status, to_address, {first_sql} FROM emails WHERE id = $1{}",
            for_update(backend_of::<DB>())
        );
        let row: Option<(String, Option<String>, String, String, bool)> = sqlx::query_as(&select)
            .bind(email_id)
            .fetch_optional(&mut **self)
            .await?;
        let Some((project_id, contact_id, current, to, first)) = row else {
            return Ok(None);
        };
        if recipient.is_some_and(|r| !r.trim().eq_ignore_ascii_case(&to)) {
            return Ok(None);
        }
        if let Some(counter) = counter {
            sqlx::query(&format!(
                "UPDATE emails SET {counter} = {counter} + 1 WHERE id = $1"
            ))
            .bind(email_id)
            .execute(&mut **self)
            .await?;
        }
        if first || counter.is_none() {
            sqlx::query(&insert_activity_sql(1))
                .bind(ActivityId::generate().as_str())
                .bind(project_id.as_str())
                .bind(email_id)
                .bind(contact_id.as_deref())
                .bind(kind)
                .bind(detail)
                .bind(now)
                .execute(&mut **self)
                .await?;
        }
        let advance = status::rank(kind) > status::rank(&current) && kind != "soft_bounced";
        if let (Some(column), true) = (column, first) {
            sqlx::query(&format!(
                "UPDATE emails SET {column} = $2, status = CASE WHEN $3 THEN $4 ELSE status END, \
                 updated_at = $2 WHERE id = $1"
            ))
            .bind(email_id)
            .bind(now)
            .bind(advance)
            .bind(kind)
            .execute(&mut **self)
            .await?;
        }
        Ok(Some(RecordedEvent {
            project_id: ProjectId::from_trusted(project_id),
            contact_id: contact_id.map(ContactId::from_trusted),
            first,
        }))
    }

    async fn insert_suppressions(
        &mut self,
        project: &str,
        entries: &[NewSuppression<'_>],
        now: i64,
    ) -> sqlx::Result<u64> {
        let mut added = 0;
        for chunk in entries.chunks(MAX_SUPPRESSIONS_PER_INSERT) {
            let sql = bound_in_order(backend_of::<DB>(), insert_suppressions_sql(chunk.len()));
            let mut q = sqlx::query(&sql);
            for e in chunk {
                q = q
                    .bind(project)
                    .bind(e.email)
                    .bind(e.reason.as_str())
                    .bind(e.detail)
                    .bind(e.email_id)
                    .bind(now);
            }
            added += q.execute(&mut **self).await?.rows();
        }
        Ok(added)
    }

    async fn count_soft_bounce(
        &mut self,
        project: &str,
        email: &str,
        email_id: &str,
        last: Option<&str>,
        rule: SoftBounceRule,
        now: i64,
    ) -> sqlx::Result<bool> {
        if rule.limit == 0 {
            return Ok(false);
        }
        sqlx::query(
            "DELETE FROM soft_bounces WHERE project_id = $1 AND email = $2 AND created_at < $3",
        )
        .bind(project)
        .bind(email)
        .bind(now - rule.window_ms)
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "INSERT INTO soft_bounces (project_id, email, email_id, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (project_id, email, email_id) DO NOTHING",
        )
        .bind(project)
        .bind(email)
        .bind(email_id)
        .bind(now)
        .execute(&mut **self)
        .await?;
        let (count,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM soft_bounces WHERE project_id = $1 AND email = $2",
        )
        .bind(project)
        .bind(email)
        .fetch_one(&mut **self)
        .await?;
        if count < i64::from(rule.limit) {
            return Ok(false);
        }
        let detail = rule.detail(count as u64, last);
        let entry = NewSuppression {
            email,
            reason: SuppressionReason::HardBounce,
            detail: Some(&detail),
            email_id: Some(email_id),
        };
        self.insert_suppressions(project, &[entry], now).await?;
        self.clear_soft_bounces(project, email).await?;
        Ok(true)
    }

    async fn clear_soft_bounces(&mut self, project: &str, email: &str) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM soft_bounces WHERE project_id = $1 AND email = $2")
            .bind(project)
            .bind(email)
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}

/// Writes `writes` (the events of one or more callers, in order) inside `tx` at `now`; answers
/// what each did, in order. The contacts' events are inserted in one statement at the end.
async fn write_events_in<DB>(
    store: &Store,
    tx: &mut Transaction<'_, DB>,
    writes: &[&EventWrite],
    now: i64,
) -> StoreResult<Vec<EventWritten>>
where
    DB: Database,
    for<'t> Transaction<'t, DB>: Statements + EventStatements,
    for<'e> &'e mut DB::Connection: Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let lock = for_update(backend_of::<DB>());
    let mut written = Vec::with_capacity(writes.len());
    let mut events = Vec::new();
    for write in writes {
        let recorded = tx
            .record_email_event_in(
                &write.email_id,
                write.kind,
                write.detail.as_deref(),
                Some(&write.recipient),
                now,
            )
            .await?;
        let Some(recorded) = recorded else {
            written.push(EventWritten::default());
            continue;
        };
        let project = recorded.project_id.as_str();
        let address = write.recipient.as_str();
        let mut listed = false;
        match write.then {
            Then::Nothing => {}
            Then::ClearSoftBounces => tx.clear_soft_bounces(project, address).await?,
            Then::CountSoftBounce(rule) => {
                listed = tx
                    .count_soft_bounce(
                        project,
                        address,
                        &write.email_id,
                        write.detail.as_deref(),
                        rule,
                        now,
                    )
                    .await?;
            }
            Then::Suppress { source, reason } => {
                if let Some(contact) = &recorded.contact_id {
                    let why = write.detail.as_deref().unwrap_or(write.kind);
                    if let Some(mut e) =
                        unsubscribe_in(store, tx, &recorded.project_id, contact, source, why, lock)
                            .await?
                    {
                        events.append(&mut e);
                    }
                }
                let entry = NewSuppression {
                    email: address,
                    reason,
                    detail: write.detail.as_deref(),
                    email_id: Some(&write.email_id),
                };
                tx.insert_suppressions(project, &[entry], now).await?;
            }
        }
        written.push(EventWritten {
            recorded: Some(recorded),
            listed,
        });
    }
    tx.insert_events(&events).await?;
    Ok(written)
}

/// Unsubscribes contact `id` of `project` inside `tx` (from `source`, `reason` recorded);
/// answers the events to insert (none when it was unsubscribed already or is gone).
async fn unsubscribe_in<DB>(
    store: &Store,
    tx: &mut Transaction<'_, DB>,
    project: &ProjectId,
    id: &ContactId,
    source: SubscriptionSource,
    reason: &str,
    lock: &str,
) -> StoreResult<Option<Vec<crate::domain::event::StoredEvent>>>
where
    DB: Database,
    for<'t> Transaction<'t, DB>: Statements,
    for<'e> &'e mut DB::Connection: Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> ContactRow: sqlx::FromRow<'r, DB::Row>,
{
    let data = DataPatch::default();
    let req = Request {
        email: None,
        subscribed: Some(false),
        subscribed_default: false,
        resubscribe: true,
        data: &data,
        topics: &[],
    };
    let effects = Effects {
        source,
        reason: Some(reason),
        ..Effects::default()
    };
    let caps = store.caps(project, None);
    let attempt = write_contact_in(
        tx,
        project,
        &Target::Id(id),
        Current::Read(lock),
        &req,
        &effects,
        &[],
        caps,
        None,
    )
    .await;
    match attempt {
        Ok(Attempt::Written(_, _, events)) => Ok(Some(events)),
        Ok(Attempt::Unchanged(..)) | Err(StoreError::NotFound) => Ok(None),
        // An unsubscription by id creates no contact, so it never races an insert.
        Ok(Attempt::Raced) => Err(StoreError::Conflict(super::Conflict::ContactBusy)),
        Err(err) => Err(err),
    }
}

/// A caller's events waiting for the writer, with where their answer goes.
struct Pending {
    writes: Vec<EventWrite>,
    reply: oneshot::Sender<StoreResult<Vec<EventWritten>>>,
}

/// The queue in front of the writer task; the task ends when the last sender is gone.
#[derive(Debug)]
pub(crate) struct EventWriter {
    queue: mpsc::Sender<Pending>,
}

impl EventWriter {
    /// Starts the writer task over `store` (which must not hold this queue itself, or the task
    /// would never end).
    fn start(store: Store) -> EventWriter {
        let (queue, receiver) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(run(store, receiver));
        EventWriter { queue }
    }
}

/// The writer task: takes every queued caller (up to [`MAX_BATCH`]) and writes them as a group.
async fn run(store: Store, receiver: mpsc::Receiver<Pending>) {
    super::group_commit::drain(receiver, MAX_BATCH, |batch| {
        let span = tracing::debug_span!("delivery_events_group", size = batch.len());
        write_group(&store, batch).instrument(span)
    })
    .await;
}

/// Writes a group of callers in one transaction, or each alone when that fails.
async fn write_group(store: &Store, batch: Vec<Pending>) {
    let writes: Vec<&EventWrite> = batch.iter().flat_map(|p| &p.writes).collect();
    match store.write_events(&writes).await {
        Ok(mut written) => {
            for pending in batch.into_iter().rev() {
                let mine = written.split_off(written.len() - pending.writes.len());
                let _ = pending.reply.send(Ok(mine));
            }
        }
        Err(err) if batch.len() > 1 => {
            tracing::debug!(error = %err, "a group of delivery events failed; writing each caller alone");
            for pending in batch {
                let writes: Vec<&EventWrite> = pending.writes.iter().collect();
                let _ = pending.reply.send(store.write_events(&writes).await);
            }
        }
        Err(err) => {
            if let Some(pending) = batch.into_iter().next() {
                let _ = pending.reply.send(Err(err));
            }
        }
    }
}

impl Store {
    /// The writer of delivery events, started on first use.
    fn event_writer(&self) -> &EventWriter {
        self.event_writer.get_or_init(|| {
            // Neither writer's store holds a writer's queue, so that both end with the last
            // store.
            EventWriter::start(Store {
                group: Default::default(),
                event_writer: Default::default(),
                ..self.clone()
            })
        })
    }

    /// Writes delivery events (see the module's doc) in one transaction (on SQLite shared with
    /// the other callers waiting at the same time); answers what each did, in order, once committed. A
    /// failure writes nothing of the caller's events.
    #[tracing::instrument(level = "debug", skip_all, fields(events = writes.len()))]
    pub async fn write_delivery_events(
        &self,
        writes: Vec<EventWrite>,
    ) -> StoreResult<Vec<EventWritten>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        if self.db().backend() == super::Backend::Postgres {
            let writes: Vec<&EventWrite> = writes.iter().collect();
            return self.write_events(&writes).await;
        }
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(pending)) = self
            .event_writer()
            .queue
            .send(Pending { writes, reply })
            .await
        {
            // The writer is gone (the runtime is shutting down): write them here.
            let writes: Vec<&EventWrite> = pending.writes.iter().collect();
            return self.write_events(&writes).await;
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Database(sqlx::Error::WorkerCrashed)))
    }

    /// Writes `writes` in one transaction of their own.
    async fn write_events(&self, writes: &[&EventWrite]) -> StoreResult<Vec<EventWritten>> {
        let now = now_ms();
        let written = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let written = write_events_in(self, &mut tx, writes, now).await?;
            tx.commit().await?;
            written
        });
        Ok(written)
    }
}
