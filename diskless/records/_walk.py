"""Record-level validation of a client batch: every record decoded, as Kafka's LogValidator does.

The broker stores the client's bytes unchanged, so a batch is accepted only when every consumer
can decode it as written: each record consumes exactly its declared length, the records number
exactly recordsCount and fill the batch, offset deltas run 0..n-1 and maxTimestamp is the largest
record timestamp. Kafka rewrites lastOffsetDelta and maxTimestamp when they are wrong; a broker that
keeps the client's bytes can only refuse such a batch (INVALID_RECORD).

Error codes follow Kafka: structural faults in records are `InvalidRecordException` there
(`DefaultRecord.readFrom`, "Incorrect declared batch size"), hence INVALID_RECORD; a timestamp
outside message.timestamp.before/after.max.ms is INVALID_TIMESTAMP; a payload that does not
decompress is CORRUPT_MESSAGE (Kafka answers UNKNOWN_SERVER_ERROR, which tells the producer less).

The walk is the hot path of every produce request, so it is written flat: locals only, one-byte
varints decoded inline, bounds left to `bytes` indexing (an IndexError means a truncated record).
"""

from __future__ import annotations

from typing import Final

from diskless._types import ErrorCode, TimestampType
from diskless.records._compression import CODEC_NAMES, DECOMPRESSORS, decompressed_bytes_max
from diskless.records._header import HEADER_SIZE, BatchHeader, InvalidBatch

NO_TIMESTAMP: Final = -1
"""Records carrying no timestamp are exempt from the bounds, as in Kafka."""
_INT32_LIMIT: Final = 1 << 32
_INT64_LIMIT: Final = 1 << 64


class _Malformed(Exception):
    """A structural fault found below the walk loop; its message is the reason."""


def _varint(data: bytes, position: int, limit: int) -> tuple[int, int]:
    """A zigzag varint of more than one byte at `position`: (value, next position).

    Stricter than Java's `ByteUtils.readVarint`, which silently drops bits past 32 (64 for
    varlong): such encodings come only from corrupt or hostile producers.
    """
    value = 0
    shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise _Malformed("varint too long")
    if value >= limit:
        raise _Malformed("varint out of range")
    return (value >> 1) ^ -(value & 1), position


def _skip_headers(data: bytes, position: int, count: int) -> int:
    """Past `count` record headers; a null (negative) key is invalid, a null value is not."""
    for _ in range(count):
        key_size, position = _varint(data, position, _INT32_LIMIT)
        if key_size < 0:
            raise _Malformed("null header key" if key_size == -1 else "negative header key size")
        position += key_size
        value_size, position = _varint(data, position, _INT32_LIMIT)
        if value_size < -1:
            raise _Malformed(f"header value size {value_size}")
        if value_size > 0:
            position += value_size
    return position


def walk_records(
    data: bytes, count: int, base_timestamp: int, earliest: int, latest: int
) -> int | InvalidBatch:
    """Check `count` records filling `data` exactly; return the largest record timestamp.

    Record timestamps (other than -1) must lie in [earliest, latest].
    """
    end = len(data)
    position = 0
    low = earliest - base_timestamp
    high = latest - base_timestamp
    absent = NO_TIMESTAMP - base_timestamp
    max_delta = None
    varint = _varint
    int32_limit = _INT32_LIMIT
    index = 0
    try:
        for index in range(count):
            byte = data[position]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                size, position = varint(data, position, int32_limit)
            if size < 0:
                raise _Malformed(f"record size {size}")
            body_end = position + size
            position += 1  # record attributes: unused in magic 2
            byte = data[position]
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                delta, position = varint(data, position, _INT64_LIMIT)
            byte = data[position]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                offset_delta, position = varint(data, position, int32_limit)
            if offset_delta != index:
                return InvalidBatch(
                    ErrorCode.INVALID_RECORD,
                    f"record {index} has offset delta {offset_delta}; deltas must run 0..n-1",
                )
            if (delta > high or delta < low) and delta != absent:
                return InvalidBatch(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"record {index} timestamp {base_timestamp + delta} is outside "
                    f"[{earliest}, {latest}]",
                )
            if max_delta is None or delta > max_delta:
                max_delta = delta
            byte = data[position]  # key length: -1 (null) or >= 0
            if byte < 0x80:
                position += 1
                if byte & 1:
                    if byte != 1:
                        raise _Malformed(f"key size {(byte >> 1) ^ -1}")
                else:
                    position += byte >> 1
            else:
                length, position = varint(data, position, int32_limit)
                if length < -1:
                    raise _Malformed(f"key size {length}")
                if length > 0:
                    position += length
            byte = data[position]  # value length: -1 (null) or >= 0
            if byte < 0x80:
                position += 1
                if byte & 1:
                    if byte != 1:
                        raise _Malformed(f"value size {(byte >> 1) ^ -1}")
                else:
                    position += byte >> 1
            else:
                length, position = varint(data, position, int32_limit)
                if length < -1:
                    raise _Malformed(f"value size {length}")
                if length > 0:
                    position += length
            byte = data[position]  # header count
            position += 1
            if byte:
                if byte < 0x80:
                    if byte & 1:
                        raise _Malformed(f"header count {(byte >> 1) ^ -1}")
                    position = _skip_headers(data, position, byte >> 1)
                else:
                    headers, position = varint(data, position - 1, int32_limit)
                    if headers < 0:
                        raise _Malformed(f"header count {headers}")
                    position = _skip_headers(data, position, headers)
            if position != body_end:
                raise _Malformed(f"record body declares {size} bytes but holds a different size")
    except IndexError:
        return InvalidBatch(ErrorCode.INVALID_RECORD, f"record {index} runs past the batch end")
    except _Malformed as fault:
        return InvalidBatch(ErrorCode.INVALID_RECORD, f"record {index}: {fault}")
    if position != end or max_delta is None:
        return InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"{end - position} bytes follow the declared {count} records",
        )
    return base_timestamp + max_delta


def validate_records(
    header: BatchHeader,
    *,
    max_message_bytes: int,
    timestamp_type: TimestampType,
    now_ms: int,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
) -> InvalidBatch | None:
    """Every record of a client batch whose header already passed `validate_client_batch`.

    For CreateTime topics each timestamp must lie in [now - before_max, now + after_max]
    (message.timestamp.before.max.ms / message.timestamp.after.max.ms) and maxTimestamp must be
    the largest record timestamp: Kafka would rewrite a wrong maxTimestamp, but these bytes are
    stored as sent, so a mismatch is INVALID_RECORD. LogAppendTime topics skip both, as Kafka
    does (their maxTimestamp is replaced when the batch is read).
    """
    start = header.position + HEADER_SIZE
    payload = header.buffer[start : header.position + header.size]
    codec = header.compression
    if codec:
        decompress = DECOMPRESSORS.get(codec)
        if decompress is None:
            return InvalidBatch(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression {codec}")
        data = decompress(payload, decompressed_bytes_max(max_message_bytes))
        if isinstance(data, InvalidBatch):
            return data
    else:
        data = bytes(payload)
    create_time = timestamp_type == TimestampType.CREATE_TIME
    if create_time:
        earliest = now_ms - timestamp_before_max_ms
        latest = now_ms + timestamp_after_max_ms
    else:
        earliest = -_INT64_LIMIT
        latest = _INT64_LIMIT
    max_timestamp = walk_records(
        data, header.records_count, header.base_timestamp, earliest, latest
    )
    if isinstance(max_timestamp, InvalidBatch):
        if codec and max_timestamp.error == ErrorCode.INVALID_RECORD:
            return InvalidBatch(
                max_timestamp.error, f"{CODEC_NAMES[codec]} batch: {max_timestamp.message}"
            )
        return max_timestamp
    if create_time and max_timestamp != header.max_timestamp:
        return InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"batch max timestamp {header.max_timestamp} is not the largest record "
            f"timestamp {max_timestamp}",
        )
    return None
