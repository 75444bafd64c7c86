-- Kafka topic configs a diskless topic accepts and does not apply, kept as given.
ALTER TABLE topics ADD COLUMN inapplicable_configs TEXT NOT NULL DEFAULT '';
