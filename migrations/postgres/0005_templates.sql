-- Templates: a subject and an HTML body with Handlebars variables, what they are for, and an
-- optional sender (a from address on a verified domain, a display name, a reply-to address).

CREATE TABLE templates (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    body        TEXT NOT NULL,
    type        TEXT NOT NULL CHECK (type IN ('TRANSACTIONAL', 'MARKETING')),
    from_email  TEXT,
    from_name   TEXT,
    reply_to    TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX templates_project ON templates(project_id, id);
CREATE INDEX templates_project_type ON templates(project_id, type, id);
