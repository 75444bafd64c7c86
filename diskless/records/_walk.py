"""Record-level validation of a client batch: every record decoded, as Kafka's LogValidator does.

The broker stores the client's records unchanged, so a batch is accepted only when every consumer
can decode it as written: each record consumes exactly its declared length, the records number
exactly recordsCount and fill the batch, and offset deltas run 0..n-1. One header field is fixed
rather than refused, as Kafka fixes it: a CreateTime batch's maxTimestamp becomes its largest
record timestamp, or -1 when none is larger (older clients, Sarama before 2025, send -1 there),
on a copy with a new CRC; a batch that needs no fix is never copied.

Error codes follow Kafka: structural faults in records are `InvalidRecordException` there
(`DefaultRecord.readFrom`, "Incorrect declared batch size"), hence INVALID_RECORD; a timestamp
outside message.timestamp.before/after.max.ms is INVALID_TIMESTAMP; a payload that does not
decompress is CORRUPT_MESSAGE (Kafka answers UNKNOWN_SERVER_ERROR, which tells the producer less).
A structural fault anywhere in the batch wins over a timestamp out of bounds, as in Kafka, whose
record iterator throws at once while timestamp errors are collected until the end.

Decoding follows `DefaultRecord.readFrom` (a varint of more than 5 bytes, a varlong of more than
10, a null or negative header key and a negative header count are refused there too). Two rules
go further: a key, value or header value size below -1 (Java reads null; librdkafka's length
check takes it for a huge size and fails the fetch), and a varint whose last byte carries bits
past 32 (64) bits, which clients read differently (Java drops them, librdkafka decodes 64 bits
before truncating, kafka-python keeps them), so the record has no single meaning. Record
attributes are ignored and header keys are not checked for UTF-8, as in Kafka and librdkafka.

A topic whose `compression.type` names a codec gets every batch in another codec rewritten in
it once its records are valid (`_recompress`); a batch already in it, and every batch of a topic
that keeps the producer's codec, is stored as written.

The walk over the records runs once per record of every produced batch, so it is C
(`_cwalk.c`); this module decompresses, calls it, and maps its answer to an `InvalidBatch`.
"""

from __future__ import annotations

from typing import Final

from diskless._types import ErrorCode, TimestampType
from diskless.records._compression import CODEC_NAMES, DECOMPRESSORS, decompressed_bytes_max
from diskless.records._header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    with_max_timestamp,
)
from diskless.records._recompress import recompress

try:
    from diskless.records._cwalk import walk
except ImportError as error:  # a checkout whose extension was never compiled
    raise ImportError(
        "diskless.records._cwalk is not built: `./run tests` or `pip install -e .` compiles it"
    ) from error

_CREATE_TIME: Final = TimestampType.CREATE_TIME
"""Bound once: an enum member lookup costs as much as walking a dozen records."""


def validate_records(
    header: BatchHeader,
    *,
    max_message_bytes: int,
    timestamp_type: TimestampType,
    now_ms: int,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
    compression: int = -1,
    compression_level: int = 0,
) -> BatchHeader | InvalidBatch:
    """Every record of a client batch whose header already passed `validate_client_batch`; the
    batch to store (`header` itself, unless its maxTimestamp was fixed or it was recompressed)
    or why it is refused.

    For CreateTime topics each timestamp must lie in [now - before_max, now + after_max]
    (message.timestamp.before.max.ms / message.timestamp.after.max.ms), and a maxTimestamp other
    than Kafka's (the largest record timestamp, at least -1) is rewritten to it. LogAppendTime
    topics skip both, as Kafka does (their maxTimestamp is the append time, stamped on read).
    `compression` is the topic's codec (-1: the producer's), `compression_level` its level.
    """
    return check_records(
        header,
        max_message_bytes,
        timestamp_type,
        now_ms,
        timestamp_before_max_ms,
        timestamp_after_max_ms,
        compression,
        compression_level,
    )


def check_records(
    header: BatchHeader,
    max_message_bytes: int,
    timestamp_type: TimestampType,
    now_ms: int,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
    compression: int,
    compression_level: int,
) -> BatchHeader | InvalidBatch:
    """`validate_records`, its arguments positional: produce calls it once per batch, where
    eight keywords cost as much as walking a few records."""
    buffer: bytes | memoryview = header.buffer
    start = header.position + HEADER_SIZE
    end = header.position + header.length + LOG_OVERHEAD
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        decompress = DECOMPRESSORS.get(codec)
        if decompress is None:
            return InvalidBatch(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression {codec}")
        records = decompress(buffer[start:end], decompressed_bytes_max(max_message_bytes))
        if isinstance(records, InvalidBatch):
            return records
        buffer, start, end = records, 0, len(records)
    problem = walk(
        buffer,
        start,
        end,
        header.records_count,
        header.base_timestamp,
        header.max_timestamp,
        timestamp_type == _CREATE_TIME,
        now_ms,
        timestamp_before_max_ms,
        timestamp_after_max_ms,
    )
    if problem is None or isinstance(problem, int):
        if compression < 0 or compression == codec:  # stored as written
            return header if problem is None else with_max_timestamp(header, problem)
        return recompress(
            header,
            buffer[start:end],
            codec=compression,
            level=compression_level,
            max_timestamp=header.max_timestamp if problem is None else problem,
            max_message_bytes=max_message_bytes,
        )
    code, message = problem
    if codec and code == ErrorCode.INVALID_RECORD:
        message = f"{CODEC_NAMES[codec]} batch: {message}"
    return InvalidBatch(ErrorCode(code), message)
