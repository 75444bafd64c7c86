-- Extents, each the metadata of a run of batches consolidated into one object.
CREATE TABLE extents (
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
        index_byte_offset BIGINT NOT NULL,
        index_size BIGINT NOT NULL,
        PRIMARY KEY (partition_id, base_offset)
    );
