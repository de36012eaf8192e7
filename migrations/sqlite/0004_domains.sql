-- Sending domains: a DKIM key per domain (the private key never leaves the service), the DNS
-- records to publish and what the last check found.

CREATE TABLE domains (
    id               TEXT PRIMARY KEY,
    project_id       TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL,
    allow_subdomains BOOLEAN NOT NULL DEFAULT FALSE,
    dkim_selector    TEXT NOT NULL,
    dkim_private_key TEXT NOT NULL,
    dkim_public_key  TEXT NOT NULL,
    records          TEXT NOT NULL DEFAULT '[]',
    failure_reason   TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    verified_at      BIGINT,
    last_checked_at  BIGINT,
    UNIQUE (project_id, name)
);
CREATE INDEX domains_project ON domains(project_id, id);
