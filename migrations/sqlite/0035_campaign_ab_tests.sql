-- A/B tests of campaigns and sends at each contact's local time (#78 item 5).
--
-- `ab_test`: the test's variants (subject, body, from name), test fraction, winner metric and
-- duration, as JSON; NULL for a campaign without a test. `ab_decide_at`: when the winner is
-- chosen (set when the test group is in the ledger); `ab_winner` (0-based) and
-- `ab_decided_at` once chosen. `local_send_at`: for a send at each contact's local time, the
-- wall-clock time of `scheduledFor` (as unix ms read in UTC); NULL otherwise.
ALTER TABLE campaigns ADD COLUMN ab_test TEXT;
ALTER TABLE campaigns ADD COLUMN ab_decide_at BIGINT;
ALTER TABLE campaigns ADD COLUMN ab_winner INTEGER;
ALTER TABLE campaigns ADD COLUMN ab_decided_at BIGINT;
ALTER TABLE campaigns ADD COLUMN local_send_at BIGINT;

-- The variant a recipient of the test group was drawn for (0-based), written with the
-- recipient's ledger row; NULL for the rest of the audience (who get the winner).
ALTER TABLE campaign_recipients ADD COLUMN variant INTEGER;
