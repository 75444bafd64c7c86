-- Extents, each the metadata of a run of batches consolidated into one object.
CREATE TABLE extents (
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
        index_byte_offset INTEGER NOT NULL,
        index_size INTEGER NOT NULL,
        PRIMARY KEY (partition_id, base_offset)
    ) WITHOUT ROWID;
