"""Extents: runs of batches the coordinator knows only as a whole, found inside their object by
its index footer and a walk over batch headers.

A fetch expands the extents of its answer into their batches (with the bytes, already as served)
so that the fetch budgets can be applied exactly; ListOffsets finds the record that answers inside
an extent. Every batch walked is checked as a stored batch is: it frames, its CRC holds, and its
offsets lie past the previous batch's within the extent (right after it, but for a cleaned
extent's gaps: the offsets of the records the cleaner removed), its last batch ending at the
extent's last offset.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, NamedTuple

from diskless.coordinator import BatchInfo
from diskless.read._batches import CorruptBatch
from diskless.read._cache import ObjectCache
from diskless.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    InvalidBatch,
    first_record_reaching,
    parse_batch,
)
from diskless.wal import ExtentFooter, ExtentFormatError, ExtentIndexEntry, decode_extent_footer

FOOTERS_CACHED_MAX: Final = 1024
"""Decoded footers kept (about 100 KiB each for a 256 MiB object at the default density)."""


class Served(NamedTuple):
    """A batch a fetch may return: its coordinates and, for a batch of an extent, its bytes as
    served (read while walking the extent); None for batches still to be read or synthesized."""

    info: BatchInfo
    data: memoryview | None = None

    @property
    def size(self) -> int:
        return self.info.size


class ExtentReader:
    """Walks extents through a shared `ObjectCache`; keeps decoded footers (LRU by count)."""

    def __init__(self, cache: ObjectCache, footers_max: int = FOOTERS_CACHED_MAX) -> None:
        assert footers_max >= 1, footers_max
        self._cache = cache
        self._footers: OrderedDict[str, ExtentFooter] = OrderedDict()
        self._footers_max = footers_max
        self.lookup_batches_read = 0
        """Batches whose records `find_record` walked."""

    @property
    def cache(self) -> ObjectCache:
        return self._cache

    async def footer(self, info: BatchInfo) -> ExtentFooter:
        """The index of the object holding extent `info`; CorruptBatch when it is unreadable."""
        assert info.extent is not None, info
        footer = self._footers.get(info.object_key)
        if footer is not None:
            self._footers.move_to_end(info.object_key)
            return footer
        index = info.extent
        tail = await self._cache.read(
            info.object_key, index.byte_offset, index.byte_offset + index.size, _size_of(info)
        )
        try:
            footer = decode_extent_footer(tail)
        except ExtentFormatError as e:
            raise CorruptBatch(f"{info.object_key}: {e}") from None
        if footer.batches_size != index.byte_offset:
            raise CorruptBatch(
                f"{info.object_key}: footer at {index.byte_offset}, batches end at "
                f"{footer.batches_size}"
            )
        self._footers[info.object_key] = footer
        while len(self._footers) > self._footers_max:
            self._footers.popitem(last=False)
        return footer

    async def expand(self, info: BatchInfo, offset: int, bytes_cap: int) -> list[Served]:
        """The extent's batches from the one holding `offset` (the extent's first if below it),
        until their sizes add up to more than `bytes_cap` (that last one included) or the
        extent ends."""
        footer = await self.footer(info)
        target = max(offset, info.base_offset)
        served: list[Served] = []
        used = 0
        walk = _Walk(self._cache, info, footer.start_for_offset(target))
        async for header, data in walk:
            if header.last_offset < target:
                continue
            batch = _batch_info(info, header, walk.position - header.size)
            served.append(Served(batch, data))
            used += batch.size
            if used > bytes_cap:
                break
        return served

    async def find_record(
        self, info: BatchInfo, offset: int, timestamp: int
    ) -> tuple[int, int] | None:
        """ListOffsets inside extent `info`: (offset, timestamp) of its first record whose offset
        is at least `offset` and whose timestamp is at least `timestamp`, None when none is.

        The index skips every batch before the later of the entries for `offset` and for
        `timestamp`; the headers after it find the first batch that could answer, and only that
        batch is read whole (the next ones too only while `offset` cuts them short)."""
        footer = await self.footer(info)
        by_offset = footer.start_for_offset(max(offset, info.base_offset))
        by_time = footer.start_for_timestamp(timestamp)
        start = by_offset if by_offset.position >= by_time.position else by_time
        if start.position >= info.byte_offset + info.size:
            return None  # the extent ends before any batch that could answer
        walk = _Walk(self._cache, info, start, headers_only=True)
        async for header, _ in walk:
            if header.last_offset < offset or header.max_timestamp < timestamp:
                continue
            position = walk.position - header.size
            data = await self._cache.read(
                info.object_key, position, position + header.size, _size_of(info)
            )
            self.lookup_batches_read += 1
            found = first_record_reaching(
                _checked(data, f"{info.object_key} at {position}"),
                offset=offset,
                timestamp=timestamp,
            )
            if isinstance(found, InvalidBatch):
                raise CorruptBatch(f"{info.object_key} at {position}: {found.message}")
            if found is not None:
                return found
        return None


class _Walk:
    """Batches of extent `info` from an index entry (or the extent's start if that lies later)."""

    def __init__(
        self,
        cache: ObjectCache,
        info: BatchInfo,
        entry: ExtentIndexEntry,
        headers_only: bool = False,
    ) -> None:
        self._cache = cache
        self._info = info
        self._end = info.byte_offset + info.size
        self._size = _size_of(info)
        self._headers_only = headers_only
        if entry.position >= info.byte_offset:
            self.position, self._next_offset = entry.position, entry.base_offset
        else:
            self.position, self._next_offset = info.byte_offset, info.base_offset
        """Where the next batch starts in the object."""

    def __aiter__(self) -> _Walk:
        return self

    async def __anext__(self) -> tuple[BatchHeader, memoryview | None]:
        info = self._info
        where = f"{info.object_key} at {self.position}"
        if self.position >= self._end:
            if self._next_offset != info.last_offset + 1:
                raise CorruptBatch(f"{where}: extent ends before offset {info.last_offset}")
            raise StopAsyncIteration
        if self.position + HEADER_SIZE > self._end:
            raise CorruptBatch(f"{where}: a batch header would cross the extent's end")
        head = await self._cache.read(
            info.object_key, self.position, self.position + HEADER_SIZE, self._size
        )
        header = _frame(head, where)
        if self.position + header.size > self._end:
            raise CorruptBatch(f"{where}: a batch of {header.size} bytes crosses the extent's end")
        if header.base_offset < self._next_offset or header.last_offset > info.last_offset:
            raise CorruptBatch(
                f"{where}: batch [{header.base_offset}, {header.last_offset}] where offset "
                f"{self._next_offset} was due (extent ends at {info.last_offset})"
            )
        data: memoryview | None = None
        if not self._headers_only:
            data = await self._cache.read(
                info.object_key, self.position, self.position + header.size, self._size
            )
            header = _checked(data, where)
        self.position += header.size
        self._next_offset = header.last_offset + 1
        return header, data


def _checked(data: memoryview, where: str) -> BatchHeader:
    """The batch that `data` holds whole, its CRC checked."""
    full = parse_batch(data)
    if isinstance(full, InvalidBatch) or full.size != len(data):
        raise CorruptBatch(f"{where}: batch does not frame")
    if not full.crc_valid():
        raise CorruptBatch(f"{where}: CRC-32C mismatch")
    return full


def _frame(head: memoryview, where: str) -> BatchHeader:
    """The header of a batch of which only the first HEADER_SIZE bytes were read."""
    header = BatchHeader(head)
    if header.magic != MAGIC or header.length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"{where}: no batch header (magic {header.magic})")
    return header


def _size_of(info: BatchInfo) -> int:
    """A consolidated object ends with its footer and trailer, which `info.extent` covers."""
    assert info.extent is not None, info
    return info.extent.byte_offset + info.extent.size


def _batch_info(extent: BatchInfo, header: BatchHeader, position: int) -> BatchInfo:
    return BatchInfo(
        object_key=extent.object_key,
        byte_offset=position,
        size=header.size,
        base_offset=header.base_offset,
        last_offset=header.last_offset,
        timestamp_type=extent.timestamp_type,
        log_append_time=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
    )
