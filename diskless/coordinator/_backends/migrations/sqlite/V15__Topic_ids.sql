-- Each topic's id (KIP-516), random at creation (32 hex digits); existing topics get one.
ALTER TABLE topics ADD COLUMN topic_uuid TEXT;
UPDATE topics SET topic_uuid = lower(hex(randomblob(16))) WHERE topic_uuid IS NULL;
