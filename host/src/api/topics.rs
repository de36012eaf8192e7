//! `/topics`: what a project's contacts subscribe to one by one, beside the global `subscribed`
//! flag. A contact's state for a topic is its own choice when it made one, else the topic's
//! `defaultSubscription` (`OPT_IN`: subscribed until it opts out; `OPT_OUT`: subscribed only
//! once it opts in). `PUBLIC` topics are listed on the contact's preference page.

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::OneOf;
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::ids::{ProjectId, TopicId};
use crate::domain::segment::Violation;
use crate::domain::topic::{
    DefaultSubscription, Topic, Visibility, check_default, check_description, check_name,
    check_visibility,
};
use crate::store::topics::{NewTopic, TopicPatch};
use crate::store::{Conflict, StoreError};

/// The state of a contact that made no choice for a topic.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TopicDefault {
    /// Subscribed until the contact opts out.
    OptIn,
    /// Not subscribed until the contact opts in.
    OptOut,
}

impl From<DefaultSubscription> for TopicDefault {
    fn from(d: DefaultSubscription) -> TopicDefault {
        match d {
            DefaultSubscription::OptIn => TopicDefault::OptIn,
            DefaultSubscription::OptOut => TopicDefault::OptOut,
        }
    }
}

/// Whether the preference page lists a topic.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "UPPERCASE")]
pub enum TopicVisibility {
    /// Listed on the preference page.
    Public,
    /// Not listed: changed through the API only.
    Private,
}

impl From<Visibility> for TopicVisibility {
    fn from(v: Visibility) -> TopicVisibility {
        match v {
            Visibility::Public => TopicVisibility::Public,
            Visibility::Private => TopicVisibility::Private,
        }
    }
}

/// A topic.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct TopicBody {
    /// Its id (`top_…`).
    pub id: String,
    /// Its name, shown on the preference page.
    pub name: String,
    /// What it is about, shown on the preference page; null when none.
    #[oai(nullable)]
    pub description: Option<String>,
    /// The state of a contact that made no choice: `OPT_IN` subscribed, `OPT_OUT` not. Fixed
    /// at creation.
    pub default_subscription: TopicDefault,
    /// `PUBLIC` (listed on the preference page) or `PRIVATE`.
    pub visibility: TopicVisibility,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl From<Topic> for TopicBody {
    fn from(t: Topic) -> TopicBody {
        TopicBody {
            id: t.id.into_string(),
            name: t.name,
            description: t.description,
            default_subscription: t.default_subscription.into(),
            visibility: t.visibility.into(),
            created_at: Timestamp(t.created_at),
            updated_at: Timestamp(t.updated_at),
        }
    }
}

/// `POST /topics` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateTopic {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    pub description: Option<String>,
    /// `OPT_IN` (contacts are subscribed until they opt out) or `OPT_OUT` (subscribed only
    /// once they opt in), read in any case. Cannot be changed later.
    pub default_subscription: OneOf<TopicDefault>,
    /// `PUBLIC` or `PRIVATE` (default), read in any case.
    #[oai(skip_serializing_if_is_none)]
    pub visibility: Option<OneOf<TopicVisibility>>,
}

/// `PATCH /topics/:id` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateTopic {
    /// A new name.
    #[serde(default)]
    pub name: MaybeUndefined<String>,
    /// A new description, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    /// A new visibility.
    #[serde(default)]
    pub visibility: MaybeUndefined<OneOf<TopicVisibility>>,
    /// Refused: the default is fixed at creation, so that no contact's state changes without
    /// its own choice.
    #[serde(default)]
    pub default_subscription: MaybeUndefined<OneOf<TopicDefault>>,
}

/// Answer of `POST /topics`.
#[derive(ApiResponse)]
pub enum CreatedTopic {
    /// Created.
    #[oai(status = 201)]
    Created(Json<TopicBody>),
}

/// Answer of `DELETE /topics/:id`.
#[derive(ApiResponse)]
pub enum DeletedTopic {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

fn topic_id(id: &str) -> Result<TopicId, ApiError> {
    TopicId::parse(id).ok_or_else(|| ApiError::not_found("topic"))
}

fn invalid(violations: Vec<Violation>) -> Result<(), ApiError> {
    if violations.is_empty() {
        return Ok(());
    }
    Err(ApiError::validation(
        violations
            .into_iter()
            .map(|v| FieldError::new(v.field, v.code, v.message))
            .collect(),
    ))
}

async fn load(state: &AppState, project: &ProjectId, id: &str) -> Result<Topic, ApiError> {
    state
        .store()
        .topic(project, &topic_id(id)?)
        .await
        .map_err(|e| ApiError::from_store(e, "topic"))
}

/// The topics endpoints.
#[derive(Default)]
pub struct TopicsApi;

#[OpenApi(tag = "ApiTags::Topics")]
impl TopicsApi {
    /// List topics
    ///
    /// Every topic of the project (at most 100), oldest first.
    #[oai(path = "/topics", method = "get", operation_id = "listTopics")]
    async fn list(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Vec<TopicBody>>, ApiError> {
        let topics = state.store().list_topics(auth.0.project_id()).await?;
        Ok(Json(topics.into_iter().map(Into::into).collect()))
    }

    /// Create a topic
    ///
    /// `defaultSubscription` is the state of every contact that has made no choice for the
    /// topic: `OPT_IN` subscribed, `OPT_OUT` not. A project has at most 100 topics (409).
    #[oai(path = "/topics", method = "post", operation_id = "createTopic")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateTopic>,
    ) -> Result<CreatedTopic, ApiError> {
        let req = body.0;
        let mut violations = Vec::new();
        let name = check_name(&req.name).map_err(|v| violations.push(v)).ok();
        let description = match req.description.as_deref() {
            Some(d) => check_description(d).map_err(|v| violations.push(v)).ok(),
            None => Some(None),
        };
        let default = check_default(req.default_subscription.as_str())
            .map_err(|v| violations.push(v))
            .ok();
        let visibility = match &req.visibility {
            Some(v) => check_visibility(v.as_str())
                .map_err(|v| violations.push(v))
                .ok(),
            None => Some(Visibility::Private),
        };
        invalid(violations)?;
        let (Some(name), Some(description), Some(default_subscription), Some(visibility)) =
            (name, description, default, visibility)
        else {
            return Err(ApiError::internal("a checked field has no value"));
        };
        let new = NewTopic {
            name,
            description,
            default_subscription,
            visibility,
        };
        let topic = state
            .store()
            .insert_topic(auth.0.project_id(), &new)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(Conflict::TooManyTopics) => ApiError::conflict(
                    "the project has 100 topics, the most it may have; delete one first",
                ),
                other => ApiError::from_store(other, "topic"),
            })?;
        Ok(CreatedTopic::Created(Json(topic.into())))
    }

    /// Get a topic
    #[oai(path = "/topics/:id", method = "get", operation_id = "getTopic")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The topic's id.
        id: Path<String>,
    ) -> Result<Json<TopicBody>, ApiError> {
        Ok(Json(load(&state, auth.0.project_id(), &id).await?.into()))
    }

    /// Update a topic
    ///
    /// Changes only the fields sent: `name`, `description` (null removes it) and `visibility`.
    /// `defaultSubscription` is fixed at creation (422).
    #[oai(path = "/topics/:id", method = "patch", operation_id = "updateTopic")]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The topic's id.
        id: Path<String>,
        body: JsonBody<UpdateTopic>,
    ) -> Result<Json<TopicBody>, ApiError> {
        let project = auth.0.project_id();
        let topic = load(&state, project, &id).await?;
        let req = body.0;
        let mut violations = Vec::new();
        let name = match req.name {
            MaybeUndefined::Value(n) => check_name(&n).map_err(|v| violations.push(v)).ok(),
            MaybeUndefined::Null => {
                violations.push(not_null("name"));
                None
            }
            MaybeUndefined::Undefined => None,
        };
        let description = match req.description {
            MaybeUndefined::Value(d) => check_description(&d).map_err(|v| violations.push(v)).ok(),
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Undefined => None,
        };
        let visibility = match req.visibility {
            MaybeUndefined::Value(v) => check_visibility(v.as_str())
                .map_err(|v| violations.push(v))
                .ok(),
            MaybeUndefined::Null => {
                violations.push(not_null("visibility"));
                None
            }
            MaybeUndefined::Undefined => None,
        };
        if !req.default_subscription.is_undefined() {
            violations.push(Violation::new(
                "defaultSubscription",
                "immutable",
                "a topic's defaultSubscription is fixed at creation (it decides the state of \
                 every contact without a choice); create another topic instead",
            ));
        }
        invalid(violations)?;
        let patch = TopicPatch {
            name,
            description,
            visibility,
        };
        let topic = state
            .store()
            .update_topic(project, &topic.id, &patch)
            .await
            .map_err(|e| ApiError::from_store(e, "topic"))?;
        Ok(Json(topic.into()))
    }

    /// Delete a topic
    ///
    /// Contacts' choices for it are forgotten with it. 409 while a template or a campaign that
    /// is not finished (`DRAFT`, `SCHEDULED`, `SENDING`, `PAUSED`) names it.
    #[oai(path = "/topics/:id", method = "delete", operation_id = "deleteTopic")]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The topic's id.
        id: Path<String>,
    ) -> Result<DeletedTopic, ApiError> {
        state
            .store()
            .delete_topic(auth.0.project_id(), &topic_id(&id)?)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(c @ Conflict::TopicInUse) => ApiError::conflict(c.to_string()),
                other => ApiError::from_store(other, "topic"),
            })?;
        Ok(DeletedTopic::Deleted)
    }
}

fn not_null(field: &str) -> Violation {
    Violation::new(
        field,
        "not_null",
        format!("`{field}` cannot be null; leave it out to keep it"),
    )
}

/// A topic choice sent with a contact (`topics` of `POST`/`PATCH /contacts`, `/v1/send`,
/// `/v1/track`).
#[derive(Object, Deserialize, serde::Serialize, Clone, Debug)]
pub struct TopicSetting {
    /// The topic's id (`top_…`).
    pub id: String,
    /// Whether the contact is subscribed to it.
    pub subscribed: bool,
}

/// A contact's state for one topic of the project.
#[derive(Object, Clone, Debug)]
pub struct ContactTopic {
    /// The topic's id (`top_…`).
    pub id: String,
    /// The topic's name.
    pub name: String,
    /// The contact's state: its own choice when it made one, else the topic's default.
    pub subscribed: bool,
}

/// Every topic of a project with a contact's state for it (its choices: `Contact::topics`).
pub fn contact_topics(
    topics: &[Topic],
    choices: &std::collections::BTreeMap<String, bool>,
) -> Vec<ContactTopic> {
    topics
        .iter()
        .map(|t| ContactTopic {
            id: t.id.as_str().to_string(),
            name: t.name.clone(),
            subscribed: t.subscribed(choices),
        })
        .collect()
}

/// The topic choices a request sends under `field` (`topics`, `to[0].topics`…), each checked to
/// name a topic of the project: an unknown or malformed id is 422 at `<field>[i].id`. Reads the
/// project's topics only when choices are sent.
pub async fn parse_choices(
    state: &AppState,
    project: &ProjectId,
    field: &str,
    settings: Option<&[TopicSetting]>,
) -> Result<Vec<crate::domain::topic::TopicChoice>, ApiError> {
    if settings.is_none_or(|s| s.is_empty()) {
        return Ok(Vec::new());
    }
    let topics = state.store().list_topics(project).await?;
    choices_from(&topics, field, settings)
}

/// [`parse_choices`] against the project's topics read already.
pub fn choices_from(
    topics: &[Topic],
    field: &str,
    settings: Option<&[TopicSetting]>,
) -> Result<Vec<crate::domain::topic::TopicChoice>, ApiError> {
    let Some(settings) = settings.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut errors = Vec::new();
    let mut choices = Vec::with_capacity(settings.len());
    for (i, s) in settings.iter().enumerate() {
        match topics.iter().find(|t| t.id.as_str() == s.id.trim()) {
            Some(t) => choices.push(crate::domain::topic::TopicChoice {
                topic: t.id.clone(),
                default: t.default_subscription,
                subscribed: s.subscribed,
            }),
            None => errors.push(FieldError::new(
                format!("{field}[{i}].id"),
                "unknown_topic",
                format!(
                    "`{}` is not a topic of this project; GET /topics lists them",
                    s.id
                ),
            )),
        }
    }
    if errors.is_empty() {
        Ok(choices)
    } else {
        Err(ApiError::validation(errors))
    }
}

/// 422 at `field` unless `topic` is a topic of the project.
pub async fn require_topic(
    state: &AppState,
    project: &ProjectId,
    topic: &TopicId,
    field: &str,
) -> Result<Topic, ApiError> {
    match state.store().topic(project, topic).await {
        Ok(t) => Ok(t),
        Err(StoreError::NotFound) => Err(ApiError::invalid_field(
            field,
            "not_found",
            format!("there is no topic `{topic}` in this project; GET /topics lists them"),
        )),
        Err(e) => Err(e.into()),
    }
}
