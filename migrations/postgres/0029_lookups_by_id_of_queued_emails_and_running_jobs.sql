-- The partial indexes of queued emails and of running jobs are keyed by id first.
--
-- Every write that ends a delivery names its email by id and also says `status = 'queued'`,
-- which is the predicate of the queued emails' partial index; a job's completion and heartbeat
-- name it by id and say `state = 'running'`, the running jobs' predicate. Keyed by `updated_at`
-- and `locked_until`, those indexes offered the planner a scan of every queued email (or
-- running job) filtered by id, and with statistics taken while few were queued PostgreSQL took
-- it: in the send benchmark each email's outcome read all 1,850 queued emails (2.8 ms, most of
-- the database's time), and each hand-off of 50 emails took 14 ms. Keyed by id, either index the
-- planner takes for such a write is one seek. The two periodic searches that used the old key
-- (queued emails left alone too long, once a minute; running jobs whose lease expired, bounded
-- by the workers' slots) now read the whole partial index, which holds only the work in flight.
DROP INDEX emails_queued;
CREATE INDEX emails_queued_by_id ON emails(id, updated_at) WHERE status = 'queued';
DROP INDEX jobs_running_by_lease;
CREATE INDEX jobs_running_by_id ON jobs(id, locked_until) WHERE state = 'running';
