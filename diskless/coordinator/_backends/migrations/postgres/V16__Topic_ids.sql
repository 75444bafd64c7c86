-- Each topic's id (KIP-516), random at creation; existing topics each get their own (a
-- volatile default is evaluated per row).
ALTER TABLE topics ADD COLUMN topic_uuid UUID NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE topics ALTER COLUMN topic_uuid DROP DEFAULT;
