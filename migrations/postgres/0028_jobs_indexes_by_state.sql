-- Each of the queue's searches has an index of its own state only.
--
-- `jobs_ready (state, run_at)` held an entry for every job ever run, and it offered the planner
-- a second way to the queued jobs: in the PostgreSQL send benchmark, with statistics taken before
-- the burst, the queue's loose index scan (`MIN(queue) … WHERE state = 'queued'`) read every
-- queued job through it (8,452 of them, 24-34 ms a claim) instead of seeking
-- `jobs_queued_by_queue` once a queue. Now the queued jobs are reached only through
-- `jobs_queued_by_queue`, the running ones (expired leases, a claim's heartbeat, the claims in
-- flight of a throttled queue) through this partial index, and completed and failed jobs are in
-- neither, so no search of the queue grows with the jobs that have run. One index fewer is
-- also written on every claim and completion.
DROP INDEX jobs_ready;
CREATE INDEX jobs_running_by_lease ON jobs(locked_until) WHERE state = 'running';
