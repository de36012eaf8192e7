-- Queued emails are their own delivery queue (host/src/jobs/deliver.rs): delivery workers claim
-- a project's due emails straight from this table, so a send writes no delivery job.
--
-- `due_at` is when a queued email may next be handed off: the time it was queued, a deferral's
-- retry time, or, while a hand-off holds it, the end of that hand-off's lease (which its
-- heartbeat extends), so that the queue's search passes over emails in flight. Workers list the
-- projects with queued email by a loose scan of `emails_due` (one seek a project) and take a
-- project's earliest due emails from it.
--
-- Emails queued before this migration become due now; their delivery jobs (queued or running)
-- go. An email whose hand-off was running keeps `handed_off_at`, which stops a new hand-off until
-- that one is stale, as before. The sweep that re-queued emails without a live delivery job is no
-- longer needed: an email no worker holds is due by itself. `delivery_job_id` is no longer
-- written; it stays for the previous release, which may run beside this one during a rolling
-- upgrade (emails it queues have no `due_at`, and maintenance makes them due).
ALTER TABLE emails ADD COLUMN due_at BIGINT;
UPDATE emails SET due_at = 0 WHERE status = 'queued';
DELETE FROM jobs WHERE kind = 'emails.deliver' AND state IN ('queued', 'running');
CREATE INDEX emails_due ON emails(project_id, due_at) WHERE status = 'queued';
