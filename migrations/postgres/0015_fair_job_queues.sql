-- Fair claims across projects and job kinds (host/src/jobs/fairness.rs):
-- `queue` names the queue a job waits in, `<project id> <kind>` (an empty project for system
-- jobs). Workers list the queues with due work by a loose index scan over this index (one seek
-- per queue, however long each queue is) and take jobs from them in turn, so one project's
-- backlog never delays another's first job.
ALTER TABLE jobs ADD COLUMN queue TEXT NOT NULL DEFAULT '';
UPDATE jobs SET queue = COALESCE(project_id, '') || ' ' || kind;
CREATE INDEX jobs_queued_by_queue ON jobs(queue, run_at) WHERE state = 'queued';
