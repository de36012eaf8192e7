-- A segment count reads an event condition as one set: the contacts with events of a name since
-- a time (`c.id IN (SELECT contact_id FROM events WHERE project_id = … AND name = … AND
-- created_at >= …)`). This index answers that from the index alone, in time order.
CREATE INDEX events_project_name_time ON events(project_id, name, created_at, contact_id);
