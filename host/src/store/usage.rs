//! Where a contact field, an event name or a template is referenced: the segments, campaigns
//! and workflows (with the step) that would change meaning if it went away. One answer shape for
//! the three usage endpoints.
//!
//! A project has few segments and workflows, so their filters and step configs are read and
//! parsed here (filters with `herald-filter`, the same parser that evaluates them) rather than
//! matched as text in SQL:
//!
//! - a dynamic segment references a field when a condition of its filter (nested groups
//!   included) is on it: `data.plan` matches conditions on `data.plan` and on `data.plan.<more>`;
//!   `email`, `subscribed`, `createdAt` and `updatedAt` match themselves. It references an event
//!   when a condition is on `event.<name>`. Segments never reference templates.
//! - a workflow references an event by its trigger (a [`UsageRef`] without a step), by a
//!   `WAIT_FOR_EVENT` step's `config.eventName` and by a `CONDITION` step's `config.filter`; a
//!   field by a `CONDITION` filter or an `UPDATE_CONTACT` step that sets it (`config.data` holding
//!   the key path, or `config.subscribed`); a template by a `SEND_EMAIL` step's
//!   `config.templateId`.
//! - a `FILTERED` campaign references a field or an event as a segment does, by its
//!   `audienceFilter`. Campaigns carry their own subject and body, so they never reference a
//!   template.

use herald_filter::{Field, Filter, Scope};
use serde_json::Value;
use sqlx::types::Json;

use super::{Store, StoreResult, on_db};
use crate::domain::ids::ProjectId;
use crate::domain::workflow::StepType;

/// What usage is asked for.
#[derive(Clone, Copy, Debug)]
pub enum UsageOf<'a> {
    /// A contact field (`email`, `subscribed`, `createdAt`, `updatedAt` or `data.<path>`).
    Field(&'a Field),
    /// An event name.
    Event(&'a str),
    /// A template, by id.
    Template(&'a str),
}

/// One thing that references the field, event or template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRef {
    pub id: String,
    pub name: String,
    /// The workflow step that references it; `None` for a segment, a campaign, or a workflow's
    /// trigger.
    pub step_id: Option<String>,
}

/// Everything that references a field, event or template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Dynamic segments, newest first.
    pub segments: Vec<UsageRef>,
    /// `FILTERED` campaigns, newest first.
    pub campaigns: Vec<UsageRef>,
    /// Workflows, newest first; one entry for the trigger and one per referencing step, in step
    /// order.
    pub workflows: Vec<UsageRef>,
}

/// A row of a workflow and one of its steps (none for a workflow without steps).
type WorkflowStepRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<Json<Value>>,
);

impl Store {
    /// The segments, campaigns and workflows of a project that reference `of` (see the module
    /// docs for what counts).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn usage(&self, project: &ProjectId, of: UsageOf<'_>) -> StoreResult<Usage> {
        let mut usage = Usage::default();
        if !matches!(of, UsageOf::Template(_)) {
            for segment in self.list_segments(project).await? {
                if segment.filter()?.is_some_and(|f| filter_refers(&f, of)) {
                    usage.segments.push(UsageRef {
                        id: segment.id.into_string(),
                        name: segment.name,
                        step_id: None,
                    });
                }
            }
        }
        if !matches!(of, UsageOf::Template(_)) {
            for (id, name, filter) in self.campaign_filters(project).await? {
                let refers = herald_filter::parse(&filter, Scope::Contacts)
                    .is_ok_and(|f| filter_refers(&f, of));
                if refers {
                    usage.campaigns.push(UsageRef {
                        id,
                        name,
                        step_id: None,
                    });
                }
            }
        }
        let rows: Vec<WorkflowStepRow> = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT w.id, w.name, w.trigger_event, s.id, s.type, s.config FROM workflows w \
                 LEFT JOIN workflow_steps s ON s.workflow_id = w.id AND s.project_id = w.project_id \
                 WHERE w.project_id = $1 ORDER BY w.id DESC, s.id",
            )
            .bind(project.as_str())
            .fetch_all(pool)
            .await?
        });
        let mut last_workflow: Option<String> = None;
        for (id, name, trigger, step_id, step_type, config) in rows {
            if last_workflow.as_deref() != Some(id.as_str()) {
                last_workflow = Some(id.clone());
                if matches!(of, UsageOf::Event(event) if event == trigger) {
                    usage.workflows.push(UsageRef {
                        id: id.clone(),
                        name: name.clone(),
                        step_id: None,
                    });
                }
            }
            let (Some(step_id), Some(step_type)) = (step_id, step_type) else {
                continue;
            };
            let Some(step_type) = StepType::parse(&step_type) else {
                continue;
            };
            let config = config.map(|c| c.0).unwrap_or(Value::Null);
            if step_refers(step_type, &config, of) {
                usage.workflows.push(UsageRef {
                    id,
                    name,
                    step_id: Some(step_id),
                });
            }
        }
        Ok(usage)
    }
}

/// Whether a condition on `used` references `of`.
fn field_refers(used: &Field, of: UsageOf<'_>) -> bool {
    match (used, of) {
        (Field::Event(name), UsageOf::Event(event)) => name == event,
        (Field::Data(path), UsageOf::Field(Field::Data(prefix))) => path.starts_with(prefix),
        (
            Field::Email | Field::Subscribed | Field::CreatedAt | Field::UpdatedAt,
            UsageOf::Field(field),
        ) => used == field,
        _ => false,
    }
}

/// Whether a condition of `filter` (nested groups included) references `of`.
fn filter_refers(filter: &Filter, of: UsageOf<'_>) -> bool {
    filter
        .conditions()
        .iter()
        .any(|c| field_refers(&c.field, of))
}

/// Whether a workflow step of `step_type` with `config` references `of`. A config the step
/// could not run with (a filter that does not parse, a value of the wrong type) references
/// nothing.
fn step_refers(step_type: StepType, config: &Value, of: UsageOf<'_>) -> bool {
    match (step_type, of) {
        (StepType::SendEmail, UsageOf::Template(id)) => {
            config.get("templateId").and_then(Value::as_str) == Some(id)
        }
        (StepType::WaitForEvent, UsageOf::Event(event)) => {
            config.get("eventName").and_then(Value::as_str) == Some(event)
        }
        (StepType::Condition, UsageOf::Event(_) | UsageOf::Field(_)) => config
            .get("filter")
            .and_then(|f| herald_filter::parse(f, Scope::Workflow).ok())
            .is_some_and(|f| filter_refers(&f, of)),
        (StepType::UpdateContact, UsageOf::Field(Field::Subscribed)) => {
            config.get("subscribed").is_some_and(|v| !v.is_null())
        }
        (StepType::UpdateContact, UsageOf::Field(Field::Data(path))) => {
            let mut at = config.get("data");
            for key in path {
                at = at.and_then(Value::as_object).and_then(|o| o.get(key));
            }
            at.is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(path: &str) -> Field {
        Field::Data(path.split('.').map(str::to_string).collect())
    }

    fn filter(fields: &[&str]) -> Value {
        let conditions: Vec<Value> = fields
            .iter()
            .map(|f| {
                if f.starts_with("event.") && !f.starts_with("event.data.") {
                    json!({ "field": f, "operator": "triggered" })
                } else {
                    json!({ "field": f, "operator": "exists" })
                }
            })
            .collect();
        json!({ "logic": "OR", "groups": [
            { "filters": [ { "field": "email", "operator": "exists" } ],
              "conditions": { "logic": "AND", "groups": [ { "filters": conditions } ] } } ] })
    }

    #[test]
    fn a_data_field_is_referenced_by_itself_and_the_paths_below_it() {
        let f = herald_filter::parse(&filter(&["data.plan.tier"]), Scope::Contacts).unwrap();
        assert!(filter_refers(&f, UsageOf::Field(&data("plan"))));
        assert!(filter_refers(&f, UsageOf::Field(&data("plan.tier"))));
        assert!(!filter_refers(&f, UsageOf::Field(&data("plan.tier.x"))));
        assert!(!filter_refers(&f, UsageOf::Field(&data("pla"))));
        assert!(!filter_refers(&f, UsageOf::Field(&data("tier"))));
        // The nested group's sibling condition on `email`.
        assert!(filter_refers(&f, UsageOf::Field(&Field::Email)));
        assert!(!filter_refers(&f, UsageOf::Field(&Field::Subscribed)));
        assert!(!filter_refers(&f, UsageOf::Event("plan")));
    }

    #[test]
    fn events_are_referenced_by_event_conditions_only() {
        let f = herald_filter::parse(&filter(&["event.signup", "data.signup"]), Scope::Contacts)
            .unwrap();
        assert!(filter_refers(&f, UsageOf::Event("signup")));
        assert!(!filter_refers(&f, UsageOf::Event("sign")));
        assert!(!filter_refers(&f, UsageOf::Field(&data("event"))));
        assert!(!filter_refers(&f, UsageOf::Template("signup")));
    }

    #[test]
    fn steps_reference_what_their_config_names() {
        let send = json!({ "templateId": "tpl_1", "to": "contact" });
        assert!(step_refers(
            StepType::SendEmail,
            &send,
            UsageOf::Template("tpl_1")
        ));
        assert!(!step_refers(
            StepType::SendEmail,
            &send,
            UsageOf::Template("tpl_2")
        ));
        assert!(!step_refers(
            StepType::Webhook,
            &send,
            UsageOf::Template("tpl_1")
        ));

        let wait = json!({ "eventName": "paid", "timeoutSeconds": 60 });
        assert!(step_refers(
            StepType::WaitForEvent,
            &wait,
            UsageOf::Event("paid")
        ));
        assert!(!step_refers(
            StepType::WaitForEvent,
            &wait,
            UsageOf::Event("unpaid")
        ));

        // Workflow conditions may name the trigger's data and the context too.
        let condition = json!({ "filter": filter(&["event.paid", "data.plan", "event.data.amount", "context.x"]) });
        assert!(step_refers(
            StepType::Condition,
            &condition,
            UsageOf::Event("paid")
        ));
        assert!(step_refers(
            StepType::Condition,
            &condition,
            UsageOf::Field(&data("plan"))
        ));
        assert!(!step_refers(
            StepType::Condition,
            &condition,
            UsageOf::Field(&data("amount"))
        ));
        let broken = json!({ "filter": { "logic": "XOR" } });
        assert!(!step_refers(
            StepType::Condition,
            &broken,
            UsageOf::Field(&Field::Email)
        ));

        let update =
            json!({ "data": { "plan": { "tier": "gold" }, "gone": null }, "subscribed": false });
        for (path, referenced) in [
            ("plan", true),
            ("plan.tier", true),
            ("gone", true),
            ("plan.seats", false),
            ("tier", false),
        ] {
            assert_eq!(
                step_refers(
                    StepType::UpdateContact,
                    &update,
                    UsageOf::Field(&data(path))
                ),
                referenced,
                "{path}"
            );
        }
        assert!(step_refers(
            StepType::UpdateContact,
            &update,
            UsageOf::Field(&Field::Subscribed)
        ));
        assert!(!step_refers(
            StepType::UpdateContact,
            &json!({ "data": {} }),
            UsageOf::Field(&Field::Subscribed)
        ));
        assert!(!step_refers(
            StepType::UpdateContact,
            &update,
            UsageOf::Event("plan")
        ));
    }
}
