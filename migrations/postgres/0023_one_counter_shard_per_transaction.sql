-- Counter shards by transaction, not at random: a transaction that inserts many rows of one
-- project (a `/v1/send` to 50 new recipients, an import chunk) picked a random shard of
-- `contact_counts` and `usage_counters` for each row, so two such transactions locked shards in
-- different orders and deadlocked (seen under a benchmark: `deadlock detected`, a 500). Each
-- transaction now adds to the one shard its transaction id picks: it locks at most one shard per
-- counter, and concurrent transactions still spread over the 16. Only the functions change;
-- the tables and their meaning (a count is the sum of its shards) stay as they were.
CREATE OR REPLACE FUNCTION contact_counts_contact_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contact_counts (project_id, shard, n)
    VALUES (NEW.project_id, (txid_current() % 16)::int, 1)
    ON CONFLICT (project_id, shard) DO UPDATE SET n = contact_counts.n + 1;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION usage_meter(p_project TEXT, p_category TEXT) RETURNS void LANGUAGE plpgsql AS $$
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
    VALUES (p_project, v_period, p_category, (txid_current() % 16)::int, 1)
    ON CONFLICT (project_id, period, category, shard) DO UPDATE SET n = usage_counters.n + 1;
END $$;
