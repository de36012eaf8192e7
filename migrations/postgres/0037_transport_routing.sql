-- Transport routing (#77): a project and a sending domain may name the transport their mail
-- goes through (a `[transports.<name>]` of the settings or a transport plugin; NULL: the next
-- choice, the project's, then `plugins.transport`), and an email records the transport that
-- took it (after a failover, the fallback).
ALTER TABLE projects ADD COLUMN transport TEXT;
ALTER TABLE domains ADD COLUMN transport TEXT;
ALTER TABLE emails ADD COLUMN transport TEXT;
