//! The outbox consumer that starts and resumes executions.
//!
//! For each event of a contact: every enabled workflow of the project whose trigger is the
//! event's name starts an execution for the contact (the store deduplicates by (workflow,
//! event), so a re-delivered event starts nothing twice, and applies the re-entry rules), and
//! every execution of the contact waiting for that event name resumes on branch `event`
//! (unless its timeout committed first). Events that happened before a wait began do not
//! resume it.
//!
//! A dispatched batch is handled together: each (project, event name) and each workflow is read
//! once, every start of the batch is written in one transaction, and the per-contact look-up of
//! waiting executions runs only for the event names some execution of the project waits for.
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
use crate::store::StoreError;
use crate::store::executions::{NewExecution, NotStarted};
use crate::store::workflows::WorkflowGraph;

/// The consumer.
pub struct WorkflowTriggers {
    pub engine: WorkflowEngine,
}

/// What a batch reads once: the workflows an event name triggers, the workflows' graphs, and
/// whether any execution waits for an event name.
#[derive(Default)]
struct BatchReads {
    /// The ids of the enabled workflows each (project, event name) triggers.
    triggered: HashMap<(String, String), Vec<String>>,
    graphs: HashMap<String, Option<WorkflowGraph>>,
    waited_for: HashMap<(String, String), bool>,
}

impl WorkflowTriggers {
    /// The workflows `event` triggers and their graphs (read once per batch).
    async fn graphs_for(
        &self,
        reads: &mut BatchReads,
        event: &StoredEvent,
    ) -> Result<Vec<String>, StoreError> {
        let store = &self.engine.store;
        let key = (event.project_id.as_str().to_string(), event.name.clone());
        if !reads.triggered.contains_key(&key) {
            let ids = store
                .triggered_workflows(&event.project_id, &event.name)
                .await?;
            reads.triggered.insert(key.clone(), ids);
        }
        let ids = reads.triggered[&key].clone();
        for id in &ids {
            if reads.graphs.contains_key(id) {
                continue;
            }
            let wid = WorkflowId::from_trusted(id.clone());
            let graph = match store.workflow_graph(&event.project_id, &wid).await {
                Ok(g) => Some(g),
                // Deleted since it was listed.
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e),
            };
            reads.graphs.insert(id.clone(), graph);
        }
        Ok(ids)
    }

    /// Resumes the executions of the event's contact that wait for it.
    async fn resume_waiting(
        &self,
        reads: &mut BatchReads,
        event: &StoredEvent,
    ) -> Result<(), ConsumerError> {
        let Some(contact) = &event.contact_id else {
            return Ok(());
        };
        let store = &self.engine.store;
        let key = (event.project_id.as_str().to_string(), event.name.clone());
        let any = match reads.waited_for.get(&key) {
            Some(any) => *any,
            None => {
                let any = store
                    .any_waiting_for(&event.project_id, &event.name)
                    .await?;
                reads.waited_for.insert(key, any);
                any
            }
        };
        if !any {
            return Ok(());
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
                    Some("event"),
                    Some(&output),
                    None,
                )
                .await?;
        }
        Ok(())
    }

    /// Starts what `events` trigger (one transaction for all) and resumes what they end the
    /// wait of; one outcome per event.
    async fn handle_events(&self, events: &[&StoredEvent]) -> Vec<Result<(), ConsumerError>> {
        let mut reads = BatchReads::default();
        let mut outcomes: Vec<Result<(), ConsumerError>> = Vec::with_capacity(events.len());
        let mut triggered: Vec<Vec<String>> = Vec::with_capacity(events.len());
        for event in events {
            let ids = if event.contact_id.is_some() {
                match self.graphs_for(&mut reads, event).await {
                    Ok(ids) => ids,
                    Err(e) => {
                        outcomes.push(Err(e.into()));
                        triggered.push(Vec::new());
                        continue;
                    }
                }
            } else {
                Vec::new()
            };
            outcomes.push(Ok(()));
            triggered.push(ids);
        }
        let empty = Map::new();
        let mut starts: Vec<usize> = Vec::new();
        let mut new: Vec<NewExecution<'_>> = Vec::new();
        for (i, (event, ids)) in events.iter().zip(&triggered).enumerate() {
            let Some(contact) = &event.contact_id else {
                continue;
            };
            for id in ids {
                let Some(Some(graph)) = reads.graphs.get(id) else {
                    continue;
                };
                match self.engine.plan_start(graph, contact, Some(event), &empty) {
                    Ok(n) => {
                        starts.push(i);
                        new.push(n);
                    }
                    Err(StartError::InvalidGraph(problems)) => {
                        tracing::warn!(workflow_id = %id, problems = problems.len(), "an enabled workflow's graph cannot run; not started");
                    }
                    Err(StartError::Store(e)) => outcomes[i] = Err(e.into()),
                    Err(StartError::Refused(_)) => {}
                }
            }
        }
        match self.engine.store.start_executions(&new).await {
            Ok(started) => {
                let mut any = false;
                for (n, outcome) in new.iter().zip(started) {
                    match outcome {
                        Ok(row) => {
                            any = true;
                            tracing::info!(execution_id = %row.id, workflow_id = %n.workflow, contact_id = %n.contact, "workflow execution started");
                        }
                        // Refused by the re-entry rules, or its workflow or contact was
                        // deleted since the batch read them: nothing to start.
                        Err(
                            NotStarted::Duplicate
                            | NotStarted::Active
                            | NotStarted::AlreadyEntered
                            | NotStarted::WorkflowGone
                            | NotStarted::ContactGone,
                        ) => {}
                    }
                }
                if any {
                    self.engine.jobs.wake();
                }
            }
            Err(e) => {
                let message = e.to_string();
                for i in &starts {
                    outcomes[*i] = Err(ConsumerError::Failed(message.clone()));
                }
            }
        }
        for (i, event) in events.iter().enumerate() {
            if outcomes[i].is_err() {
                continue;
            }
            if let Err(e) = self.resume_waiting(&mut reads, event).await {
                outcomes[i] = Err(e);
            }
        }
        outcomes
    }
}

impl EventConsumer for WorkflowTriggers {
    fn name(&self) -> &'static str {
        "workflows"
    }

    fn handle<'a>(&'a self, event: &'a StoredEvent) -> BoxFuture<'a, Result<(), ConsumerError>> {
        Box::pin(async move {
            let mut outcomes = self.handle_events(std::slice::from_ref(&event)).await;
            outcomes.pop().unwrap_or(Ok(()))
        })
    }

    fn handle_batch<'a>(
        &'a self,
        events: &'a [&'a StoredEvent],
    ) -> BoxFuture<'a, Vec<Result<(), ConsumerError>>> {
        Box::pin(self.handle_events(events))
    }
}
