//! `POST /templates/:id/preview`: a template rendered for one contact as a send would render it
//! (the contact's data, the variant its `data.locale` picks, its signed unsubscribe, subscribe
//! and preference links, a "view in browser" link), with nothing recorded and nothing sent. The
//! subject, body and variants of the request, when given, stand in for the saved ones, so that
//! an editor previews what it has not saved yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use super::templates::{Invalid, LocaleVariant, locale_variants, template_id};
use crate::domain::contact::{Contact, ContactUpsert};
use crate::domain::custom_data::DataPatch;
use crate::domain::email::EmailAddress;
use crate::domain::ids::{ContactId, EmailId, ProjectId};
use crate::domain::locale::{self, LocaleContent};
use crate::domain::template::fields::TemplateType;
use crate::domain::template::{CompiledTemplate, TemplateError};
use crate::services::sending::{NOT_IN_TOPIC_REASON, UNSUBSCRIBED_REASON, variables};
use crate::store::contacts::plan_upsert;

/// `POST /templates/:id/preview` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct PreviewTemplate {
    /// The contact to render for (`con_…`). Give it or `email`.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// An address to render for: its contact when there is one, else the new contact a send to
    /// it would create (no data yet). Give it or `contactId`.
    #[oai(nullable)]
    pub email: Option<String>,
    /// A language tag used instead of the contact's `data.locale`, as a send's one-off
    /// `data.locale` would be.
    #[oai(nullable)]
    pub locale: Option<String>,
    /// An unsaved subject, used instead of the template's.
    #[oai(nullable)]
    pub subject: Option<String>,
    /// An unsaved HTML body, used instead of the template's.
    #[oai(nullable)]
    pub body: Option<String>,
    /// Unsaved variants by language, used instead of all of the template's (`{}` for none).
    #[oai(nullable)]
    pub variants: Option<BTreeMap<String, LocaleVariant>>,
}

/// A template as one contact would receive it.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TemplatePreview {
    /// The rendered subject.
    pub subject: String,
    /// The rendered HTML body, without click tracking or the open pixel (the links are as
    /// written; a send adds tracking when the project turns it on).
    pub html: String,
    /// The plain-text alternative a send derives from the body.
    pub text: String,
    /// The variant used (its tag as written), or null for the template's own subject and body.
    #[oai(nullable)]
    pub locale: Option<String>,
    /// The contact rendered for; null when the address is not a contact yet.
    #[oai(nullable)]
    pub contact_id: Option<String>,
    /// The contact's address.
    pub email: String,
    /// Why a send of this template would not deliver to the contact (marketing mail to an
    /// unsubscribed contact, or to one not subscribed to the template's topic); null when it
    /// would.
    #[oai(nullable)]
    pub not_sent_reason: Option<String>,
}

/// The preview endpoint.
#[derive(Default)]
pub struct TemplatePreviewApi;

#[OpenApi(tag = "ApiTags::Templates")]
impl TemplatePreviewApi {
    /// Preview a template for a contact
    ///
    /// Renders the subject and body as a send to the contact would: with its data, the variant
    /// its `data.locale` (or `locale`) picks, its signed unsubscribe, subscribe and preference
    /// links and a "view in browser" link (which leads nowhere: no email exists). Nothing is
    /// recorded or sent. `subject`, `body` and `variants` preview unsaved changes; they are
    /// checked as on save (422 with the field, line and column). 404 for a template or contact
    /// of another project.
    #[oai(
        path = "/templates/:id/preview",
        method = "post",
        operation_id = "previewTemplate"
    )]
    async fn preview(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The template's id.
        id: Path<String>,
        body: JsonBody<PreviewTemplate>,
    ) -> Result<Json<TemplatePreview>, ApiError> {
        let project = auth.0.project_id();
        let req = body.0;
        let cpu = state.sending().cpu();
        let mut invalid = Invalid::default();
        let target = match (&req.contact_id, &req.email) {
            (Some(_), Some(_)) => {
                invalid.0.push(FieldError::new(
                    "email",
                    "invalid",
                    "give `contactId` or `email`, not both",
                ));
                None
            }
            (None, None) => {
                invalid.0.push(FieldError::new(
                    "contactId",
                    "required",
                    "name the contact to preview for with `contactId` or `email`",
                ));
                None
            }
            (Some(c), None) => Some(Target::Id(c.clone())),
            (None, Some(e)) => invalid.check_email(e).map(Target::Address),
        };
        if let Some(tag) = req.locale.as_deref().filter(|t| !locale::well_formed(t)) {
            invalid.0.push(FieldError::new(
                "locale",
                "invalid_locale",
                format!("`{tag}` is not a language tag; use a BCP 47 tag such as `fr` or `pt-BR`"),
            ));
        }
        invalid
            .content(cpu, req.subject.as_deref(), req.body.as_deref())
            .await;
        let draft_variants = req.variants.map(locale_variants);
        if let Some(v) = &draft_variants {
            invalid.variants(cpu, v).await;
        }
        invalid.done()?;
        let Some(target) = target else {
            return Err(ApiError::internal("a checked field has no value"));
        };

        let template = state
            .store()
            .template(project, &template_id(&id)?)
            .await
            .map_err(|e| ApiError::from_store(e, "template"))?
            .fields;
        let (contact, known) = contact_of(&state, project, target).await?;
        let topic = match &template.topic {
            Some(t) => Some(
                state
                    .store()
                    .topic(project, t)
                    .await
                    .map_err(|e| ApiError::from_store(e, "topic"))?,
            ),
            None => None,
        };

        // The content the contact gets: the variant of its language, else the template's own.
        let variants = draft_variants.unwrap_or(template.variants);
        let transient: Map<String, Value> = req
            .locale
            .map(|l| Map::from_iter([("locale".to_string(), Value::String(l))]))
            .unwrap_or_default();
        let picked = locale::of_contact(&transient, &contact.data)
            .and_then(|tag| locale::pick(tag, variants.0.keys().map(String::as_str)))
            .and_then(|i| variants.0.into_iter().nth(i));
        let (prefix, tag, content) = match picked {
            Some((tag, c)) => (format!("variants.{tag}."), Some(tag), c),
            None => (
                String::new(),
                None,
                LocaleContent {
                    subject: req.subject.unwrap_or(template.subject),
                    body: req.body.unwrap_or(template.body),
                },
            ),
        };
        let compiled = state
            .sending()
            .compile(project, content.subject, content.body)
            .await
            .map_err(|e| syntax_error(&prefix, &e))?;

        let links = state.links();
        let urls =
            links.contact_urls_about(contact.id.as_str(), topic.as_ref().map(|t| t.id.as_str()));
        let mut vars = variables(&contact, &transient, &urls);
        if let Value::Object(vars) = &mut vars {
            let view = links.view_url(EmailId::generate().as_str());
            vars.insert("viewInBrowserUrl".into(), Value::String(view));
        }
        let rendered = render(cpu, compiled, vars)
            .await
            .map_err(|e| syntax_error(&prefix, &e))?;

        let marketing = topic.is_some() || template.template_type == TemplateType::Marketing;
        let not_sent_reason = if !marketing {
            None
        } else if !contact.subscribed {
            Some(UNSUBSCRIBED_REASON)
        } else if topic
            .as_ref()
            .is_some_and(|t| !t.subscribed(&contact.topics))
        {
            Some(NOT_IN_TOPIC_REASON)
        } else {
            None
        };
        Ok(Json(TemplatePreview {
            subject: rendered.subject,
            html: rendered.html,
            text: rendered.text,
            locale: tag,
            contact_id: known.then(|| contact.id.into_string()),
            email: contact.email.to_string(),
            not_sent_reason: not_sent_reason.map(str::to_string),
        }))
    }
}

/// Who a preview is for, as asked.
enum Target {
    Id(String),
    Address(EmailAddress),
}

impl Invalid {
    /// An address, or its problem recorded against `email`.
    fn check_email(&mut self, email: &str) -> Option<EmailAddress> {
        EmailAddress::parse(email)
            .map_err(|e| {
                self.0
                    .push(FieldError::new("email", "invalid_email", e.to_string()))
            })
            .ok()
    }
}

/// The contact a preview renders for: the project's contact of that id (404 otherwise), or the
/// contact of that address as a send to it would leave it (a new one when there is none); and
/// whether it exists.
async fn contact_of(
    state: &AppState,
    project: &ProjectId,
    target: Target,
) -> Result<(Contact, bool), ApiError> {
    match target {
        Target::Id(id) => {
            let id = ContactId::parse(&id).ok_or_else(|| ApiError::not_found("contact"))?;
            state
                .store()
                .contact(project, &id)
                .await
                .map(|c| (c, true))
                .map_err(|e| ApiError::from_store(e, "contact"))
        }
        Target::Address(email) => {
            let current = state
                .store()
                .contacts_with_emails(project, std::slice::from_ref(&email))
                .await?
                .into_iter()
                .next();
            let upsert = ContactUpsert {
                email,
                subscribed: None,
                subscribed_default: false,
                resubscribe: true,
                data: DataPatch::default(),
                topics: Vec::new(),
            };
            let known = current.is_some();
            Ok((
                plan_upsert(project, &upsert, current).contact().clone(),
                known,
            ))
        }
    }
}

/// Renders on the CPU pool, within a message's limits.
async fn render(
    cpu: &crate::services::cpu::CpuPool,
    compiled: Arc<CompiledTemplate>,
    vars: Value,
) -> Result<crate::domain::template::Rendered, TemplateError> {
    cpu.run(move || compiled.render(&vars)).await
}

/// 422 for a template that does not compile or render, at its field (`body`,
/// `variants.fr.subject`).
fn syntax_error(prefix: &str, e: &TemplateError) -> ApiError {
    ApiError::invalid_field(
        &format!("{prefix}{}", e.field),
        "invalid_template",
        e.describe(),
    )
}
