-- Each project's contact count, kept by triggers in the transactions that add and remove
-- contacts, so that `GET /contacts` answers `total` without counting the table. The count is the
-- sum of a project's rows (PostgreSQL spreads inserts over 16 rows against lock waits; SQLite's
-- single writer needs only row 0, which every project has from its creation).
CREATE TABLE contact_counts (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, shard)
);

INSERT INTO contact_counts (project_id, shard, n)
SELECT p.id, 0, (SELECT COUNT(*) FROM contacts c WHERE c.project_id = p.id) FROM projects p;

CREATE TRIGGER contact_counts_project_added AFTER INSERT ON projects
BEGIN
    INSERT INTO contact_counts (project_id, shard, n) VALUES (NEW.id, 0, 0);
END;

CREATE TRIGGER contact_counts_contact_added AFTER INSERT ON contacts
BEGIN
    UPDATE contact_counts SET n = n + 1 WHERE project_id = NEW.project_id AND shard = 0;
END;

CREATE TRIGGER contact_counts_contact_removed AFTER DELETE ON contacts
BEGIN
    UPDATE contact_counts SET n = n - 1 WHERE project_id = OLD.project_id AND shard = 0;
END;
