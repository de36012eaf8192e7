//! The one usage shape of `/contacts/fields/:field/usage`, `/events/:eventName/usage` and
//! `/templates/:id/usage` (`docs/decisions.md`): `{ segments, campaigns, workflows }`, each a
//! list of `{ id, name, stepId? }`, flattened into each endpoint's answer.

use poem_openapi::Object;

use crate::store::usage::{Usage, UsageRef};

/// A segment, campaign or workflow that references the field, event or template.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct UsageRefBody {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The workflow step that references it; absent for segments, campaigns and a workflow's
    /// trigger.
    #[oai(skip_serializing_if_is_none)]
    pub step_id: Option<String>,
}

/// Where something is referenced.
#[derive(Object)]
pub struct UsageBody {
    /// Dynamic segments whose filter has a condition on it (never a template), newest first.
    pub segments: Vec<UsageRefBody>,
    /// `FILTERED` campaigns whose audience filter has a condition on it, newest first
    /// (campaigns carry their own content, so never for a template).
    pub campaigns: Vec<UsageRefBody>,
    /// Workflows, newest first: one entry without `stepId` when the workflow is triggered by
    /// the event, and one with `stepId` per step that uses it (`SEND_EMAIL` its template,
    /// `WAIT_FOR_EVENT` its event, `CONDITION` its filter, `UPDATE_CONTACT` the fields it sets).
    pub workflows: Vec<UsageRefBody>,
}

fn refs(list: Vec<UsageRef>) -> Vec<UsageRefBody> {
    list.into_iter()
        .map(|r| UsageRefBody {
            id: r.id,
            name: r.name,
            step_id: r.step_id,
        })
        .collect()
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> UsageBody {
        UsageBody {
            segments: refs(u.segments),
            campaigns: refs(u.campaigns),
            workflows: refs(u.workflows),
        }
    }
}
