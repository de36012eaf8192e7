-- Topics (#78): what a project's contacts subscribe to one by one, beside the global
-- `subscribed` flag (docs/engagement.md, "Topics and the preference center"). A topic's
-- `default_subscription` is the state of a contact that made no choice: `OPT_IN` subscribed,
-- `OPT_OUT` not. It is fixed at creation, so a contact's state never changes without its own
-- choice. `visibility` `PUBLIC` lists it on the preference page, `PRIVATE` does not.
CREATE TABLE topics (
    id                   TEXT PRIMARY KEY,
    project_id           TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name                 TEXT NOT NULL,
    description          TEXT,
    default_subscription TEXT NOT NULL CHECK (default_subscription IN ('OPT_IN', 'OPT_OUT')),
    visibility           TEXT NOT NULL CHECK (visibility IN ('PUBLIC', 'PRIVATE')),
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);
CREATE INDEX topics_by_project ON topics (project_id, id);

-- A contact's own choices, `{ "top_…": true | false }`: a topic it never chose is absent and
-- takes the topic's default. Kept on the contact row so that every contact write (versioned,
-- grouped, multi-row) carries them with the rest of the contact; a deleted topic's key is
-- ignored wherever choices are read.
ALTER TABLE contacts ADD COLUMN topics JSONB NOT NULL DEFAULT '{}';

-- What a campaign and a template send is about: only contacts subscribed to the topic receive
-- it, and its one-click unsubscribe leaves that topic only.
ALTER TABLE campaigns ADD COLUMN topic_id TEXT;
ALTER TABLE templates ADD COLUMN topic_id TEXT;
