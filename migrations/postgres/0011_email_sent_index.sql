-- `/activity/stats` counts the distinct emails sent in a period and how many of them were
-- opened, clicked or bounced, by `sent_at`.
CREATE INDEX emails_project_sent ON emails(project_id, sent_at);
