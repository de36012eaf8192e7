//! One round of a batch: the members' step runs, contacts and transitions read at once, each
//! step run (and those it runs on to in memory), and every outcome committed in one
//! transaction.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::json;
use tracing::Instrument;

use super::step::{apply_updates, reads_history, step_span};
use super::{CHAIN_LIMIT, Member, Planned, Ran, StepRunner};
use crate::domain::contact::Contact;
use crate::domain::ids::ProjectId;
use crate::domain::time::now_ms;
use crate::engine::workflows::effects::SendReads;
use crate::jobs::JobError;
use crate::store::StoreError;
use crate::store::executions::{Committed, EffectWrite, Exit, RunContext, StepCommit};

impl StepRunner {
    /// One round: reads the members' step runs, contacts and transitions at once, runs each
    /// step, and commits every outcome in one transaction. Members whose job carries on with
    /// their next step run stay in `members`; the others are answered with how they ended.
    pub(super) async fn round(
        &self,
        project: &ProjectId,
        members: &mut Vec<Member>,
        deadline: std::time::Instant,
    ) -> Result<Vec<(Member, Result<(), JobError>)>, StoreError> {
        let store = &self.engine.store;
        let ids: Vec<&str> = members.iter().map(|m| m.run_id.as_str()).collect();
        let mut runs: HashMap<String, RunContext> = store
            .run_contexts(&ids)
            .await?
            .into_iter()
            .map(|r| (r.run_id.clone(), r))
            .collect();
        let contact_ids: BTreeSet<&str> = runs.values().map(|r| r.contact_id.as_str()).collect();
        let contact_ids: Vec<&str> = contact_ids.into_iter().collect();
        let contacts: HashMap<String, Contact> = store
            .contacts_by_ids(project, &contact_ids)
            .await?
            .into_iter()
            .map(|c| (c.id.as_str().to_string(), c))
            .collect();
        // Contacts that more than one of the round's step runs is for.
        let mut once = HashSet::new();
        let shared: HashSet<String> = runs
            .values()
            .filter(|r| !once.insert(r.contact_id.as_str()))
            .map(|r| r.contact_id.clone())
            .collect();
        drop(once);
        let workflow_ids: BTreeSet<&str> = runs.values().map(|r| r.workflow_id.as_str()).collect();
        let workflow_ids: Vec<&str> = workflow_ids.into_iter().collect();
        let transitions = store.transitions_of_workflows(&workflow_ids).await?;
        // One after the other: on SQLite every effect waits for the one writer anyway, and
        // running a batch's steps at once only lengthens the writer's queue in front of the API's
        // requests (measured: no faster on either database, and /v1/track slowed by half).
        let mut ran: Vec<Ran> = Vec::with_capacity(members.len());
        let mut reads = SendReads::new(project.clone());
        for (index, m) in members.iter().enumerate() {
            // Past the job's wall time, the members not run yet go back to the queue (the first
            // one of a job's first round always runs, so that every claim makes progress).
            if (index > 0 || m.ran > 0) && std::time::Instant::now() >= deadline {
                ran.push(Ran::Finished(self.postpone(m, now_ms()).await));
                continue;
            }
            let run = runs.remove(&m.run_id);
            let contact = run
                .as_ref()
                .and_then(|r| contacts.get(&r.contact_id).cloned());
            let exits = run
                .as_ref()
                .and_then(|r| transitions.get(&r.step_id))
                .map_or(&[][..], Vec::as_slice);
            let may_chain = m.chainable && m.ran + 1 < CHAIN_LIMIT;
            let mut outcome = self
                .run_member(&mut reads, m, run, contact.clone(), exits, may_chain)
                .await;
            // The contact as the chain's step runs so far leave it: their updates are written by
            // the commit, after it checks that the contact is still as the round read it.
            let mut current = contact.clone();
            if let (Ran::Commit(p), Some(current)) = (&outcome, &mut current) {
                apply_updates(current, &p.effects);
            }
            // Runs on in memory while a step run goes on at once, so that a chain of such steps
            // and the step after them are read and committed once, their effects' writes with
            // them.
            while let Ran::Commit(planned) = &outcome
                && planned.runs_on()
                && let (Some(stored), Some(seen)) = (&contact, &current)
            {
                let next = planned.next.as_ref().expect("runs_on");
                let Some(config) = transitions
                    .get(&planned.run.step_id)
                    .and_then(|exits| exits.iter().find(|t| t.to_step_id == next.step_id))
                    .map(|t| &t.to_step_config.0)
                else {
                    break;
                };
                // Past an update of the contact, only when no other step run of the round is for
                // the same contact (two chains that each updated it, both checked against the one
                // read, would each miss the other's update), and not into a step that reads the
                // contact's events or segments (its subscription events are written by the
                // commit).
                if planned.updates_contact()
                    && (shared.contains(stored.id.as_str())
                        || reads_history(&next.step_type, config))
                {
                    break;
                }
                // Past the wall time, the next step run is committed to run from its own row.
                if std::time::Instant::now() >= deadline {
                    break;
                }
                let run = planned.next_context(next, config);
                let exits = transitions.get(&run.step_id).map_or(&[][..], Vec::as_slice);
                let ahead = planned.earlier.len() as u32 + 1;
                let may_chain = m.ran + 1 + ahead < CHAIN_LIMIT;
                let Ran::Commit(mut then) = self
                    .run_ahead(&mut reads, m, run, stored, seen.clone(), exits, may_chain)
                    .await
                else {
                    break;
                };
                let Ran::Commit(mut planned) = outcome else {
                    unreachable!("matched above")
                };
                if let Some(current) = &mut current {
                    apply_updates(current, &then.effects);
                }
                let mut effects = std::mem::take(&mut planned.effects);
                effects.append(&mut then.effects);
                then.effects = effects;
                then.earlier = std::mem::take(&mut planned.earlier);
                then.earlier.push(*planned);
                outcome = Ran::Commit(then);
            }
            ran.push(outcome);
        }
        let mut ended: Vec<Option<Result<(), JobError>>> = Vec::with_capacity(ran.len());
        let mut planned: Vec<(usize, Box<Planned>)> = Vec::new();
        for (i, r) in ran.into_iter().enumerate() {
            match r {
                Ran::Commit(p) => {
                    planned.push((i, p));
                    ended.push(None);
                }
                Ran::Finished(result) => ended.push(Some(result)),
                Ran::Back => unreachable!("only a step run run on to comes back"),
            }
        }
        let commits: Vec<StepCommit<'_>> = planned
            .iter()
            .map(|(i, p)| p.commit(&members[*i].lease))
            .collect();
        let committed = store.commit_steps(&commits).await?;
        drop(commits);
        let mut wake = false;
        let mut next_runs: HashMap<usize, (String, u32)> = HashMap::new();
        for ((i, p), committed) in planned.iter().zip(committed) {
            if committed == Committed::Stale {
                let stale = "a contact changed while its email was being rendered; retrying";
                ended[*i] = Some(Err(JobError::Retry(stale.into())));
                continue;
            }
            if committed != Committed::LeaseLost {
                wake |= p.effects.iter().any(EffectWrite::queues_email);
            }
            tracing::info!(
                step_run_id = %p.run.run_id,
                execution_id = %p.run.execution_id,
                status = p.run_status,
                execution_status = p.execution_status,
                chained = committed == Committed::Chained,
                ran_before = p.earlier.len(),
                "step run finished"
            );
            match committed {
                Committed::LeaseLost => ended[*i] = Some(Err(JobError::LeaseLost)),
                Committed::Chained => {
                    if let Some(next) = &p.next {
                        let ran = 1 + p.earlier.len() as u32;
                        next_runs.insert(*i, (next.run_id.as_str().to_string(), ran));
                    }
                }
                Committed::Done => {
                    wake |= p.next.is_some() || p.timeout_job.is_some();
                    ended[*i] = Some(Ok(()));
                }
                // Answered above.
                Committed::Stale => {}
            }
        }
        if wake {
            self.engine.jobs.wake();
        }
        let mut out = Vec::new();
        let mut staying = Vec::with_capacity(next_runs.len());
        for (i, (mut member, end)) in members.drain(..).zip(ended).enumerate() {
            if let Some((next, ran)) = next_runs.remove(&i) {
                // The job row now names `next`, with its attempts counted afresh.
                member.run_id = next;
                member.attempts = 1;
                member.ran += ran;
                staying.push(member);
            } else {
                out.push((member, end.unwrap_or(Ok(()))));
            }
        }
        *members = staying;
        Ok(out)
    }

    /// Runs one member's step run up to its commit (the round writes it), or to its end when it
    /// cannot run (gone, skipped, failed, retried).
    async fn run_member(
        &self,
        reads: &mut SendReads,
        member: &Member,
        run: Option<RunContext>,
        contact: Option<Contact>,
        transitions: &[Exit],
        may_chain: bool,
    ) -> Ran {
        let Some(run) = run else {
            // The execution was deleted with its workflow or contact.
            let done = self
                .engine
                .store
                .complete_job(&member.lease, &json!({ "gone": true }))
                .await;
            return Ran::Finished(match done {
                Ok(true) => Ok(()),
                Ok(false) => Err(JobError::LeaseLost),
                Err(e) => Err(e.into()),
            });
        };
        let span = step_span(&run);
        match self
            .run_step(
                reads,
                member,
                run,
                None,
                contact,
                transitions,
                may_chain,
                false,
            )
            .instrument(span)
            .await
        {
            Ok(ran) => ran,
            Err(e) => Ran::Finished(Err(e)),
        }
    }

    /// Runs on in memory to `run`, the step run that `member`'s step run goes on to at once, for
    /// `contact` as the step runs before it leave it (`stored`: as the round read it):
    /// [`Ran::Commit`] with its outcome, or [`Ran::Back`] (nothing written) when it does not
    /// come to one.
    #[allow(clippy::too_many_arguments)]
    async fn run_ahead(
        &self,
        reads: &mut SendReads,
        member: &Member,
        run: RunContext,
        stored: &Contact,
        contact: Contact,
        transitions: &[Exit],
        may_chain: bool,
    ) -> Ran {
        let span = step_span(&run);
        // Its first attempt, under the job's lease.
        let first = Member {
            lease: member.lease.clone(),
            attempts: 1,
            max_attempts: member.max_attempts,
            run_id: run.run_id.clone(),
            chainable: true,
            ran: 0,
            claimed: false,
        };
        match self
            .run_step(
                reads,
                &first,
                run,
                Some(stored),
                Some(contact),
                transitions,
                may_chain,
                true,
            )
            .instrument(span)
            .await
        {
            Ok(Ran::Commit(planned)) => Ran::Commit(planned),
            Ok(_) | Err(_) => Ran::Back,
        }
    }
}
