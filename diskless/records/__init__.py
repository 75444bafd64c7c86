"""Kafka record batch v2 (magic 2): header view, validation, rewrites and control batches.

A batch is the unit that moves through every stage: the broker validates it, copies it into a
WAL segment, and the read path hands it back. Its records are never changed, and its header only
where Kafka's broker changes it too; these four rewrites are the only ones the broker may make:
- the base offset, on read (outside the CRC);
- for LogAppendTime topics, the timestamp-type bit and maxTimestamp (the append time), on read,
  with a new CRC;
- for CreateTime topics, a client's maxTimestamp that is not its largest record timestamp (-1
  from older clients), set to it on produce with a new CRC (`with_max_timestamp`), as Kafka's
  LogValidator does; the WAL stores the fixed batch, so the time index, ListOffsets and every
  later read see the right value;
- for topics whose `compression.type` names a codec, a batch in another codec rebuilt in it (its
  records unchanged, only compressed anew, with a new CRC), as Kafka's LogValidator rebuilds it;
  a batch already in it is kept as written.
(A front end that bridges transaction version 1 clients also presents their batches at the
coordinator's producer epoch and sequences, `rewrite_producer_state`, before they reach produce.)
Parsing here never copies a batch that needs no rewrite and never raises on hostile input: every
problem is an `InvalidBatch` carrying the Kafka error the producer must see.
"""

from diskless.records._compression import (
    COMPRESSORS,
    DECOMPRESSED_BYTES_MAX,
    DECOMPRESSION_RATIO_MAX,
    DECOMPRESSORS,
    GZIP_LEVEL_DEFAULT,
    LZ4_LEVEL_DEFAULT,
    ZSTD_LEVEL_DEFAULT,
    compression_level_error,
    decompressed_bytes_max,
)
from diskless.records._control import (
    CONTROL_RECORD_VERSION,
    END_TXN_MARKER_VERSION,
    build_control_batch,
)
from diskless.records._header import (
    COMPRESSION_CODECS_MAX,
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_OVERHEAD_MIN,
    SEQUENCE_MAX,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidBatch,
    last_sequence,
    log_append_time_header,
    parse_batch,
    set_base_offset,
    set_log_append_time,
    split_batches,
    validate_client_batch,
    with_max_timestamp,
)
from diskless.records._produce import (
    TIMESTAMP_AFTER_MAX_MS_DEFAULT,
    TIMESTAMP_BEFORE_MAX_MS_DEFAULT,
    RecordRules,
    parse_produce_payload,
)
from diskless.records._rewrite import rewrite_producer_state
from diskless.records._timestamps import first_record_reaching
from diskless.records._walk import validate_records

__all__ = [
    "COMPRESSORS",
    "DECOMPRESSORS",
    "DECOMPRESSED_BYTES_MAX",
    "DECOMPRESSION_RATIO_MAX",
    "GZIP_LEVEL_DEFAULT",
    "LZ4_LEVEL_DEFAULT",
    "ZSTD_LEVEL_DEFAULT",
    "TIMESTAMP_AFTER_MAX_MS_DEFAULT",
    "TIMESTAMP_BEFORE_MAX_MS_DEFAULT",
    "RecordRules",
    "compression_level_error",
    "decompressed_bytes_max",
    "first_record_reaching",
    "validate_records",
    "COMPRESSION_CODECS_MAX",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "CONTROL_RECORD_VERSION",
    "DELETE_HORIZON_BIT",
    "END_TXN_MARKER_VERSION",
    "HEADER_SIZE",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LOG_OVERHEAD",
    "MAGIC",
    "RECORD_OVERHEAD_MIN",
    "SEQUENCE_MAX",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "BatchHeader",
    "InvalidBatch",
    "build_control_batch",
    "last_sequence",
    "log_append_time_header",
    "parse_batch",
    "parse_produce_payload",
    "set_base_offset",
    "set_log_append_time",
    "split_batches",
    "validate_client_batch",
    "with_max_timestamp",
    "rewrite_producer_state",
]
