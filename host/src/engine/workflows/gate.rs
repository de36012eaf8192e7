//! How many `WEBHOOK` calls may be under way at once on this instance: at most
//! `workflows.webhooks_per_project` of one project, and at most half of the job slots
//! (`jobs_concurrency`, at least one) of all projects together, so that step runs waiting on
//! slow servers never hold every slot and the other jobs (campaign batches, imports, other
//! projects' steps) keep the rest.
//!
//! The counts are this instance's, in memory: each instance protects its own job slots, and
//! with `n` instances a project may have up to `n × webhooks_per_project` calls under way. A
//! step run that finds no room is not waited for in its slot: its job goes back to the queue
//! for a moment ([`DEFER_MS`]) without counting an attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How long a step run that found no room for its call waits in the queue before it is
/// claimed again, in milliseconds (less up to a quarter, see [`crate::jobs::jittered`]).
pub const DEFER_MS: i64 = 500;

/// The counts of calls under way.
#[derive(Debug)]
pub struct WebhookGate {
    per_project: usize,
    total: usize,
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    projects: HashMap<String, usize>,
}

/// A call's place: it is given back when dropped.
#[derive(Debug)]
pub struct WebhookPermit {
    gate: Arc<WebhookGate>,
    project: String,
}

impl WebhookGate {
    /// At most `per_project` calls of a project, and half of `slots` (at least one) in all.
    pub fn new(per_project: usize, slots: usize) -> Arc<WebhookGate> {
        Arc::new(WebhookGate {
            per_project: per_project.max(1),
            total: (slots / 2).max(1),
            state: Mutex::new(Counts::default()),
        })
    }

    /// A place for one call of `project`, or `None` when the project or the instance is at its
    /// limit.
    pub fn try_enter(self: &Arc<Self>, project: &str) -> Option<WebhookPermit> {
        let mut counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mine = counts.projects.get(project).copied().unwrap_or(0);
        if counts.total >= self.total || mine >= self.per_project {
            return None;
        }
        counts.total += 1;
        counts.projects.insert(project.to_string(), mine + 1);
        Some(WebhookPermit {
            gate: self.clone(),
            project: project.to_string(),
        })
    }
}

impl Drop for WebhookPermit {
    fn drop(&mut self) {
        let mut counts = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.projects.get_mut(&self.project) {
            *n -= 1;
            if *n == 0 {
                counts.projects.remove(&self.project);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WebhookGate;

    #[test]
    fn a_project_and_the_instance_are_each_capped_and_places_come_back() {
        let gate = WebhookGate::new(2, 6);
        let a1 = gate.try_enter("a").unwrap();
        let _a2 = gate.try_enter("a").unwrap();
        assert!(gate.try_enter("a").is_none(), "the project's limit");
        let _b1 = gate.try_enter("b").unwrap();
        assert!(gate.try_enter("c").is_none(), "half of 6 slots");
        drop(a1);
        assert!(gate.try_enter("a").is_some());
        assert!(
            WebhookGate::new(4, 1).try_enter("a").is_some(),
            "at least one"
        );
    }
}
