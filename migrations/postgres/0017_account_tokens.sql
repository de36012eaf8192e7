-- Single-use tokens the service mails to account holders (email verification, password reset).
-- Only a SHA-256 of the token is kept; `email` is the address it was sent to, so a verification
-- proves that address and no other.
CREATE TABLE account_tokens (
    token_hash TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    purpose    TEXT NOT NULL,
    email      TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at    BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX account_tokens_user ON account_tokens(user_id, purpose);
