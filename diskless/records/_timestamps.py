"""ListOffsets by time inside one batch: the first record at or after an offset whose timestamp
reaches a target, as Kafka's `FileRecords.searchForTimestamp` finds it in the batch it reads.

A batch read back from storage passed the full record walk when it was produced, so this walk
decodes only what it needs of each record (its length, timestamp delta and offset delta) and
skips the rest. It still never trusts the bytes: a record that does not frame is an
`InvalidBatch`, never an exception or a read past the records.
"""

from __future__ import annotations

from diskless._types import ErrorCode
from diskless.records._compression import DECOMPRESSED_BYTES_MAX, DECOMPRESSORS
from diskless.records._header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    InvalidBatch,
)
from diskless.records._varint import (
    VARINT_BYTES_MAX,
    VARLONG_BYTES_MAX,
    MalformedVarint,
    read_varint,
)


class _Malformed(Exception):
    pass


def first_record_reaching(
    header: BatchHeader, *, offset: int, timestamp: int
) -> tuple[int, int] | InvalidBatch | None:
    """(offset, timestamp) of the batch's first record whose offset is at least `offset` and
    whose timestamp is at least `timestamp`; None when no record of the batch is.

    A LogAppendTime batch stamps every record with its maxTimestamp (as Kafka's record iterator
    reads it), so its answer needs no record. A compressed batch is decompressed (within the
    absolute bound: it was within its topic's, smaller one, when produced). As in Kafka, a batch
    whose maxTimestamp is below `timestamp` is not read at all.
    """
    if header.max_timestamp < timestamp or header.last_offset < offset:
        return None
    if header.attributes & TIMESTAMP_TYPE_BIT:
        return max(offset, header.base_offset), header.max_timestamp
    buffer: bytes | memoryview = header.buffer
    start = header.position + HEADER_SIZE
    end = header.position + header.length + LOG_OVERHEAD
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        decompress = DECOMPRESSORS.get(codec)
        if decompress is None:
            return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"compression {codec}")
        records = decompress(buffer[start:end], DECOMPRESSED_BYTES_MAX)
        if isinstance(records, InvalidBatch):
            return records
        buffer, start, end = records, 0, len(records)
    try:
        return _walk(header, buffer, start, end, offset, timestamp)
    except (_Malformed, MalformedVarint) as e:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch at {header.base_offset}: {e}")


def _walk(
    header: BatchHeader,
    buffer: bytes | memoryview,
    position: int,
    end: int,
    offset: int,
    timestamp: int,
) -> tuple[int, int] | None:
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    for _ in range(header.records_count):
        length, position = read_varint(buffer, position, end, VARINT_BYTES_MAX)
        record_end = position + length
        if length < 0 or record_end > end:
            raise _Malformed(f"a record of {length} bytes at {position} crosses the records' end")
        position += 1  # attributes
        delta, position = read_varint(buffer, position, record_end, VARLONG_BYTES_MAX)
        offset_delta, position = read_varint(buffer, position, record_end, VARINT_BYTES_MAX)
        record_timestamp = base_timestamp + delta
        if base_offset + offset_delta >= offset and record_timestamp >= timestamp:
            return base_offset + offset_delta, record_timestamp
        position = record_end
    return None
