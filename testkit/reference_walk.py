"""The record walk written a second time, in plain Python, as the reference for the C walk.

`diskless.records._cwalk.walk` runs in production; this copy states the same rules as directly as
Python allows (no fast paths), so that a differential test can hold the two against each other
and against kafka-python's decoder. Same signature and answer: None, the maxTimestamp a CreateTime
batch must carry when its own is not it, or (error code, message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from diskless._types import ErrorCode

_INT32_LIMIT: Final = 1 << 32
_INT64_LIMIT: Final = 1 << 64


class Malformed(Exception):
    """A structural fault in one record; the message is the reason."""


class _PastEnd(Exception):
    """A field overruns its record or the records section."""


class _Reader:
    def __init__(self, data: bytes, position: int, end: int) -> None:
        self.data = data
        self.position = position
        self.end = end

    def byte(self) -> int:
        if self.position >= self.end:
            raise _PastEnd
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self, max_bytes: int, limit: int) -> int:
        """Kafka's zigzag varint: at most `max_bytes` bytes, raw value below `limit`."""
        raw = 0
        for index in range(max_bytes):
            byte = self.byte()
            raw |= (byte & 0x7F) << (7 * index)
            if byte < 0x80:
                if raw >= limit:
                    raise Malformed("varint out of range")
                return (raw >> 1) ^ -(raw & 1)
        raise Malformed("varint too long")

    def int32(self) -> int:
        return self.varint(5, _INT32_LIMIT)

    def int64(self) -> int:
        return self.varint(10, _INT64_LIMIT)

    def skip(self, size: int) -> None:
        if size > self.end - self.position:
            raise _PastEnd
        self.position += size


Visitor = Callable[[int, int, list[bytes]], None]
"""Called with each well-formed record's timestamp delta, attributes byte and header keys."""


def _record(reader: _Reader, index: int, visit: Visitor | None) -> int:
    """One record's body (after its size); returns its timestamp delta."""
    attributes = reader.byte()  # ignored, as Kafka and librdkafka ignore them
    header_keys: list[bytes] = []
    delta = reader.int64()
    offset_delta = reader.int32()
    if offset_delta != index:
        raise _OffsetDelta(offset_delta)
    for field in ("key", "value"):
        size = reader.int32()
        if size < -1:
            raise Malformed(f"{field} size {size}")
        if size > 0:
            reader.skip(size)
    headers = reader.int32()
    if headers < 0:
        raise Malformed(f"header count {headers}")
    for _ in range(headers):
        key_size = reader.int32()
        if key_size == -1:
            raise Malformed("null header key")
        if key_size < 0:
            raise Malformed(f"negative header key size {key_size}")
        reader.skip(key_size)
        header_keys.append(reader.data[reader.position - key_size : reader.position])
        value_size = reader.int32()
        if value_size < -1:
            raise Malformed(f"header value size {value_size}")
        if value_size > 0:
            reader.skip(value_size)
    if visit is not None and reader.position == reader.end:
        visit(delta, attributes, header_keys)
    return delta


class _OffsetDelta(Exception):
    pass


def reference_walk(
    buffer: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    create_time: bool,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
    *,
    visit: Visitor | None = None,
) -> tuple[int, str] | int | None:
    """What `diskless.records._cwalk.walk` answers for the same arguments."""
    data = bytes(buffer)
    earliest = now_ms - before_max_ms
    latest = now_ms + after_max_ms
    outer = _Reader(data, start, end)
    deltas: list[int] = []
    first_bad: tuple[int, int] | None = None
    for index in range(count):
        try:
            size = outer.int32()
        except _PastEnd:
            return ErrorCode.INVALID_RECORD, f"record {index} runs past the batch end"
        except Malformed as fault:
            return ErrorCode.INVALID_RECORD, f"record {index}: {fault}"
        if size < 0:
            return ErrorCode.INVALID_RECORD, f"record {index}: record size {size}"
        if size > end - outer.position:
            return ErrorCode.INVALID_RECORD, f"record {index} runs past the batch end"
        reader = _Reader(data, outer.position, outer.position + size)
        outer.position += size
        wrong_size = (
            ErrorCode.INVALID_RECORD,
            f"record {index}: record body declares {size} bytes but holds a different size",
        )
        try:
            delta = _record(reader, index, visit)
        except _PastEnd:
            return wrong_size
        except Malformed as fault:
            return ErrorCode.INVALID_RECORD, f"record {index}: {fault}"
        except _OffsetDelta as fault:
            return (
                ErrorCode.INVALID_RECORD,
                f"record {index} has offset delta {fault.args[0]}; deltas must run 0..n-1",
            )
        if reader.position != reader.end:
            return wrong_size
        timestamp = base_timestamp + delta
        if create_time and timestamp != -1 and not earliest <= timestamp <= latest:
            first_bad = first_bad or (index, timestamp)
        deltas.append(delta)
    if outer.position != end or not deltas:
        return (
            ErrorCode.INVALID_RECORD,
            f"{end - outer.position} bytes follow the declared {count} records",
        )
    if first_bad is not None:
        index, timestamp = first_bad
        return (
            ErrorCode.INVALID_TIMESTAMP,
            f"record {index} timestamp {timestamp} is outside [{earliest}, {latest}]",
        )
    largest = max(-1, base_timestamp + max(deltas))  # Kafka's maximum starts at NO_TIMESTAMP
    if create_time and largest != max_timestamp:
        if largest >= _INT64_LIMIT // 2:
            return (
                ErrorCode.INVALID_RECORD,
                f"largest record timestamp {largest} is past the int64 range",
            )
        return largest
    return None
