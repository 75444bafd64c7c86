"""One batch's records as the cleaner reads them, and the batches it writes back.

The cleaner decides per record from three things: its offset delta, its key and whether its
value is null. `records_of` walks a batch's records (decompressed first) and yields exactly
those, with where each record lies, so that a kept record is copied byte for byte. The batches
read back from storage passed the full record walk when produced; still, a record that does not
frame raises `UncleanableBatch` rather than reading past the records.

`rebuilt` writes the batch Kafka's `MemoryRecords.filterTo` writes for the records kept: the
original base offset and last offset delta (so that the producer's last sequence survives and
readers see the gaps), producer id, epoch, base sequence, partition leader epoch, timestamp type,
transactional and control flags; the kept records in the batch's own codec at its default level;
a new record count, maxTimestamp and CRC. Its baseTimestamp stays (Kafka's builder takes the
first kept record's; every record reads the same timestamp either way). A batch gaining a delete
horizon (KIP-534) carries it
in baseTimestamp with attribute bit 6, and its records' timestamp deltas are rewritten against
it, so that every record keeps its timestamp. `empty_batch` is Kafka's `writeEmptyHeader`: the
header alone, kept to preserve a producer's last sequence and epoch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

import crc32c

from diskless.compaction import _native
from diskless.records import (
    COMPRESSION_MASK,
    COMPRESSORS,
    CONTROL_BIT,
    DECOMPRESSED_BYTES_MAX,
    DECOMPRESSORS,
    DELETE_HORIZON_BIT,
    GZIP_LEVEL_DEFAULT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    LZ4_LEVEL_DEFAULT,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    VARINT_BYTES_MAX,
    VARLONG_BYTES_MAX,
    ZSTD_LEVEL_DEFAULT,
    BatchHeader,
    InvalidBatch,
    MalformedVarint,
    read_varint,
    zigzag,
)

_LEVELS: Final = {1: GZIP_LEVEL_DEFAULT, 2: 0, 3: LZ4_LEVEL_DEFAULT, 4: ZSTD_LEVEL_DEFAULT}
"""Each codec's default level: Kafka's cleaner rebuilds with `Compression.of(type).build()`."""
_PREFIX: Final = struct.Struct(">qiib")
"""baseOffset, length, partitionLeaderEpoch, magic: the bytes before the CRC."""
_AFTER_CRC: Final = struct.Struct(">hiqqqhii")
"""attributes … recordsCount: the CRC-covered rest of the header."""
_CONTROL_KEY: Final = struct.Struct(">hh")
NO_TIMESTAMP: Final = -1


class UncleanableBatch(Exception):
    """A batch read back for cleaning does not decode: the stored bytes are corrupt, and the
    pass must stop without writing anything (an infrastructure failure, as a failed read)."""


class RecordView(NamedTuple):
    """One record of a batch, located in the batch's (decompressed) records."""

    start: int
    """Where its length varint starts."""
    end: int
    timestamp_delta: int
    timestamp_at: int
    """Where its timestamp delta starts (after the attributes byte)."""
    rest_at: int
    """Where its offset delta starts: the bytes from here to `end` never change."""
    offset_delta: int
    key: memoryview | None
    has_value: bool


def records_section(header: BatchHeader) -> bytes | memoryview:
    """The batch's records, decompressed (within the absolute bound: it was within its topic's,
    smaller one, when produced)."""
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    section = header.buffer[start:end]
    codec = header.attributes & COMPRESSION_MASK
    if not codec:
        return section
    decompress = DECOMPRESSORS.get(codec)
    if decompress is None:
        raise UncleanableBatch(f"batch at {header.base_offset}: compression {codec}")
    records = decompress(section, DECOMPRESSED_BYTES_MAX)
    if isinstance(records, InvalidBatch):
        raise UncleanableBatch(f"batch at {header.base_offset}: {records.message}")
    return records


def records_of(header: BatchHeader, section: bytes | memoryview) -> Iterator[RecordView]:
    """Each record of `section` (`records_section(header)`), in order; exactly recordsCount
    records filling the section, or `UncleanableBatch`.

    Runs once per record of every batch cleaned: a varint of one byte (most of them) is decoded
    inline, a longer one by `read_varint` (its `MalformedVarint` becomes `UncleanableBatch`)."""
    view = memoryview(section)
    end = len(view)
    position = 0
    varint = read_varint
    try:
        for _ in range(header.records_count):
            start = position
            if position >= end:
                raise UncleanableBatch(f"batch at {header.base_offset}: fewer records than counted")
            byte = view[position]
            if byte < 0x80:
                length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                length, position = varint(view, position, end, VARINT_BYTES_MAX)
            record_end = position + length
            if length < 3 or record_end > end:
                raise UncleanableBatch(f"batch at {header.base_offset}: a record crosses its end")
            timestamp_at = position + 1  # after the attributes byte
            byte = view[timestamp_at]
            if byte < 0x80:
                delta, rest_at = (byte >> 1) ^ -(byte & 1), timestamp_at + 1
            else:
                delta, rest_at = varint(view, timestamp_at, record_end, VARLONG_BYTES_MAX)
            byte = view[rest_at] if rest_at < record_end else 0x80
            if byte < 0x80:
                offset_delta, position = (byte >> 1) ^ -(byte & 1), rest_at + 1
            else:
                offset_delta, position = varint(view, rest_at, record_end, VARINT_BYTES_MAX)
            byte = view[position] if position < record_end else 0x80
            if byte < 0x80:
                key_length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                key_length, position = varint(view, position, record_end, VARINT_BYTES_MAX)
            key = None
            if key_length >= 0:
                key = view[position : position + key_length]
                position += key_length
            byte = view[position] if position < record_end else 0x80
            if byte < 0x80:
                value_length, position = (byte >> 1) ^ -(byte & 1), position + 1
            else:
                value_length, position = varint(view, position, record_end, VARINT_BYTES_MAX)
            if position > record_end or position + max(value_length, 0) > record_end:
                raise UncleanableBatch(f"batch at {header.base_offset}: a record overruns itself")
            yield RecordView(
                start,
                record_end,
                delta,
                timestamp_at,
                rest_at,
                offset_delta,
                key,
                value_length >= 0,
            )
            position = record_end
    except MalformedVarint as e:
        raise UncleanableBatch(str(e)) from None
    if position != end:
        raise UncleanableBatch(f"batch at {header.base_offset}: bytes after its records")


def first_unkeyed(header: BatchHeader) -> int | None:
    """The index of the batch's first record without a key, None when every record has one
    (what a compacted topic requires of a produced batch, as Kafka's LogValidator does); a
    batch whose records do not decode raises `UncleanableBatch`."""
    for index, record in enumerate(records_of(header, records_section(header))):
        if record.key is None:
            return index
    return None


def control_type(header: BatchHeader) -> int | None:
    """The marker type (0 abort, 1 commit) of a control batch; None when it has no record."""
    for record in records_of(header, records_section(header)):
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            raise UncleanableBatch(f"control batch at {header.base_offset} without a type")
        _version, kind = _CONTROL_KEY.unpack_from(record.key)
        return int(kind)
    return None


def _assemble(header: BatchHeader, attributes: int, fields: tuple[int, ...], body: bytes) -> bytes:
    """A batch of `header`'s base offset, leader epoch and producer fields, `attributes`,
    (baseTimestamp, maxTimestamp, recordsCount) from `fields`, and `body` as its records."""
    base_timestamp, max_timestamp, count = fields
    after_crc = _AFTER_CRC.pack(
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(after_crc))
    prefix = _PREFIX.pack(
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        header.partition_leader_epoch,
        MAGIC,
    )
    return b"".join((prefix, struct.pack(">I", crc), after_crc, body))


def rebuilt(
    header: BatchHeader,
    section: bytes | memoryview,
    kept: list[RecordView],
    delete_horizon_ms: int,
) -> bytes:
    """`header`'s batch holding only `kept` (non-empty, in order), with `delete_horizon_ms` as
    its delete horizon (NO_TIMESTAMP: none)."""
    assert kept
    view = memoryview(section)
    old_base = header.base_timestamp
    if delete_horizon_ms != NO_TIMESTAMP:
        base = delete_horizon_ms
        attributes = header.attributes | DELETE_HORIZON_BIT
    else:
        base = old_base
        attributes = header.attributes & ~DELETE_HORIZON_BIT
    if base == old_base:
        parts: list[bytes | memoryview] = [view[record.start : record.end] for record in kept]
    else:
        parts = []
        for record in kept:
            body = b"".join(
                (
                    view[record.timestamp_at - 1 : record.timestamp_at],  # attributes
                    zigzag(old_base + record.timestamp_delta - base),
                    view[record.rest_at : record.end],
                )
            )
            parts.append(zigzag(len(body)))
            parts.append(body)
    if header.attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = header.max_timestamp  # LogAppendTime: the append time stays
    else:
        max_timestamp = max(old_base + record.timestamp_delta for record in kept)
    records = b"".join(parts)
    codec = attributes & COMPRESSION_MASK
    body = COMPRESSORS[codec](records, _LEVELS[codec]) if codec else records
    return _assemble(header, attributes, (base, max_timestamp, len(kept)), body)


def rebuilt_native(
    header: BatchHeader,
    section: bytes | memoryview,
    spans: bytes,
    max_delta: int,
    delete_horizon_ms: int,
) -> bytes:
    """`rebuilt` from the C filter's answer (`_native`): `spans` of the kept records (at least
    one), the largest timestamp delta among them."""
    assert spans and _native.NATIVE is not None
    old_base = header.base_timestamp
    if delete_horizon_ms != NO_TIMESTAMP:
        base = delete_horizon_ms
        attributes = header.attributes | DELETE_HORIZON_BIT
    else:
        base = old_base
        attributes = header.attributes & ~DELETE_HORIZON_BIT
    records = _native.NATIVE.assemble(section, spans, old_base - base)
    if header.attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = old_base + max_delta
    codec = attributes & COMPRESSION_MASK
    body = COMPRESSORS[codec](records, _LEVELS[codec]) if codec else records
    count = len(spans) // _native.SPAN_BYTES
    return _assemble(header, attributes, (base, max_timestamp, count), body)


def empty_batch(header: BatchHeader) -> bytes:
    """`header`'s batch without records, as Kafka's `writeEmptyHeader`: uncompressed, no delete
    horizon, baseTimestamp -1, its maxTimestamp, its offsets and producer fields."""
    attributes = header.attributes & (TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
    return _assemble(header, attributes, (NO_TIMESTAMP, header.max_timestamp, 0), b"")
