"""Framing, the 61-byte header and its client checks, and the header rewrites (base offset and
LogAppendTime in place, a client's maxTimestamp on a copy); the package docstring says what a batch
goes through."""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

import crc32c

from diskless._types import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ErrorCode,
    TimestampType,
)

# Layout (KAFKA_SEMANTICS.md): all integers big-endian.
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE: Final = _HEADER.size
LOG_OVERHEAD: Final = 12
"""baseOffset + length: the bytes not counted by the length field."""
HEADER_SIZE_UP_TO_MAGIC: Final = 17
RECORD_OVERHEAD_MIN: Final = 14
"""Kafka's smallest legal `length` value (a v0 record); smaller means the framing is garbage."""
MAGIC: Final = 2
SEQUENCE_MAX: Final = 2**31 - 1

_BASE_OFFSET_AT: Final = 0
_LENGTH_AT: Final = 8
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
_MAX_TIMESTAMP_AT: Final = 35
_PRODUCER_ID_AT: Final = 43

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40
COMPRESSION_CODECS_MAX: Final = 4
"""none, gzip, snappy, lz4, zstd; 5 to 7 are not codecs."""

_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_UINT32: Final = struct.Struct(">I")

assert HEADER_SIZE == 61


class InvalidBatch(NamedTuple):
    """Why a batch was refused: the Kafka error for its partition and a message for humans."""

    error: ErrorCode
    message: str


class BatchHeader:
    """The 61-byte header of the batch at `buffer[position:]`, decoded once, bytes not copied.

    Construct through `parse_batch`, which checks the framing first; the fields are plain
    attributes so that hot paths read them without function calls.
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "buffer",
        "crc",
        "last_offset_delta",
        "length",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    buffer: memoryview
    position: int
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    def __init__(self, buffer: memoryview, position: int = 0) -> None:
        self.buffer = buffer
        self.position = position
        (
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = _HEADER.unpack_from(buffer, position)

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record, wrapping after 2147483647 to 0 as Kafka does."""
        return last_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_BIT
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    def bytes_view(self) -> memoryview:
        """The whole batch, as a view into the original buffer."""
        return self.buffer[self.position : self.position + self.size]

    def crc_valid(self) -> bool:
        """Whether the stored CRC-32C matches bytes 21..end (everything after the CRC field)."""
        start = self.position + _ATTRIBUTES_AT
        end = self.position + self.size
        return crc32c.crc32c(self.buffer[start:end]) == self.crc

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, size={self.size}, "
            f"records={self.records_count}, producer={self.producer_id}/{self.producer_epoch}, "
            f"base_sequence={self.base_sequence}, attributes={self.attributes:#x})"
        )


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence`: past 2147483647 the sequence wraps to 0.

    Written as Kafka writes it, not as `% 2**31`: the two differ for a negative base sequence
    other than -1 (possible in a batch without a producer id), where Kafka simply adds. Java's
    32-bit arithmetic is reproduced too, so that hostile fields still give an int32.
    """
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > _int32(SEQUENCE_MAX - last_offset_delta):
        return _int32(last_offset_delta - (SEQUENCE_MAX - base_sequence) - 1)
    return _int32(base_sequence + last_offset_delta)


def _int32(value: int) -> int:
    """`value` wrapped as Java's `int` arithmetic wraps it."""
    return ((value + 2**31) & 0xFFFFFFFF) - 2**31


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat view of unsigned bytes, so that lengths, indexing and slices count bytes."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def parse_batch(
    data: bytes | bytearray | memoryview, position: int = 0
) -> BatchHeader | InvalidBatch:
    """Frame the batch starting at `position`: length, truncation, magic. CRC is not checked."""
    buffer = _byte_view(data)
    if position < 0:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"negative batch position {position}")
    remaining = len(buffer) - position
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"{remaining} bytes cannot hold a batch")
    (length,) = _INT32.unpack_from(buffer, position + _LENGTH_AT)
    if length < RECORD_OVERHEAD_MIN:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch length {length} is too small")
    if length + LOG_OVERHEAD > remaining:
        return InvalidBatch(
            ErrorCode.CORRUPT_MESSAGE,
            f"batch of {length + LOG_OVERHEAD} bytes truncated to {remaining}",
        )
    magic = buffer[position + 16]
    if magic != MAGIC:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"unsupported magic {magic}")
    if length + LOG_OVERHEAD < HEADER_SIZE:
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch length {length} below v2 header")
    return BatchHeader(buffer, position)


def split_batches(data: bytes | bytearray | memoryview) -> list[BatchHeader] | InvalidBatch:
    """Frame every batch of a record set; the first framing error condemns the whole set."""
    buffer = _byte_view(data)
    headers: list[BatchHeader] = []
    position = 0
    while position < len(buffer):
        parsed = parse_batch(buffer, position)
        if isinstance(parsed, InvalidBatch):
            return parsed
        headers.append(parsed)
        position += parsed.size
    return headers


def validate_client_batch(header: BatchHeader, max_message_bytes: int) -> InvalidBatch | None:
    """Kafka's append-time checks of a producer's batch, in Kafka's order; None when valid.

    Record-level contents (keys, headers, compressed payloads) are not decoded: the broker
    stores batches opaquely and the CRC already guards their integrity.
    """
    # Fast path: when every check but the CRC passes, only the CRC can fail; otherwise the
    # ordered checks below find the first failure exactly as Kafka reports it.
    attributes = header.attributes
    producer_id = header.producer_id
    records_count = header.records_count
    if (
        header.length + LOG_OVERHEAD <= max_message_bytes
        and header.base_offset == 0
        and records_count > 0
        and header.last_offset_delta + 1 == records_count
        and not attributes & (CONTROL_BIT | TIMESTAMP_TYPE_BIT)
        and attributes & COMPRESSION_MASK <= COMPRESSION_CODECS_MAX
        and (producer_id <= NO_PRODUCER_ID or header.base_sequence >= 0)
        and (producer_id > NO_PRODUCER_ID or not attributes & TRANSACTIONAL_BIT)
    ):
        if header.crc_valid():
            return None
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "CRC-32C mismatch")
    if header.size > max_message_bytes:
        return InvalidBatch(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}",
        )
    if not header.crc_valid():
        return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "CRC-32C mismatch")
    if header.base_offset != 0:
        return InvalidBatch(
            ErrorCode.INVALID_RECORD, f"client batch has base offset {header.base_offset}, not 0"
        )
    if header.records_count <= 0:
        return InvalidBatch(ErrorCode.INVALID_RECORD, "batch holds no records")
    if header.last_offset_delta + 1 != header.records_count:
        return InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"last offset delta {header.last_offset_delta} does not match "
            f"{header.records_count} records",
        )
    if header.is_control:
        return InvalidBatch(ErrorCode.INVALID_RECORD, "clients may not send control batches")
    if header.compression > COMPRESSION_CODECS_MAX:
        return InvalidBatch(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression {header.compression}"
        )
    if header.attributes & TIMESTAMP_TYPE_BIT:
        return InvalidBatch(
            ErrorCode.INVALID_TIMESTAMP, "producers may not set the LogAppendTime attribute"
        )
    if header.has_producer_id and header.base_sequence < 0:
        return InvalidBatch(ErrorCode.INVALID_RECORD, "idempotent batch without a base sequence")
    if header.is_transactional and not header.has_producer_id:
        return InvalidBatch(ErrorCode.INVALID_RECORD, "transactional batch without a producer id")
    return None


def set_base_offset(batch: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Rewrite the base offset in place; it lies outside the CRC, so the CRC stays valid."""
    _INT64.pack_into(batch, position + _BASE_OFFSET_AT, base_offset)


def set_log_append_time(batch: bytearray | memoryview, append_time: int, position: int = 0) -> None:
    """Stamp LogAppendTime in place: the timestamp-type bit, maxTimestamp, and a new CRC.

    Kafka leaves baseTimestamp alone; readers take every record's timestamp from maxTimestamp.
    """
    view = _byte_view(batch)
    view[position : position + HEADER_SIZE] = log_append_time_header(view[position:], append_time)


def log_append_time_header(batch: bytes | bytearray | memoryview, append_time: int) -> bytearray:
    """The first HEADER_SIZE bytes of `batch` stamped with LogAppendTime (`set_log_append_time`),
    the CRC computed over them and the batch's records, the batch itself unchanged: a fetch
    serves this copy of the header followed by the rest of the stored batch, not copied."""
    view = _byte_view(batch)
    (length,) = _INT32.unpack_from(view, _LENGTH_AT)
    header = bytearray(view[:HEADER_SIZE])
    (attributes,) = _INT16.unpack_from(header, _ATTRIBUTES_AT)
    _INT16.pack_into(header, _ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(header, _MAX_TIMESTAMP_AT, append_time)
    crc = crc32c.crc32c(header[_ATTRIBUTES_AT:])
    crc = crc32c.crc32c(view[HEADER_SIZE : length + LOG_OVERHEAD], crc)
    _UINT32.pack_into(header, _CRC_AT, crc)
    return header


def with_max_timestamp(header: BatchHeader, max_timestamp: int) -> BatchHeader:
    """The batch of `header` carrying `max_timestamp`, its CRC recomputed: Kafka's LogValidator
    rewrite of a CreateTime batch whose maxTimestamp is not its largest record timestamp.

    A copy, made once in one join (the client's bytes may still be referenced by its request);
    every other byte is the client's. Only a batch whose CRC was valid may be rewritten, or the
    new CRC would hide its corruption.
    """
    view = header.bytes_view()
    stamp = _INT64.pack(max_timestamp)
    crc = crc32c.crc32c(view[_ATTRIBUTES_AT:_MAX_TIMESTAMP_AT])
    crc = crc32c.crc32c(view[_PRODUCER_ID_AT:], crc32c.crc32c(stamp, crc))
    batch = b"".join(
        (
            view[:_CRC_AT],
            _UINT32.pack(crc),
            view[_ATTRIBUTES_AT:_MAX_TIMESTAMP_AT],
            stamp,
            view[_PRODUCER_ID_AT:],
        )
    )
    return BatchHeader(memoryview(batch))
