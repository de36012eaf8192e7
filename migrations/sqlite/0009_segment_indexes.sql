-- Segments at scale. The periodic re-evaluation of time-relative tracked segments
-- (`segments.reevaluate`, host/src/jobs/segments.rs) is one job for every instance sharing the
-- database: at most one is queued or running, so instances that each try to queue it at start
-- and in maintenance (`INSERT … ON CONFLICT DO NOTHING`) add no second one.
CREATE UNIQUE INDEX jobs_segments_reevaluate ON jobs(kind)
    WHERE kind = 'segments.reevaluate' AND state IN ('queued', 'running');
