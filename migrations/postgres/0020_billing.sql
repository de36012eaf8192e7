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
-- shards: writers add to one of 16 picked at random, so concurrent writers of one project
-- rarely wait on each other's row lock.
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

-- Refuses the row when the project's cap of `category` is reached (the store maps the message
-- `herald_billing_limit:<category>` to 429 BILLING_LIMIT_EXCEEDED) and counts it otherwise.
-- Concurrent transactions of one project do not see each other's uncommitted counts, so under
-- concurrency a cap may be passed by the rows in flight at once.
CREATE FUNCTION usage_meter(p_project TEXT, p_category TEXT) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_period TEXT := to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM');
    v_cap BIGINT;
BEGIN
    SELECT CASE p_category WHEN 'emails' THEN emails WHEN 'contacts' THEN contacts ELSE events END
        INTO v_cap FROM billing_limits WHERE project_id = p_project;
    IF v_cap IS NOT NULL AND v_cap <= COALESCE((SELECT SUM(u.n) FROM usage_counters u
            WHERE u.project_id = p_project AND u.period = v_period
              AND u.category = p_category), 0) THEN
        RAISE EXCEPTION 'herald_billing_limit:%', p_category;
    END IF;
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (p_project, v_period, p_category, floor(random() * 16)::int, 1)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = usage_counters.n + 1;
END $$;

CREATE FUNCTION usage_emails() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter(NEW.project_id, 'emails');
    RETURN NULL;
END $$;

CREATE TRIGGER usage_emails AFTER INSERT ON emails
    FOR EACH ROW WHEN (NEW.status <> 'suppressed') EXECUTE FUNCTION usage_emails();

CREATE FUNCTION usage_contacts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter(NEW.project_id, 'contacts');
    RETURN NULL;
END $$;

CREATE TRIGGER usage_contacts AFTER INSERT ON contacts
    FOR EACH ROW EXECUTE FUNCTION usage_contacts();

-- Only events the project tracks count; the service's own (`email.*`, `segment.*`,
-- `contact.subscribed`, `contact.unsubscribed`) do not.
CREATE FUNCTION usage_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter(NEW.project_id, 'events');
    RETURN NULL;
END $$;

CREATE TRIGGER usage_events AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.name NOT LIKE 'email.%' AND NEW.name NOT LIKE 'segment.%'
                       AND NEW.name NOT IN ('contact.subscribed', 'contact.unsubscribed'))
    EXECUTE FUNCTION usage_events();
