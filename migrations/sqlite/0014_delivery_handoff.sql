-- Delivery that outlasts lost leases and outages:
-- `hand_off_token` is the claim that started an email's current hand-off; its outcome is
-- recorded keyed on it, whether or not that claim still owns the job.
-- `delivery_job_id` is the email's delivery job, so that a periodic sweep finds queued emails
-- whose job is gone (failed for good, or lost) and queues a new one.
ALTER TABLE emails ADD COLUMN hand_off_token TEXT;
ALTER TABLE emails ADD COLUMN delivery_job_id TEXT;
CREATE INDEX emails_queued ON emails(updated_at) WHERE status = 'queued';
