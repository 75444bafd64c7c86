"""Kafka record batch v2 (magic 2): header view, validation, rewrites and control batches.

A batch is the unit that moves through every stage untouched: the broker validates it, copies it
byte-for-byte into a WAL segment, and the read path hands the same bytes back with only the base
offset (outside the CRC) and, for LogAppendTime topics, the timestamp rewritten. Parsing here never
copies a batch and never raises on hostile input: every problem is an `InvalidBatch` carrying the
Kafka error the producer must see.
"""

from diskless.records._compression import (
    DECOMPRESSED_BYTES_MAX,
    DECOMPRESSION_RATIO_MAX,
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
    parse_batch,
    set_base_offset,
    set_log_append_time,
    split_batches,
    validate_client_batch,
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
    "DECOMPRESSED_BYTES_MAX",
    "DECOMPRESSION_RATIO_MAX",
    "TIMESTAMP_AFTER_MAX_MS_DEFAULT",
    "TIMESTAMP_BEFORE_MAX_MS_DEFAULT",
    "RecordRules",
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
    "parse_batch",
    "parse_produce_payload",
    "set_base_offset",
    "set_log_append_time",
    "split_batches",
    "validate_client_batch",
    "rewrite_producer_state",
]
