//! The SQL text of a round's commit: step runs' outcomes, executions' states and finished runs,
//! each one statement for many rows.

/// Records `n` step runs' outcomes (those still `PENDING`); binds per run its id, status,
/// branch, input, output, error, attempts, start and end.
pub(in crate::store) fn step_runs_update_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_branch, v_input, v_output, v_error, v_attempts, v_started, v_finished) AS \
         (VALUES {}) UPDATE workflow_step_runs SET status = v_status, branch = v_branch, input = v_input, \
         output = v_output, error = v_error, attempts = v_attempts, started_at = v_started, finished_at = v_finished \
         FROM v WHERE id = v_id AND status = 'PENDING'",
        crate::store::dialect::value_rows(1, n, 9)
    )
}

/// Creates `n` step runs finished (run on to in memory, see [`StepCommit::earlier`]); binds per
/// run its outcome as [`bind_outcome!`] does, then its execution, project, step, step type and
/// creation.
pub(in crate::store) fn finished_runs_insert_sql(n: usize) -> String {
    format!(
        "INSERT INTO workflow_step_runs (id, status, branch, input, output, error, attempts, started_at, \
         finished_at, execution_id, project_id, step_id, step_type, created_at) VALUES {}",
        crate::store::dialect::value_rows(1, n, 14)
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
pub(in crate::store) fn executions_update_sql(n: usize) -> String {
    format!(
        "WITH v (v_id, v_status, v_context, v_step, v_event, v_run, v_since, v_error, v_exit, v_finished) AS \
         (VALUES {}) UPDATE workflow_executions SET status = v_status, context = v_context, current_step_id = v_step, \
         waiting_event = v_event, waiting_run_id = v_run, waiting_since = v_since, error = v_error, \
         exit_reason = v_exit, updated_at = ${now}, finished_at = v_finished \
         FROM v WHERE id = v_id AND status NOT IN ('COMPLETED', 'EXITED', 'FAILED', 'CANCELLED') \
         RETURNING id",
        crate::store::dialect::value_rows(1, n, 10),
        now = 10 * n + 1
    )
}
