//! Fair claims: which queues a worker takes its next work from.
//!
//! Every job waits in a queue, `<project id> <kind>` (see `migrations/*/0015_fair_job_queues.sql`),
//! and every queued email in its project's delivery queue (`store::delivery`). A worker with free
//! slots lists the queues that have queued work (a loose index scan: one seek per queue, however
//! long each queue is), keeps those with due work whose budget is not spent, and deals its slots
//! one at a time to them in turn, starting after the queue it served last. So a project with
//! 100,000 queued emails takes one slot per turn like a project with one, and campaign batches of
//! a project do not wait behind another project's jobs.
//!
//! A throttled queue (a project's deliveries past its per-second budget, counted in the shared
//! `send_windows` table) gets no more slots than its budget has left, and none once it is spent:
//! its emails stay queued, untouched, until the next window. Several instances plan on their own;
//! the budget is shared through the database, and each claim of a delivery batch takes its share
//! of it in the claim's own transaction, so a race between instances only leaves a slot idle.

use std::collections::HashMap;

pub use crate::store::jobs::{QueueHead, queue_of};

/// Queues a claim looks at, at most: the next ones after the queue served last, so that every
/// queue gets its turn however many there are.
pub const HEADS_PER_CLAIM: i64 = 256;

/// The queues a claim looks at: up to [`HEADS_PER_CLAIM`] after `cursor` in queue order, then
/// from the first one up to the cursor (wrapping), as `list(after, limit)` lists them.
pub async fn heads_after<F, Fut, E>(cursor: Option<&str>, list: F) -> Result<Vec<QueueHead>, E>
where
    F: Fn(String, i64) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<QueueHead>, E>>,
{
    let after = cursor.unwrap_or_default();
    let mut heads = list(after.to_string(), HEADS_PER_CLAIM).await?;
    let room = HEADS_PER_CLAIM - heads.len() as i64;
    if room > 0 && !after.is_empty() {
        let wrapped = list(String::new(), room).await?;
        heads.extend(wrapped.into_iter().filter(|h| h.queue.as_str() <= after));
    }
    Ok(heads)
}

/// Where a claim takes its jobs: how many from each queue, and the queue to start after next
/// time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// `(queue, jobs)`, in the order the slots were dealt.
    pub takes: Vec<(String, i64)>,
    /// The last queue dealt a slot in the first round: the next plan starts after it.
    pub cursor: Option<String>,
}

/// Deals `slots` over the `heads` that are due at `now`, one at a time in turn, starting with the
/// first queue after `cursor` (in queue order, wrapping). `left` is what a throttled queue's
/// budget has left this window (absent: no budget).
pub fn plan(
    heads: &[QueueHead],
    left: &HashMap<String, i64>,
    cursor: Option<&str>,
    slots: usize,
    now: i64,
) -> ClaimPlan {
    let mut due: Vec<(&str, i64)> = heads
        .iter()
        .filter(|h| h.next_run_at <= now)
        .map(|h| {
            (
                h.queue.as_str(),
                left.get(&h.queue).copied().unwrap_or(i64::MAX),
            )
        })
        .filter(|(_, budget)| *budget > 0)
        .collect();
    due.sort_by(|a, b| a.0.cmp(b.0));
    // Start after the cursor, wrapping.
    let start = cursor.map_or(0, |c| due.partition_point(|(q, _)| *q <= c));
    due.rotate_left(start);

    let mut taken = vec![0i64; due.len()];
    let mut cursor = None;
    let mut remaining = slots as i64;
    let mut round = 0;
    while remaining > 0 {
        let mut dealt = false;
        for (i, (queue, budget)) in due.iter().enumerate() {
            if remaining == 0 {
                break;
            }
            if taken[i] < *budget {
                taken[i] += 1;
                remaining -= 1;
                dealt = true;
                if round == 0 {
                    cursor = Some(queue.to_string());
                }
            }
        }
        if !dealt {
            break;
        }
        round += 1;
    }
    ClaimPlan {
        takes: due
            .iter()
            .zip(taken)
            .filter(|(_, n)| *n > 0)
            .map(|((q, _), n)| (q.to_string(), n))
            .collect(),
        cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(queue: &str, next_run_at: i64) -> QueueHead {
        QueueHead {
            queue: queue.into(),
            next_run_at,
        }
    }

    #[test]
    fn queue_names_split_into_project_and_kind() {
        let h = head(&queue_of(Some("prj_a"), "emails.deliver"), 0);
        assert_eq!(h.project(), Some("prj_a"));
        assert_eq!(h.kind(), "emails.deliver");
        let h = head(&queue_of(None, "domains.check"), 0);
        assert_eq!(h.project(), None);
        assert_eq!(h.kind(), "domains.check");
    }

    #[test]
    fn slots_go_round_robin_and_the_cursor_moves_on() {
        let heads = [head("a x", 0), head("b x", 0), head("c x", 0)];
        let none = HashMap::new();
        let p = plan(&heads, &none, None, 1, 10);
        assert_eq!(p.takes, vec![("a x".into(), 1)]);
        let p = plan(&heads, &none, p.cursor.as_deref(), 1, 10);
        assert_eq!(p.takes, vec![("b x".into(), 1)]);
        let p = plan(&heads, &none, p.cursor.as_deref(), 1, 10);
        assert_eq!(p.takes, vec![("c x".into(), 1)]);
        let p = plan(&heads, &none, p.cursor.as_deref(), 1, 10);
        assert_eq!(p.takes, vec![("a x".into(), 1)]);
        // More slots than queues: dealt in turn, several rounds.
        let p = plan(&heads, &none, Some("a x"), 7, 10);
        assert_eq!(
            p.takes,
            vec![("b x".into(), 3), ("c x".into(), 2), ("a x".into(), 2)]
        );
        assert_eq!(p.cursor.as_deref(), Some("a x"));
    }

    #[test]
    fn queues_not_due_or_out_of_budget_get_nothing() {
        let heads = [head("a x", 0), head("b x", 50), head("c x", 0)];
        let left = HashMap::from([("a x".to_string(), 0), ("c x".to_string(), 2)]);
        let p = plan(&heads, &left, None, 8, 10);
        assert_eq!(p.takes, vec![("c x".into(), 2)]);
        let p = plan(&heads, &left, None, 8, 100);
        assert_eq!(p.takes, vec![("b x".into(), 6), ("c x".into(), 2)]);
        assert_eq!(plan(&[], &left, None, 8, 100), ClaimPlan::default());
    }

    #[test]
    fn a_cursor_past_every_queue_wraps() {
        let heads = [head("a x", 0), head("b x", 0)];
        let p = plan(&heads, &HashMap::new(), Some("zz"), 1, 10);
        assert_eq!(p.takes, vec![("a x".into(), 1)]);
    }
}
