-- Each project's contact count, kept by triggers in the transactions that add and remove
-- contacts, so that `GET /contacts` answers `total` without counting the table. The count is the
-- sum of a project's rows: inserts add to one of 16 rows picked at random, so concurrent writers
-- of one project rarely wait on each other's row lock; deletes take from row 0, which every
-- project has from its creation (an UPDATE, never an insert, so a delete cascading from a
-- project's deletion never re-creates a row).
CREATE TABLE contact_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, shard)
);

INSERT INTO contact_counts (project_id, shard, n)
SELECT p.id, 0, (SELECT COUNT(*) FROM contacts c WHERE c.project_id = p.id) FROM projects p;

CREATE FUNCTION contact_counts_project_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_counts (project_id, shard, n) VALUES (NEW.id, 0, 0);
    RETURN NULL;
END $$;

CREATE TRIGGER contact_counts_project_added AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION contact_counts_project_added();

CREATE FUNCTION contact_counts_contact_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_counts (project_id, shard, n)
    VALUES (NEW.project_id, floor(random() * 16)::int, 1)
    ON CONFLICT (project_id, shard) DO UPDATE SET n = contact_counts.n + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_counts_contact_added AFTER INSERT ON contacts
    FOR EACH ROW EXECUTE FUNCTION contact_counts_contact_added();

CREATE FUNCTION contact_counts_contact_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE contact_counts SET n = n - 1 WHERE project_id = OLD.project_id AND shard = 0;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_counts_contact_removed AFTER DELETE ON contacts
    FOR EACH ROW EXECUTE FUNCTION contact_counts_contact_removed();
