-- Confirmed opt-in and view in browser (#78).
-- A project's `doubleOptIn` (`OFF`, `PUBLIC_KEY` or `ALL`) and the template its confirmation
-- mail uses instead of the built-in one (NULL: the built-in).
ALTER TABLE projects ADD COLUMN double_opt_in TEXT NOT NULL DEFAULT 'OFF';
ALTER TABLE projects ADD COLUMN confirmation_template_id TEXT;
-- A contact waiting for the confirmation of its subscription: since when (the link names it),
-- until when the link works, and when the confirmation was last mailed (resends are spaced).
CREATE TABLE contact_confirmations (
    contact_id    TEXT PRIMARY KEY REFERENCES contacts(id) ON DELETE CASCADE,
    project_id    TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    pending_since BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    last_sent_at  BIGINT NOT NULL
);
CREATE INDEX contact_confirmations_project ON contact_confirmations(project_id);
CREATE INDEX contact_confirmations_expiry ON contact_confirmations(expires_at);
-- The drafts kept after hand-off for the "view in browser" page, by age, for their pruning
-- (a queued email's draft is not in it: it enters when its delivery keeps it).
CREATE INDEX emails_kept_drafts ON emails(created_at) WHERE draft IS NOT NULL AND status <> 'queued';
