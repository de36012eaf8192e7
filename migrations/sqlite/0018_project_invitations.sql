-- Invitations to a project for addresses without an account: the invitee signs up through the
-- mailed link (`POST /auth/signup` with `invitation`), and the membership is created then. Only a
-- SHA-256 of the link's token is kept; one pending invitation per project and address.
CREATE TABLE project_invitations (
    token_hash  TEXT PRIMARY KEY,
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    email       TEXT NOT NULL,
    role        TEXT NOT NULL,
    invited_by  TEXT REFERENCES users(id) ON DELETE SET NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX project_invitations_address ON project_invitations(project_id, email);
