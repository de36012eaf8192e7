-- Each contact's events by name: how many, and the time of the latest. Filters (`event.<name>`
-- triggered, triggeredWithin, ...), live segment membership and a workflow step's `history` read
-- one row per contact and name here instead of every event the contact ever had, so their cost
-- no longer grows with a contact's history. Kept by a trigger on `events`, whoever inserts them
-- (this release, the one before it during a rolling upgrade, a loader writing SQL); deleting
-- events by name (`DELETE /events/:name`) recounts what is left (host/src/store/events.rs).
CREATE TABLE event_summaries (
    contact_id TEXT NOT NULL REFERENCES contacts(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    count      BIGINT NOT NULL,
    last_at    BIGINT NOT NULL,
    PRIMARY KEY (contact_id, name)
) WITH (fillfactor = 80);
CREATE INDEX event_summaries_project_name ON event_summaries(project_id, name);

INSERT INTO event_summaries (contact_id, name, project_id, count, last_at)
SELECT contact_id, name, MIN(project_id), COUNT(*), MAX(created_at) FROM events
WHERE contact_id IS NOT NULL GROUP BY contact_id, name;

-- One statement for every statement that inserts events, its rows in key order so that two
-- transactions touching the same summaries lock them in the same order.
CREATE FUNCTION events_to_summaries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_summaries AS s (contact_id, name, project_id, count, last_at)
    SELECT contact_id, name, MIN(project_id), COUNT(*), MAX(created_at) FROM new_events
    WHERE contact_id IS NOT NULL GROUP BY contact_id, name ORDER BY contact_id, name
    ON CONFLICT (contact_id, name) DO UPDATE
    SET count = s.count + excluded.count, last_at = GREATEST(s.last_at, excluded.last_at);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_to_summaries AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_to_summaries();
