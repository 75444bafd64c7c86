-- Committed consumer-group offsets (Kafka's __consumer_offsets).
CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset INTEGER NOT NULL,
            metadata TEXT,
            PRIMARY KEY (group_id, topic, partition)
        ) WITHOUT ROWID;
CREATE INDEX group_offsets_by_topic ON group_offsets (topic);
