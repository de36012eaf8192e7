-- A project's default sender, used by `/v1/send` when neither the request nor the template names
-- a `from` (so clients written for Plunk, which send without one, work unchanged).
ALTER TABLE projects ADD COLUMN default_from_email TEXT;
ALTER TABLE projects ADD COLUMN default_from_name TEXT;
