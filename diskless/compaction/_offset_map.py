"""The cleaner's key→offset map in a fixed number of bytes: Kafka's dedupe buffer.

Kafka's `SkimpyOffsetMap` stores, for each key of the dirty section, only a hash of the key and
the key's greatest offset, in one preallocated buffer; it never stores keys. This one does the
same: one `bytearray` of `bytes_max` bytes holding slots of a 16-byte MD5 of the key and an
8-byte offset, found by open addressing (double hashing over a prime number of slots, so that a
probe sequence visits every slot). Memory is the buffer and nothing else, whatever the keys.

Two hashes colliding would make the older record of one key look superseded by the other key's
record; with 128 bits, as in Kafka, that is accepted as never happening.

A map is "full" when it holds `load_factor` x its slots (Kafka's `log.cleaner.io.buffer.load.
factor`, 0.9): past that, probing grows long. `put` then refuses a key it does not hold yet,
and the cleaner ends the pass at the last batch it mapped whole (`latest_offset`), leaving the
rest of the dirty section to the next pass.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Final

from diskless.compaction import _native

HASH_BYTES: Final = 16
"""MD5, Kafka's default `log.cleaner` hash."""
ENTRY_BYTES: Final = HASH_BYTES + 8
LOAD_FACTOR_DEFAULT: Final = 0.9
"""Kafka's log.cleaner.io.buffer.load.factor."""
MAP_BYTES_DEFAULT: Final = 128 * 1024 * 1024
"""Kafka's log.cleaner.dedupe.buffer.size (shared by its cleaner threads; one map here)."""
MAP_BYTES_MIN: Final = 64 * ENTRY_BYTES
MAP_BYTES_MAX: Final = 2**31 - 1
"""Kafka's dedupe buffer is one Java array; the same limit keeps slot arithmetic in range."""

_CLEAR_BLOCK_BYTES: Final = 64 * 1024
_OFFSET: Final = struct.Struct(">q")
_SLOT: Final = struct.Struct(">QQq")
"""Hash halves, then the offset plus one (so that an all-zero slot is empty)."""


def _prime_at_most(n: int) -> int:
    """The greatest prime ≤ n (n ≥ 2): a prime slot count makes every probe step cover the map."""
    for candidate in range(n, 1, -1):
        if candidate < 4 or (
            candidate % 2 and all(candidate % d for d in range(3, int(candidate**0.5) + 1, 2))
        ):
            return candidate
    raise AssertionError("unreachable: 2 is prime")


def key_hash(key: bytes | memoryview) -> bytes:
    """The 16 bytes that stand for `key` in the map."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key hash → greatest offset, in `bytes_max` bytes; no deletes (cleared between passes)."""

    __slots__ = ("_buffer", "_entries", "_entries_max", "_latest_offset", "_slots", "bytes_max")

    def __init__(self, bytes_max: int, load_factor: float = LOAD_FACTOR_DEFAULT) -> None:
        if not MAP_BYTES_MIN <= bytes_max <= MAP_BYTES_MAX:
            raise ValueError(f"map size {bytes_max} outside [{MAP_BYTES_MIN}, {MAP_BYTES_MAX}]")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} outside (0, 1]")
        self.bytes_max = bytes_max
        self._slots = _prime_at_most(bytes_max // ENTRY_BYTES)
        self._buffer = bytearray(self._slots * ENTRY_BYTES)
        self._entries_max = max(1, int(self._slots * load_factor))
        self._entries = 0
        self._latest_offset = -1
        assert len(self._buffer) <= bytes_max

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def entries_max(self) -> int:
        """How many distinct keys fit before the map counts as full."""
        return self._entries_max

    def __len__(self) -> int:
        return self._entries

    @property
    def latest_offset(self) -> int:
        """The last offset of the dirty section this map covers (-1: none): every key at or
        below it is mapped; records above it are not the map's to judge."""
        return self._latest_offset

    def set_latest_offset(self, offset: int) -> None:
        self._latest_offset = offset

    def clear(self) -> None:
        """Zero the slots in place, a block at a time: no second buffer of the map's size."""
        view = memoryview(self._buffer)
        zeros = bytes(min(_CLEAR_BLOCK_BYTES, len(view)))
        for position in range(0, len(view), len(zeros)):
            chunk = view[position : position + len(zeros)]
            chunk[:] = zeros[: len(chunk)]
        self._entries = 0
        self._latest_offset = -1

    def _find(self, digest: bytes) -> tuple[int, bool]:
        """(byte position of the slot holding `digest` or of the empty slot where it belongs,
        whether it holds it)."""
        high, low = int.from_bytes(digest[:8]), int.from_bytes(digest[8:])
        slots = self._slots
        slot = high % slots
        step = low % (slots - 1) + 1 if slots > 1 else 1
        buffer = self._buffer
        for _ in range(slots):
            position = slot * ENTRY_BYTES
            stored_high, stored_low, stored = _SLOT.unpack_from(buffer, position)
            if stored == 0:
                return position, False
            if stored_high == high and stored_low == low:
                return position, True
            slot = (slot + step) % slots
        return -1, False

    def put(self, digest: bytes, offset: int) -> bool:
        """Map `digest` (`key_hash`) to `offset`; False, nothing changed, when it is a new key
        and the map is full. Offsets must not decrease for a key (they come in log order)."""
        assert offset >= 0 and len(digest) == HASH_BYTES
        position, held = self._find(digest)
        if not held:
            if self._entries >= self._entries_max or position < 0:
                return False
            self._buffer[position : position + HASH_BYTES] = digest
            self._entries += 1
        _OFFSET.pack_into(self._buffer, position + HASH_BYTES, offset + 1)
        return True

    def get(self, digest: bytes) -> int:
        """The greatest offset mapped for `digest`, or -1."""
        position, held = self._find(digest)
        if not held:
            return -1
        offset: int = _OFFSET.unpack_from(self._buffer, position + HASH_BYTES)[0]
        return offset - 1

    def put_section(
        self, section: bytes | memoryview, count: int, base_offset: int, start: int, end: int
    ) -> tuple[int, int]:
        """Map the keyed records of [start, end) in a batch's records section (`count`
        records from `base_offset`) with the C walk (`_native`): (records mapped, the offset of
        the first key that did not fit, -1 when all did). Raises ValueError when a record does
        not decode."""
        assert _native.NATIVE is not None
        self._entries, mapped, stopped = _native.NATIVE.map_keys(
            section,
            count,
            base_offset,
            start,
            end,
            self._buffer,
            self._slots,
            self._entries,
            self._entries_max,
        )
        return mapped, stopped

    @property
    def table(self) -> bytearray:
        """The slots, for the C filter (`_native`)."""
        return self._buffer

    def utilization(self) -> float:
        return self._entries / self._slots
