-- Opens and clicks are recorded once per email (the first one, in `email_events`) and counted
-- after that, so a recipient (or a proxy prefetching images) hitting `/t/o` and `/t/c` over and
-- over adds no rows.
ALTER TABLE emails ADD COLUMN open_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE emails ADD COLUMN click_count INTEGER NOT NULL DEFAULT 0;
