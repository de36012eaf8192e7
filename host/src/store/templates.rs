//! Templates: a project's subjects and bodies with their type and optional sender. A change is
//! one `UPDATE` that sets only the fields sent, so concurrent changes of different fields never
//! undo each other.

use sqlx::FromRow;
use sqlx::types::Json;

use super::{Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ProjectId, TemplateId, TopicId};
use crate::domain::locale::LocaleVariants;
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::template::fields::TemplateType;
use crate::domain::time::now_ms;

/// A stored template.
#[derive(Clone, Debug)]
pub struct Template {
    pub id: TemplateId,
    pub project_id: ProjectId,
    /// What it says and who sends it.
    pub fields: TemplateFields,
    /// Created, unix ms.
    pub created_at: i64,
    /// Last changed, unix ms.
    pub updated_at: i64,
}

/// The fields of a template a caller sets (validated).
#[derive(Clone, Debug)]
pub struct TemplateFields {
    pub name: String,
    /// The subject (a template).
    pub subject: String,
    /// The HTML body (a template).
    pub body: String,
    /// What it is for.
    pub template_type: TemplateType,
    /// The sender address.
    pub from_email: Option<EmailAddress>,
    /// The sender's display name.
    pub from_name: Option<String>,
    /// The reply-to address.
    pub reply_to: Option<EmailAddress>,
    /// Subject and body by language (`domain::locale`); empty when there are none.
    pub variants: LocaleVariants,
    /// The topic its mail is about (marketing mail that only the topic's subscribers receive).
    pub topic: Option<TopicId>,
}

#[derive(FromRow)]
struct TemplateRow {
    id: String,
    project_id: String,
    name: String,
    subject: String,
    body: String,
    #[sqlx(rename = "type")]
    template_type: String,
    from_email: Option<String>,
    from_name: Option<String>,
    reply_to: Option<String>,
    variants: Option<Json<LocaleVariants>>,
    created_at: i64,
    updated_at: i64,
    topic_id: Option<String>,
}

const COLUMNS: &str = "id, project_id, name, subject, body, type, from_email, from_name, reply_to, \
     variants, created_at, updated_at, topic_id";

/// Variants as stored: `NULL` for none.
fn stored(variants: &LocaleVariants) -> Option<Json<&LocaleVariants>> {
    (!variants.is_empty()).then_some(Json(variants))
}

impl TryFrom<TemplateRow> for Template {
    type Error = StoreError;

    fn try_from(r: TemplateRow) -> Result<Template, StoreError> {
        let template_type = TemplateType::parse(&r.template_type)
            .ok_or_else(|| StoreError::Corrupt(format!("template type `{}`", r.template_type)))?;
        Ok(Template {
            id: TemplateId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            fields: TemplateFields {
                name: r.name,
                subject: r.subject,
                body: r.body,
                template_type,
                from_email: r.from_email.map(EmailAddress::from_trusted),
                from_name: r.from_name,
                reply_to: r.reply_to.map(EmailAddress::from_trusted),
                variants: r.variants.map(|v| v.0).unwrap_or_default(),
                topic: r.topic_id.map(TopicId::from_trusted),
            },
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// The fields of a change (validated); `None` keeps a field, `Some(None)` clears an optional one.
#[derive(Clone, Debug, Default)]
pub struct TemplatePatch {
    /// A new name.
    pub name: Option<String>,
    /// A new subject.
    pub subject: Option<String>,
    /// A new body.
    pub body: Option<String>,
    /// A new type.
    pub template_type: Option<TemplateType>,
    /// A new sender address, or none.
    pub from_email: Option<Option<EmailAddress>>,
    /// A new display name, or none.
    pub from_name: Option<Option<String>>,
    /// A new reply-to address, or none.
    pub reply_to: Option<Option<EmailAddress>>,
    /// New variants (empty: none).
    pub variants: Option<LocaleVariants>,
    /// A new topic, or none.
    pub topic: Option<Option<TopicId>>,
}

impl TemplatePatch {
    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.subject.is_none()
            && self.body.is_none()
            && self.template_type.is_none()
            && self.from_email.is_none()
            && self.from_name.is_none()
            && self.reply_to.is_none()
            && self.variants.is_none()
            && self.topic.is_none()
    }
}

impl Store {
    /// Adds a template.
    #[tracing::instrument(level = "debug", skip(self, t))]
    pub async fn insert_template(
        &self,
        project: &ProjectId,
        t: &TemplateFields,
    ) -> StoreResult<Template> {
        let id = TemplateId::generate();
        let sql = format!(
            "INSERT INTO templates ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12) RETURNING {COLUMNS}"
        );
        let row: TemplateRow = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(id.as_str())
                .bind(project.as_str())
                .bind(&t.name)
                .bind(&t.subject)
                .bind(&t.body)
                .bind(t.template_type.as_str())
                .bind(t.from_email.as_ref().map(EmailAddress::as_str))
                .bind(t.from_name.as_deref())
                .bind(t.reply_to.as_ref().map(EmailAddress::as_str))
                .bind(stored(&t.variants))
                .bind(now_ms())
                .bind(t.topic.as_ref().map(TopicId::as_str))
                .fetch_one(pool)
                .await?
        });
        row.try_into()
    }

    /// A template of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn template(&self, project: &ProjectId, id: &TemplateId) -> StoreResult<Template> {
        let sql = format!("SELECT {COLUMNS} FROM templates WHERE project_id = $1 AND id = $2");
        let row: Option<TemplateRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// A page of a project's templates, newest first, optionally of one type.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_templates(
        &self,
        project: &ProjectId,
        template_type: Option<TemplateType>,
        page: &PageRequest,
    ) -> StoreResult<Page<Template>> {
        let mut from_where = String::from("FROM templates WHERE project_id = $1");
        let mut binds = vec![project.as_str()];
        if let Some(t) = template_type {
            from_where.push_str(" AND type = $2");
            binds.push(t.as_str());
        }
        let (rows, total): (Vec<TemplateRow>, i64) = self
            .newest_first_rows(COLUMNS, &from_where, &binds, page)
            .await?;
        let items = rows
            .into_iter()
            .map(Template::try_from)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page::from_rows(items, page, total, |t| t.id.as_str()))
    }

    /// Applies a change to a template and answers it.
    #[tracing::instrument(level = "debug", skip(self, patch))]
    pub async fn update_template(
        &self,
        project: &ProjectId,
        id: &TemplateId,
        patch: &TemplatePatch,
    ) -> StoreResult<Template> {
        if patch.is_empty() {
            return self.template(project, id).await;
        }
        let sql = format!(
            "UPDATE templates SET name = COALESCE($3, name), subject = COALESCE($4, subject), \
             body = COALESCE($5, body), type = COALESCE($6, type), \
             from_email = CASE WHEN $7 THEN $8 ELSE from_email END, \
             from_name = CASE WHEN $9 THEN $10 ELSE from_name END, \
             reply_to = CASE WHEN $11 THEN $12 ELSE reply_to END, \
             variants = CASE WHEN $13 THEN $14 ELSE variants END, \
             updated_at = $15, topic_id = CASE WHEN $16 THEN $17 ELSE topic_id END \
             WHERE project_id = $1 AND id = $2 RETURNING {COLUMNS}"
        );
        let from_email = patch
            .from_email
            .as_ref()
            .map(|f| f.as_ref().map(EmailAddress::as_str));
        let from_name = patch.from_name.as_ref().map(Option::as_deref);
        let reply_to = patch
            .reply_to
            .as_ref()
            .map(|r| r.as_ref().map(EmailAddress::as_str));
        let topic = patch
            .topic
            .as_ref()
            .map(|t| t.as_ref().map(TopicId::as_str));
        let row: Option<TemplateRow> = on_db_write!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(patch.name.as_deref())
                .bind(patch.subject.as_deref())
                .bind(patch.body.as_deref())
                .bind(patch.template_type.map(TemplateType::as_str))
                .bind(from_email.is_some())
                .bind(from_email.flatten())
                .bind(from_name.is_some())
                .bind(from_name.flatten())
                .bind(reply_to.is_some())
                .bind(reply_to.flatten())
                .bind(patch.variants.is_some())
                .bind(patch.variants.as_ref().and_then(stored))
                .bind(now_ms())
                .bind(topic.is_some())
                .bind(topic.flatten())
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// Removes a template.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_template(&self, project: &ProjectId, id: &TemplateId) -> StoreResult<()> {
        let n = on_db_write!(self.db(), pool => {
            sqlx::query("DELETE FROM templates WHERE project_id = $1 AND id = $2")
                .bind(project.as_str())
                .bind(id.as_str())
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
}
