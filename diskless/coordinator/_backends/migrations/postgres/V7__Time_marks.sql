-- A sparse time index (the time marks) for the two per-batch timestamp indexes.
DROP INDEX batches_by_timestamp;
DROP INDEX batches_by_running_max;
CREATE INDEX batches_time_marks ON batches (partition_id, ts_running_max, base_offset) WHERE (base_offset + 1023) / 1024 <= last_offset / 1024;
