"""The consolidated object format: one partition range's batches as served, then an index footer.

    ┌──────────────────────────────┬──────────────────────┬──────────────────────────────────┐
    │ batch 0 │ batch 1 │ … │ batch n │ footer (msgpack)     │ trailer (16 bytes, big-endian)   │
    └──────────────────────────────┴──────────────────────┴──────────────────────────────────┘
    trailer = footer length (uint32) · footer CRC-32C (uint32) · format version (uint16) · magic

The batches are exactly what a fetch returns (base offsets set, log append time stamped, markers
as real control batches), back to back from byte 0, so a fetch serves them without a rewrite.
Batches frame themselves (the 61-byte header holds the base offset, the last offset delta, the
size and the max timestamp), so the footer indexes only every `index_interval_bytes`: the read
path jumps to the last entry at or before what it looks for and walks headers from there. Each
entry is both an offset index entry (base offset -> position) and a time index entry (the running
max timestamp of every batch before it -> position): a batch before an entry whose running max is
below a timestamp cannot hold that timestamp, so a lookup by time starts at the last such entry.
The footer is the object's own description too (partition, offsets), as the WAL's is.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable
from typing import Final

import crc32c
import msgspec

from diskless._types import TopicPartition
from diskless.errors import DisklessError
from diskless.records import InvalidBatch, parse_batch

EXTENT_FORMAT_VERSION: Final = 1
EXTENT_TRAILER_MAGIC: Final = b"DLEXT\x01"
_TRAILER: Final = struct.Struct(">IIH6s")
EXTENT_TRAILER_SIZE: Final = _TRAILER.size
EXTENT_FOOTER_BYTES_MAX: Final = 64 * 1024 * 1024
INDEX_INTERVAL_BYTES_DEFAULT: Final = 32 * 1024
"""Kafka's `index.interval.bytes` is 4096; headers are walked from a cached block instead of read
one by one, so a sparser index (about 8,000 entries for 256 MiB) costs no extra GET."""

assert EXTENT_TRAILER_SIZE == 16
assert len(EXTENT_TRAILER_MAGIC) == 6


class ExtentFormatError(DisklessError):
    """Bytes that are not a consolidated object: bad magic or version, CRC mismatch, bad index."""


class ExtentIndexEntry(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A batch the index points at: its base offset, its position, and the largest timestamp of
    every batch before it in the object (-1 for the first)."""

    base_offset: int
    position: int
    max_timestamp_before: int


class ExtentFooter(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    batches_size: int
    """The batches fill [0, batches_size); the footer follows them."""
    max_timestamp: int
    entries: list[ExtentIndexEntry]
    """Sorted by offset and position; the first one is the first batch."""

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def start_for_offset(self, offset: int) -> ExtentIndexEntry:
        """The last entry whose batch starts at or before `offset` (no batch before it can
        hold `offset`)."""
        at = bisect.bisect_right(self.entries, offset, key=lambda e: e.base_offset) - 1
        return self.entries[max(0, at)]

    def start_for_timestamp(self, timestamp: int) -> ExtentIndexEntry:
        """The last entry every batch before which has a timestamp below `timestamp`."""
        at = bisect.bisect_left(self.entries, timestamp, key=lambda e: e.max_timestamp_before) - 1
        return self.entries[max(0, at)]


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(ExtentFooter)


def encode_extent(
    topic_partition: TopicPartition,
    batches: Iterable[bytes | bytearray | memoryview],
    index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT,
    *,
    gaps: bool = False,
) -> tuple[bytes, int]:
    """The object holding `batches` (as served, consecutive offsets; with `gaps`, a cleaned
    partition's, increasing offsets), and where its footer starts. Raises ExtentFormatError
    when a batch does not frame or offsets are not as said: an object the read path would
    refuse must never be uploaded."""
    assert index_interval_bytes > 0, index_interval_bytes
    body = bytearray()
    entries: list[ExtentIndexEntry] = []
    max_timestamp = -1
    last_indexed = -index_interval_bytes
    next_offset: int | None = None
    for batch in batches:
        header = parse_batch(batch)
        if isinstance(header, InvalidBatch):
            raise ExtentFormatError(f"batch at {len(body)}: {header.message}")
        if header.size != len(batch):
            raise ExtentFormatError(f"batch at {len(body)} holds {header.size} of {len(batch)}")
        if next_offset is not None and (
            header.base_offset < next_offset if gaps else header.base_offset != next_offset
        ):
            raise ExtentFormatError(f"batch at offset {header.base_offset}, {next_offset} next")
        if len(body) - last_indexed >= index_interval_bytes:
            entries.append(ExtentIndexEntry(header.base_offset, len(body), max_timestamp))
            last_indexed = len(body)
        max_timestamp = max(max_timestamp, header.max_timestamp)
        next_offset = header.last_offset + 1
        body += batch
    if next_offset is None:
        raise ExtentFormatError("a consolidated object holds at least one batch")
    footer = ExtentFooter(
        topic_partition.topic,
        topic_partition.partition,
        entries[0].base_offset,
        next_offset - 1,
        len(body),
        max_timestamp,
        entries,
    )
    encoded = _encoder.encode(footer)
    assert len(encoded) <= EXTENT_FOOTER_BYTES_MAX, len(encoded)
    trailer = _TRAILER.pack(
        len(encoded), crc32c.crc32c(encoded), EXTENT_FORMAT_VERSION, EXTENT_TRAILER_MAGIC
    )
    footer_at = len(body)
    body += encoded
    body += trailer
    return bytes(body), footer_at


def decode_extent_footer(data: bytes | bytearray | memoryview) -> ExtentFooter:
    """The footer from `data` = the object's footer followed by its trailer (the object's tail
    from the footer's start: `ExtentIndex` names exactly that range)."""
    view = memoryview(data)
    if len(view) < EXTENT_TRAILER_SIZE:
        raise ExtentFormatError(f"{len(view)} bytes cannot hold an extent trailer")
    size, crc, version, magic = _TRAILER.unpack_from(view, len(view) - EXTENT_TRAILER_SIZE)
    if magic != EXTENT_TRAILER_MAGIC:
        raise ExtentFormatError(f"not a consolidated object: magic {magic!r}")
    if version != EXTENT_FORMAT_VERSION:
        raise ExtentFormatError(f"unsupported consolidated object version {version}")
    if size != len(view) - EXTENT_TRAILER_SIZE:
        raise ExtentFormatError(
            f"footer length {size}, but {len(view) - EXTENT_TRAILER_SIZE} bytes precede the trailer"
        )
    encoded = view[:size]
    if crc32c.crc32c(encoded) != crc:
        raise ExtentFormatError("consolidated object footer CRC-32C mismatch")
    try:
        footer = _decoder.decode(encoded)
    except msgspec.DecodeError as error:
        raise ExtentFormatError(f"undecodable consolidated object footer: {error}") from None
    _check(footer)
    return footer


def _check(footer: ExtentFooter) -> None:
    entries = footer.entries
    if not entries or entries[0].position != 0 or entries[0].base_offset != footer.base_offset:
        raise ExtentFormatError("the index does not start at the first batch")
    for before, after in itertools.pairwise(entries):
        if not (
            before.base_offset < after.base_offset
            and before.position < after.position
            and before.max_timestamp_before <= after.max_timestamp_before
        ):
            raise ExtentFormatError(f"index entries out of order: {before}, {after}")
    if entries[-1].position >= footer.batches_size or footer.last_offset < entries[-1].base_offset:
        raise ExtentFormatError("the index points past the batches")
