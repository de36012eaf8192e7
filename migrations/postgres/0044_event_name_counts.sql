-- How many events of a project have each name, kept by triggers in the transactions that add and
-- remove events (tracked, the service's own, deleted by name, with their contact or by a
-- project's reset), so that `GET /events/names`, `/events/stats` (its names and total) and
-- `/events/:name/usage` read a few rows per name instead of every event. As with
-- `contact_counts` (0023, 0027): once per statement over its transition table, each name's
-- change added to the one of 64 shards the transaction id picks, rows locked in name order; a
-- count is the sum of its shards. Rows that drop to 0 stay until their project goes.
CREATE TABLE event_name_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, name, shard)
);

INSERT INTO event_name_counts (project_id, name, shard, n)
SELECT project_id, name, 0, COUNT(*) FROM events GROUP BY project_id, name;

CREATE FUNCTION event_name_counts_events_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_name_counts (project_id, name, shard, n)
    SELECT project_id, name, (txid_current() % 64)::int, COUNT(*) FROM added_events
    GROUP BY project_id, name ORDER BY project_id, name
    ON CONFLICT (project_id, name, shard) DO UPDATE SET n = event_name_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER event_name_counts_events_added AFTER INSERT ON events
    REFERENCING NEW TABLE AS added_events
    FOR EACH STATEMENT EXECUTE FUNCTION event_name_counts_events_added();

-- Not for a project being deleted: its rows go by cascade, and a new row would point at a
-- project that is gone.
CREATE FUNCTION event_name_counts_events_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_name_counts (project_id, name, shard, n)
    SELECT r.project_id, r.name, (txid_current() % 64)::int, -COUNT(*) FROM removed_events r
    WHERE EXISTS (SELECT 1 FROM projects p WHERE p.id = r.project_id)
    GROUP BY r.project_id, r.name ORDER BY r.project_id, r.name
    ON CONFLICT (project_id, name, shard) DO UPDATE SET n = event_name_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER event_name_counts_events_removed AFTER DELETE ON events
    REFERENCING OLD TABLE AS removed_events
    FOR EACH STATEMENT EXECUTE FUNCTION event_name_counts_events_removed();
