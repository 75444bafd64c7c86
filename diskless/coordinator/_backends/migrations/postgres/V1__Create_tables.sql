-- Topics, partitions, files, batches (markers included: file_id 0, no file), producer
-- state, broker epochs, counters, transaction registrations, leases (the commit barrier),
-- the ongoing (LSO) and aborted indexes, transaction records, committed group offsets.
CREATE TABLE topics (
            topic_id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            partition_count INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            retention_ms BIGINT NOT NULL,
            retention_bytes BIGINT NOT NULL,
            max_message_bytes BIGINT NOT NULL,
            timestamp_before_max_ms BIGINT NOT NULL,
            timestamp_after_max_ms BIGINT NOT NULL
        );
CREATE TABLE partitions (
            partition_id BIGSERIAL PRIMARY KEY,
            topic_id BIGINT NOT NULL,
            partition INTEGER NOT NULL,
            high_watermark BIGINT NOT NULL DEFAULT 0,
            log_start_offset BIGINT NOT NULL DEFAULT 0,
            size_bytes BIGINT NOT NULL DEFAULT 0,
            ts_running_max BIGINT NOT NULL DEFAULT -1,
            UNIQUE (topic_id, partition)
        );
-- state: 0 live, 1 unreferenced, 2 condemned.
CREATE TABLE files (
            file_id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            state SMALLINT NOT NULL,
            size BIGINT NOT NULL,
            since_ms BIGINT NOT NULL,
            live_batches BIGINT NOT NULL
        );
CREATE INDEX files_dead ON files (since_ms, key) WHERE state <> 0;
CREATE TABLE batches (
            partition_id BIGINT NOT NULL,
            base_offset BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            file_id BIGINT NOT NULL,
            byte_offset BIGINT NOT NULL,
            size BIGINT NOT NULL,
            max_timestamp BIGINT NOT NULL,
            log_append_time BIGINT NOT NULL,
            timestamp BIGINT NOT NULL,
            ts_running_max BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            control INTEGER NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            PRIMARY KEY (partition_id, base_offset)
        );
-- MAX_TIMESTAMP: the first batch among those with the largest timestamp.
CREATE INDEX batches_by_timestamp ON batches (partition_id, timestamp DESC, base_offset);
-- By timestamp: the running max grows with the offset, so the first entry >= ts answers.
CREATE INDEX batches_by_running_max ON batches (partition_id, ts_running_max, base_offset);
CREATE TABLE producers (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            last_timestamp BIGINT NOT NULL,
            last_update_ms BIGINT NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            txn_first_offset BIGINT,
            batches BYTEA NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        );
CREATE INDEX producers_idle ON producers (last_update_ms) WHERE txn_first_offset IS NULL;
CREATE TABLE brokers (broker_id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL);
CREATE TABLE meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
CREATE TABLE txn_registrations (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            ending BOOLEAN NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        );
CREATE TABLE txn_leases (
            lease_id BIGSERIAL PRIMARY KEY,
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            expires_ms BIGINT NOT NULL
        );
CREATE INDEX txn_leases_by_producer ON txn_leases (partition_id, producer_id);
CREATE TABLE ongoing_txns (
            partition_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            PRIMARY KEY (partition_id, first_offset)
        );
CREATE TABLE aborted_txns (
            partition_id BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            lso BIGINT NOT NULL,
            PRIMARY KEY (partition_id, last_offset)
        );
CREATE TABLE txn_records (
            transactional_id TEXT PRIMARY KEY,
            record BYTEA NOT NULL,
            due_ms BIGINT
        );
CREATE INDEX txn_records_due ON txn_records (due_ms) WHERE due_ms IS NOT NULL;
CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset BIGINT NOT NULL,
            metadata TEXT,
            PRIMARY KEY (group_id, topic, partition)
        );
CREATE INDEX group_offsets_by_topic ON group_offsets (topic);
CREATE TABLE broker_registrations (
            broker_id INTEGER PRIMARY KEY,
            broker_epoch INTEGER NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            expires_ms BIGINT NOT NULL
        );
