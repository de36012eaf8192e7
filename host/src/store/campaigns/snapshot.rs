//! A campaign's audience and its snapshot into the recipients ledger, a chunk a transaction.

use herald_filter::{Scope, SqlValue};

use super::ab::variant_updates;
use super::records::{
    AudienceCounts, Campaign, SNAPSHOT_CHUNK, SnapshotStep, batch_job, finish_job, winner_job,
};
use crate::domain::campaign::Audience;
use crate::domain::time::now_ms;
use crate::store::dialect::{BeginWrite, for_update};
use crate::store::jobs::Lease;
use crate::store::segments::bind_all;
use crate::store::statements::Statements;
use crate::store::{Store, StoreError, StoreResult, on_db, on_db_write};

impl Store {
    /// The `FROM contacts c … WHERE …` of a campaign's audience (all contacts, not only the
    /// subscribed) and its binds (`$1` the project); `None` when its segment no longer exists.
    async fn audience_from(
        &self,
        c: &Campaign,
        now: i64,
    ) -> StoreResult<Option<(String, Vec<SqlValue>)>> {
        let project = &c.project_id;
        match &c.content.audience {
            Audience::All => Ok(Some((
                "FROM contacts c WHERE c.project_id = $1".to_string(),
                vec![SqlValue::Text(project.as_str().to_string())],
            ))),
            Audience::Segment(id) => match self.segment(project, id).await {
                Ok(segment) => self.members_from(&segment, now).map(Some),
                Err(StoreError::NotFound) => Ok(None),
                Err(e) => Err(e),
            },
            Audience::Filtered(f) => {
                let filter = herald_filter::parse(f, Scope::Contacts)
                    .map_err(|_| StoreError::Corrupt(format!("campaign {} filter", c.id)))?;
                let (expr, binds) = self.compile(project, None, &filter, now)?;
                Ok(Some((
                    format!("FROM contacts c WHERE c.project_id = $1 AND ({expr})"),
                    binds,
                )))
            }
        }
    }

    /// Whether a contact of a campaign's audience (`c`) is subscribed to the campaign's topic,
    /// as SQL (the topic's id pushed onto `binds`); true for a campaign without a topic. The
    /// one rule of the snapshot and the audience preview.
    fn in_topic(&self, c: &Campaign, binds: &mut Vec<SqlValue>) -> String {
        let Some(topic) = &c.content.topic else {
            return "(1 = 1)".to_string();
        };
        binds.push(SqlValue::Text(topic.as_str().to_string()));
        let dialect = crate::store::segments::rows::dialect(self.db().backend());
        herald_filter::topic_subscribed_sql(dialect, &format!("${}", binds.len()))
    }

    /// The contacts of a campaign's audience now, counted by the rules a send applies (the
    /// snapshot takes the subscribed ones; a batch records those on the project's suppression
    /// list as suppressed): each contact once, by the first rule that keeps it from the send.
    /// `None` when its segment no longer exists.
    #[tracing::instrument(level = "debug", skip(self, c))]
    pub async fn audience_counts(&self, c: &Campaign) -> StoreResult<Option<AudienceCounts>> {
        let now = now_ms();
        let Some((from, mut binds)) = self.audience_from(c, now).await? else {
            return Ok(None);
        };
        // The suppression list's lookup, as the batch's (`statements::listed_emails`): the
        // contact's address exactly, one seek of the list's primary key.
        let listed = "EXISTS (SELECT 1 FROM suppressions s WHERE s.project_id = c.project_id \
                      AND s.email = c.email)";
        // A contact waiting for the confirmation of its subscription (`store::confirmations`),
        // unsubscribed until it confirms: one seek of the waits' primary key.
        binds.push(SqlValue::Int(now));
        let pending = format!(
            "EXISTS (SELECT 1 FROM contact_confirmations p WHERE p.contact_id = c.id \
             AND p.expires_at > ${})",
            binds.len()
        );
        // The snapshot's topic rule (`in_topic`), the same text.
        let in_topic = self.in_topic(c, &mut binds);
        let sql = format!(
            "SELECT COUNT(CASE WHEN c.subscribed AND {in_topic} AND NOT {listed} THEN 1 END) AS recipients, \
             COUNT(CASE WHEN NOT c.subscribed AND NOT {pending} THEN 1 END) AS unsubscribed, \
             COUNT(CASE WHEN NOT c.subscribed AND {pending} THEN 1 END) AS pending, \
             COUNT(CASE WHEN c.subscribed AND NOT {in_topic} THEN 1 END) AS not_in_topic, \
             COUNT(CASE WHEN c.subscribed AND {in_topic} AND {listed} THEN 1 END) AS suppressed {from}"
        );
        let counts: AudienceCounts = on_db!(self.db(), pool => {
            bind_all!(sqlx::query_as(&sql), &binds).fetch_one(pool).await?
        });
        Ok(Some(counts))
    }

    /// Takes the next chunk of a sending campaign's audience into its ledger: the subscribed
    /// contacts after the checkpoint, in id order, with the checkpoint's move and the chunk's
    /// batch job, in one transaction guarded by the checkpoint `c` was read with. When nothing
    /// is left, marks the snapshot done, queues the finish job and completes `lease`'s job.
    /// `Err(NotFound)` when the campaign's segment was deleted.
    #[tracing::instrument(level = "debug", skip_all, fields(campaign = %c.id, batch = c.batches))]
    pub async fn snapshot_chunk(
        &self,
        c: &Campaign,
        lease: &Lease,
        max_attempts: i32,
    ) -> StoreResult<SnapshotStep> {
        let now = now_ms();
        // The filter's clock is the send's start, so every chunk sees the same audience rules.
        let Some((from, mut binds)) = self.audience_from(c, c.started_at.unwrap_or(now)).await?
        else {
            return Err(StoreError::NotFound);
        };
        let in_topic = self.in_topic(c, &mut binds);
        let n = binds.len();
        binds.push(SqlValue::Text(c.id.as_str().to_string()));
        binds.push(SqlValue::Int(i64::from(c.batches)));
        binds.push(SqlValue::Text(c.snapshot_after.clone().unwrap_or_default()));
        let insert = format!(
            "INSERT INTO campaign_recipients (campaign_id, contact_id, batch, status) \
             SELECT ${}, c.id, ${}, 'pending' {from} AND c.subscribed AND {in_topic} AND c.id > ${} \
             ORDER BY c.id LIMIT {SNAPSHOT_CHUNK} RETURNING contact_id",
            n + 1,
            n + 2,
            n + 3
        );
        let guard = format!(
            "SELECT 1 FROM campaigns WHERE id = $1 AND status = 'SENDING' AND NOT snapshot_done \
             AND batches = $2 AND COALESCE(snapshot_after, '') = $3{}",
            for_update(self.db().backend())
        );
        let batch = batch_job(&c.project_id, &c.id, c.batches, max_attempts, now)?;
        // An A/B test's winner is chosen after its duration (it queues the finish job then).
        let decide_at = c.content.ab.as_ref().map(|t| now + t.duration_ms());
        let finish = match decide_at {
            Some(at) => winner_job(&c.project_id, &c.id, max_attempts, at)?,
            None => finish_job(&c.project_id, &c.id, max_attempts, now)?,
        };
        let after = c.snapshot_after.clone().unwrap_or_default();
        let step = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let current: Option<i32> = sqlx::query_scalar(&guard)
                .bind(c.id.as_str())
                .bind(c.batches)
                .bind(&after)
                .fetch_optional(&mut *tx)
                .await?;
            if current.is_none() {
                tx.rollback().await?;
                return Ok(SnapshotStep::Stopped);
            }
            let taken: Vec<String> = bind_all!(sqlx::query_scalar(&insert), &binds)
                .fetch_all(&mut *tx)
                .await?;
            match taken.iter().max() {
                Some(last) => {
                    for (sql, variant, ids) in variant_updates(c, &taken) {
                        let mut q = sqlx::query(&sql).bind(c.id.as_str()).bind(variant);
                        for id in ids {
                            q = q.bind(id);
                        }
                        q.execute(&mut *tx).await?;
                    }
                    sqlx::query(
                        "UPDATE campaigns SET snapshot_after = $2, batches = batches + 1, \
                         recipient_count = recipient_count + $3, updated_at = $4 WHERE id = $1",
                    )
                    .bind(c.id.as_str())
                    .bind(last)
                    .bind(taken.len() as i64)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    tx.insert_job(&batch, now).await?;
                    tx.commit().await?;
                    SnapshotStep::Took(taken.len() as i64)
                }
                None => {
                    sqlx::query(
                        "UPDATE campaigns SET snapshot_done = TRUE, updated_at = $2, ab_decide_at = $3 WHERE id = $1",
                    )
                        .bind(c.id.as_str())
                        .bind(now)
                        .bind(decide_at)
                        .execute(&mut *tx)
                        .await?;
                    tx.insert_job(&finish, now).await?;
                    let result = serde_json::json!({ "recipients": c.recipient_count, "batches": c.batches });
                    if !tx.complete_job(lease, &result, now).await? {
                        tx.rollback().await?;
                        return Ok(SnapshotStep::Stopped);
                    }
                    tx.commit().await?;
                    SnapshotStep::Done
                }
            }
        });
        Ok(step)
    }
}
