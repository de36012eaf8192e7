-- How many contacts of a project have each top-level key in `data`, kept by triggers in the
-- transactions that add, change and remove contacts, so that `GET /contacts/fields` (a field's
-- `coverage`) and `GET /workflows/fields` read a few rows per key instead of every contact's data.
-- A count is the sum of its shards; SQLite's single writer needs only shard 0 (PostgreSQL spreads
-- over 64, as `contact_counts` does). Rows that drop to 0 stay until the project goes.
CREATE TABLE contact_key_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, key, shard)
);

INSERT INTO contact_key_counts (project_id, key, shard, n)
SELECT c.project_id, j.key, 0, COUNT(*) FROM contacts c, json_each(c.data) j
GROUP BY c.project_id, j.key;

CREATE TRIGGER contact_key_counts_contact_added AFTER INSERT ON contacts
BEGIN
    INSERT INTO contact_key_counts (project_id, key, shard, n)
    SELECT NEW.project_id, j.key, 0, 1 FROM json_each(NEW.data) j WHERE true
    ON CONFLICT (project_id, key, shard) DO UPDATE SET n = n + 1;
END;

-- Most changes keep the keys and change values (a tracked event's data on its contact): those
-- whose keys are listed alike before and after, in order, are passed over without reading the
-- counts (a change that only reorders them is counted, to no effect).
CREATE TRIGGER contact_key_counts_contact_changed AFTER UPDATE OF data ON contacts
WHEN OLD.data IS NOT NEW.data
 AND (SELECT group_concat(key, char(0)) FROM json_each(OLD.data))
     IS NOT (SELECT group_concat(key, char(0)) FROM json_each(NEW.data))
BEGIN
    UPDATE contact_key_counts SET n = n - 1
    WHERE project_id = OLD.project_id AND shard = 0
      AND key IN (SELECT key FROM json_each(OLD.data))
      AND key NOT IN (SELECT key FROM json_each(NEW.data));
    INSERT INTO contact_key_counts (project_id, key, shard, n)
    SELECT NEW.project_id, j.key, 0, 1 FROM json_each(NEW.data) j
    WHERE j.key NOT IN (SELECT key FROM json_each(OLD.data))
    ON CONFLICT (project_id, key, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER contact_key_counts_contact_removed AFTER DELETE ON contacts
BEGIN
    UPDATE contact_key_counts SET n = n - 1
    WHERE project_id = OLD.project_id AND shard = 0
      AND key IN (SELECT key FROM json_each(OLD.data));
END;
