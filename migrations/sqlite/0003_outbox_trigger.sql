-- Every event gets its outbox row in the same statement, whoever writes it.
CREATE TRIGGER events_to_outbox AFTER INSERT ON events
BEGIN
    INSERT INTO event_outbox (event_id, project_id, available_at, attempts)
    VALUES (NEW.id, NEW.project_id, NEW.created_at, 0);
END;
