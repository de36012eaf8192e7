//! Starting executions: deduplicated by trigger event, one active per contact, by the
//! workflow's re-entry rule, each with its first step run and job.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};
use sqlx::types::Json;

use super::records::{EXECUTION_COLUMNS, ExecutionRecord, INSERT_CHUNK, LOOKUP_CHUNK, NextRun};
use crate::domain::ids::{ContactId, ExecutionId, ProjectId, WorkflowId};
use crate::domain::time::now_ms;
use crate::store::dialect::{BeginWrite, bound_in_order, for_key_share, placeholders};
use crate::store::statements::Statements;
use crate::store::{Store, StoreResult, on_db, on_db_write};

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

impl Store {
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
}

/// Creates pending step runs, `(project, execution, run)` each, in one statement.
pub(super) async fn insert_runs<'c, DB>(
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
    let sql = bound_in_order(crate::store::dialect::backend_of::<DB>(), sql);
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
