-- Inbound mail (#76): a domain of a project may receive mail. With `inbound` set, its records
-- list an MX record at the domain itself pointing at `domains.mail_host`, checked with the
-- others; the SMTP server accepts mail for the domain's addresses once the domain is verified
-- and that record is found. The server looks the domain up by name, across projects, at each
-- `RCPT`: the partial index holds only the domains that receive.
ALTER TABLE domains ADD COLUMN inbound BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX domains_inbound ON domains(name) WHERE inbound;
