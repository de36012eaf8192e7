-- Counters without deadlocks and without long update chains.
--
-- `contact_counts` and billing's `usage_counters` were kept by row triggers adding to a random
-- one of 16 shards per row. A transaction that inserts many rows of one project (a `/v1/send` to
-- 50 new recipients, an import chunk) therefore locked several shards in random order, and two
-- such transactions deadlocked (seen under a benchmark: `deadlock detected`, a 500). And an
-- `INSERT … SELECT` of many rows updated the same few counter rows once per row inside one
-- transaction, whose row versions cannot be pruned before it commits, so the cost grew with the
-- square of the rows.
--
-- Now the triggers run once per statement over its transition table, adding the statement's
-- count per project in one upsert, to the one shard the transaction id picks: a transaction
-- locks at most one shard per counter (concurrent transactions still spread over the 16), and a
-- statement of a million rows is one counter update. Caps are checked per statement: a
-- statement whose rows would pass the cap is refused whole, which for the one-row statements the
-- service writes is the rule as before. The tables and their meaning (a count is the sum of its
-- shards) stay as they were.

DROP TRIGGER contact_counts_contact_added ON contacts;
DROP TRIGGER contact_counts_contact_removed ON contacts;
DROP TRIGGER usage_emails ON emails;
DROP TRIGGER usage_contacts ON contacts;
DROP TRIGGER usage_events ON events;

CREATE FUNCTION contact_counts_contacts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_counts (project_id, shard, n)
    SELECT project_id, (txid_current() % 16)::int, COUNT(*) FROM added_contacts
    GROUP BY project_id ORDER BY project_id
    ON CONFLICT (project_id, shard) DO UPDATE SET n = contact_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_counts_contacts_added AFTER INSERT ON contacts
    REFERENCING NEW TABLE AS added_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_contacts_added();

CREATE FUNCTION contact_counts_contacts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE contact_counts c SET n = c.n - r.n
    FROM (SELECT project_id, COUNT(*) AS n FROM removed_contacts GROUP BY project_id) r
    WHERE c.project_id = r.project_id AND c.shard = 0;
    RETURN NULL;
END $$;

CREATE TRIGGER contact_counts_contacts_removed AFTER DELETE ON contacts
    REFERENCING OLD TABLE AS removed_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_contacts_removed();

-- Refuses the statement when its `p_rows` rows would pass the project's cap of `p_category`
-- (the store maps the message `herald_billing_limit:<category>` to 429 BILLING_LIMIT_EXCEEDED)
-- and counts them otherwise.
CREATE FUNCTION usage_meter_rows(p_project TEXT, p_category TEXT, p_rows BIGINT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_period TEXT := to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM');
    v_cap BIGINT;
BEGIN
    SELECT CASE p_category WHEN 'emails' THEN emails WHEN 'contacts' THEN contacts ELSE events END
        INTO v_cap FROM billing_limits WHERE project_id = p_project;
    IF v_cap IS NOT NULL AND v_cap < p_rows + COALESCE((SELECT SUM(u.n) FROM usage_counters u
            WHERE u.project_id = p_project AND u.period = v_period
              AND u.category = p_category), 0) THEN
        RAISE EXCEPTION 'herald_billing_limit:%', p_category;
    END IF;
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (p_project, v_period, p_category, (txid_current() % 16)::int, p_rows)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = usage_counters.n + EXCLUDED.n;
END $$;

CREATE FUNCTION usage_emails_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter_rows(project_id, 'emails', COUNT(*)) FROM added_emails
        WHERE status <> 'suppressed' GROUP BY project_id ORDER BY project_id;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_emails_added AFTER INSERT ON emails
    REFERENCING NEW TABLE AS added_emails
    FOR EACH STATEMENT EXECUTE FUNCTION usage_emails_added();

CREATE FUNCTION usage_contacts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter_rows(project_id, 'contacts', COUNT(*)) FROM added_contacts
        GROUP BY project_id ORDER BY project_id;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_contacts_added AFTER INSERT ON contacts
    REFERENCING NEW TABLE AS added_contacts
    FOR EACH STATEMENT EXECUTE FUNCTION usage_contacts_added();

-- Only events the project tracks count; the service's own (`email.*`, `segment.*`,
-- `contact.subscribed`, `contact.unsubscribed`) do not.
CREATE FUNCTION usage_events_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM usage_meter_rows(project_id, 'events', COUNT(*)) FROM added_events
        WHERE name NOT LIKE 'email.%' AND name NOT LIKE 'segment.%'
          AND name NOT IN ('contact.subscribed', 'contact.unsubscribed')
        GROUP BY project_id ORDER BY project_id;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_events_added AFTER INSERT ON events
    REFERENCING NEW TABLE AS added_events
    FOR EACH STATEMENT EXECUTE FUNCTION usage_events_added();
