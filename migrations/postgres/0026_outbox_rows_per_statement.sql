-- The outbox row of every event, written by one INSERT per statement that inserts events instead
-- of one PL/pgSQL call and one INSERT per event row: a group of tracked events, a send's
-- subscription events or a compute chunk's entries are one multi-row insert, and their outbox
-- rows follow in one statement too.
DROP TRIGGER events_to_outbox ON events;
DROP FUNCTION events_to_outbox();

CREATE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_outbox (event_id, project_id, available_at, attempts)
    SELECT id, project_id, created_at, 0 FROM new_events;
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_to_outbox AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_to_outbox();
