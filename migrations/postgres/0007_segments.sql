-- Segments: a named set of a project's contacts. A DYNAMIC segment is defined by a filter
-- (`condition`, the herald-filter language) and evaluated live; a STATIC one by its stored
-- members. A dynamic segment with `track_membership` also stores its members, reconciled by
-- compute, so that entries and exits become events. `member_count` is the count cached by the
-- last compute, refresh or static change.

CREATE TABLE segments (
    id               TEXT PRIMARY KEY,
    project_id       TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    description      TEXT,
    type             TEXT NOT NULL CHECK (type IN ('DYNAMIC', 'STATIC')),
    condition        JSONB,
    track_membership BOOLEAN NOT NULL DEFAULT FALSE,
    member_count     BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX segments_project ON segments(project_id, id);

CREATE TABLE segment_members (
    segment_id TEXT NOT NULL REFERENCES segments(id) ON DELETE CASCADE,
    contact_id TEXT NOT NULL REFERENCES contacts(id) ON DELETE CASCADE,
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    added_at   BIGINT NOT NULL,
    PRIMARY KEY (segment_id, contact_id)
);
CREATE INDEX segment_members_contact ON segment_members(project_id, contact_id);
