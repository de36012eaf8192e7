//! Queued emails as the delivery queue (`jobs::deliver`): a send writes its emails `queued` and
//! due at once, and no job; delivery workers list the projects with queued email, claim a
//! project's due emails for one hand-off within its send budget, keep that hand-off alive, and
//! put back what it did not take. Outcomes are written by [`Store::finish_deliveries`].
//!
//! An email's `due_at` is when it may next be handed off; a claim sets it to the end of the
//! hand-off's lease (extended by its heartbeat), so the search passes over emails in flight, and
//! a claim also requires that no other hand-off of the email started within the stale time
//! (`handed_off_at`), so that a lapsed heartbeat alone never hands a message off twice.

use super::dialect::{BeginWrite, bound_in_order, placeholders};
use super::emails::insert_activity_sql;
use super::emails::{DELIVERABLE_COLUMNS, Deliverable};
use super::jobs::QueueHead;
use super::{Store, StoreResult, on_db, on_db_write};
use crate::domain::time::now_ms;

/// The transports a project's mail may go through ([`Store::transport_choices`]).
#[derive(Clone, Debug, Default)]
pub struct TransportChoices {
    /// The project's own (`None`: the deployment's default).
    pub project: Option<String>,
    /// Its sending domains, each with its transport if it names one.
    pub domains: Vec<DomainTransport>,
}

/// A sending domain of a project and its transport.
#[derive(Clone, Debug)]
pub struct DomainTransport {
    /// The domain name.
    pub name: String,
    /// Whether its subdomains send under it.
    pub allow_subdomains: bool,
    /// Its transport (`None`: the project's).
    pub transport: Option<String>,
}

/// A claim of a project's due emails: the emails, or when the project's send budget has room
/// again.
pub type Claimed = Result<Vec<Deliverable>, i64>;

impl Store {
    /// The projects with queued email after `after` in id order, at most `limit`, each with
    /// when its earliest queued email is due: a loose index scan over `emails_due`, two seeks
    /// a project however many emails it has queued.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delivery_heads(&self, after: &str, limit: i64) -> StoreResult<Vec<QueueHead>> {
        self.queue_heads(DUE_HEADS, after, limit).await
    }

    /// Claims for the hand-off `token`, in one transaction, up to `most` of `project`'s due
    /// emails, earliest first: those no other hand-off started less than `lease_ms` ago (its
    /// hold may have lapsed with a stalled heartbeat). Each claimed email counts an attempt and
    /// is held (not due) for `lease_ms`. With a per-second
    /// send budget (`per_second`, 0: none), takes no more than the current second has left and
    /// counts what it took; `Err(next_window_ms)` when nothing is left. The budget is shared by
    /// every instance through the database. Answers the emails as they were before the claim
    /// (`handed_off_at` set: an earlier hand-off of it was interrupted).
    #[tracing::instrument(level = "debug", skip(self, token))]
    pub async fn claim_deliveries(
        &self,
        project: &str,
        token: &str,
        most: i64,
        per_second: u32,
        lease_ms: i64,
    ) -> StoreResult<Claimed> {
        let now = now_ms();
        let window = now - now.rem_euclid(1000);
        let backend = self.db().backend();
        let pick = format!(
            "SELECT {DELIVERABLE_COLUMNS} FROM emails WHERE project_id = $1 AND status = 'queued' \
             AND due_at <= $2 AND (handed_off_at IS NULL OR handed_off_at < $3) \
             ORDER BY due_at LIMIT $4{}",
            super::dialect::skip_locked(backend)
        );
        let claimed = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let mut most = most.max(0);
            if per_second > 0 {
                // The upsert locks the window's row until the commit (PostgreSQL).
                let sent: i32 = sqlx::query_scalar(
                    "INSERT INTO send_windows (project_id, window_start, sent) VALUES ($1, $2, 0) \
                     ON CONFLICT (project_id, window_start) DO UPDATE SET sent = send_windows.sent \
                     RETURNING sent",
                )
                .bind(project)
                .bind(window)
                .fetch_one(&mut *tx)
                .await?;
                let left = i64::from(per_second) - i64::from(sent);
                if left <= 0 {
                    tx.rollback().await?;
                    return Ok(Err(window + 1000));
                }
                most = most.min(left);
            }
            let picked: Vec<Deliverable> = sqlx::query_as(&pick)
                .bind(project)
                .bind(now)
                .bind(now - lease_ms)
                .bind(most)
                .fetch_all(&mut *tx)
                .await?;
            if picked.is_empty() {
                tx.rollback().await?;
                return Ok(Ok(picked));
            }
            let picked_any = picked.len();
            let emails = suppress_listed_in(&mut tx, project, picked, now).await?;
            if emails.is_empty() {
                // Every email picked was to an address listed since it was queued.
                tx.commit().await?;
                tracing::debug!(suppressed = picked_any, "claimed emails suppressed");
                return Ok(Ok(emails));
            }
            let sql = bound_in_order(
                backend,
                format!(
                    "UPDATE emails SET handed_off_at = $1, hand_off_token = $2, attempts = attempts + 1, \
                     due_at = $3, updated_at = $4 WHERE id IN ({})",
                    placeholders(5, emails.len())
                ),
            );
            let mut q = sqlx::query(&sql).bind(now).bind(token).bind(now + lease_ms).bind(now);
            for e in &emails {
                q = q.bind(&e.id);
            }
            q.execute(&mut *tx).await?;
            if per_second > 0 {
                sqlx::query(
                    "UPDATE send_windows SET sent = sent + $3 WHERE project_id = $1 AND window_start = $2",
                )
                .bind(project)
                .bind(window)
                .bind(emails.len() as i64)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            emails
        });
        Ok(Ok(claimed))
    }

    /// The heartbeat of the hand-off `token`: its emails (`ids`) still queued under it stay
    /// held for another `lease_ms`. Answers how many it still holds.
    #[tracing::instrument(level = "debug", skip_all, fields(emails = ids.len()))]
    pub async fn extend_hand_offs(
        &self,
        ids: &[&str],
        token: &str,
        lease_ms: i64,
    ) -> StoreResult<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let sql = bound_in_order(
            self.db().backend(),
            format!(
                "UPDATE emails SET due_at = $1 WHERE hand_off_token = $2 AND id IN ({}) AND status = 'queued'",
                placeholders(3, ids.len())
            ),
        );
        let n = on_db_write!(self.db(), pool => {
            let mut q = sqlx::query(&sql).bind(now_ms() + lease_ms).bind(token);
            for id in ids {
                q = q.bind(*id);
            }
            q.execute(pool).await?.rows_affected()
        });
        Ok(n)
    }

    /// Puts back emails the hand-off `token` claimed but did not hand to the transport (no room
    /// for them in memory now): due at once, their attempt not counted.
    #[tracing::instrument(level = "debug", skip_all, fields(emails = ids.len()))]
    pub async fn release_hand_offs(&self, ids: &[&str], token: &str) -> StoreResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = bound_in_order(
            self.db().backend(),
            format!(
                "UPDATE emails SET handed_off_at = NULL, hand_off_token = NULL, attempts = attempts - 1, \
                 due_at = $1 WHERE hand_off_token = $2 AND id IN ({}) AND status = 'queued'",
                placeholders(3, ids.len())
            ),
        );
        on_db_write!(self.db(), pool => {
            let mut q = sqlx::query(&sql).bind(now_ms()).bind(token);
            for id in ids {
                q = q.bind(*id);
            }
            q.execute(pool).await?;
        });
        Ok(())
    }

    /// The transports a project's mail may be routed to at hand-off: the project's own and
    /// each of its sending domains' (`jobs::routing` chooses among them by the `from` domain).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn transport_choices(&self, project: &str) -> StoreResult<TransportChoices> {
        let (own, domains) = on_db!(self.db(), pool => {
            let own: Option<Option<String>> =
                sqlx::query_scalar("SELECT transport FROM projects WHERE id = $1")
                    .bind(project)
                    .fetch_optional(pool)
                    .await?;
            let domains: Vec<(String, bool, Option<String>)> = sqlx::query_as(
                "SELECT name, allow_subdomains, transport FROM domains WHERE project_id = $1",
            )
            .bind(project)
            .fetch_all(pool)
            .await?;
            (own, domains)
        });
        Ok(TransportChoices {
            project: own.flatten(),
            domains: domains
                .into_iter()
                .map(|(name, allow_subdomains, transport)| DomainTransport {
                    name,
                    allow_subdomains,
                    transport,
                })
                .collect(),
        })
    }

    /// Makes due the queued emails that have no due time (up to `limit`): those an older
    /// release, which gave each email a delivery job instead, queued while it ran beside this
    /// one during a rolling upgrade. Answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn adopt_undue_emails(&self, limit: i64) -> StoreResult<u64> {
        let sql = super::dialect::in_subquery(
            self.db().backend(),
            "id",
            &format!(
                "SELECT id FROM emails WHERE status = 'queued' AND due_at IS NULL LIMIT {limit}"
            ),
        );
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(&format!("UPDATE emails SET due_at = updated_at WHERE {sql}"))
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n)
    }
}

/// The projects with queued email after `$1`, at most `$2`, and each one's earliest due time
/// (NULL when only emails without one are queued): the loose index scan of the jobs' queues
/// (`jobs::QUEUE_HEADS`) over `emails_due`.
const DUE_HEADS: &str = "WITH RECURSIVE q(project_id, n) AS ( \
     SELECT (SELECT project_id FROM emails WHERE status = 'queued' AND project_id > $1 ORDER BY project_id LIMIT 1), 1 \
     UNION ALL \
     SELECT (SELECT e.project_id FROM emails e WHERE e.status = 'queued' AND e.project_id > q.project_id \
     ORDER BY e.project_id LIMIT 1), q.n + 1 FROM q WHERE q.project_id IS NOT NULL AND q.n < $2) \
     SELECT project_id, (SELECT e.due_at FROM emails e WHERE e.status = 'queued' AND e.project_id = q.project_id \
     AND e.due_at IS NOT NULL ORDER BY e.due_at LIMIT 1) FROM q WHERE q.project_id IS NOT NULL";

/// Takes out of `emails` (just picked in `tx`, of `project`) those whose recipient was put on
/// the project's suppression list after they were queued (a hard bounce or complaint of an
/// earlier email, an operator's entry), and writes each `suppressed` with the entry's reason
/// and its history entry, as a send to a listed address is written: never handed to the
/// transport. The list is read by `statements::listed_addresses`; the rare suppressed email is
/// written by two statements of its own.
async fn suppress_listed_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    project: &str,
    emails: Vec<Deliverable>,
    now: i64,
) -> sqlx::Result<Vec<Deliverable>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, String, String): sqlx::FromRow<'r, DB::Row>,
{
    let backend = super::dialect::backend_of::<DB>();
    let addresses: std::collections::BTreeSet<&str> =
        emails.iter().map(|e| e.to_address.as_str()).collect();
    let addresses: Vec<&str> = addresses.into_iter().collect();
    let listed: std::collections::HashMap<String, String> =
        super::statements::listed_addresses::<DB>(&mut **tx, &[project], &addresses)
            .await?
            .into_iter()
            .map(|((_, email), reason)| (email, reason))
            .collect();
    if listed.is_empty() {
        return Ok(emails);
    }
    let mut kept = Vec::with_capacity(emails.len());
    for email in emails {
        let Some(reason) = listed.get(&email.to_address) else {
            kept.push(email);
            continue;
        };
        let detail = crate::domain::suppression::suppressed_reason(reason);
        sqlx::query(&bound_in_order(
            backend,
            "UPDATE emails SET status = 'suppressed', error = $1, draft = NULL, due_at = NULL, \
             handed_off_at = NULL, hand_off_token = NULL, updated_at = $2 WHERE id = $3"
                .to_string(),
        ))
        .bind(detail.as_str())
        .bind(now)
        .bind(email.id.as_str())
        .execute(&mut **tx)
        .await?;
        sqlx::query(&bound_in_order(backend, insert_activity_sql(1)))
            .bind(crate::domain::ids::ActivityId::generate().as_str())
            .bind(project)
            .bind(email.id.as_str())
            .bind(email.contact_id.as_deref())
            .bind(super::emails::status::SUPPRESSED)
            .bind(detail.as_str())
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    Ok(kept)
}
