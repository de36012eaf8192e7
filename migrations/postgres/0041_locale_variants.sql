-- Content per locale (#78): a template's subject and body by BCP 47 tag, as a JSON object
-- `{ "fr": { "subject": …, "body": … }, … }`; NULL when it has none.
ALTER TABLE templates ADD COLUMN variants JSONB;
-- A campaign's subject and body by language, in the same shape (`localeVariants`).
ALTER TABLE campaigns ADD COLUMN locale_variants JSONB;
