//! Committing step runs' outcomes with the next steps' jobs, in one lease-guarded transaction a
//! round; the sends among their effects are checked against the suppression list in it, so that
//! a step run's output says when its email is suppressed and why.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use sqlx::types::Json;

use super::records::{NextRun, is_final};
use super::sql::{executions_update_sql, finished_runs_insert_sql, step_runs_update_sql};
use super::start::insert_runs;
use crate::domain::contact::ContactChange;
use crate::domain::ids::{ContactId, ProjectId};
use crate::domain::time::now_ms;
use crate::domain::workflow::step_run_status as rs;
use crate::store::dialect::{BeginWrite, bound_in_order};
use crate::store::emails::PreparedSend;
use crate::store::jobs::{Lease, NewJob};
use crate::store::statements::Statements;
use crate::store::{Store, StoreResult, on_db_write};

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

impl Store {
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
        let lock = crate::store::dialect::for_update(backend);
        let by_key = crate::store::dialect::lookups_by_key(backend);
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
                    let fresh = crate::store::emails::sends_fresh_in(&mut tx, &project, &checked, lock).await?;
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
                // Sends to an address on the suppression list are written suppressed, and their
                // step runs' outputs say so (the list read here, where the emails are written).
                let held_commits: Vec<(usize, &StepCommit<'_>)> = held.iter().map(|&k| (wave[k], of(&wave[k]))).collect();
                let listed = &listed_sends(&mut tx, &held_commits, now).await?;
                let sql = bound_in_order(backend, step_runs_update_sql(held.len()));
                let mut q = sqlx::query(&sql);
                for &k in &held {
                    q = bind_outcome!(q, listed.outcome(of(&wave[k]).first()), now);
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
                            .map(move |r| (c.project_id, c.execution_id, listed.outcome(r)))
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
                let mut effects: Vec<(&str, &EffectWrite)> = held_commits
                    .iter()
                    .filter(|(_, c)| advanced.contains(c.execution_id))
                    .flat_map(|&(i, c)| listed.effects(i, c).iter().map(move |e| (c.project_id, e)))
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
}

/// The sends of a round's commits whose recipient is on the project's suppression list, as the
/// commit writes them ([`listed_sends`]).
#[derive(Default)]
struct Listed {
    /// The effects of a commit (by its index) whose listed sends are written suppressed, with
    /// their recorded responses saying so.
    effects: HashMap<usize, Vec<EffectWrite>>,
    /// The outputs of the step runs (by id) that record a listed send, marked suppressed.
    outputs: HashMap<String, Value>,
}

impl Listed {
    /// The effects the commit `c` (index `i`) writes.
    fn effects<'s>(&'s self, i: usize, c: &'s StepCommit<'_>) -> &'s [EffectWrite] {
        self.effects.get(&i).map_or(c.effects, Vec::as_slice)
    }

    /// The outcome `r` as it is recorded: with its output marked where it records a listed
    /// send.
    fn outcome<'s>(&'s self, r: RunOutcome<'s>) -> RunOutcome<'s> {
        match self.outputs.get(r.run_id) {
            Some(output) => RunOutcome { output, ..r },
            None => r,
        }
    }
}

/// Reads the suppression list inside the round's transaction `tx` for the sends among the
/// effects of `commits` (each with its index): a send to a listed address is written
/// `suppressed` with the entry's reason, and its step run's output and its recorded response
/// say `suppressed: true` and the `reason` (`HARD_BOUNCE`, `COMPLAINT`, `MANUAL`), so that the
/// execution's timeline tells why no mail went. One select for the whole round.
async fn listed_sends<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    commits: &[(usize, &StepCommit<'_>)],
    now: i64,
) -> StoreResult<Listed>
where
    DB: sqlx::Database,
    for<'t> sqlx::Transaction<'t, DB>: Statements,
{
    use crate::domain::workflow::mark_send_suppressed;
    // Each send: its commit, its index among the commit's effects, its project and itself.
    let mut sends = Vec::new();
    for (i, c) in commits {
        for (j, effect) in c.effects.iter().enumerate() {
            if let EffectWrite::SendEmail { send, .. } = effect {
                sends.push((
                    *i,
                    *c,
                    j,
                    ProjectId::from_trusted(c.project_id.to_string()),
                    &**send,
                ));
            }
        }
    }
    let mut inserts = Vec::new();
    // Where each insert comes from: its send and its index among the send's emails.
    let mut origins = Vec::new();
    for (s, (_, _, _, project, send)) in sends.iter().enumerate() {
        for (m, insert) in send.email_inserts(project, now).enumerate() {
            inserts.push(insert);
            origins.push((s, m));
        }
    }
    let mut listed = Listed::default();
    if inserts.is_empty() {
        return Ok(listed);
    }
    for (k, reason) in tx.listed_reasons(&inserts).await? {
        let (s, m) = origins[k];
        let (i, c, j) = (sends[s].0, sends[s].1, sends[s].2);
        let effects = listed
            .effects
            .entry(i)
            .or_insert_with(|| c.effects.to_vec());
        let EffectWrite::SendEmail { send, response, .. } = &mut effects[j] else {
            continue;
        };
        let Some(email) = send.emails.get_mut(m) else {
            continue;
        };
        *email = crate::store::statements::suppressed_copy(email, &reason);
        let email_id = email.id.as_str().to_string();
        mark_send_suppressed(response, &email_id, &reason);
        for r in c.earlier.iter().chain([&c.run]) {
            let mut output = match listed.outputs.get(r.run_id) {
                Some(marked) => marked.clone(),
                None => r.output.clone(),
            };
            if mark_send_suppressed(&mut output, &email_id, &reason) {
                listed.outputs.insert(r.run_id.to_string(), output);
            }
        }
    }
    Ok(listed)
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
