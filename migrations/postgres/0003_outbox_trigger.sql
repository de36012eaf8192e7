-- Every event gets its outbox row in the same statement, whoever writes it.
CREATE FUNCTION events_to_outbox() RETURNS trigger AS $$
BEGIN
    INSERT INTO event_outbox (event_id, project_id, available_at, attempts)
    VALUES (NEW.id, NEW.project_id, NEW.created_at, 0);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER events_to_outbox AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_to_outbox();
