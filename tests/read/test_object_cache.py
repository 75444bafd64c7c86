"""Unit: the shared object cache reads each aligned block with one GET, stays within its byte
bound (LRU), and lets concurrent misses of one block share one GET."""

from __future__ import annotations

import asyncio
import random

import pytest

from diskless.errors import StorageError
from diskless.read import ObjectCache
from diskless.storage import Fault, FaultyObjectStore, MemoryObjectStore, StoreOp

BLOCK = 1024


async def _store(size: int = 10 * BLOCK + 100) -> tuple[MemoryObjectStore, bytes]:
    store = MemoryObjectStore()
    data = bytes(i % 251 for i in range(size))
    await store.put("obj", data)
    return store, data


async def test_one_get_per_block_for_any_number_of_reads() -> None:
    store, data = await _store()
    cache = ObjectCache(store, block_bytes=BLOCK, bytes_max=64 * BLOCK)
    for start in range(0, 3 * BLOCK, 37):
        end = min(start + 200, 3 * BLOCK)
        assert await cache.read("obj", start, end, len(data)) == data[start:end]
    assert store.stats().ranged_gets == 3
    # a range across blocks, and the last (short) block of the object
    assert (
        await cache.read("obj", 2 * BLOCK - 5, 4 * BLOCK + 5, len(data))
        == data[2 * BLOCK - 5 : 4 * BLOCK + 5]
    )
    assert await cache.read("obj", len(data) - 10, len(data), len(data)) == data[-10:]
    assert store.stats().ranged_gets == 3 + 2 + 1
    assert cache.stats().gets_issued == 6


async def test_an_object_of_unknown_size_is_read_up_to_what_is_needed_then_extended() -> None:
    store, data = await _store()
    cache = ObjectCache(store, block_bytes=BLOCK, bytes_max=64 * BLOCK)
    assert await cache.read("obj", 10 * BLOCK + 10, 10 * BLOCK + 50) == data[-90:-50]
    assert await cache.read("obj", 10 * BLOCK, 10 * BLOCK + 40) == data[10 * BLOCK : -60]
    assert store.stats().ranged_gets == 1
    assert await cache.read("obj", 10 * BLOCK + 60, 10 * BLOCK + 100) == data[-40:]
    assert store.stats().ranged_gets == 2
    assert cache.stats().bytes_fetched == 100  # the tail only, not the block again


async def test_the_cache_stays_within_its_bound_least_recently_used_first() -> None:
    store, data = await _store()
    cache = ObjectCache(store, block_bytes=BLOCK, bytes_max=3 * BLOCK)
    for block in (0, 1, 2):
        await cache.read("obj", block * BLOCK, block * BLOCK + 1, len(data))
    await cache.read("obj", 0, 1, len(data))  # block 0 is now the most recent
    await cache.read("obj", 3 * BLOCK, 3 * BLOCK + 1, len(data))  # evicts block 1
    assert cache.stats().cached_bytes <= 3 * BLOCK
    assert cache.stats().evicted_blocks == 1
    before = store.stats().ranged_gets
    await cache.read("obj", 0, 1, len(data))
    assert store.stats().ranged_gets == before
    await cache.read("obj", BLOCK, BLOCK + 1, len(data))
    assert store.stats().ranged_gets == before + 1


async def test_concurrent_misses_of_one_block_share_one_get() -> None:
    store, data = await _store()
    slow = FaultyObjectStore(store, random.Random(0), latency_s=0.01)
    cache = ObjectCache(slow, block_bytes=BLOCK, bytes_max=64 * BLOCK)
    reads = [cache.read("obj", i * 10, i * 10 + 20, len(data)) for i in range(50)]
    results = await asyncio.gather(*reads)
    assert results == [data[i * 10 : i * 10 + 20] for i in range(50)]
    assert store.stats().ranged_gets == 1


async def test_a_failed_get_is_not_cached_and_is_retried() -> None:
    store, data = await _store()
    faulty = FaultyObjectStore(store, random.Random(0), latency_s=0.01)
    faulty.schedule(StoreOp.GET, Fault.FAIL)
    cache = ObjectCache(faulty, block_bytes=BLOCK, bytes_max=64 * BLOCK)
    waiters = [cache.read("obj", 0, 10, len(data)) for _ in range(3)]
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert any(isinstance(o, StorageError) for o in outcomes)
    assert await cache.read("obj", 0, 10, len(data)) == data[:10]
    with pytest.raises(ValueError):
        await cache.read("obj", 0, len(data) + 1, len(data))
