//! A project's topics (`topics`). A contact's choices are not here: they are the `topics`
//! column of its row (`{ "top_…": true | false }`), written with the rest of the contact.

use sqlx::FromRow;

use super::{Conflict, Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{ProjectId, TopicId};
use crate::domain::time::now_ms;
use crate::domain::topic::{DefaultSubscription, MAX_TOPICS, Topic, Visibility};

const COLUMNS: &str =
    "id, name, description, default_subscription, visibility, created_at, updated_at";

#[derive(FromRow)]
struct TopicRow {
    id: String,
    name: String,
    description: Option<String>,
    default_subscription: String,
    visibility: String,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<TopicRow> for Topic {
    type Error = StoreError;

    fn try_from(r: TopicRow) -> StoreResult<Topic> {
        let default_subscription = DefaultSubscription::parse(&r.default_subscription)
            .ok_or_else(|| StoreError::Corrupt(format!("topic {}: default", r.id)))?;
        let visibility = Visibility::parse(&r.visibility)
            .ok_or_else(|| StoreError::Corrupt(format!("topic {}: visibility", r.id)))?;
        Ok(Topic {
            id: TopicId::from_trusted(r.id),
            name: r.name,
            description: r.description,
            default_subscription,
            visibility,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// A topic to add.
#[derive(Clone, Debug)]
pub struct NewTopic {
    pub name: String,
    pub description: Option<String>,
    pub default_subscription: DefaultSubscription,
    pub visibility: Visibility,
}

/// A change to a topic: only the fields set change (`description: Some(None)` removes it).
/// The default subscription is fixed at creation.
#[derive(Clone, Debug, Default)]
pub struct TopicPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    pub visibility: Option<Visibility>,
}

impl Store {
    /// Adds a topic; [`StoreError::Conflict`] when the project has [`MAX_TOPICS`] already.
    #[tracing::instrument(level = "debug", skip(self, t))]
    pub async fn insert_topic(&self, project: &ProjectId, t: &NewTopic) -> StoreResult<Topic> {
        let id = TopicId::generate();
        // The count and the insert are one statement, so two creations cannot both pass it.
        let sql = format!(
            "INSERT INTO topics (id, project_id, name, description, default_subscription, \
             visibility, created_at, updated_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $7 \
             WHERE (SELECT COUNT(*) FROM topics WHERE project_id = $2) < $8 \
             RETURNING {COLUMNS}"
        );
        let row: Option<TopicRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(project.as_str())
                .bind(&t.name)
                .bind(t.description.as_deref())
                .bind(t.default_subscription.as_str())
                .bind(t.visibility.as_str())
                .bind(now_ms())
                .bind(MAX_TOPICS)
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::Conflict(Conflict::TooManyTopics))?
            .try_into()
    }

    /// A topic of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn topic(&self, project: &ProjectId, id: &TopicId) -> StoreResult<Topic> {
        let sql = format!("SELECT {COLUMNS} FROM topics WHERE project_id = $1 AND id = $2");
        let row: Option<TopicRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Every topic of a project (at most [`MAX_TOPICS`]), oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_topics(&self, project: &ProjectId) -> StoreResult<Vec<Topic>> {
        let sql = format!("SELECT {COLUMNS} FROM topics WHERE project_id = $1 ORDER BY id");
        let rows: Vec<TopicRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?
        });
        rows.into_iter().map(Topic::try_from).collect()
    }

    /// Applies a change to a topic and answers it.
    #[tracing::instrument(level = "debug", skip(self, patch))]
    pub async fn update_topic(
        &self,
        project: &ProjectId,
        id: &TopicId,
        patch: &TopicPatch,
    ) -> StoreResult<Topic> {
        let sql = format!(
            "UPDATE topics SET name = COALESCE($3, name), \
             description = CASE WHEN $4 THEN $5 ELSE description END, \
             visibility = COALESCE($6, visibility), updated_at = $7 \
             WHERE project_id = $1 AND id = $2 RETURNING {COLUMNS}"
        );
        let row: Option<TopicRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(patch.name.as_deref())
                .bind(patch.description.is_some())
                .bind(patch.description.clone().flatten())
                .bind(patch.visibility.map(Visibility::as_str))
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Removes a topic, unless a template or a campaign that is not finished (`DRAFT`,
    /// `SCHEDULED`, `SENDING`, `PAUSED`) names it: [`Conflict::TopicInUse`], with what names it.
    /// Contacts' choices for it stay in their rows and are ignored (a topic id is never reused).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_topic(&self, project: &ProjectId, id: &TopicId) -> StoreResult<()> {
        // One statement: the check and the delete see the same rows.
        let sql = "DELETE FROM topics WHERE project_id = $1 AND id = $2 \
                   AND NOT EXISTS (SELECT 1 FROM templates WHERE project_id = $1 AND topic_id = $2) \
                   AND NOT EXISTS (SELECT 1 FROM campaigns WHERE project_id = $1 AND topic_id = $2 \
                   AND status IN ('DRAFT', 'SCHEDULED', 'SENDING', 'PAUSED'))";
        let n = on_db_write!(self.db(), pool => {
            sqlx::query(sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            // Gone, or kept for what names it.
            self.topic(project, id).await?;
            return Err(StoreError::Conflict(Conflict::TopicInUse));
        }
        Ok(())
    }
}
