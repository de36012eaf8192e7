//! The periodic re-evaluation of tracked dynamic segments whose filters change with time alone
//! (`within`, `olderThan`, `triggeredWithin`, `notTriggeredWithin`): a contact can enter or
//! leave such a segment without any event or change of its own, which live re-evaluation never
//! sees. One `segments.reevaluate` job, shared by every instance of the database (a unique index
//! allows one queued or running), recomputes each of those segments with
//! [`Store::compute_segment`], so entries and exits fire exactly as `POST /segments/:id/compute`
//! fires them. It saves a checkpoint after each segment (a resumed run skips the ones done), then
//! completes and queues its next run `interval` later in one transaction. The application also
//! queues it at start and in its periodic maintenance whenever none is queued or running, so a
//! run that failed for good does not end the chain.
//!
//! [`Store::compute_segment`]: crate::store::Store::compute_segment

use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JobContext, JobError, JobHandler};
use crate::domain::time::now_ms;
use crate::store::StoreError;
use crate::store::jobs::NewJob;
use crate::store::segments::REEVALUATE_KIND;

/// The next run of the re-evaluation, `interval` from now.
pub fn next_reevaluation(interval: Duration, max_attempts: i32) -> NewJob {
    NewJob {
        kind: REEVALUATE_KIND.to_string(),
        project_id: None,
        payload: Value::Null,
        input: None,
        max_attempts,
        run_at: now_ms() + interval.as_millis().max(1000) as i64,
    }
}

/// Where a run got to: the last segment recomputed and the changes so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Progress {
    /// The id of the last segment recomputed (segments are taken in id order).
    after: Option<String>,
    /// Segments recomputed.
    segments: i64,
    /// Entries fired.
    added: i64,
    /// Exits fired.
    removed: i64,
}

/// Runs the periodic re-evaluation.
pub struct ReevaluateSegments {
    /// Time between the end of a run and the next.
    pub interval: Duration,
}

impl JobHandler for ReevaluateSegments {
    fn kinds(&self) -> &'static [&'static str] {
        &[REEVALUATE_KIND]
    }

    fn run(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), JobError>> {
        Box::pin(async move {
            let mut progress: Progress = ctx.checkpoint().unwrap_or_default();
            let segments = ctx.store.time_relative_segments().await?;
            let count = segments.len().max(1);
            for (i, listed) in segments.iter().enumerate() {
                if progress
                    .after
                    .as_deref()
                    .is_some_and(|after| listed.id.as_str() <= after)
                {
                    continue;
                }
                // Read again: it may have changed or gone since the list was read.
                let outcome = match ctx.store.segment(&listed.project_id, &listed.id).await {
                    Ok(segment) if segment.track_membership => {
                        ctx.store.compute_segment(&segment).await
                    }
                    Ok(_) => Err(StoreError::NotFound),
                    Err(err) => Err(err),
                };
                match outcome {
                    Ok(outcome) => {
                        progress.segments += 1;
                        progress.added += outcome.added;
                        progress.removed += outcome.removed;
                        if outcome.added + outcome.removed > 0 {
                            tracing::info!(segment_id = %listed.id, added = outcome.added, removed = outcome.removed, "time-relative segment re-evaluated");
                        }
                    }
                    Err(StoreError::NotFound) => {}
                    Err(err) => return Err(err.into()),
                }
                progress.after = Some(listed.id.as_str().to_string());
                let done = ((i + 1) * 100 / count) as i32;
                let checkpoint = serde_json::to_value(&progress)
                    .map_err(|e| JobError::Fail(format!("checkpoint: {e}")))?;
                if !ctx
                    .store
                    .checkpoint_job(&ctx.lease, &checkpoint, done)
                    .await?
                {
                    return Err(JobError::LeaseLost);
                }
            }
            let result = json!({
                "segments": progress.segments,
                "added": progress.added,
                "removed": progress.removed,
            });
            let next = next_reevaluation(self.interval, ctx.job.max_attempts);
            ctx.store
                .queue_singleton_job(&next, Some((&ctx.lease, &result)))
                .await?
                .map(|_| ())
                .ok_or(JobError::LeaseLost)
        })
    }
}
