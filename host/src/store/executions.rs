//! Workflow executions and their step runs: starting one (deduplicated by trigger event, one
//! active per contact, re-entry rules), what a step run needs to run, committing a step's
//! outcome with the next step's job in one lease-guarded transaction, resuming a waiting
//! execution (by event or timeout, whichever commits first), cancelling, and the reads of the
//! executions API.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::{BeginWrite, bound_in_order, for_key_share, placeholders};
use super::emails::PreparedSend;
use super::jobs::{JobPayload, Lease, NewJob};
use super::statements::Statements;
use super::{Store, StoreError, StoreResult, on_db, on_db_write};
use crate::domain::contact::{Contact, ContactChange};
use crate::domain::event::{StoredEvent, SubscriptionSource};
use crate::domain::ids::{ContactId, ExecutionId, ProjectId, StepRunId, WorkflowId};
use crate::domain::pagination::{Page, PageRequest};
use crate::domain::time::now_ms;
use crate::domain::workflow::{execution_status as es, step_run_status as rs};

/// The job kind that runs one step run.
pub const STEP_KIND: &str = "workflow.step";
/// The job kind that resumes a `WAIT_FOR_EVENT` on branch `timeout`.
pub const TIMEOUT_KIND: &str = "workflow.timeout";

/// The payload of a `workflow.step` job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPayload {
    /// The step run to run.
    pub step_run_id: String,
    /// Its execution (so that cancelling can drop queued jobs).
    pub execution_id: String,
    /// Its workflow (so that cancelling all can drop queued jobs).
    pub workflow_id: String,
}

impl JobPayload for StepPayload {}

/// The payload of a `workflow.timeout` job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutPayload {
    /// The waiting step run.
    pub step_run_id: String,
    pub execution_id: String,
    pub workflow_id: String,
    /// The wait is a `DELAY` that is its workflow's last step: it ends the wait with no branch,
    /// keeping the step run's output, and completes the execution.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delay: bool,
}

impl JobPayload for TimeoutPayload {}

/// A transition out of a step, as the engine follows it.
#[derive(Clone, Debug, FromRow)]
pub struct Exit {
    pub to_step_id: String,
    pub branch: Option<String>,
    /// The type of the step it leads to.
    pub to_step_type: String,
    /// The config of the step it leads to.
    pub to_step_config: Json<Value>,
}

/// An execution as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct ExecutionRecord {
    pub id: String,
    pub workflow_id: String,
    pub contact_id: String,
    pub status: String,
    pub trigger_event_id: Option<String>,
    pub trigger: Option<Json<Value>>,
    pub context: Json<Map<String, Value>>,
    pub current_step_id: Option<String>,
    pub waiting_event: Option<String>,
    pub error: Option<String>,
    pub exit_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

const EXECUTION_COLUMNS: &str = "id, workflow_id, contact_id, status, trigger_event_id, trigger, context, \
     current_step_id, waiting_event, error, exit_reason, created_at, updated_at, finished_at";

/// A step run as the API shows it.
#[derive(Clone, Debug, FromRow)]
pub struct StepRunRecord {
    pub id: String,
    pub step_id: String,
    pub step_type: String,
    pub status: String,
    pub branch: Option<String>,
    pub input: Option<Json<Value>>,
    pub output: Option<Json<Value>>,
    pub error: Option<String>,
    pub attempts: i32,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Ids that one look-up of [`Store::start_executions`] names.
const LOOKUP_CHUNK: usize = 500;

/// Executions that one insert of [`Store::start_executions`] writes (8 values each).
const INSERT_CHUNK: usize = 200;

const RUN_COLUMNS: &str = "id, step_id, step_type, status, branch, input, output, error, attempts, \
     created_at, started_at, finished_at";

/// An event name of a contact: the name, how many times, the last time (unix ms).
pub type EventCount = (String, i64, i64);

/// A `PLUGIN` step of any project's workflow, with the plugin it names.
#[derive(Clone, Debug, FromRow, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStep {
    pub project_id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub enabled: bool,
    pub step_id: String,
    /// `config.plugin`; `None` when the config names none.
    pub plugin: Option<String>,
}

/// An active execution with its workflow's name.
#[derive(Clone, Debug, FromRow)]
pub struct ActiveExecution {
    pub id: String,
    pub workflow_id: String,
    pub workflow_name: String,
    pub contact_id: String,
    pub status: String,
    pub current_step_id: Option<String>,
    pub waiting_event: Option<String>,
    pub created_at: i64,
}

/// Everything a step job reads about its step run before running it.
#[derive(Clone, Debug, FromRow)]
pub struct RunContext {
    pub run_id: String,
    pub run_status: String,
    pub step_id: String,
    pub execution_id: String,
    pub project_id: String,
    pub workflow_id: String,
    pub contact_id: String,
    pub execution_status: String,
    pub trigger: Option<Json<Value>>,
    pub context: Json<Map<String, Value>>,
    /// The step's type and config; `None` when the step was deleted since.
    pub step_type: Option<String>,
    pub config: Option<Json<Value>>,
}

/// A step run to create, with the job that runs it.
#[derive(Clone, Debug)]
pub struct NextRun {
    pub run_id: StepRunId,
    pub step_id: String,
    pub step_type: String,
    /// The job (kind `workflow.step`).
    pub job: NewJob,
}

/// An execution to start.
pub struct NewExecution<'a> {
    pub id: ExecutionId,
    pub project: &'a ProjectId,
    pub workflow: &'a WorkflowId,
    pub contact: &'a ContactId,
    pub allow_reentry: bool,
    /// The triggering event's id (deduplicates starts), if any.
    pub trigger_event_id: Option<&'a str>,
    /// The triggering event (`{ name, data, createdAt }`), for the steps.
    pub trigger: Option<Value>,
    pub context: &'a Map<String, Value>,
    /// The entry step's run and job.
    pub entry: NextRun,
}

/// Why an execution did not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStarted {
    /// The contact has an active execution of the workflow.
    Active,
    /// The contact went through the workflow before and it does not allow re-entry.
    AlreadyEntered,
    /// An execution was already started from this trigger event.
    Duplicate,
    /// The workflow was deleted (by a concurrent request) before the start was written.
    WorkflowGone,
    /// The contact was deleted (by a concurrent request) before the start was written.
    ContactGone,
}

/// How a step run ends, written by [`Store::commit_steps`].
pub struct StepCommit<'a> {
    /// The job's lease: nothing is written when another worker owns the job now.
    pub lease: &'a Lease,
    /// The step run's outcome.
    pub run: RunOutcome<'a>,
    pub execution_id: &'a str,
    pub project_id: &'a str,
    /// The execution afterwards.
    pub execution_status: &'static str,
    pub context: &'a Map<String, Value>,
    /// The step it is at (the next one, or the waiting one).
    pub current_step: Option<&'a str>,
    /// The event waited for.
    pub waiting_event: Option<&'a str>,
    pub execution_error: Option<&'a str>,
    pub exit_reason: Option<&'a str>,
    /// The next step run to create.
    pub next: Option<&'a NextRun>,
    /// A `workflow.timeout` job to queue.
    pub timeout_job: Option<&'a NewJob>,
    /// Run `next` in this same job instead of queueing a job for it (it is due now): the job's
    /// payload becomes `next`'s and the claim stays.
    pub chain: bool,
    /// The writes of the effects of the step run and of those in `earlier`, in order, made in
    /// the same transaction as the rest (when the lease held and the execution is still
    /// active). A send's contact is checked first: it must still be as the round read it (a
    /// contact update among them is written after, and the send was rendered for the contact
    /// as that update leaves it).
    pub effects: &'a [EffectWrite],
    /// The step runs the job ran before this one in the same round, oldest first: each went on
    /// to the next at once. The first is the job's own step run, whose
    /// row exists; the others and this one are created by the commit, finished (only when the
    /// execution is still active: otherwise the first alone is recorded). Empty when this is
    /// the job's own step run.
    pub earlier: Vec<RunOutcome<'a>>,
}

/// A step run's outcome as it is recorded.
#[derive(Clone, Copy, Debug)]
pub struct RunOutcome<'a> {
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub step_type: &'a str,
    /// `COMPLETED`, `WAITING` or `FAILED`.
    pub status: &'static str,
    pub branch: Option<&'a str>,
    pub input: &'a Value,
    pub output: &'a Value,
    pub error: Option<&'a str>,
    pub attempts: i32,
    pub started_at: i64,
}

impl<'a> StepCommit<'a> {
    /// The outcome of the step run whose row exists: the job's own.
    fn first(&self) -> RunOutcome<'a> {
        self.earlier.first().copied().unwrap_or(self.run)
    }
}

/// A write a step's effect asks for, made in its round's commit ([`Store::commit_steps`]) and
/// keyed for idempotency: a retried step run finds the key and does not write again.
#[derive(Clone, Debug)]
pub enum EffectWrite {
    /// `SEND_EMAIL`: the send planned and rendered before the commit, recording `response`
    /// under the idempotency key `key`.
    SendEmail {
        send: Box<PreparedSend>,
        key: String,
        response: Value,
    },
    /// `UPDATE_CONTACT`: changes the contact (subscription events with source `workflow`),
    /// recording `response` under the idempotency key `key`. Nothing is written for a contact
    /// deleted meanwhile.
    UpdateContact {
        contact: ContactId,
        change: Box<ContactChange>,
        key: String,
        response: Value,
    },
}

impl EffectWrite {
    /// The order a round's commit writes effects in: sends first, then contact updates by
    /// contact.
    fn order(&self) -> (u8, &str) {
        match self {
            EffectWrite::SendEmail { .. } => (0, ""),
            EffectWrite::UpdateContact { contact, .. } => (1, contact.as_str()),
        }
    }

    /// Whether it queues emails (the delivery workers are woken after the commit).
    pub fn queues_email(&self) -> bool {
        matches!(self, EffectWrite::SendEmail { .. })
    }
}

/// The endpoint name recorded with the idempotency keys of a workflow's effects.
pub const EFFECT_ENDPOINT: &str = "workflow";

/// What [`Store::commit_steps`] did with one step run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    /// The job's lease was lost: nothing was written.
    LeaseLost,
    /// Written, and the job completed (a next step run, if any, has a job of its own).
    Done,
    /// Written, and the job now runs the next step run (see [`StepCommit::chain`]).
    Chained,
    /// Nothing was written: a contact its send was rendered for changed since (retry it).
    Stale,
}

/// A waiting execution to resume.
pub struct Resume<'a> {
    pub execution_id: &'a str,
    pub project_id: &'a str,
    /// The step run that waits.
    pub waiting_run_id: &'a str,
    /// `event` or `timeout`; `None` for a trailing `DELAY`'s end.
    pub branch: Option<&'a str>,
    /// The step run's output; `None` keeps the one it has.
    pub output: Option<&'a Value>,
    /// The step after the branch; `None` completes the execution.
    pub next: Option<&'a NextRun>,
    /// The timeout job's lease, when the timeout resumes it (completed with the resume).
    pub lease: Option<&'a Lease>,
}

/// A waiting execution of a contact.
#[derive(Clone, Debug, FromRow)]
pub struct Waiting {
    pub id: String,
    pub workflow_id: String,
    pub waiting_run_id: Option<String>,
    pub current_step_id: Option<String>,
    pub waiting_since: Option<i64>,
}

fn is_final(status: &str) -> bool {
    !es::ACTIVE.contains(&status)
}

impl Store {
    /// The transitions leaving a step, with the type of the step each leads to.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn transitions_from(&self, step: &str) -> StoreResult<Vec<Exit>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT t.to_step_id, t.branch, s.type AS to_step_type, s.config AS to_step_config \
                 FROM workflow_transitions t JOIN workflow_steps s ON s.id = t.to_step_id \
                 WHERE t.from_step_id = $1 ORDER BY t.id",
            )
            .bind(step)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The step a step run runs.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn run_step_id(&self, run: &str) -> StoreResult<Option<String>> {
        let id = on_db!(self.db(), pool => {
            sqlx::query_scalar("SELECT step_id FROM workflow_step_runs WHERE id = $1")
                .bind(run)
                .fetch_optional(pool)
                .await?
        });
        Ok(id)
    }

    /// The ids of the enabled workflows of a project that `event_name` triggers.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn triggered_workflows(
        &self,
        project: &ProjectId,
        event_name: &str,
    ) -> StoreResult<Vec<String>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT id FROM workflows WHERE project_id = $1 AND trigger_event = $2 \
                 AND enabled = TRUE ORDER BY id",
            )
            .bind(project.as_str())
            .bind(event_name)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Starts an execution at its entry step: the execution, the entry step run and its job in
    /// one transaction; or says why not.
    #[tracing::instrument(level = "debug", skip_all, fields(workflow_id = %new.workflow))]
    pub async fn start_execution(
        &self,
        new: &NewExecution<'_>,
    ) -> StoreResult<Result<ExecutionRecord, NotStarted>> {
        let mut started = self.start_executions(std::slice::from_ref(new)).await?;
        Ok(started.pop().unwrap_or(Err(NotStarted::Duplicate)))
    }

    /// [`Store::start_execution`] of many executions (the starts a batch of events triggers) in
    /// one transaction, in order: a later one sees the earlier ones, so two events of one batch
    /// start one execution of a workflow for a contact where the re-entry rules allow one.
    /// Answers one outcome per execution, in order.
    #[tracing::instrument(level = "debug", skip_all, fields(executions = starts.len()))]
    pub async fn start_executions(
        &self,
        starts: &[NewExecution<'_>],
    ) -> StoreResult<Vec<Result<ExecutionRecord, NotStarted>>> {
        if starts.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        let backend = self.db().backend();
        // What the database holds, read once per workflow of the batch (not once per start).
        let mut per_workflow: BTreeMap<&str, (bool, Vec<&str>, Vec<&str>)> = BTreeMap::new();
        for new in starts {
            let entry = per_workflow
                .entry(new.workflow.as_str())
                .or_insert_with(|| (new.allow_reentry, Vec::new(), Vec::new()));
            entry.1.extend(new.trigger_event_id);
            entry.2.push(new.contact.as_str());
        }
        let outcomes = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            // (workflow, trigger event) pairs that started an execution, and (workflow,
            // contact) pairs that bar a start: any execution, or an active one where the
            // workflow allows re-entry. The checks only read, so a start refused leaves the
            // others of the batch as they are.
            let mut triggers: HashSet<(String, String)> = HashSet::new();
            let mut contacts: HashSet<(String, String)> = HashSet::new();
            // The workflows and contacts that still exist, locked against deletion until the
            // commit: a start whose workflow or contact a concurrent request deleted since it was
            // read is refused for that reason instead of failing the batch on a foreign key.
            let lock = for_key_share(backend);
            let mut live: HashSet<String> = HashSet::new();
            let workflow_ids: Vec<&str> = per_workflow.keys().copied().collect();
            let contact_ids: Vec<&str> = {
                let unique: BTreeSet<&str> = starts.iter().map(|s| s.contact.as_str()).collect();
                unique.into_iter().collect()
            };
            for (table, ids) in [("workflows", &workflow_ids), ("contacts", &contact_ids)] {
                for chunk in ids.chunks(LOOKUP_CHUNK) {
                    let sql = format!(
                        "SELECT id FROM {table} WHERE id IN ({}){lock}",
                        placeholders(1, chunk.len())
                    );
                    let mut q = sqlx::query_scalar::<_, String>(&sql);
                    for id in chunk {
                        q = q.bind(*id);
                    }
                    live.extend(q.fetch_all(&mut *tx).await?);
                }
            }
            for (workflow, (reentry, trigger_ids, contact_ids)) in &per_workflow {
                let active = if *reentry { " AND status IN ('RUNNING', 'WAITING')" } else { "" };
                let lookups = [
                    ("trigger_event_id", trigger_ids, "", &mut triggers),
                    ("contact_id", contact_ids, active, &mut contacts),
                ];
                for (column, ids, only, found) in lookups {
                    for chunk in ids.chunks(LOOKUP_CHUNK) {
                        let sql = format!(
                            "SELECT DISTINCT {column} FROM workflow_executions \
                             WHERE workflow_id = $1 AND {column} IN ({}){only}",
                            placeholders(2, chunk.len())
                        );
                        let sql = bound_in_order(backend, sql);
                        let mut q = sqlx::query_scalar::<_, String>(&sql).bind(*workflow);
                        for id in chunk {
                            q = q.bind(*id);
                        }
                        for id in q.fetch_all(&mut *tx).await? {
                            found.insert((workflow.to_string(), id));
                        }
                    }
                }
            }
            // In order: a start sees the ones before it in the batch as started.
            let mut outcomes: Vec<Option<Result<ExecutionRecord, NotStarted>>> =
                Vec::with_capacity(starts.len());
            let mut accepted: Vec<usize> = Vec::new();
            for (i, new) in starts.iter().enumerate() {
                let workflow = new.workflow.as_str();
                if !live.contains(workflow) {
                    outcomes.push(Some(Err(NotStarted::WorkflowGone)));
                    continue;
                }
                if !live.contains(new.contact.as_str()) {
                    outcomes.push(Some(Err(NotStarted::ContactGone)));
                    continue;
                }
                if let Some(trigger) = new.trigger_event_id
                    && triggers.contains(&(workflow.to_string(), trigger.to_string()))
                {
                    outcomes.push(Some(Err(NotStarted::Duplicate)));
                    continue;
                }
                if !contacts.insert((workflow.to_string(), new.contact.as_str().to_string())) {
                    outcomes.push(Some(Err(if new.allow_reentry { NotStarted::Active } else { NotStarted::AlreadyEntered })));
                    continue;
                }
                if let Some(trigger) = new.trigger_event_id {
                    triggers.insert((workflow.to_string(), trigger.to_string()));
                }
                outcomes.push(None);
                accepted.push(i);
            }
            let mut inserted: HashMap<String, ExecutionRecord> = HashMap::new();
            for chunk in accepted.chunks(INSERT_CHUNK) {
                let sql = format!(
                    "INSERT INTO workflow_executions (id, project_id, workflow_id, contact_id, status, trigger_event_id, \
                     trigger, context, current_step_id, created_at, updated_at) \
                     VALUES {} ON CONFLICT DO NOTHING RETURNING {EXECUTION_COLUMNS}",
                    (0..chunk.len())
                        .map(|r| {
                            let f = 1 + r * 10;
                            format!(
                                "({}, 'RUNNING', {})",
                                placeholders(f, 4),
                                placeholders(f + 4, 6)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let sql = bound_in_order(backend, sql);
                let mut q = sqlx::query_as::<_, ExecutionRecord>(&sql);
                for &i in chunk {
                    let new = &starts[i];
                    q = q
                        .bind(new.id.as_str())
                        .bind(new.project.as_str())
                        .bind(new.workflow.as_str())
                        .bind(new.contact.as_str())
                        .bind(new.trigger_event_id)
                        .bind(new.trigger.as_ref().map(Json))
                        .bind(Json(new.context))
                        .bind(new.entry.step_id.as_str())
                        .bind(now)
                        .bind(now);
                }
                for row in q.fetch_all(&mut *tx).await? {
                    inserted.insert(row.id.clone(), row);
                }
            }
            // The entry step runs and their jobs, written together after the starts.
            let mut runs = Vec::new();
            let outcomes: Vec<Result<ExecutionRecord, NotStarted>> = outcomes
                .into_iter()
                .zip(starts)
                .map(|(outcome, new)| match outcome {
                    Some(refused) => refused,
                    None => match inserted.remove(new.id.as_str()) {
                        Some(row) => {
                            runs.push((new.project.as_str(), new.id.as_str(), &new.entry));
                            Ok(row)
                        }
                        // A concurrent start took the trigger or the contact's active slot
                        // (the insert wrote nothing for it).
                        None => Err(if new.trigger_event_id.is_some() {
                            NotStarted::Duplicate
                        } else {
                            NotStarted::Active
                        }),
                    },
                })
                .collect();
            insert_runs(&mut tx, &runs, now).await?;
            tx.insert_jobs(&runs.iter().map(|(_, _, run)| &run.job).collect::<Vec<_>>(), now).await?;
            tx.commit().await?;
            outcomes
        });
        Ok(outcomes)
    }

    /// Whether any execution of `project` waits for `event_name` (so that a batch of events of
    /// that name needs no per-contact look-up when none does).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn any_waiting_for(
        &self,
        project: &ProjectId,
        event_name: &str,
    ) -> StoreResult<bool> {
        let found: Option<i32> = on_db!(self.db(), pool => {
            sqlx::query_scalar(
                "SELECT 1 FROM workflow_executions WHERE project_id = $1 AND status = 'WAITING' \
                 AND waiting_event = $2 LIMIT 1",
            )
            .bind(project.as_str())
            .bind(event_name)
            .fetch_optional(pool)
            .await?
        });
        Ok(found.is_some())
    }

    /// What the step jobs of `runs` need about their step runs, in one read; a run that is
    /// gone (deleted with its workflow or contact) is left out.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = runs.len()))]
    pub async fn run_contexts(&self, runs: &[&str]) -> StoreResult<Vec<RunContext>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT r.id AS run_id, r.status AS run_status, r.step_id, r.execution_id, e.project_id, \
             e.workflow_id, e.contact_id, e.status AS execution_status, e.trigger, e.context, \
             s.type AS step_type, s.config \
             FROM workflow_step_runs r JOIN workflow_executions e ON e.id = r.execution_id \
             LEFT JOIN workflow_steps s ON s.id = r.step_id WHERE r.id IN ({})",
            placeholders(1, runs.len())
        );
        let sql = bound_in_order(self.db().backend(), sql);
        let rows = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for run in runs {
                q = q.bind(*run);
            }
            q.fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Every transition of each of `workflows`, by the step it leaves (a step with no
    /// transition is left out), in one read: a round follows its step runs' transitions and
    /// those of the steps it runs on to in memory.
    #[tracing::instrument(level = "debug", skip_all, fields(workflows = workflows.len()))]
    pub async fn transitions_of_workflows(
        &self,
        workflows: &[&str],
    ) -> StoreResult<std::collections::HashMap<String, Vec<Exit>>> {
        let mut out: std::collections::HashMap<String, Vec<Exit>> = Default::default();
        if workflows.is_empty() {
            return Ok(out);
        }
        let sql = format!(
            "SELECT t.from_step_id, t.to_step_id, t.branch, s.type AS to_step_type, s.config AS to_step_config \
             FROM workflow_transitions t JOIN workflow_steps s ON s.id = t.to_step_id \
             WHERE t.workflow_id IN ({}) ORDER BY t.id",
            placeholders(1, workflows.len())
        );
        let sql = bound_in_order(self.db().backend(), sql);
        type Row = (String, String, Option<String>, String, Json<Value>);
        let rows: Vec<Row> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql);
            for workflow in workflows {
                q = q.bind(*workflow);
            }
            q.fetch_all(pool).await?
        });
        for (from, to_step_id, branch, to_step_type, to_step_config) in rows {
            out.entry(from).or_default().push(Exit {
                to_step_id,
                branch,
                to_step_type,
                to_step_config,
            });
        }
        Ok(out)
    }

    /// The contact's event history by name (`name`, count, last time) and the ids of the
    /// segments it is a stored member of (static segments and tracked dynamic ones).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn contact_summary(
        &self,
        contact: &ContactId,
    ) -> StoreResult<(Vec<EventCount>, Vec<String>)> {
        let out = on_db!(self.db(), pool => {
            let events: Vec<EventCount> = sqlx::query_as(
                "SELECT name, count, last_at FROM event_summaries WHERE contact_id = $1 ORDER BY name",
            )
            .bind(contact.as_str())
            .fetch_all(pool)
            .await?;
            let segments: Vec<String> = sqlx::query_scalar(
                "SELECT segment_id FROM segment_members WHERE contact_id = $1 ORDER BY segment_id",
            )
            .bind(contact.as_str())
            .fetch_all(pool)
            .await?;
            (events, segments)
        });
        Ok(out)
    }

    /// Records a failed attempt of a step run (it stays `PENDING` for the retry).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn record_step_attempt(
        &self,
        run: &str,
        attempts: i32,
        error: &str,
    ) -> StoreResult<()> {
        on_db_write!(self.db(), pool => {
            sqlx::query("UPDATE workflow_step_runs SET attempts = $2, error = $3 WHERE id = $1 AND status = 'PENDING'")
                .bind(run)
                .bind(attempts)
                .bind(error)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Writes the outcome of each of `commits`, a step run of a batch of step jobs, in one
    /// transaction: for each, the step run's outcome, its execution advanced, the next step run
    /// with its job (or, with [`StepCommit::chain`], the current job handed on to it), a timeout
    /// job, and the current job completed, guarded by that job's own lease. A commit whose lease
    /// was lost writes nothing and is answered [`Committed::LeaseLost`], and the others are
    /// written all the same. When an execution stopped being active meanwhile (cancelled), its
    /// step run is recorded but the execution is left as it is, no next step is created and the
    /// job completes. Answers one outcome per commit, in order.
    ///
    /// Each table is written by one multi-row statement for the whole batch (jobs handed on,
    /// jobs completed, step runs, executions, new step runs, new jobs), not one per step run.
    #[tracing::instrument(level = "debug", skip_all, fields(step_runs = commits.len()))]
    pub async fn commit_steps(&self, commits: &[StepCommit<'_>]) -> StoreResult<Vec<Committed>> {
        let mut outcomes = vec![Committed::LeaseLost; commits.len()];
        if commits.is_empty() {
            return Ok(outcomes);
        }
        let now = now_ms();
        let waves = distinct_executions(commits);
        let backend = self.db().backend();
        let lock = super::dialect::for_update(backend);
        let by_key = super::dialect::lookups_by_key(backend);
        // Field types the effects recorded, remembered once the transaction commits.
        let mut learned: Vec<(String, Vec<(String, &'static str)>)> = Vec::new();
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if let Some(sql) = by_key {
                sqlx::query(sql).execute(&mut *tx).await?;
            }
            for wave in &waves {
                let of = |i: &usize| &commits[*i];
                // A send whose contact changed since it was rendered is not written: its step
                // run is retried (and rendered again), the others go on. The wave's sends are
                // checked with one select a project; the contacts stay locked until the commit
                // (PostgreSQL; SQLite's writer excludes the others anyway).
                let mut stale: HashSet<usize> = HashSet::new();
                let mut projects: Vec<&str> = wave.iter().map(|i| of(i).project_id).collect();
                projects.sort_unstable();
                projects.dedup();
                for project in projects {
                    let sends: Vec<(usize, &PreparedSend)> = wave
                        .iter()
                        .filter(|i| of(i).project_id == project)
                        .flat_map(|&i| {
                            of(&i).effects.iter().filter_map(move |e| match e {
                                EffectWrite::SendEmail { send, .. } => Some((i, &**send)),
                                EffectWrite::UpdateContact { .. } => None,
                            })
                        })
                        .collect();
                    if sends.is_empty() {
                        continue;
                    }
                    let project = ProjectId::from_trusted(project.to_string());
                    let checked: Vec<&PreparedSend> = sends.iter().map(|(_, s)| *s).collect();
                    let fresh = super::emails::sends_fresh_in(&mut tx, &project, &checked, lock).await?;
                    for ((i, _), fresh) in sends.iter().zip(fresh) {
                        if !fresh {
                            stale.insert(*i);
                        }
                    }
                }
                let mut fresh = Vec::with_capacity(wave.len());
                for &i in wave {
                    if stale.contains(&i) {
                        outcomes[i] = Committed::Stale;
                    } else {
                        fresh.push(i);
                    }
                }
                let wave = &fresh;
                // The lease checks write nothing for a lost lease, so the others of the wave go
                // on in the same transaction.
                let results: Vec<Value> = wave
                    .iter()
                    .map(|i| serde_json::json!({ "stepRunId": of(i).run.run_id, "status": of(i).run.status }))
                    .collect();
                let mut chained = Vec::new();
                let mut completed = Vec::new();
                for (k, i) in wave.iter().enumerate() {
                    match chains(of(i)) {
                        Some(next) => chained.push((of(i).lease, &next.job.payload)),
                        None => completed.push((of(i).lease, &results[k])),
                    }
                }
                let mut owned: HashSet<String> = tx.chain_jobs(&chained, now).await?.into_iter().collect();
                owned.extend(tx.complete_jobs(&completed, now).await?);
                let held: Vec<usize> = (0..wave.len())
                    .filter(|&k| owned.contains(of(&wave[k]).lease.job.as_str()))
                    .collect();
                if held.is_empty() {
                    continue;
                }
                let sql = bound_in_order(backend, step_runs_update_sql(held.len()));
                let mut q = sqlx::query(&sql);
                for &k in &held {
                    q = bind_outcome!(q, of(&wave[k]).first(), now);
                }
                q.execute(&mut *tx).await?;
                let sql = bound_in_order(backend, executions_update_sql(held.len()));
                let mut q = sqlx::query_scalar::<_, String>(&sql);
                for &k in &held {
                    let c = of(&wave[k]);
                    // A step run that waits (for an event, or a trailing `DELAY` for its time) is
                    // the one its execution's resume ends.
                    let waits = c.run.status == rs::WAITING;
                    q = q
                        .bind(c.execution_id)
                        .bind(c.execution_status)
                        .bind(Json(c.context))
                        .bind(c.current_step)
                        .bind(c.waiting_event)
                        .bind(waits.then_some(c.run.run_id))
                        .bind(waits.then_some(now))
                        .bind(c.execution_error)
                        .bind(c.exit_reason)
                        .bind(is_final(c.execution_status).then_some(now));
                }
                let advanced: HashSet<String> = q.bind(now).fetch_all(&mut *tx).await?.into_iter().collect();
                // The step runs run on to in memory, created finished.
                let finished: Vec<(&str, &str, RunOutcome<'_>)> = held
                    .iter()
                    .map(|&k| of(&wave[k]))
                    .filter(|c| !c.earlier.is_empty() && advanced.contains(c.execution_id))
                    .flat_map(|c| {
                        c.earlier[1..]
                            .iter()
                            .copied()
                            .chain([c.run])
                            .map(move |r| (c.project_id, c.execution_id, r))
                    })
                    .collect();
                if !finished.is_empty() {
                    let sql = bound_in_order(backend, finished_runs_insert_sql(finished.len()));
                    let mut q = sqlx::query(&sql);
                    for (project, execution, r) in &finished {
                        q = bind_outcome!(q, *r, now)
                            .bind(*execution)
                            .bind(*project)
                            .bind(r.step_id)
                            .bind(r.step_type)
                            .bind(now);
                    }
                    q.execute(&mut *tx).await?;
                }
                let mut runs = Vec::new();
                let mut jobs = Vec::new();
                let mut ended_chains = Vec::new();
                // Sends first (their contacts are locked already), then contact updates in
                // contact order (a stable sort keeps each contact's in their order), so that two
                // commits lock the contacts they change in the same order.
                let mut effects: Vec<(&str, &EffectWrite)> = held
                    .iter()
                    .map(|&k| of(&wave[k]))
                    .filter(|c| advanced.contains(c.execution_id))
                    .flat_map(|c| c.effects.iter().map(move |e| (c.project_id, e)))
                    .collect();
                effects.sort_by_key(|(_, e)| e.order());
                self.write_sends(&mut tx, &effects, now, &mut learned).await?;
                self.write_updates(&mut tx, &effects, lock, &mut learned).await?;
                for &k in &held {
                    let c = of(&wave[k]);
                    let i = wave[k];
                    outcomes[i] = Committed::Done;
                    if advanced.contains(c.execution_id) {
                        if let Some(next) = c.next {
                            runs.push((c.project_id, c.execution_id, next));
                            if chains(c).is_some() {
                                outcomes[i] = Committed::Chained;
                            } else {
                                jobs.push(&next.job);
                            }
                        }
                        jobs.extend(c.timeout_job);
                    } else if chains(c).is_some() {
                        // Cancelled meanwhile: nothing follows, so the job that was to carry on
                        // ends.
                        ended_chains.push((c.lease, &results[k]));
                    }
                }
                insert_runs(&mut tx, &runs, now).await?;
                tx.insert_jobs(&jobs, now).await?;
                tx.complete_jobs(&ended_chains, now).await?;
            }
            tx.commit().await?;
        });
        for (project, types) in &learned {
            let types: Vec<(&str, &str)> = types.iter().map(|(k, t)| (k.as_str(), *t)).collect();
            self.known_fields.remember(project, &types);
        }
        Ok(outcomes)
    }

    /// Writes the sends among a round's `effects` inside its commit, all in one statement per
    /// table ([`super::emails::write_sends_in`]); the field types they record are added to
    /// `learned`.
    async fn write_sends<DB>(
        &self,
        tx: &mut sqlx::Transaction<'_, DB>,
        effects: &[(&str, &EffectWrite)],
        now: i64,
        learned: &mut Vec<(String, Vec<(String, &'static str)>)>,
    ) -> StoreResult<()>
    where
        DB: sqlx::Database,
        for<'t> sqlx::Transaction<'t, DB>: Statements,
        for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let mut owned = Vec::new();
        for (project, effect) in effects {
            if let EffectWrite::SendEmail {
                send,
                key,
                response,
            } = effect
            {
                let types = self.known_fields.unknown(project, &send.types());
                let idempotency = super::idempotency::IdempotentWrite {
                    key: key.as_str(),
                    endpoint: EFFECT_ENDPOINT,
                    request_hash: key.as_str(),
                    status: 200,
                    response,
                };
                owned.push((
                    ProjectId::from_trusted(project.to_string()),
                    send,
                    types,
                    idempotency,
                ));
            }
        }
        if owned.is_empty() {
            return Ok(());
        }
        let sends: Vec<super::emails::SendWrite<'_>> = owned
            .iter()
            .map(
                |(project, send, types, idempotency)| super::emails::SendWrite {
                    project,
                    send,
                    types,
                    idempotency: Some(idempotency),
                },
            )
            .collect();
        if !super::emails::write_sends_in(tx, &sends, now).await? {
            // A new recipient's address was taken by a concurrent write since the check: the
            // whole round is retried (it finds the contact then).
            return Err(StoreError::Conflict(super::Conflict::Busy));
        }
        for (project, _, types, _) in &owned {
            if !types.is_empty() {
                let types = types.iter().map(|(k, t)| (k.to_string(), *t)).collect();
                learned.push((project.to_string(), types));
            }
        }
        Ok(())
    }

    /// Makes the `UPDATE_CONTACT` writes among a round's `effects` inside its commit, in their
    /// order, with one statement of each kind for those of a project
    /// ([`super::contacts::change_contacts_in`]; a send is written by [`Store::write_sends`]:
    /// nothing here); the field types they record are added to `learned`. Nothing is written
    /// for a contact deleted meanwhile.
    async fn write_updates<DB>(
        &self,
        tx: &mut sqlx::Transaction<'_, DB>,
        effects: &[(&str, &EffectWrite)],
        lock: &str,
        learned: &mut Vec<(String, Vec<(String, &'static str)>)>,
    ) -> StoreResult<()>
    where
        DB: sqlx::Database,
        for<'t> sqlx::Transaction<'t, DB>: Statements,
        for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'r> super::contacts::ContactRow: sqlx::FromRow<'r, DB::Row>,
    {
        let mut projects: Vec<&str> = Vec::new();
        for (project, effect) in effects {
            if matches!(effect, EffectWrite::UpdateContact { .. }) && !projects.contains(project) {
                projects.push(project);
            }
        }
        for project in projects {
            let updates: Vec<(&ContactId, &ContactChange, &String, &Value)> = effects
                .iter()
                .filter(|(p, _)| *p == project)
                .filter_map(|(_, effect)| match effect {
                    EffectWrite::UpdateContact {
                        contact,
                        change,
                        key,
                        response,
                    } => Some((contact, &**change, key, response)),
                    EffectWrite::SendEmail { .. } => None,
                })
                .collect();
            // Each replays the response recorded with its effect.
            let responders: Vec<_> = updates
                .iter()
                .map(|(_, _, _, response)| {
                    let recorded = (*response).clone();
                    move |_: &Contact, _: Option<&StoredEvent>| recorded.clone()
                })
                .collect();
            let changes: Vec<super::contacts::GroupChange<'_>> = updates
                .iter()
                .zip(&responders)
                .map(
                    |((contact, change, key, _), respond)| super::contacts::GroupChange {
                        id: contact,
                        change,
                        effects: super::contacts::Effects {
                            source: SubscriptionSource::Workflow,
                            reason: None,
                            event: None,
                            idempotency: Some(super::idempotency::IdempotentWrite {
                                key,
                                endpoint: EFFECT_ENDPOINT,
                                request_hash: key,
                                status: 200,
                                response: respond as &super::contacts::Respond,
                            }),
                        },
                        types: self
                            .known_fields
                            .unknown(project, &super::contacts::field_types(&change.data.set)),
                    },
                )
                .collect();
            let project_id = ProjectId::from_trusted(project.to_string());
            let types =
                super::contacts::change_contacts_in(tx, &project_id, &changes, lock).await?;
            if !types.is_empty() {
                learned.push((project.to_string(), types));
            }
        }
        Ok(())
    }

    /// Marks a step run and its execution failed because the step cannot run at all (its
    /// step was deleted, its contact is gone), completing the job.
    #[tracing::instrument(level = "debug", skip(self, lease))]
    pub async fn fail_execution(
        &self,
        lease: &Lease,
        run: &str,
        execution: &str,
        error: &str,
        attempts: i32,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let ok = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &serde_json::json!({ "stepRunId": run, "status": rs::FAILED }), now).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query("UPDATE workflow_step_runs SET status = 'FAILED', error = $2, finished_at = $3, attempts = $4 WHERE id = $1 AND status = 'PENDING'")
                .bind(run)
                .bind(error)
                .bind(now)
                .bind(attempts)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE workflow_executions SET status = 'FAILED', error = $2, updated_at = $3, finished_at = $3, \
                 waiting_event = NULL, waiting_run_id = NULL WHERE id = $1 AND status IN ('RUNNING', 'WAITING')",
            )
            .bind(execution)
            .bind(error)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            true
        });
        Ok(ok)
    }

    /// Completes a job that had nothing to do (its step run already ran, its execution ended),
    /// marking a pending step run of an ended execution `SKIPPED`.
    #[tracing::instrument(level = "debug", skip(self, lease))]
    pub async fn skip_step_run(&self, lease: &Lease, run: &str) -> StoreResult<bool> {
        let now = now_ms();
        let ok = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &serde_json::json!({ "stepRunId": run, "status": rs::SKIPPED }), now).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query(
                "UPDATE workflow_step_runs SET status = 'SKIPPED', finished_at = $2 WHERE id = $1 AND status = 'PENDING' \
                 AND execution_id IN (SELECT id FROM workflow_executions WHERE status NOT IN ('RUNNING', 'WAITING'))",
            )
            .bind(run)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            true
        });
        Ok(ok)
    }

    /// The executions of a contact waiting for `event_name`, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn waiting_executions(
        &self,
        project: &ProjectId,
        contact: &ContactId,
        event_name: &str,
    ) -> StoreResult<Vec<Waiting>> {
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, workflow_id, waiting_run_id, current_step_id, waiting_since FROM workflow_executions \
                 WHERE project_id = $1 AND contact_id = $2 AND waiting_event = $3 AND status = 'WAITING' ORDER BY id",
            )
            .bind(project.as_str())
            .bind(contact.as_str())
            .bind(event_name)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Resumes a waiting execution along `branch`, if it still waits on that step run:
    /// completes the waiting step run, creates the next one with its job (or completes the
    /// execution), and completes the timeout job when that is what resumed it. `Ok(false)` when
    /// the other of event and timeout won, or the execution ended (nothing written but the
    /// timeout job's completion). `None` when the timeout job's lease was lost (nothing
    /// written).
    #[tracing::instrument(level = "debug", skip_all, fields(execution_id = %r.execution_id, branch = r.branch.unwrap_or_default()))]
    pub async fn resume_execution(&self, r: &Resume<'_>) -> StoreResult<Option<bool>> {
        let now = now_ms();
        let (status, finished) = match r.next {
            Some(_) => (es::RUNNING, None),
            None => (es::COMPLETED, Some(now)),
        };
        let resumed = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if let Some(lease) = r.lease
                && !tx.complete_job(lease, &serde_json::json!({ "stepRunId": r.waiting_run_id }), now).await?
            {
                tx.rollback().await?;
                return Ok(None);
            }
            let n = sqlx::query(
                "UPDATE workflow_executions SET status = $3, current_step_id = $4, waiting_event = NULL, \
                 waiting_run_id = NULL, waiting_since = NULL, updated_at = $5, finished_at = $6 \
                 WHERE id = $1 AND waiting_run_id = $2 AND status = 'WAITING'",
            )
            .bind(r.execution_id)
            .bind(r.waiting_run_id)
            .bind(status)
            .bind(r.next.map(|n| n.step_id.as_str()))
            .bind(now)
            .bind(finished)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 1 {
                sqlx::query(
                    "UPDATE workflow_step_runs SET status = 'COMPLETED', branch = $2, output = COALESCE($3, output), \
                     finished_at = $4 WHERE id = $1 AND status = 'WAITING'",
                )
                .bind(r.waiting_run_id)
                .bind(r.branch)
                .bind(r.output.map(Json))
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if let Some(next) = r.next {
                    insert_runs(&mut tx, &[(r.project_id, r.execution_id, next)], now).await?;
                    tx.insert_job(&next.job, now).await?;
                }
            }
            tx.commit().await?;
            n == 1
        });
        Ok(Some(resumed))
    }

    /// Cancels one active execution of a workflow: `NotFound` when it is not the project's,
    /// `Ok(None)` when it is no longer active. Its pending and waiting step runs are marked
    /// `SKIPPED` and its queued jobs dropped.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_execution(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &ExecutionId,
    ) -> StoreResult<Option<ExecutionRecord>> {
        let current = self.execution(project, workflow, id).await?;
        if is_final(&current.status) {
            return Ok(None);
        }
        let n = self
            .cancel_where(
                "id = $1 AND workflow_id = $2",
                &[id.as_str(), workflow.as_str()],
                "executionId",
                id.as_str(),
            )
            .await?;
        if n == 0 {
            return Ok(None);
        }
        self.execution(project, workflow, id).await.map(Some)
    }

    /// Cancels every active execution of a workflow; answers how many.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel_all_executions(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
    ) -> StoreResult<u64> {
        self.cancel_where(
            "workflow_id = $1 AND project_id = $2",
            &[workflow.as_str(), project.as_str()],
            "workflowId",
            workflow.as_str(),
        )
        .await
    }

    async fn cancel_where(
        &self,
        filter: &str,
        binds: &[&str],
        job_key: &'static str,
        job_value: &str,
    ) -> StoreResult<u64> {
        let now = now_ms();
        let n = binds.len();
        let active = format!("{filter} AND status IN ('RUNNING', 'WAITING')");
        let skip_runs = format!(
            "UPDATE workflow_step_runs SET status = 'SKIPPED', finished_at = ${} \
             WHERE status IN ('PENDING', 'WAITING') AND execution_id IN (SELECT id FROM workflow_executions WHERE {active})",
            n + 1
        );
        let cancel = format!(
            "UPDATE workflow_executions SET status = 'CANCELLED', waiting_event = NULL, waiting_run_id = NULL, \
             waiting_since = NULL, updated_at = ${0}, finished_at = ${0} WHERE {active}",
            n + 1
        );
        let backend = self.db().backend();
        let drop_jobs = format!(
            "DELETE FROM jobs WHERE kind IN ('{STEP_KIND}', '{TIMEOUT_KIND}') AND state = 'queued' AND {} = $1",
            super::dialect::json_text(backend, "payload", job_key)
        );
        let cancelled = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let mut q = sqlx::query(&skip_runs);
            for b in binds {
                q = q.bind(*b);
            }
            q.bind(now).execute(&mut *tx).await?;
            let mut q = sqlx::query(&cancel);
            for b in binds {
                q = q.bind(*b);
            }
            let cancelled = q.bind(now).execute(&mut *tx).await?.rows_affected();
            sqlx::query(&drop_jobs).bind(job_value).execute(&mut *tx).await?;
            tx.commit().await?;
            cancelled
        });
        Ok(cancelled)
    }

    /// An execution of a workflow of the project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn execution(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        id: &ExecutionId,
    ) -> StoreResult<ExecutionRecord> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM workflow_executions WHERE project_id = $1 AND workflow_id = $2 AND id = $3"
        );
        let row: Option<ExecutionRecord> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(workflow.as_str())
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
        });
        row.ok_or(StoreError::NotFound)
    }

    /// The step runs of an execution, in order.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn step_runs(&self, execution: &ExecutionId) -> StoreResult<Vec<StepRunRecord>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM workflow_step_runs WHERE execution_id = $1 ORDER BY id"
        );
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(execution.as_str()).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// A page of a workflow's executions, newest first, optionally of some statuses.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn list_executions(
        &self,
        project: &ProjectId,
        workflow: &WorkflowId,
        statuses: &[&str],
        page: &PageRequest,
    ) -> StoreResult<Page<ExecutionRecord>> {
        let mut filter = String::from("project_id = $1 AND workflow_id = $2");
        let mut next = 3;
        if !statuses.is_empty() {
            filter.push_str(&format!(
                " AND status IN ({})",
                placeholders(next, statuses.len())
            ));
            next += statuses.len();
        }
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM workflow_executions WHERE {filter}");
        if page.after.is_some() {
            sql.push_str(&format!(" AND id < ${next}"));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", page.limit + 1));
        let count_sql = format!("SELECT COUNT(*) FROM workflow_executions WHERE {filter}");
        let (rows, total): (Vec<ExecutionRecord>, i64) = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str()).bind(workflow.as_str());
            let mut c = sqlx::query_scalar(&count_sql).bind(project.as_str()).bind(workflow.as_str());
            for s in statuses {
                q = q.bind(*s);
                c = c.bind(*s);
            }
            if let Some(after) = &page.after {
                q = q.bind(after);
            }
            let rows = q.fetch_all(pool).await?;
            let total = if page.is_first() { c.fetch_one(pool).await? } else { 0 };
            (rows, total)
        });
        Ok(Page::from_rows(rows, page, total, |e| e.id.as_str()))
    }

    /// Every `PLUGIN` step of every workflow (for `herald plugins check`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn plugin_steps(&self) -> StoreResult<Vec<PluginStep>> {
        let plugin = super::dialect::json_text(self.db().backend(), "s.config", "plugin");
        let sql = format!(
            "SELECT w.project_id, w.id AS workflow_id, w.name AS workflow_name, w.enabled, s.id AS step_id, \
             {plugin} AS plugin FROM workflow_steps s JOIN workflows w ON w.id = s.workflow_id \
             WHERE s.type = 'PLUGIN' ORDER BY w.id, s.id"
        );
        let rows = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// The oldest `limit` active executions of a project with their workflow's name, and how
    /// many are active in all (for `/activity/upcoming`).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn active_executions(
        &self,
        project: &ProjectId,
        limit: i64,
    ) -> StoreResult<(Vec<ActiveExecution>, i64)> {
        let out = on_db!(self.db(), pool => {
            let rows: Vec<ActiveExecution> = sqlx::query_as(
                "SELECT e.id, e.workflow_id, w.name AS workflow_name, e.contact_id, e.status, e.current_step_id, \
                 e.waiting_event, e.created_at FROM workflow_executions e JOIN workflows w ON w.id = e.workflow_id \
                 WHERE e.project_id = $1 AND e.status IN ('RUNNING', 'WAITING') ORDER BY e.id LIMIT $2",
            )
            .bind(project.as_str())
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM workflow_executions WHERE project_id = $1 AND status IN ('RUNNING', 'WAITING')",
            )
            .bind(project.as_str())
            .fetch_one(pool)
            .await?;
            (rows, n)
        });
        Ok(out)
    }
}

/// Creates pending step runs, `(project, execution, run)` each, in one statement.
async fn insert_runs<'c, DB>(
    tx: &mut sqlx::Transaction<'c, DB>,
    runs: &[(&str, &str, &NextRun)],
    now: i64,
) -> sqlx::Result<()>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if runs.is_empty() {
        return Ok(());
    }
    let rows = (0..runs.len())
        .map(|i| {
            let b = 1 + 6 * i;
            format!("({}, 'PENDING', 0, ${})", placeholders(b, 5), b + 5)
        })
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "INSERT INTO workflow_step_runs (id, execution_id, project_id, step_id, step_type, status, attempts, created_at) \
         VALUES {rows}"
    );
    let sql = bound_in_order(super::dialect::backend_of::<DB>(), sql);
    let mut q = sqlx::query(&sql);
    for (project, execution, run) in runs {
        q = q
            .bind(run.run_id.as_str())
            .bind(*execution)
            .bind(*project)
            .bind(run.step_id.as_str())
            .bind(run.step_type.as_str())
            .bind(now);
    }
    q.execute(&mut **tx).await?;
    Ok(())
}

/// The commits as waves of distinct executions, in order: each wave's rows are written by one
/// statement per table, which must not meet one execution twice. A round has one step run per
/// execution, so this is one wave in practice.
fn distinct_executions(commits: &[StepCommit<'_>]) -> Vec<Vec<usize>> {
    let mut waves: Vec<(HashSet<&str>, Vec<usize>)> = Vec::new();
    for (i, c) in commits.iter().enumerate() {
        // After the last wave that has this execution, so that its commits stay in order.
        let after = waves
            .iter()
            .rposition(|(seen, _)| seen.contains(c.execution_id))
            .map_or(0, |w| w + 1);
        if after == waves.len() {
            waves.push((HashSet::new(), Vec::new()));
        }
        let (seen, wave) = &mut waves[after];
        seen.insert(c.execution_id);
        wave.push(i);
    }
    waves.into_iter().map(|(_, wave)| wave).collect()
}

/// The next step run `c` runs in its own job, when it does.
fn chains<'a>(c: &StepCommit<'a>) -> Option<&'a NextRun> {
    c.next.filter(|_| c.chain)
}

/// Binds a step run's outcome ([`RunOutcome`]) to a query: id, status, branch, input, output,
/// error, attempts, start and end (`now`, unless it waits).
macro_rules! bind_outcome {
    ($q:expr, $r:expr, $now:expr) => {{
        let r: RunOutcome<'_> = $r;
        $q.bind(r.run_id)
            .bind(r.status)
            .bind(r.branch)
            .bind(Json(r.input))
            .bind(Json(r.output))
            .bind(r.error)
            .bind(r.attempts)
            .bind(r.started_at)
            .bind((r.status != rs::WAITING).then_some($now))
    }};
}
use bind_outcome;

/// Records `n` step runs' outcomes (those still `PENDING`); binds per run its id, status,
/// branch, input, output, error, attempts, start and end.
pub(super) fn step_runs_update_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_branch, v_input, v_output, v_error, v_attempts, v_started, v_finished) AS \
         (VALUES {}) UPDATE workflow_step_runs SET status = v_status, branch = v_branch, input = v_input, \
         output = v_output, error = v_error, attempts = v_attempts, started_at = v_started, finished_at = v_finished \
         FROM v WHERE id = v_id AND status = 'PENDING'",
        super::dialect::value_rows(1, n, 9)
    )
}

/// Creates `n` step runs finished (run on to in memory, see [`StepCommit::earlier`]); binds per
/// run its outcome as [`bind_outcome!`] does, then its execution, project, step, step type and
/// creation.
pub(super) fn finished_runs_insert_sql(n: usize) -> String {
    format!(
        "INSERT INTO workflow_step_runs (id, status, branch, input, output, error, attempts, started_at, \
         finished_at, execution_id, project_id, step_id, step_type, created_at) VALUES {}",
        super::dialect::value_rows(1, n, 14)
    )
}

/// Advances `n` executions still `RUNNING` or `WAITING`, answering their ids; binds per
/// execution its id, status, context, current step, waiting event, waiting run, waiting since,
/// error, exit reason and end, then now (each placeholder once, in order: see
/// [`bound_in_order`]).
///
/// "Still active" is written as "not ended" on purpose: `status IN ('RUNNING', 'WAITING')` is
/// the predicate of the partial index of active executions, and PostgreSQL, estimating a few
/// active rows (statistics of a table that grew since its last analyze), then hash-joined the
/// values against a scan of every active execution (22-25 ms a call with thousands running)
/// instead of looking each one up by primary key.
pub(super) fn executions_update_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_context, v_step, v_event, v_run, v_since, v_error, v_exit, v_finished) AS \
         (VALUES {}) UPDATE workflow_executions SET status = v_status, context = v_context, current_step_id = v_step, \
         waiting_event = v_event, waiting_run_id = v_run, waiting_since = v_since, error = v_error, \
         exit_reason = v_exit, updated_at = ${now}, finished_at = v_finished \
         FROM v WHERE id = v_id AND status NOT IN ('COMPLETED', 'EXITED', 'FAILED', 'CANCELLED') \
         RETURNING id",
        super::dialect::value_rows(1, n, 10),
        now = 10 * n + 1
    )
}
