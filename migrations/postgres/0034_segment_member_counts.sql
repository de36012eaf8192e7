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

-- `GET /contacts?search=` matches a substring of the address anywhere (`email LIKE '%term%'`):
-- a trigram index (pg_trgm, a trusted extension: the database's owner may create it) serves it
-- for a term of 3 characters or more. The extension goes where it already is, or in `public`.
CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
DO $$
DECLARE
    ext_schema text;
BEGIN
    SELECT n.nspname INTO ext_schema FROM pg_extension e
    JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX contacts_email_trgm ON contacts USING gin (email %I.gin_trgm_ops)',
                   ext_schema);
END;
$$;
