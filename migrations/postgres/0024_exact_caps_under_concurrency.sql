-- Caps hold exactly under concurrent writes.
--
-- `usage_meter_rows` compared the cap with the sum of the committed shards. Under READ COMMITTED
-- two transactions of one project that each wrote a row at once both saw the same sum (neither
-- saw the other's uncommitted shard), both passed, and a cap of 5 emails let 6 through (seen
-- under a test of 12 concurrent single-recipient sends).
--
-- Now, when the category has a cap, the project's `billing_limits` row is locked (`FOR NO KEY
-- UPDATE`, held to commit) before the sum is read. A second writer of the project waits there
-- until the first commits or rolls back; its next statement reads a fresh snapshot, so the sum
-- includes the first one's rows. One row per project is locked whatever the category, so two
-- transactions metering emails and contacts in opposite order cannot deadlock on it. Projects
-- without a cap take no lock and keep writing in parallel, as before.

CREATE OR REPLACE FUNCTION usage_meter_rows(p_project TEXT, p_category TEXT, p_rows BIGINT)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_period TEXT := to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM');
    v_cap BIGINT;
BEGIN
    SELECT CASE p_category WHEN 'emails' THEN emails WHEN 'contacts' THEN contacts ELSE events END
        INTO v_cap FROM billing_limits WHERE project_id = p_project;
    IF v_cap IS NOT NULL THEN
        -- Waits for any other transaction metering against this project's caps; the cap itself
        -- is read again under the lock, since it may have changed meanwhile.
        SELECT CASE p_category WHEN 'emails' THEN emails WHEN 'contacts' THEN contacts ELSE events END
            INTO v_cap FROM billing_limits WHERE project_id = p_project FOR NO KEY UPDATE;
        IF v_cap IS NOT NULL AND v_cap < p_rows + COALESCE((SELECT SUM(u.n) FROM usage_counters u
                WHERE u.project_id = p_project AND u.period = v_period
                  AND u.category = p_category), 0) THEN
            RAISE EXCEPTION 'herald_billing_limit:%', p_category;
        END IF;
    END IF;
    INSERT INTO usage_counters (project_id, period, category, shard, n)
    VALUES (p_project, v_period, p_category, (txid_current() % 16)::int, p_rows)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = usage_counters.n + EXCLUDED.n;
END $$;
