-- How many events of a project have each name, kept by triggers in the transactions that add and
-- remove events (tracked, the service's own, deleted by name, with their contact or by a
-- project's reset), so that `GET /events/names`, `/events/stats` (its names and total) and
-- `/events/:name/usage` read a few rows per name instead of every event. A count is the sum of
-- its shards; SQLite's single writer needs only shard 0 (PostgreSQL spreads over 64, as
-- `contact_counts` does). Rows that drop to 0 stay until their project goes.
CREATE TABLE event_name_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, name, shard)
);

INSERT INTO event_name_counts (project_id, name, shard, n)
SELECT project_id, name, 0, COUNT(*) FROM events GROUP BY project_id, name;

CREATE TRIGGER event_name_counts_event_added AFTER INSERT ON events
BEGIN
    INSERT INTO event_name_counts (project_id, name, shard, n)
    VALUES (NEW.project_id, NEW.name, 0, 1)
    ON CONFLICT (project_id, name, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_name_counts_event_removed AFTER DELETE ON events
BEGIN
    UPDATE event_name_counts SET n = n - 1
    WHERE project_id = OLD.project_id AND name = OLD.name AND shard = 0;
END;
