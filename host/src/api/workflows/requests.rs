//! The bodies of the `/workflows` requests that create and change workflows, steps and
//! transitions.

use poem_openapi::Object;
use poem_openapi::types::MaybeUndefined;
use serde::Deserialize;
use serde_json::Value;

use super::TriggerConfig;
use super::bodies::PositionBody;

/// `POST /workflows` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateWorkflow {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 2000 characters.
    #[oai(nullable)]
    pub description: Option<String>,
    /// The trigger: `{ eventName }` (or send `eventName` at the top level).
    #[oai(nullable)]
    pub trigger_config: Option<TriggerConfig>,
    /// The trigger event name, as an alternative to `triggerConfig.eventName`.
    #[oai(nullable)]
    pub event_name: Option<String>,
    /// Let a contact enter again once its previous execution is over (default false).
    #[oai(nullable)]
    pub allow_reentry: Option<bool>,
}

/// `PATCH /workflows/:id` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateWorkflow {
    /// A new name.
    #[serde(default)]
    pub name: MaybeUndefined<String>,
    /// A new description, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    /// Only `EVENT`.
    #[serde(default)]
    pub trigger_type: MaybeUndefined<String>,
    /// A new trigger event.
    #[serde(default)]
    pub trigger_config: MaybeUndefined<TriggerConfig>,
    /// A new trigger event name (alternative to `triggerConfig.eventName`).
    #[serde(default)]
    pub event_name: MaybeUndefined<String>,
    /// `true` checks the whole workflow and enables it (422 listing every problem otherwise);
    /// `false` disables it.
    #[serde(default)]
    pub enabled: MaybeUndefined<bool>,
    /// Whether a contact may enter again once its previous execution is over.
    #[serde(default)]
    pub allow_reentry: MaybeUndefined<bool>,
}

/// `POST /workflows/:id/steps` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateStep {
    /// `SEND_EMAIL`, `DELAY`, `WAIT_FOR_EVENT`, `CONDITION`, `WEBHOOK`, `UPDATE_CONTACT`,
    /// `EXIT` or `PLUGIN` (any case).
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub step_type: String,
    /// 1 to 200 characters.
    #[oai(nullable)]
    pub name: Option<String>,
    /// The step's configuration (a JSON object of at most 64 KB; default `{}`), checked by its
    /// step plugin.
    #[oai(nullable)]
    pub config: Option<Value>,
    /// Where it is drawn on the canvas.
    #[oai(nullable)]
    pub position: Option<PositionBody>,
}

/// `PATCH /workflows/:id/steps/:stepId` body: only the fields sent change.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateStep {
    /// A new name, or null for none.
    #[serde(default)]
    #[oai(nullable)]
    pub name: MaybeUndefined<String>,
    /// A new configuration, checked by the step's plugin (and, while the workflow is enabled,
    /// as enabling checks it).
    #[serde(default)]
    pub config: MaybeUndefined<Value>,
    /// Where it is drawn on the canvas, or null for nowhere. Allowed while the workflow is
    /// enabled.
    #[serde(default)]
    #[oai(nullable)]
    pub position: MaybeUndefined<PositionBody>,
}

/// `POST /workflows/:id/transitions` body.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateTransition {
    /// The step it leaves (of this workflow).
    pub from_step_id: String,
    /// The step it leads to (of this workflow).
    pub to_step_id: String,
    /// Required out of `CONDITION` (`yes`/`no`) and `WAIT_FOR_EVENT` (`event`/`timeout`)
    /// steps, refused out of the others.
    #[oai(nullable)]
    pub branch: Option<String>,
}
