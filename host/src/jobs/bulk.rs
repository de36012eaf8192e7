//! Bulk subscribe, unsubscribe and delete of up to 1,000 contacts by id. The whole batch and the
//! job's result are written in one transaction.

use futures::future::BoxFuture;
use serde_json::json;

use super::{JobContext, JobError, JobHandler};
use crate::store::bulk::BulkAction;
use crate::store::jobs::BulkPayload;

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
            let BulkPayload { contact_ids: ids } = ctx.payload()?;
            let done = ctx
                .store
                .bulk_contacts(&project, &ctx.lease, action, &ids, |outcome| {
                    json!({
                        "total": ids.len(),
                        "succeeded": outcome.found.len(),
                        "failed": outcome.not_found.len(),
                        "changed": outcome.changed,
                        "errors": outcome.not_found.iter()
                            .map(|id| json!({ "contactId": id, "error": "contact not found" }))
                            .collect::<Vec<_>>(),
                    })
                })
                .await?;
            done.map(|_| ()).ok_or(JobError::LeaseLost)
        })
    }
}
