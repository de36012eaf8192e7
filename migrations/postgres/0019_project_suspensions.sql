-- Automatic suspensions of a project's sending: when its hard-bounce or complaint rate over the
-- recent window crosses a threshold (settings `security.*`), a row records the figures and the
-- reason; the project sends nothing new until an operator lifts it (`herald projects lift-suspension`).
CREATE TABLE project_suspensions (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    reason     TEXT NOT NULL,
    sent       BIGINT NOT NULL,
    bounced    BIGINT NOT NULL,
    complained BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    lifted_at  BIGINT
);
CREATE INDEX project_suspensions_project ON project_suspensions(project_id, created_at);
