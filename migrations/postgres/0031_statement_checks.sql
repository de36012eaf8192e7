-- A check inside one statement: `herald_require(ok, message)` raises an error with SQLSTATE
-- HR001 and `message` when `ok` is false. A statement that checks what it wrote this way, and
-- raises when it is not what it expected, writes nothing of itself, inside a transaction or
-- outside one: a group of sends that create their contacts is one statement run on its own
-- (host/src/store/group_commit.rs), which an address taken meanwhile must leave unwritten.
CREATE FUNCTION herald_require(ok boolean, message text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION USING ERRCODE = 'HR001', MESSAGE = message;
    END IF;
    RETURN ok;
END $$;
