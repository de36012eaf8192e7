-- Events (tracked and the service's own), their outbox, the durable job queue and idempotency keys.

CREATE TABLE events (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    contact_id TEXT REFERENCES contacts(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL DEFAULT '{}',
    created_at BIGINT NOT NULL
);
CREATE INDEX events_project ON events(project_id, id);
CREATE INDEX events_project_name ON events(project_id, name, id);
CREATE INDEX events_contact ON events(contact_id, id);

-- Every event is written here in the transaction that creates it; the dispatcher hands it to
-- every registered consumer and deletes it once all of them succeeded.
CREATE TABLE event_outbox (
    event_id     TEXT PRIMARY KEY REFERENCES events(id) ON DELETE CASCADE,
    project_id   TEXT NOT NULL,
    available_at BIGINT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT
);
CREATE INDEX event_outbox_available ON event_outbox(available_at);

CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    project_id   TEXT REFERENCES projects(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    payload      TEXT NOT NULL DEFAULT '{}',
    input        BLOB,
    state        TEXT NOT NULL,
    progress     INTEGER NOT NULL DEFAULT 0,
    checkpoint   TEXT,
    result       TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    run_at       BIGINT NOT NULL,
    locked_by    TEXT,
    locked_until BIGINT,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    finished_at  BIGINT
);
CREATE INDEX jobs_ready ON jobs(state, run_at);
CREATE INDEX jobs_project ON jobs(project_id, id);

CREATE TABLE idempotency_keys (
    project_id    TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    endpoint      TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status        INTEGER NOT NULL,
    response      TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (project_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys(created_at);
