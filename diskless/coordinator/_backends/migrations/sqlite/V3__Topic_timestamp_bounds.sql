-- Per-topic timestamp bounds (message.timestamp.before/after.max.ms, Kafka's defaults).
ALTER TABLE topics ADD COLUMN timestamp_before_max_ms INTEGER NOT NULL DEFAULT 9223372036854775807;
ALTER TABLE topics ADD COLUMN timestamp_after_max_ms INTEGER NOT NULL DEFAULT 3600000;
