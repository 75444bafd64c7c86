"""The WAL object format: batches byte-exact, then a self-describing index footer.

    ┌──────────────────────────────┬──────────────────────┬──────────────────────────────────┐
    │ batch 0 │ batch 1 │ … │ batch n │ footer (msgpack)     │ trailer (16 bytes, big-endian)   │
    └──────────────────────────────┴──────────────────────┴──────────────────────────────────┘
    trailer = footer length (uint32) · footer CRC-32C (uint32) · format version (uint16) · magic

Batches start at byte 0 and sit back to back, so the coordinator addresses each one by
(byte offset, size) and the read path fetches exactly those bytes. The footer lists every batch
with its partition and producer fields, so that recovery tooling and the garbage collector learn
what an object holds without asking the coordinator. The footer is checked by its own CRC; the
batches carry theirs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import crc32c
import msgspec

from diskless._types import TopicPartition
from diskless.errors import DisklessError, ObjectNotFoundError
from diskless.records import BatchHeader
from diskless.storage import ObjectStore

FORMAT_VERSION: Final = 1
TRAILER_MAGIC: Final = b"DLWAL\x01"
_TRAILER: Final = struct.Struct(">IIH6s")
TRAILER_SIZE: Final = _TRAILER.size
FOOTER_BYTES_MAX: Final = 64 * 1024 * 1024
"""A footer claiming more than this is corrupt (a 64 MiB footer would index ~1M batches)."""
TAIL_READ_BYTES: Final = 64 * 1024
"""`read_object_index` fetches this much of the object's end first; most footers fit in it."""

assert TRAILER_SIZE == 16
assert len(TRAILER_MAGIC) == 6


class WalFormatError(DisklessError):
    """Bytes that are not a WAL object: bad magic, unknown version, CRC mismatch, bad footer."""


class WalEntry(NamedTuple):
    """One validated batch to append to the WAL, for one partition."""

    topic_partition: TopicPartition
    header: BatchHeader
    """Already validated by the caller; `header.bytes_view()` is the batch."""
    lease_id: int | None = None
    """The transaction lease taken for a transactional batch (copied into its CommitBatch)."""


class SegmentIndexEntry(msgspec.Struct, frozen=True, array_like=True):
    """One batch of a WAL object, as listed in its footer."""

    topic: str
    partition: int
    byte_offset: int
    size: int
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


_footer_encoder: Final = msgspec.msgpack.Encoder()
_footer_decoder: Final = msgspec.msgpack.Decoder(list[SegmentIndexEntry])


IndexRow = tuple[str, int, int, int, int, int, int, int]
"""A footer row as a plain tuple, in `SegmentIndexEntry` field order (same encoding)."""


def encode_footer(index: Sequence[SegmentIndexEntry] | Sequence[IndexRow]) -> bytes:
    """The footer and trailer to append after the batches that `index` describes."""
    footer = _footer_encoder.encode(index)
    assert len(footer) <= FOOTER_BYTES_MAX, len(footer)
    trailer = _TRAILER.pack(len(footer), crc32c.crc32c(footer), FORMAT_VERSION, TRAILER_MAGIC)
    return footer + trailer


def parse_trailer(tail: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(footer length, footer CRC) from the last TRAILER_SIZE bytes of `tail`."""
    if len(tail) < TRAILER_SIZE:
        raise WalFormatError(f"{len(tail)} bytes cannot hold a WAL trailer")
    footer_size, footer_crc, version, magic = _TRAILER.unpack_from(tail, len(tail) - TRAILER_SIZE)
    if magic != TRAILER_MAGIC:
        raise WalFormatError(f"not a WAL object: magic {magic!r}")
    if version != FORMAT_VERSION:
        raise WalFormatError(f"unsupported WAL format version {version}")
    if footer_size > FOOTER_BYTES_MAX:
        raise WalFormatError(f"footer length {footer_size} exceeds {FOOTER_BYTES_MAX}")
    return footer_size, footer_crc


def _decode_footer(
    footer: bytes | bytearray | memoryview, footer_crc: int
) -> list[SegmentIndexEntry]:
    if crc32c.crc32c(footer) != footer_crc:
        raise WalFormatError("WAL footer CRC-32C mismatch")
    try:
        index = _footer_decoder.decode(footer)
    except msgspec.DecodeError as error:
        raise WalFormatError(f"undecodable WAL footer: {error}") from None
    return index


def read_footer(
    data: bytes | bytearray | memoryview, *, whole: bool = True
) -> list[SegmentIndexEntry]:
    """The index of the WAL object `data`: the whole object, or (`whole=False`) a suffix of it.

    Raises WalFormatError when the trailer, the footer CRC or the footer itself is invalid, or
    when the batches listed do not sit back to back from byte 0 (up to the footer, if `whole`).
    """
    view = memoryview(data)
    footer_size, footer_crc = parse_trailer(view)
    footer_end = len(view) - TRAILER_SIZE
    if footer_size > footer_end:
        raise WalFormatError(f"footer length {footer_size} exceeds the {len(view)} bytes given")
    index = _decode_footer(view[footer_end - footer_size : footer_end], footer_crc)
    _check_index(index, footer_end - footer_size, whole=whole)
    return index


def _check_index(index: Sequence[SegmentIndexEntry], batches_end: int, whole: bool) -> None:
    """Batches must sit back to back from byte 0; with the whole object, up to the footer."""
    position = 0
    for entry in index:
        if entry.byte_offset != position or entry.size <= 0:
            raise WalFormatError(
                f"footer entry at {entry.byte_offset} (size {entry.size}) "
                f"does not follow {position}"
            )
        position += entry.size
    if whole and position != batches_end:
        raise WalFormatError(
            f"footer indexes {position} bytes of batches, object holds {batches_end}"
        )


async def read_object_index(
    store: ObjectStore, key: str, size: int | None = None
) -> list[SegmentIndexEntry]:
    """The index of a stored WAL object, with at most two ranged GETs (one for most objects).

    `size` is the object's size when known (from a listing or the coordinator); otherwise one
    listing request finds it. Raises WalFormatError for corrupt objects and StorageError (e.g.
    ObjectNotFoundError) when the object cannot be read.
    """
    if size is None:
        page = await store.list_page(key, limit=1)
        if not page.objects or page.objects[0].key != key:
            raise ObjectNotFoundError(f"no object {key!r}")
        size = page.objects[0].size
    if size < TRAILER_SIZE:
        raise WalFormatError(f"{size} bytes cannot hold a WAL trailer")
    tail_start = max(0, size - TAIL_READ_BYTES)
    tail = await store.get_range(key, tail_start, size)
    footer_size, footer_crc = parse_trailer(tail)
    footer_start = size - TRAILER_SIZE - footer_size
    if footer_start < 0:
        raise WalFormatError(f"footer length {footer_size} exceeds the object's {size} bytes")
    if footer_start >= tail_start:
        at = footer_start - tail_start
        footer: bytes | memoryview = memoryview(tail)[at : at + footer_size]
    else:
        footer = await store.get_range(key, footer_start, size - TRAILER_SIZE)
    index = _decode_footer(footer, footer_crc)
    _check_index(index, footer_start, whole=True)
    return index
