-- A project's suppression list: the addresses no email of the project is sent to, whatever its
-- kind (`/v1/send`, campaigns, workflows, test sends). An email to a listed address is written
-- `suppressed` with the entry's reason where it is committed (host/src/store/statements.rs) and
-- never handed to the transport. Entries come from hard bounces and complaints
-- (services/delivery_events.rs), from the soft-bounce rule below and from `POST /suppressions`;
-- `DELETE /suppressions/:email` removes one. `email` is stored lower-case. A project's reset
-- keeps its list (like its sending domains); its deletion removes it by cascade.
CREATE TABLE suppressions (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    email      TEXT NOT NULL,
    reason     TEXT NOT NULL CHECK (reason IN ('HARD_BOUNCE', 'COMPLAINT', 'MANUAL')),
    detail     TEXT,
    email_id   TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, email)
) WITHOUT ROWID;

-- The list, newest first (`GET /suppressions`, a cursor of (created_at, email)).
CREATE INDEX suppressions_by_time ON suppressions (project_id, created_at, email);

-- The soft bounces of each address not yet followed by a delivery to it: one row per email that
-- soft-bounced (so a report applied twice counts once). When `sending.soft_bounce_limit` of them
-- fall within `sending.soft_bounce_days`, the address is suppressed as a hard bounce and its rows
-- go; a delivery to the address deletes them, and older ones are pruned as new ones come.
CREATE TABLE soft_bounces (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    email      TEXT NOT NULL,
    email_id   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, email, email_id)
) WITHOUT ROWID;
