-- Emails: one row per recipient of a send, with its rendered message until the transport has
-- it, and the history of its delivery (which also feeds the activity feed).

CREATE TABLE emails (
    id            TEXT PRIMARY KEY,
    project_id    TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    contact_id    TEXT REFERENCES contacts(id) ON DELETE SET NULL,
    template_id   TEXT,
    kind          TEXT NOT NULL,
    from_address  TEXT NOT NULL,
    to_address    TEXT NOT NULL,
    subject       TEXT NOT NULL,
    status        TEXT NOT NULL,
    message_id    TEXT NOT NULL,
    envelope_from TEXT NOT NULL,
    signed_by     TEXT,
    provider_id   TEXT,
    error         TEXT,
    links         TEXT NOT NULL DEFAULT '[]',
    raw           BLOB,
    attempts      INTEGER NOT NULL DEFAULT 0,
    handed_off_at BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    sent_at       BIGINT,
    delivered_at  BIGINT,
    opened_at     BIGINT,
    clicked_at    BIGINT,
    bounced_at    BIGINT,
    complained_at BIGINT,
    failed_at     BIGINT
);
CREATE INDEX emails_project ON emails(project_id, id);
CREATE INDEX emails_contact ON emails(contact_id, id);
CREATE INDEX emails_message_id ON emails(message_id);

CREATE TABLE email_events (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    email_id   TEXT REFERENCES emails(id) ON DELETE CASCADE,
    contact_id TEXT,
    kind       TEXT NOT NULL,
    detail     TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX email_events_project ON email_events(project_id, id);
CREATE INDEX email_events_project_kind ON email_events(project_id, kind, id);
CREATE INDEX email_events_email ON email_events(email_id, id);

-- Per-project send throttle: messages handed to the transport per one-second window, shared by
-- every instance.
CREATE TABLE send_windows (
    project_id TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    sent INTEGER NOT NULL,
    PRIMARY KEY (project_id, window_start)
);

-- Open and click tracking, switchable per project.
ALTER TABLE projects ADD COLUMN track_opens BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE projects ADD COLUMN track_clicks BOOLEAN NOT NULL DEFAULT TRUE;
