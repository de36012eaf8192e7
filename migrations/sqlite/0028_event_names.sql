-- The distinct event names each project tracked, so that the cap on them
-- (`event_names_max_per_project`) is one count of a small table rather than a scan of the events.
-- Written by the contact writes that track an event (host/src/store/contacts.rs, once per name
-- an instance has not seen recorded), emptied by `DELETE /events/:name` once no event has the
-- name, by a project's reset and, by cascade, by its deletion. The service's own names
-- (contact.subscribed, contact.unsubscribed, email.*, segment.*) are not tracked and not here.
CREATE TABLE event_names (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, name)
) WITHOUT ROWID;

INSERT INTO event_names (project_id, name, created_at)
SELECT project_id, name, MIN(created_at) FROM events
WHERE name NOT IN ('contact.subscribed', 'contact.unsubscribed')
  AND substr(name, 1, 6) <> 'email.' AND substr(name, 1, 8) <> 'segment.'
GROUP BY project_id, name;
