-- Campaigns: one message to an audience (every subscribed contact, a segment's members, or the
-- contacts a filter selects). At send time the audience is snapshotted into
-- `campaign_recipients` in chunks, each chunk one transaction that also moves the checkpoint
-- (`snapshot_after`, the last contact id taken) and queues the chunk's delivery batch, so a
-- crash resumes where it stopped. A recipient row moves from `pending` to `queued` (its email
-- written in the same transaction), `suppressed` (unsubscribed since the snapshot), `skipped`
-- (the contact was deleted) or `cancelled` exactly once.

CREATE TABLE campaigns (
    id              TEXT PRIMARY KEY,
    project_id      TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    description     TEXT,
    subject         TEXT NOT NULL,
    body            TEXT NOT NULL,
    from_email      TEXT NOT NULL,
    from_name       TEXT,
    reply_to        TEXT,
    audience_type   TEXT NOT NULL CHECK (audience_type IN ('ALL', 'SEGMENT', 'FILTERED')),
    segment_id      TEXT,
    audience_filter JSONB,
    status          TEXT NOT NULL,
    scheduled_at    BIGINT,
    started_at      BIGINT,
    finished_at     BIGINT,
    failure_reason  TEXT,
    snapshot_after  TEXT,
    snapshot_done   BOOLEAN NOT NULL DEFAULT FALSE,
    batches         INTEGER NOT NULL DEFAULT 0,
    recipient_count BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX campaigns_project ON campaigns(project_id, id);
CREATE INDEX campaigns_segment ON campaigns(segment_id) WHERE segment_id IS NOT NULL;

CREATE TABLE campaign_recipients (
    campaign_id TEXT NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    contact_id  TEXT NOT NULL,
    batch       INTEGER NOT NULL,
    status      TEXT NOT NULL,
    email_id    TEXT,
    PRIMARY KEY (campaign_id, contact_id)
);
CREATE INDEX campaign_recipients_batch ON campaign_recipients(campaign_id, batch, status, contact_id);

-- The campaign an email belongs to (its stats), and test sends, which no statistic counts.
ALTER TABLE emails ADD COLUMN campaign_id TEXT;
ALTER TABLE emails ADD COLUMN test BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX emails_campaign ON emails(campaign_id, status) WHERE campaign_id IS NOT NULL;
