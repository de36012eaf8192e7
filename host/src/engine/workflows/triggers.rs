//! The outbox consumer that starts and resumes executions.
//!
//! For each event of a contact: every enabled workflow of the project whose trigger is the
//! event's name starts an execution for the contact (the store deduplicates by (workflow,
//! event), so a re-delivered event starts nothing twice, and applies the re-entry rules), and
//! every execution of the contact waiting for that event name resumes on branch `event`
//! (unless its timeout committed first). Events that happened before a wait began do not
//! resume it.
//!
//! Events are matched when they are dispatched: an event tracked while no enabled workflow
//! names it starts nothing later (it stays in `events`); workflows start from the events
//! dispatched after they were enabled.

use std::collections::HashMap;

use futures::future::BoxFuture;
use serde_json::{Map, json};

use super::{StartError, WorkflowEngine};
use crate::domain::event::StoredEvent;
use crate::domain::ids::WorkflowId;
use crate::outbox::{ConsumerError, EventConsumer};
use crate::store::executions::{NotStarted, Triggered};

/// The consumer.
pub struct WorkflowTriggers {
    pub engine: WorkflowEngine,
}

impl WorkflowTriggers {
    /// Starts the workflows of `triggered` (the enabled workflows triggered by the event's
    /// name) for the event's contact and resumes the executions waiting for it.
    async fn handle_event(
        &self,
        event: &StoredEvent,
        triggered: &[Triggered],
    ) -> Result<(), ConsumerError> {
        let Some(contact) = &event.contact_id else {
            return Ok(());
        };
        let store = &self.engine.store;
        for w in triggered {
            let id = WorkflowId::from_trusted(w.id.clone());
            let graph = match store.workflow_graph(&event.project_id, &id).await {
                Ok(g) => g,
                // Deleted since the lookup.
                Err(crate::store::StoreError::NotFound) => continue,
                Err(e) => return Err(e.into()),
            };
            match self
                .engine
                .start(&graph, contact, Some(event), &Map::new())
                .await
            {
                Ok(_) => {}
                Err(StartError::Refused(
                    NotStarted::Duplicate | NotStarted::Active | NotStarted::AlreadyEntered,
                )) => {}
                Err(StartError::InvalidGraph(problems)) => {
                    // Enabling validates the graph; an edit since cannot break it (edits
                    // need a disabled workflow), so this is a workflow enabled before a
                    // step type went away. Starting it cannot succeed: skip it, loudly.
                    tracing::warn!(workflow_id = %id, problems = problems.len(), "an enabled workflow's graph cannot run; not started");
                }
                Err(StartError::Store(e)) => return Err(e.into()),
            }
        }
        for waiting in store
            .waiting_executions(&event.project_id, contact, &event.name)
            .await?
        {
            let Some(run) = &waiting.waiting_run_id else {
                continue;
            };
            if waiting
                .waiting_since
                .is_some_and(|since| event.created_at < since)
            {
                continue;
            }
            let output = json!({ "eventId": event.id.as_str(), "event": event.name });
            self.engine
                .resume(
                    &event.project_id,
                    &waiting.workflow_id,
                    &waiting.id,
                    run,
                    "event",
                    &output,
                    None,
                )
                .await?;
        }
        Ok(())
    }
}

impl EventConsumer for WorkflowTriggers {
    fn name(&self) -> &'static str {
        "workflows"
    }

    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>> {
        Box::pin(async move {
            if event.contact_id.is_none() {
                return Ok(());
            }
            let triggered = self
                .engine
                .store
                .triggered_workflows(&event.project_id, &event.name)
                .await?;
            self.handle_event(event, &triggered).await
        })
    }

    /// As [`EventConsumer::handle`] for each event in turn, reading the workflows an event name
    /// triggers once per project and name in the batch (a batch of `segment.*.entry` events, or
    /// a burst of one tracked event, shares a handful of names).
    fn handle_batch<'a>(
        &'a self,
        events: &'a [&'a StoredEvent],
    ) -> BoxFuture<'a, Vec<Result<(), ConsumerError>>> {
        Box::pin(async move {
            let mut triggered: HashMap<(&str, &str), Vec<Triggered>> = HashMap::new();
            let mut outcomes = Vec::with_capacity(events.len());
            for event in events {
                if event.contact_id.is_none() {
                    outcomes.push(Ok(()));
                    continue;
                }
                let key = (event.project_id.as_str(), event.name.as_str());
                let list = match triggered.entry(key) {
                    std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => match self
                        .engine
                        .store
                        .triggered_workflows(&event.project_id, &event.name)
                        .await
                    {
                        Ok(list) => slot.insert(list),
                        Err(e) => {
                            outcomes.push(Err(e.into()));
                            continue;
                        }
                    },
                };
                outcomes.push(self.handle_event(event, list).await);
            }
            outcomes
        })
    }
}
