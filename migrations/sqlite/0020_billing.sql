-- Billing: per-project caps, usage metered by triggers in the transactions that create the work,
-- and the subscription state the billing plugin's webhooks report.

-- Caps per category for the current period; NULL means no cap.
CREATE TABLE billing_limits (
    project_id TEXT PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
    emails     BIGINT,
    contacts   BIGINT,
    events     BIGINT,
    updated_at BIGINT NOT NULL
);

-- Usage per calendar month (UTC, `YYYY-MM`) and category; a category's use is the sum of its
-- shards (PostgreSQL spreads writers over 16; SQLite's single writer uses shard 0).
CREATE TABLE usage_counters (
    project_id TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    period     TEXT NOT NULL,
    category   TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (project_id, period, category, shard)
);

-- The subscription as the billing provider last reported it.
CREATE TABLE project_billing (
    project_id TEXT PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
    plan       TEXT,
    status     TEXT NOT NULL,
    detail     TEXT NOT NULL DEFAULT '{}',
    updated_at BIGINT NOT NULL
);

-- Each trigger refuses the row when the cap is reached (the store maps the message
-- `herald_billing_limit:<category>` to 429 BILLING_LIMIT_EXCEEDED) and counts it otherwise.
CREATE TRIGGER usage_emails AFTER INSERT ON emails WHEN NEW.status <> 'suppressed'
BEGIN
    SELECT RAISE(ABORT, 'herald_billing_limit:emails')
    WHERE (SELECT emails FROM billing_limits WHERE project_id = NEW.project_id)
          <= COALESCE((SELECT SUM(n) FROM usage_counters WHERE project_id = NEW.project_id
                       AND period = strftime('%Y-%m', 'now') AND category = 'emails'), 0);
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (NEW.project_id, strftime('%Y-%m', 'now'), 'emails', 0, 1)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER usage_contacts AFTER INSERT ON contacts
BEGIN
    SELECT RAISE(ABORT, 'herald_billing_limit:contacts')
    WHERE (SELECT contacts FROM billing_limits WHERE project_id = NEW.project_id)
          <= COALESCE((SELECT SUM(n) FROM usage_counters WHERE project_id = NEW.project_id
                       AND period = strftime('%Y-%m', 'now') AND category = 'contacts'), 0);
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (NEW.project_id, strftime('%Y-%m', 'now'), 'contacts', 0, 1)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = n + 1;
END;

-- Only events the project tracks count; the service's own (`email.*`, `segment.*`,
-- `contact.subscribed`, `contact.unsubscribed`) do not.
CREATE TRIGGER usage_events AFTER INSERT ON events
WHEN NEW.name NOT LIKE 'email.%' AND NEW.name NOT LIKE 'segment.%'
     AND NEW.name NOT IN ('contact.subscribed', 'contact.unsubscribed')
BEGIN
    SELECT RAISE(ABORT, 'herald_billing_limit:events')
    WHERE (SELECT events FROM billing_limits WHERE project_id = NEW.project_id)
          <= COALESCE((SELECT SUM(n) FROM usage_counters WHERE project_id = NEW.project_id
                       AND period = strftime('%Y-%m', 'now') AND category = 'events'), 0);
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (NEW.project_id, strftime('%Y-%m', 'now'), 'events', 0, 1)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = n + 1;
END;
