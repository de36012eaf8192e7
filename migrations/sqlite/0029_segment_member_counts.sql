-- The member count of a dynamic segment's page (`GET /segments/:id/contacts`), kept for
-- `segments.members_count_cache_seconds` so that paging through a large segment counts its
-- filter once, not once per page. In the database, not in a process: every instance sharing it
-- reuses one count. `condition_hash` is the SHA-256 of the filter the count was made with: a
-- count of another filter (the segment's condition changed since) is never used.
CREATE TABLE segment_member_counts (
    segment_id     TEXT PRIMARY KEY REFERENCES segments(id) ON DELETE CASCADE,
    project_id     TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    condition_hash TEXT NOT NULL,
    total          BIGINT NOT NULL,
    counted_at     BIGINT NOT NULL
);
CREATE INDEX segment_member_counts_project ON segment_member_counts(project_id);

-- A project being deleted (`DELETE /users/@me/projects/:id`): unreachable from the moment this
-- is set (keys replaced, memberships gone, lookups skip it), its rows then deleted in chunks so
-- that SQLite's one writer is never held long; periodic maintenance finishes a deletion that
-- was interrupted (host/src/store/projects.rs).
ALTER TABLE projects ADD COLUMN deleted_at BIGINT;
CREATE INDEX projects_deleting ON projects(deleted_at) WHERE deleted_at IS NOT NULL;

-- `GET /contacts?search=` matches a substring of the address anywhere: an index of the
-- addresses' trigrams (FTS5's trigram tokenizer, over `contacts` as its external content, by
-- rowid) finds the candidates of a term of 3 characters or more, and the search's own `LIKE`
-- then decides, so the results are those of the scan it replaces. Kept by triggers, whoever
-- writes contacts. (Rebuilt from `contacts` by
-- `INSERT INTO contacts_search(contacts_search) VALUES ('rebuild')`.)
CREATE VIRTUAL TABLE contacts_search USING fts5(email, content = 'contacts', tokenize = 'trigram');
INSERT INTO contacts_search(contacts_search) VALUES ('rebuild');
CREATE TRIGGER contacts_search_insert AFTER INSERT ON contacts BEGIN
    INSERT INTO contacts_search(rowid, email) VALUES (new.rowid, new.email);
END;
CREATE TRIGGER contacts_search_delete AFTER DELETE ON contacts BEGIN
    INSERT INTO contacts_search(contacts_search, rowid, email) VALUES ('delete', old.rowid, old.email);
END;
CREATE TRIGGER contacts_search_update AFTER UPDATE OF email ON contacts BEGIN
    INSERT INTO contacts_search(contacts_search, rowid, email) VALUES ('delete', old.rowid, old.email);
    INSERT INTO contacts_search(rowid, email) VALUES (new.rowid, new.email);
END;
