-- What the dashboard reads (#79). A contact's executions of every workflow, newest first
-- (`GET /contacts/:id/executions`): one range of this index a page.
CREATE INDEX workflow_executions_by_contact ON workflow_executions(project_id, contact_id, id);
-- Where a step is drawn on the workflow canvas (`position` of a step): NULL when never placed.
ALTER TABLE workflow_steps ADD COLUMN position_x DOUBLE PRECISION;
ALTER TABLE workflow_steps ADD COLUMN position_y DOUBLE PRECISION;
