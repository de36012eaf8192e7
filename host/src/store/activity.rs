//! The activity feed: what happened to a project's emails (sent, delivered, opened, clicked,
//! bounced, complained, failed) and inbound mail, from the emails' history.

use sqlx::FromRow;

use super::{Store, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{ActivityId, ContactId, ProjectId};
use crate::domain::pagination::{Page, PageRequest};

/// One entry of the feed.
#[derive(Clone, Debug, FromRow)]
pub struct ActivityItem {
    /// Its id (`act_…`).
    pub id: String,
    /// What happened.
    pub kind: String,
    pub email_id: Option<String>,
    pub contact_id: Option<String>,
    /// The recipient.
    pub to_address: Option<String>,
    /// The email's subject.
    pub subject: Option<String>,
    /// Detail (the clicked link, the bounce reason, the provider's answer).
    pub detail: Option<String>,
    /// When.
    pub created_at: i64,
}

/// Counts by kind.
#[derive(Clone, Debug, Default, FromRow)]
pub struct KindCount {
    pub kind: String,
    /// How many.
    pub count: i64,
}

/// Emails handed to the transport in a period, and how many of them were opened (or clicked:
/// a click is an open too), clicked and bounced: distinct emails, so each is at most `sent`.
#[derive(Clone, Copy, Debug, Default, FromRow)]
pub struct EngagementCounts {
    /// Emails sent.
    pub sent: i64,
    /// Of those, opened or clicked.
    pub opened: i64,
    /// Of those, clicked.
    pub clicked: i64,
    /// Of those, bounced.
    pub bounced: i64,
}

/// Counts by day and kind.
#[derive(Clone, Debug, FromRow)]
pub struct DayKindCount {
    /// Days since the Unix epoch.
    pub day: i64,
    pub kind: String,
    /// How many.
    pub count: i64,
}

/// An email waiting in the queue.
#[derive(Clone, Debug, FromRow)]
pub struct UpcomingEmail {
    /// The email's id.
    pub id: String,
    /// The recipient.
    pub to_address: String,
    pub subject: String,
    /// When it was queued.
    pub created_at: i64,
}

/// An entry's address is its email's recipient, but an `inbound` entry's is its sender's (the
/// contact's), whose message may reply to no email.
const SELECT_ITEMS: &str = "SELECT a.id, a.kind, a.email_id, a.contact_id, \
     CASE WHEN a.kind = 'inbound' THEN c.email ELSE m.to_address END AS to_address, m.subject, \
     a.detail, a.created_at FROM email_events a LEFT JOIN emails m ON m.id = a.email_id \
     LEFT JOIN contacts c ON a.kind = 'inbound' AND c.id = a.contact_id";

impl Store {
    /// A page of the feed, newest first, optionally of one kind (`queued` entries are not part of
    /// the feed).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn activity(
        &self,
        project: &ProjectId,
        kind: Option<&str>,
        page: &PageRequest,
    ) -> StoreResult<Page<ActivityItem>> {
        let mut where_ = "a.project_id = $1 AND a.kind <> 'queued'".to_string();
        let mut n = 1;
        if kind.is_some() {
            n += 1;
            where_.push_str(&format!(" AND a.kind = ${n}"));
        }
        let mut sql = format!("{SELECT_ITEMS} WHERE {where_}");
        if page.after.is_some() {
            sql.push_str(&format!(" AND a.id < ${}", n + 1));
        }
        sql.push_str(&format!(" ORDER BY a.id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) FROM email_events a WHERE {where_}");
        let (rows, total): (Vec<ActivityItem>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str());
            if let Some(kind) = kind {
                q = q.bind(kind);
                c = c.bind(kind);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() { c.fetch_one(pool).await? } else { 0 };
            (rows, total)
        });
        Ok(Page::from_rows(rows, page, total, |a| a.id.as_str()))
    }

    /// Records a message received from `contact` in the feed, as `inbound`, under `id`, replying
    /// to `email` when it does; `detail` is its subject. Recording the same id again changes
    /// nothing (a receipt retried after a crash).
    #[tracing::instrument(level = "debug", skip(self, detail))]
    pub async fn record_inbound(
        &self,
        project: &ProjectId,
        id: &ActivityId,
        email: Option<&str>,
        contact: &ContactId,
        detail: &str,
        created_at: i64,
    ) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query(
                "INSERT INTO email_events (id, project_id, email_id, contact_id, kind, detail, created_at) \
                 VALUES ($1, $2, $3, $4, 'inbound', $5, $6) ON CONFLICT (id) DO NOTHING",
            )
            .bind(id.as_str())
            .bind(project.as_str())
            .bind(email)
            .bind(contact.as_str())
            .bind(detail)
            .bind(created_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Feed entries per kind since `since` (unix ms).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn activity_counts(
        &self,
        project: &ProjectId,
        since: i64,
    ) -> StoreResult<Vec<KindCount>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT kind, COUNT(*) AS count FROM email_events WHERE project_id = $1 AND created_at >= $2 \
                 AND kind <> 'queued' GROUP BY kind ORDER BY kind",
            )
            .bind(project.as_str())
            .bind(since)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Distinct emails sent since `since` (unix ms) and how many of them were opened, clicked
    /// and bounced.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn engagement_counts(
        &self,
        project: &ProjectId,
        since: i64,
    ) -> StoreResult<EngagementCounts> {
        let counts = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT COUNT(*) AS sent, \
                 COUNT(CASE WHEN opened_at IS NOT NULL OR clicked_at IS NOT NULL THEN 1 END) AS opened, \
                 COUNT(clicked_at) AS clicked, COUNT(bounced_at) AS bounced \
                 FROM emails WHERE project_id = $1 AND sent_at >= $2",
            )
            .bind(project.as_str())
            .bind(since)
            .fetch_one(pool)
            .await?
        });
        Ok(counts)
    }

    /// Feed entries per day and kind since `since` (unix ms).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn activity_daily(
        &self,
        project: &ProjectId,
        since: i64,
    ) -> StoreResult<Vec<DayKindCount>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT created_at / 86400000 AS day, kind, COUNT(*) AS count FROM email_events \
                 WHERE project_id = $1 AND created_at >= $2 AND kind <> 'queued' \
                 GROUP BY created_at / 86400000, kind \
                 ORDER BY day, kind",
            )
            .bind(project.as_str())
            .bind(since)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The kinds present in a project's feed.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn activity_kinds(&self, project: &ProjectId) -> StoreResult<Vec<String>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT DISTINCT kind FROM email_events WHERE project_id = $1 AND kind <> 'queued' ORDER BY kind",
            )
            .bind(project.as_str())
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Emails of a project still waiting to be handed to the transport, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn upcoming_emails(
        &self,
        project: &ProjectId,
        limit: u32,
    ) -> StoreResult<(Vec<UpcomingEmail>, i64)> {
        let (rows, total) = on_db!(self.db(), pool => {
            let rows: Vec<UpcomingEmail> = sqlx::query_as(&format!(
                "SELECT id, to_address, subject, created_at FROM emails \
                 WHERE project_id = $1 AND status = 'queued' ORDER BY id LIMIT {limit}"
            ))
            .bind(project.as_str())
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM emails WHERE project_id = $1 AND status = 'queued'",
            )
            .bind(project.as_str())
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        Ok((rows, total))
    }
}
