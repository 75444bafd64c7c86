-- Per-topic compression (compression.type, -1 for "producer", and the codecs' levels).
ALTER TABLE topics ADD COLUMN compression_type INTEGER NOT NULL DEFAULT -1;
ALTER TABLE topics ADD COLUMN compression_gzip_level INTEGER NOT NULL DEFAULT -1;
ALTER TABLE topics ADD COLUMN compression_lz4_level INTEGER NOT NULL DEFAULT 9;
ALTER TABLE topics ADD COLUMN compression_zstd_level INTEGER NOT NULL DEFAULT 3;
