//! `/templates`: a project's email templates (subject and HTML body with Handlebars variables,
//! a type, and an optional sender), checked when saved so that sending never meets a broken one.

use std::collections::BTreeMap;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::{Deserialize, Serialize};

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::OneOf;
use super::state::AppState;
use super::timestamp::Timestamp;
use super::topics::require_topic;
use super::usage::UsageBody;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ProjectId, TemplateId, TopicId};
use crate::domain::locale::{LocaleContent, LocaleVariants};
use crate::domain::pagination::PageRequest;
use crate::domain::template::fields::{
    TemplateType, Violation, check_from_name, check_name, check_subject, copy_name,
};
use crate::services::cpu::CpuPool;
use crate::store::templates::{Template, TemplateFields, TemplatePatch};
use crate::store::usage::UsageOf;

/// What a template is for.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum TemplateKind {
    /// Mail a recipient's action causes (receipts, password resets).
    Transactional,
    /// Campaign and newsletter mail.
    Marketing,
}

impl From<TemplateType> for TemplateKind {
    fn from(t: TemplateType) -> TemplateKind {
        match t {
            TemplateType::Transactional => TemplateKind::Transactional,
            TemplateType::Marketing => TemplateKind::Marketing,
        }
    }
}

impl From<TemplateKind> for TemplateType {
    fn from(t: TemplateKind) -> TemplateType {
        match t {
            TemplateKind::Transactional => TemplateType::Transactional,
            TemplateKind::Marketing => TemplateType::Marketing,
        }
    }
}

/// A template.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TemplateBody {
    /// Its id (`tpl_…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The subject, a template rendered as plain text.
    pub subject: String,
    /// The HTML body, a template.
    pub body: String,
    /// `TRANSACTIONAL` or `MARKETING`.
    #[oai(rename = "type")]
    pub template_type: TemplateKind,
    /// The sender address used when a send names this template and no `from`.
    #[oai(nullable)]
    pub from: Option<String>,
    /// The sender's display name.
    #[oai(nullable)]
    pub from_name: Option<String>,
    /// The reply-to address.
    #[oai(nullable)]
    pub reply_to: Option<String>,
    /// Subject and body by language (BCP 47 tag); a send picks the contact's `data.locale`,
    /// falling back from `fr-CA` to `fr`, then to the template's own subject and body. `{}`
    /// when there are none.
    pub variants: BTreeMap<String, LocaleVariant>,
    /// The topic its mail is about (`top_…`): a send of it is marketing mail that only the
    /// topic's subscribers receive, and its unsubscribe link leaves that topic only; null when
    /// none.
    #[oai(nullable)]
    pub topic_id: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// One language's subject and body.
#[derive(Object, Deserialize, Serialize, Clone, Debug)]
pub struct LocaleVariant {
    /// The subject in this language (1 to 998 characters on one line; may use variables).
    pub subject: String,
    /// The HTML body in this language; not empty.
    pub body: String,
}

/// Variants as written in a request, as the domain holds them.
pub(super) fn locale_variants(v: BTreeMap<String, LocaleVariant>) -> LocaleVariants {
    LocaleVariants(
        v.into_iter()
            .map(|(tag, LocaleVariant { subject, body })| (tag, LocaleContent { subject, body }))
            .collect(),
    )
}

/// Variants as answered.
pub(super) fn locale_variant_bodies(v: LocaleVariants) -> BTreeMap<String, LocaleVariant> {
    v.0.into_iter()
        .map(|(tag, LocaleContent { subject, body })| (tag, LocaleVariant { subject, body }))
        .collect()
}

impl From<Template> for TemplateBody {
    fn from(t: Template) -> TemplateBody {
        let f = t.fields;
        TemplateBody {
            id: t.id.into_string(),
            name: f.name,
            subject: f.subject,
            body: f.body,
            template_type: f.template_type.into(),
            from: f.from_email.map(|e| e.to_string()),
            from_name: f.from_name,
            reply_to: f.reply_to.map(|e| e.to_string()),
            variants: locale_variant_bodies(f.variants),
            topic_id: f.topic.map(|t| t.into_string()),
            created_at: Timestamp(t.created_at),
            updated_at: Timestamp(t.updated_at),
        }
    }
}

/// `POST /templates` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateTemplate {
    /// 1 to 200 characters.
    pub name: String,
    /// 1 to 998 characters on one line; may use variables (`Hi {{firstName ?? "there"}}`).
    pub subject: String,
    /// HTML with variables; not empty.
    pub body: String,
    /// `TRANSACTIONAL` or `MARKETING` (read in any case).
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub template_type: OneOf<TemplateKind>,
    /// A sender address on a verified domain of the project.
    #[oai(nullable)]
    pub from: Option<String>,
    /// The sender's display name (1 to 200 characters).
    #[oai(nullable)]
    pub from_name: Option<String>,
    /// A reply-to address.
    #[oai(nullable)]
    pub reply_to: Option<String>,
    /// Subject and body by language: `{ "fr": { "subject": …, "body": … }, "pt-BR": … }`, at
    /// most 50, each checked like the template's own.
    #[oai(nullable)]
    pub variants: Option<BTreeMap<String, LocaleVariant>>,
    /// A topic of the project (`top_…`): sends of the template go only to the topic's
    /// subscribers, as marketing mail whose unsubscribe link leaves that topic only.
    #[oai(nullable)]
    pub topic_id: Option<String>,
}

/// `PATCH /templates/:id` body: only the fields sent change; `null` removes `from`, `fromName`
/// or `replyTo`.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateTemplate {
    /// A new name.
    #[serde(default)]
    pub name: MaybeUndefined<String>,
    /// A new subject.
    #[serde(default)]
    pub subject: MaybeUndefined<String>,
    /// A new body.
    #[serde(default)]
    pub body: MaybeUndefined<String>,
    /// A new type.
    #[oai(rename = "type")]
    #[serde(default, rename = "type")]
    pub template_type: MaybeUndefined<OneOf<TemplateKind>>,
    /// A new sender address on a verified domain, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub from: MaybeUndefined<String>,
    /// A new display name, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub from_name: MaybeUndefined<String>,
    /// A new reply-to address, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub reply_to: MaybeUndefined<String>,
    /// New variants by language, replacing all of them; `{}` or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub variants: MaybeUndefined<BTreeMap<String, LocaleVariant>>,
    /// A new topic, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub topic_id: MaybeUndefined<String>,
}

/// One page of templates.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TemplatePage {
    /// Templates, newest first.
    pub data: Vec<TemplateBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[oai(nullable)]
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Matching templates in all (first page only; 0 on later pages).
    pub total: i64,
}

/// `{ id }` of a new copy.
#[derive(Object)]
pub struct DuplicatedTemplate {
    /// The copy's id.
    pub id: String,
}

/// Where a template is used.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TemplateUsage {
    /// The template.
    pub template_id: String,
    /// The campaigns and workflow steps that send it (`segments` is always empty).
    #[oai(flatten)]
    pub usage: UsageBody,
}

/// Answer of `POST /templates`.
#[derive(ApiResponse)]
pub enum CreatedTemplate {
    /// Created.
    #[oai(status = 201)]
    Created(Json<TemplateBody>),
}

/// Answer of `POST /templates/:id/duplicate`.
#[derive(ApiResponse)]
pub enum CreatedCopy {
    /// The copy was created.
    #[oai(status = 201)]
    Created(Json<DuplicatedTemplate>),
}

/// Answer of `DELETE /templates/:id`.
#[derive(ApiResponse)]
pub enum DeletedTemplate {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

pub(super) fn template_id(id: &str) -> Result<TemplateId, ApiError> {
    TemplateId::parse(id).ok_or_else(|| ApiError::not_found("template"))
}

/// The invalid fields of a request, gathered so that one answer names them all.
#[derive(Default)]
pub(super) struct Invalid(pub(super) Vec<FieldError>);

impl Invalid {
    /// Keeps the value of a passed rule, or records the broken one against `field`.
    fn check<T>(&mut self, field: &str, result: Result<T, Violation>) -> Option<T> {
        result
            .map_err(|(code, message)| self.0.push(FieldError::new(field, code, message)))
            .ok()
    }

    /// A field that may not be null in a change.
    fn not_null<T>(&mut self, field: &str, value: MaybeUndefined<T>) -> Option<T> {
        match value {
            MaybeUndefined::Null => {
                self.0.push(FieldError::new(
                    field,
                    "required",
                    format!("`{field}` cannot be removed; send a new value or leave it out"),
                ));
                None
            }
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Value(v) => Some(v),
        }
    }

    /// Checks a subject and a body (either may be absent): their rules, then their syntax (on
    /// the CPU pool: compiling is the expensive part of a template request).
    pub(super) async fn content(
        &mut self,
        cpu: &CpuPool,
        subject: Option<&str>,
        body: Option<&str>,
    ) {
        let subject = subject.filter(|s| self.check("subject", check_subject(s)).is_some());
        let body = body.filter(|b| {
            let present = if b.is_empty() {
                Err(("required", "the body is empty".to_string()))
            } else {
                Ok(())
            };
            self.check("body", present).is_some()
        });
        let (subject, body) = (subject.map(str::to_string), body.map(str::to_string));
        let errors = cpu
            .run(move || crate::domain::template::check(subject.as_deref(), body.as_deref()))
            .await;
        for e in errors {
            self.0
                .push(FieldError::new(e.field, "invalid_template", e.describe()));
        }
    }

    /// Checks variants by language: their rules, then each one's syntax (on the CPU pool), each
    /// problem against its path (`variants.fr.body`).
    pub(super) async fn variants(&mut self, cpu: &CpuPool, variants: &LocaleVariants) {
        let problems = variants.violations("variants");
        let broken = !problems.is_empty();
        for (field, (code, message)) in problems {
            self.0.push(FieldError::new(field, code, message));
        }
        if broken {
            return;
        }
        let variants = variants.clone();
        let errors = cpu.run(move || variants.syntax_errors("variants")).await;
        for (field, message) in errors {
            self.0
                .push(FieldError::new(field, "invalid_template", message));
        }
    }

    pub(super) fn done(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.0))
        }
    }
}

/// A topic id as sent (its existence is checked after: `require_topic`).
fn topic_id(s: &str) -> Result<TopicId, Violation> {
    TopicId::parse(s.trim()).ok_or_else(|| {
        (
            "not_found",
            format!("there is no topic `{s}` in this project; GET /topics lists them"),
        )
    })
}

fn parse_type(s: &str) -> Result<TemplateType, Violation> {
    TemplateType::parse(s).ok_or_else(|| {
        (
            "invalid",
            format!("`{s}` is not a template type; use TRANSACTIONAL or MARKETING"),
        )
    })
}

fn address(s: &str) -> Result<EmailAddress, Violation> {
    EmailAddress::parse(s).map_err(|e| ("invalid_email", e.to_string()))
}

/// 422 `DOMAIN_NOT_VERIFIED` on `field` unless the address is on a domain that may send for the
/// project (the sender rule; templates hold both `from` and `replyTo` to it).
pub(super) async fn authorize_from(
    state: &AppState,
    project: &ProjectId,
    from: &EmailAddress,
    field: &str,
) -> Result<(), ApiError> {
    state
        .sending_domains()
        .authorize_sender(project, from)
        .await
        .map(|_| ())
        .map_err(|e| {
            let error = ApiError::from(e);
            let field = FieldError::new(field, "domain_not_verified", error.message.clone());
            error
                .with_errors(vec![field])
                .suggest("verify the domain with POST /domains and GET /domains/:id/verify")
        })
}

/// The templates endpoints.
#[derive(Default)]
pub struct TemplatesApi;

#[OpenApi(tag = "ApiTags::Templates")]
impl TemplatesApi {
    /// List templates
    ///
    /// Cursor-paginated, newest first, optionally of one type.
    #[oai(path = "/templates", method = "get", operation_id = "listTemplates")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// Page size, 1 to 100.
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        limit: Query<Option<u32>>,
        /// The `cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// Only templates of this type.
        #[oai(name = "type")]
        template_type: Query<Option<TemplateKind>>,
    ) -> Result<Json<TemplatePage>, ApiError> {
        let page = PageRequest::new(limit.0, cursor.0.as_deref(), |id| {
            TemplateId::parse(id).is_some()
        })?;
        let page = state
            .store()
            .list_templates(auth.0.project_id(), template_type.0.map(Into::into), &page)
            .await?;
        Ok(Json(TemplatePage {
            data: page.items.into_iter().map(Into::into).collect(),
            cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
        }))
    }

    /// Create a template
    ///
    /// The subject and body are parsed when saved: a syntax error is 422 with the field, line
    /// and column. A `from` must be on a verified domain of the project (422
    /// `DOMAIN_NOT_VERIFIED` otherwise).
    #[oai(path = "/templates", method = "post", operation_id = "createTemplate")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateTemplate>,
    ) -> Result<CreatedTemplate, ApiError> {
        let project = auth.0.project_id();
        let req = body.0;
        let mut invalid = Invalid::default();
        let name = invalid.check("name", check_name(&req.name));
        let template_type = invalid.check("type", parse_type(req.template_type.as_str()));
        invalid
            .content(state.sending().cpu(), Some(&req.subject), Some(&req.body))
            .await;
        let from_email = req.from.map(|f| invalid.check("from", address(&f)));
        let from_name = req
            .from_name
            .map(|n| invalid.check("fromName", check_from_name(&n)));
        let reply_to = req.reply_to.map(|r| invalid.check("replyTo", address(&r)));
        let variants = locale_variants(req.variants.unwrap_or_default());
        invalid.variants(state.sending().cpu(), &variants).await;
        let topic = req.topic_id.map(|t| invalid.check("topicId", topic_id(&t)));
        invalid.done()?;
        let (Some(name), Some(template_type)) = (name, template_type) else {
            return Err(ApiError::internal("a checked field has no value"));
        };
        let new = TemplateFields {
            name,
            subject: req.subject,
            body: req.body,
            template_type,
            from_email: from_email.flatten(),
            from_name: from_name.flatten(),
            reply_to: reply_to.flatten(),
            variants,
            topic: topic.flatten(),
        };
        if let Some(topic) = &new.topic {
            require_topic(&state, project, topic, "topicId").await?;
        }
        if let Some(from) = &new.from_email {
            authorize_from(&state, project, from, "from").await?;
        }
        if let Some(reply_to) = &new.reply_to {
            authorize_from(&state, project, reply_to, "replyTo").await?;
        }
        let template = state.store().insert_template(project, &new).await?;
        Ok(CreatedTemplate::Created(Json(template.into())))
    }

    /// Get a template
    #[oai(path = "/templates/:id", method = "get", operation_id = "getTemplate")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
    ) -> Result<Json<TemplateBody>, ApiError> {
        let template = state
            .store()
            .template(auth.0.project_id(), &template_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        Ok(Json(template.into()))
    }

    /// Update a template
    ///
    /// Changes only the fields sent; `null` removes `from`, `fromName` or `replyTo`. The same
    /// checks as on create apply to what is sent.
    #[oai(
        path = "/templates/:id",
        method = "patch",
        operation_id = "updateTemplate"
    )]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
        body: JsonBody<UpdateTemplate>,
    ) -> Result<Json<TemplateBody>, ApiError> {
        let project = auth.0.project_id();
        let id = template_id(&id)?;
        let req = body.0;
        let mut invalid = Invalid::default();
        let name = invalid
            .not_null("name", req.name)
            .and_then(|n| invalid.check("name", check_name(&n)));
        let subject = invalid.not_null("subject", req.subject);
        let body = invalid.not_null("body", req.body);
        invalid
            .content(state.sending().cpu(), subject.as_deref(), body.as_deref())
            .await;
        let template_type = invalid
            .not_null("type", req.template_type)
            .and_then(|t| invalid.check("type", parse_type(t.as_str())));
        let from_email = optional(req.from, |f| invalid.check("from", address(f)));
        let from_name = optional(req.from_name, |n| {
            invalid.check("fromName", check_from_name(n))
        });
        let reply_to = optional(req.reply_to, |r| invalid.check("replyTo", address(r)));
        let variants = match req.variants {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(LocaleVariants::default()),
            MaybeUndefined::Value(v) => Some(locale_variants(v)),
        };
        if let Some(v) = &variants {
            invalid.variants(state.sending().cpu(), v).await;
        }
        let topic = optional(req.topic_id, |t| invalid.check("topicId", topic_id(t)));
        invalid.done()?;
        // The template must exist before its sender is checked: 404 comes first.
        state
            .store()
            .template(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        if let Some(Some(from)) = &from_email {
            authorize_from(&state, project, from, "from").await?;
        }
        if let Some(Some(reply_to)) = &reply_to {
            authorize_from(&state, project, reply_to, "replyTo").await?;
        }
        if let Some(Some(topic)) = &topic {
            require_topic(&state, project, topic, "topicId").await?;
        }
        let patch = TemplatePatch {
            name,
            subject,
            body,
            template_type,
            from_email,
            from_name,
            reply_to,
            variants,
            topic,
        };
        let template = state
            .store()
            .update_template(project, &id, &patch)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        Ok(Json(template.into()))
    }

    /// Delete a template
    #[oai(
        path = "/templates/:id",
        method = "delete",
        operation_id = "deleteTemplate"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
    ) -> Result<DeletedTemplate, ApiError> {
        state
            .store()
            .delete_template(auth.0.project_id(), &template_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        Ok(DeletedTemplate::Deleted)
    }

    /// Duplicate a template
    ///
    /// Copies every field into a new template named `<name> (copy)` and answers its id.
    #[oai(
        path = "/templates/:id/duplicate",
        method = "post",
        operation_id = "duplicateTemplate"
    )]
    async fn duplicate(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
    ) -> Result<CreatedCopy, ApiError> {
        let project = auth.0.project_id();
        let original = state
            .store()
            .template(project, &template_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        let copy = TemplateFields {
            name: copy_name(&original.fields.name),
            ..original.fields
        };
        let copy = state.store().insert_template(project, &copy).await?;
        Ok(CreatedCopy::Created(Json(DuplicatedTemplate {
            id: copy.id.into_string(),
        })))
    }

    /// Where a template is used
    ///
    /// The campaigns and workflow steps (`SEND_EMAIL`) that send the template, in the usage
    /// shape shared with fields and events (its `segments` list is always empty).
    #[oai(
        path = "/templates/:id/usage",
        method = "get",
        operation_id = "templateUsage"
    )]
    async fn usage(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
    ) -> Result<Json<TemplateUsage>, ApiError> {
        let project = auth.0.project_id();
        let template = state
            .store()
            .template(project, &template_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?;
        let usage = state
            .store()
            .usage(project, UsageOf::Template(template.id.as_str()))
            .await?;
        Ok(Json(TemplateUsage {
            template_id: template.id.into_string(),
            usage: usage.into(),
        }))
    }
}

/// An optional field of a change: kept when absent, cleared by `null`, else checked by `check`
/// (`None` from `check` means it was invalid and recorded).
fn optional<T, U>(
    value: MaybeUndefined<T>,
    mut check: impl FnMut(&T) -> Option<U>,
) -> Option<Option<U>> {
    match value {
        MaybeUndefined::Undefined => None,
        MaybeUndefined::Null => Some(None),
        MaybeUndefined::Value(v) => check(&v).map(Some),
    }
}
