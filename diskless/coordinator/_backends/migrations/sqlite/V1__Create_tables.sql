-- Topics, partitions, files, batches, producer state, broker epochs.
CREATE TABLE topics (
            topic_id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            partition_count INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            retention_ms INTEGER NOT NULL,
            retention_bytes INTEGER NOT NULL,
            max_message_bytes INTEGER NOT NULL
        );
CREATE TABLE partitions (
            partition_id INTEGER PRIMARY KEY,
            topic_id INTEGER NOT NULL,
            partition INTEGER NOT NULL,
            high_watermark INTEGER NOT NULL DEFAULT 0,
            log_start_offset INTEGER NOT NULL DEFAULT 0,
            size_bytes INTEGER NOT NULL DEFAULT 0,
            ts_running_max INTEGER NOT NULL DEFAULT -1,
            UNIQUE (topic_id, partition)
        );
-- state: 0 live, 1 unreferenced, 2 condemned.
CREATE TABLE files (
            file_id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            state INTEGER NOT NULL,
            size INTEGER NOT NULL,
            since_ms INTEGER NOT NULL,
            live_batches INTEGER NOT NULL
        );
CREATE INDEX files_dead ON files (since_ms, key) WHERE state <> 0;
CREATE TABLE batches (
            partition_id INTEGER NOT NULL,
            base_offset INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            file_id INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            size INTEGER NOT NULL,
            max_timestamp INTEGER NOT NULL,
            log_append_time INTEGER NOT NULL,
            timestamp INTEGER NOT NULL,
            ts_running_max INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            PRIMARY KEY (partition_id, base_offset)
        ) WITHOUT ROWID;
-- MAX_TIMESTAMP: the first batch among those with the largest timestamp.
CREATE INDEX batches_by_timestamp ON batches (partition_id, timestamp DESC, base_offset);
-- By timestamp: the running max grows with the offset, so the first entry >= ts answers.
CREATE INDEX batches_by_running_max ON batches (partition_id, ts_running_max, base_offset);
CREATE TABLE producers (
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            last_timestamp INTEGER NOT NULL,
            last_update_ms INTEGER NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            txn_first_offset INTEGER,
            batches BLOB NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        ) WITHOUT ROWID;
CREATE INDEX producers_idle ON producers (last_update_ms) WHERE txn_first_offset IS NULL;
CREATE TABLE brokers (broker_id INTEGER PRIMARY KEY, epoch INTEGER NOT NULL);
