"""A bounded cache of object bytes in aligned blocks, shared by every fetch of a broker.

Reads go through blocks of `block_bytes` (aligned in the object): a miss GETs the block once,
however many partitions, fetches and consumers need bytes of it, and concurrent misses of the
same block wait for one GET (single flight). A consumer reading many partitions of one WAL object
then costs one GET, and a consolidated object is read in block-sized ranged GETs, however small
the fetch. Blocks are kept in LRU order within `bytes_max`.

The read path does not always know an object's size (a WAL object's is not in its batch
coordinates). A block of such an object is then read from its start up to the end of what is
needed, and extended by one GET of the missing tail when a later read needs more of it.

A block is the store's view of the bytes (`ObjectStore.get_range_view`): the local store lends
the file's pages, so a block read from it costs no copy.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Final

import msgspec

from diskless.errors import StorageError
from diskless.storage import ObjectStore

OBJECT_CACHE_BLOCK_BYTES_DEFAULT: Final = 8 * 1024 * 1024
OBJECT_CACHE_BYTES_MAX_DEFAULT: Final = 128 * 1024 * 1024


class ObjectCacheStats(msgspec.Struct, frozen=True, kw_only=True):
    reads: int = 0
    block_hits: int = 0
    block_misses: int = 0
    gets_issued: int = 0
    bytes_fetched: int = 0
    evicted_blocks: int = 0
    cached_bytes: int = 0


class ObjectCache:
    """Aligned blocks of objects, LRU within `bytes_max`, one GET per missing block.

    `gets` bounds the GETs in flight (shared with the caller's other GETs when given).
    Objects are immutable once written, so a block never goes stale; a deleted object's blocks
    simply age out.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        block_bytes: int = OBJECT_CACHE_BLOCK_BYTES_DEFAULT,
        bytes_max: int = OBJECT_CACHE_BYTES_MAX_DEFAULT,
        gets: asyncio.Semaphore | None = None,
    ) -> None:
        if block_bytes < 1:
            raise ValueError(f"block_bytes must be >= 1, got {block_bytes}")
        if bytes_max < block_bytes:
            raise ValueError(f"bytes_max ({bytes_max}) must hold one block ({block_bytes})")
        self._store = store
        self._block_bytes = block_bytes
        self._bytes_max = bytes_max
        self._gets = gets if gets is not None else asyncio.Semaphore(16)
        self._blocks: OrderedDict[tuple[str, int], memoryview] = OrderedDict()
        self._checked: dict[tuple[str, int], set[int]] = {}
        """Per cached block, the object positions of batches checked in its bytes."""
        self._cached_bytes = 0
        self._inflight: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._stats: dict[str, int] = dict.fromkeys(ObjectCacheStats.__struct_fields__, 0)

    @classmethod
    def sized(cls, store: ObjectStore, block_bytes: int, bytes_max: int) -> ObjectCache | None:
        """The cache a broker's configuration asks for: none when `bytes_max` is 0."""
        if bytes_max <= 0:
            return None
        return cls(store, block_bytes=block_bytes, bytes_max=bytes_max)

    @property
    def block_bytes(self) -> int:
        return self._block_bytes

    def stats(self) -> ObjectCacheStats:
        return ObjectCacheStats(**{**self._stats, "cached_bytes": self._cached_bytes})

    async def read(
        self, key: str, start: int, end: int, object_size: int | None = None
    ) -> memoryview:
        """Bytes [start, end) of `key`, a read-only view (into the block when the range lies in
        one); `object_size` lets whole blocks be read up to the end.

        Raises StorageError when a GET fails (nothing is cached then; the next read retries).
        """
        if not 0 <= start < end or (object_size is not None and end > object_size):
            raise ValueError(f"bad range [{start}, {end}) of {key!r} (size {object_size})")
        self._stats["reads"] += 1
        size = self._block_bytes
        first, last = start // size, (end - 1) // size
        if first == last:
            return await self._read_in_block(key, first, start, end, object_size)
        parts = await asyncio.gather(
            *(
                self._read_in_block(
                    key, block, max(start, block * size), min(end, (block + 1) * size), object_size
                )
                for block in range(first, last + 1)
            )
        )
        return memoryview(b"".join(parts))

    def checked(self, key: str, position: int, view: memoryview) -> bool:
        """Whether the batch at `position` of `key`, read as `view` from this cache, was checked
        in the very block `view` lies in (`mark_checked`)."""
        slot = (key, position // self._block_bytes)
        block = self._blocks.get(slot)
        return block is not None and view.obj is block.obj and position in self._checked[slot]

    def mark_checked(self, key: str, position: int, view: memoryview) -> None:
        """The batch at `position` of `key`, read as `view` from this cache, passed the read
        path's checks: remembered while the block `view` lies in stays cached (a batch read
        across blocks is not remembered)."""
        slot = (key, position // self._block_bytes)
        block = self._blocks.get(slot)
        if block is not None and view.obj is block.obj:
            self._checked[slot].add(position)

    async def _read_in_block(
        self, key: str, block: int, start: int, end: int, object_size: int | None
    ) -> memoryview:
        block_start = block * self._block_bytes
        slot = (key, block)
        while True:
            cached = self._blocks.get(slot)
            if cached is not None and block_start + len(cached) >= end:
                self._blocks.move_to_end(slot)
                self._stats["block_hits"] += 1
                return cached[start - block_start : end - block_start]
            waiting = self._inflight.get(slot)
            if waiting is None:
                break
            await asyncio.shield(waiting)  # then look again: it may not reach as far as we need
        self._stats["block_misses"] += 1
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight[slot] = done
        try:
            data = await self._fill(key, block_start, end, object_size, cached)
        except BaseException:
            done.set_result(None)
            del self._inflight[slot]
            raise
        self._inflight.pop(slot)
        done.set_result(None)
        return data[start - block_start : end - block_start]

    async def _fill(
        self,
        key: str,
        block_start: int,
        end: int,
        object_size: int | None,
        cached: memoryview | None,
    ) -> memoryview:
        block_end = block_start + self._block_bytes
        fetch_end = end if object_size is None else min(block_end, object_size)
        have = 0 if cached is None else len(cached)
        fetch_start = block_start + have
        assert fetch_start < fetch_end, (fetch_start, fetch_end)
        async with self._gets:
            self._stats["gets_issued"] += 1
            chunk = await self._store.get_range_view(key, fetch_start, fetch_end)
        if len(chunk) != fetch_end - fetch_start:
            raise StorageError(f"{key} [{fetch_start}, {fetch_end}) returned {len(chunk)} bytes")
        self._stats["bytes_fetched"] += len(chunk)
        data = chunk if cached is None else memoryview(b"".join((cached, chunk)))
        self._put((key, block_start // self._block_bytes), data)
        return data

    def _put(self, slot: tuple[str, int], block: memoryview) -> None:
        old = self._blocks.pop(slot, None)
        if old is not None:
            self._cached_bytes -= len(old)
        self._blocks[slot] = block
        self._checked[slot] = set()
        self._cached_bytes += len(block)
        while self._cached_bytes > self._bytes_max:
            evicted_slot, evicted = self._blocks.popitem(last=False)
            del self._checked[evicted_slot]
            self._cached_bytes -= len(evicted)
            self._stats["evicted_blocks"] += 1
