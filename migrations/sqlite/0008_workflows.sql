-- Workflows: a graph of steps joined by transitions, triggered by an event name, and their
-- per-contact executions with one row per step run. The graph is edited through the API and
-- validated when the workflow is enabled; executions advance through durable `workflow.step`
-- jobs (see host/src/engine/workflows).

CREATE TABLE workflows (
    id            TEXT PRIMARY KEY,
    project_id    TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    description   TEXT,
    trigger_type  TEXT NOT NULL DEFAULT 'EVENT',
    trigger_event TEXT NOT NULL,
    enabled       BOOLEAN NOT NULL DEFAULT FALSE,
    allow_reentry BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX workflows_project ON workflows(project_id, id);
CREATE INDEX workflows_trigger ON workflows(project_id, trigger_event, enabled);

CREATE TABLE workflow_steps (
    id          TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    type        TEXT NOT NULL,
    name        TEXT,
    config      TEXT NOT NULL DEFAULT '{}',
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX workflow_steps_workflow ON workflow_steps(workflow_id, id);

-- `branch` is NULL for a plain transition, `yes`/`no` out of CONDITION, `event`/`timeout` out
-- of WAIT_FOR_EVENT.
CREATE TABLE workflow_transitions (
    id           TEXT PRIMARY KEY,
    workflow_id  TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    from_step_id TEXT NOT NULL REFERENCES workflow_steps(id) ON DELETE CASCADE,
    to_step_id   TEXT NOT NULL REFERENCES workflow_steps(id) ON DELETE CASCADE,
    branch       TEXT,
    created_at   BIGINT NOT NULL
);
CREATE INDEX workflow_transitions_workflow ON workflow_transitions(workflow_id, id);
CREATE INDEX workflow_transitions_from ON workflow_transitions(from_step_id);

-- One contact's way through a workflow. `trigger_event_id` deduplicates starts from one event
-- (at-least-once outbox delivery); at most one execution per (workflow, contact) is active.
-- `trigger` is a copy of the triggering event (name, data, createdAt) for the steps' input.
-- While WAITING for an event, `waiting_event` names it and `waiting_run_id` is the step run
-- that waits; whichever of the event and the timeout commits first resumes it.
CREATE TABLE workflow_executions (
    id               TEXT PRIMARY KEY,
    project_id       TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    workflow_id      TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    contact_id       TEXT NOT NULL REFERENCES contacts(id) ON DELETE CASCADE,
    status           TEXT NOT NULL,
    trigger_event_id TEXT,
    trigger          TEXT,
    context          TEXT NOT NULL DEFAULT '{}',
    current_step_id  TEXT,
    waiting_event    TEXT,
    waiting_run_id   TEXT,
    waiting_since    BIGINT,
    error            TEXT,
    exit_reason      TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX workflow_executions_workflow ON workflow_executions(workflow_id, id);
CREATE INDEX workflow_executions_contact ON workflow_executions(workflow_id, contact_id);
CREATE UNIQUE INDEX workflow_executions_trigger ON workflow_executions(workflow_id, trigger_event_id);
CREATE UNIQUE INDEX workflow_executions_active ON workflow_executions(workflow_id, contact_id)
    WHERE status IN ('RUNNING', 'WAITING');
CREATE INDEX workflow_executions_waiting ON workflow_executions(project_id, contact_id, waiting_event)
    WHERE waiting_event IS NOT NULL;

CREATE TABLE workflow_step_runs (
    id           TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL REFERENCES workflow_executions(id) ON DELETE CASCADE,
    project_id   TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    step_id      TEXT NOT NULL,
    step_type    TEXT NOT NULL,
    status       TEXT NOT NULL,
    branch       TEXT,
    input        TEXT,
    output       TEXT,
    error        TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT
);
CREATE INDEX workflow_step_runs_execution ON workflow_step_runs(execution_id, id);
