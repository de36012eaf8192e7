-- Foundation: settings, accounts, projects, memberships, contacts, field types, rate limits.
-- Timestamps are unix milliseconds (BIGINT) in both dialects so that queries agree.

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE,
    password_hash  TEXT NOT NULL,
    email_verified BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions(user_id);

CREATE TABLE projects (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    public_key_hash   TEXT NOT NULL UNIQUE,
    secret_key_hash   TEXT NOT NULL UNIQUE,
    public_key_hint   TEXT NOT NULL,
    secret_key_hint   TEXT NOT NULL,
    disabled          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);

CREATE TABLE memberships (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX memberships_user ON memberships(user_id);

CREATE TABLE contacts (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    email      TEXT NOT NULL,
    subscribed BOOLEAN NOT NULL,
    data       JSONB NOT NULL DEFAULT '{}',
    version    BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (project_id, email)
);
CREATE INDEX contacts_project_id ON contacts(project_id, id);

CREATE TABLE contact_fields (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    type       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, key)
);

-- UNLOGGED: counters are cheap to lose on a crash and hot on every request.
CREATE UNLOGGED TABLE rate_limit_windows (
    bucket       TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
