-- How many contacts of a project have each top-level key in `data`, kept by triggers in the
-- transactions that add, change and remove contacts, so that `GET /contacts/fields` (a field's
-- `coverage`) and `GET /workflows/fields` read a few rows per key instead of every contact's data.
-- As with `contact_counts` (0023, 0027): the triggers run once per statement over its transition
-- tables and add each key's change to the one of 64 shards the transaction id picks, locking the
-- rows in key order (no deadlocks between writers); a count is the sum of its shards. Rows that
-- drop to 0 stay until the project goes.
CREATE TABLE contact_key_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, key, shard)
);

INSERT INTO contact_key_counts (project_id, key, shard, n)
SELECT c.project_id, k, 0, COUNT(*) FROM contacts c, jsonb_object_keys(c.data) k
GROUP BY c.project_id, k;

CREATE FUNCTION contact_key_counts_contacts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_key_counts (project_id, key, shard, n)
    SELECT project_id, k, (txid_current() % 64)::int, COUNT(*)
    FROM added_contacts, jsonb_object_keys(data) k
    GROUP BY project_id, k ORDER BY project_id, k
    ON CONFLICT (project_id, key, shard) DO UPDATE SET n = contact_key_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_key_counts_contacts_added AFTER INSERT ON contacts
    REFERENCING NEW TABLE AS added_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION contact_key_counts_contacts_added();

-- An update adds 1 for each key a row has now and takes 1 for each it had; keys on both sides
-- cancel out and write nothing (most updates change no key).
CREATE FUNCTION contact_key_counts_contacts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_key_counts (project_id, key, shard, n)
    SELECT project_id, k, (txid_current() % 64)::int, SUM(d) FROM (
        SELECT project_id, k, 1 AS d FROM changed_contacts, jsonb_object_keys(data) k
        UNION ALL
        SELECT project_id, k, -1 AS d FROM previous_contacts, jsonb_object_keys(data) k
    ) t
    GROUP BY project_id, k HAVING SUM(d) <> 0 ORDER BY project_id, k
    ON CONFLICT (project_id, key, shard) DO UPDATE SET n = contact_key_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_key_counts_contacts_changed AFTER UPDATE ON contacts
    REFERENCING OLD TABLE AS previous_contacts NEW TABLE AS changed_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION contact_key_counts_contacts_changed();

-- A delete adds minus its rows to the transaction's shard, as an update would; not for a project
-- being deleted (its rows go by cascade, and a new row would point at a project that is gone).
CREATE FUNCTION contact_key_counts_contacts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_key_counts (project_id, key, shard, n)
    SELECT r.project_id, k, (txid_current() % 64)::int, -COUNT(*)
    FROM removed_contacts r, jsonb_object_keys(r.data) k
    WHERE EXISTS (SELECT 1 FROM projects p WHERE p.id = r.project_id)
    GROUP BY r.project_id, k ORDER BY r.project_id, k
    ON CONFLICT (project_id, key, shard) DO UPDATE SET n = contact_key_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_key_counts_contacts_removed AFTER DELETE ON contacts
    REFERENCING OLD TABLE AS removed_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION contact_key_counts_contacts_removed();
