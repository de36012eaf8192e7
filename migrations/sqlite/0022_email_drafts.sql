-- Messages are built and signed at hand-off: each queued email keeps its rendered draft (JSON),
-- and the attachments of one send request are stored once in `email_contents` for all its
-- recipients. `raw` stays for emails queued before this change.
CREATE TABLE email_contents (
    id          TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    attachments TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
ALTER TABLE emails ADD COLUMN draft TEXT;
ALTER TABLE emails ADD COLUMN content_id TEXT;
CREATE INDEX emails_content ON emails(content_id) WHERE content_id IS NOT NULL;
