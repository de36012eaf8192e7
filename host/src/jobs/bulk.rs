//! Bulk subscribe, unsubscribe and delete of up to 1,000 contacts by id. The whole batch and the
//! job's result are written in one transaction.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{JobContext, JobError, JobHandler};
use crate::store::bulk::BulkAction;

/// Job kind of a bulk subscribe.
pub const SUBSCRIBE: &str = "contacts.bulk-subscribe";
/// Job kind of a bulk unsubscribe.
pub const UNSUBSCRIBE: &str = "contacts.bulk-unsubscribe";
/// Job kind of a bulk delete.
pub const DELETE: &str = "contacts.bulk-delete";

/// Runs the three bulk kinds.
pub struct BulkContacts;

impl JobHandler for BulkContacts {
    fn kinds(&self) -> &'static [&'static str] {
        &[SUBSCRIBE, UNSUBSCRIBE, DELETE]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let project = ctx.project()?;
            let action = match ctx.job.kind.as_str() {
                SUBSCRIBE => BulkAction::Subscribe,
                UNSUBSCRIBE => BulkAction::Unsubscribe,
                DELETE => BulkAction::Delete,
                other => return Err(JobError::Fail(format!("unknown bulk kind {other}"))),
            };
            let ids: Vec<String> = ctx
                .job
                .payload
                .0
                .get("contactIds")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let done = ctx
                .store
                .bulk_contacts(
                    &project,
                    (&ctx.job.id, &ctx.worker),
                    action,
                    &ids,
                    |outcome| {
                        json!({
                            "total": ids.len(),
                            "succeeded": outcome.found.len(),
                            "failed": outcome.not_found.len(),
                            "changed": outcome.changed,
                            "errors": outcome.not_found.iter()
                                .map(|id| json!({ "contactId": id, "error": "contact not found" }))
                                .collect::<Vec<_>>(),
                        })
                    },
                )
                .await?;
            done.map(|_| ()).ok_or(JobError::LeaseLost)
        })
    }
}
