"""Unit: a served batch is views of the stored bytes with only its changed header bytes new, and
what the views add up to is the batch Kafka would serve, byte for byte (kafka-python's codec
decodes it); a batch checked in a cached block is not checked again while the block stays, and
is checked again once the block is gone.
"""

from __future__ import annotations

import asyncio
import mmap
import random
from pathlib import Path

import pytest

from diskless import DisklessBroker, TopicPartition
from diskless._types import TimestampType
from diskless.coordinator import BatchInfo, InMemoryBatchCoordinator
from diskless.read import CorruptBatch, FetchReader, ObjectCache
from diskless.read import _batches as batches_module
from diskless.read._batches import Buffer, served_parts
from diskless.records import HEADER_SIZE, set_base_offset, set_log_append_time
from diskless.storage import LocalObjectStore, MemoryObjectStore
from testkit.batches import CREATE_TIME_MS, build_batch, decode

APPEND_TIME = 1_750_000_000_000
BLOCK = 64 * 1024


def _info(
    batch: bytes,
    base_offset: int,
    *,
    at: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> BatchInfo:
    records = decode(batch)[0].records
    return BatchInfo(
        "wal", at, len(batch), base_offset, base_offset + len(records) - 1, timestamp_type,
        APPEND_TIME, CREATE_TIME_MS + len(records) - 1,
    )  # fmt: skip


def _batch(rng: random.Random, records: int = 5) -> bytes:
    return build_batch([rng.randbytes(rng.randrange(100, 3000)) for _ in range(records)])


def _kafka_served(stored: bytes, info: BatchInfo) -> bytes:
    """The batch as the read path served it before it stopped copying: a whole copy, base offset
    set in place, the append time stamped in place."""
    batch = bytearray(stored)
    set_base_offset(batch, info.base_offset)
    if info.timestamp_type == TimestampType.LOG_APPEND_TIME:
        set_log_append_time(batch, info.log_append_time)
    return bytes(batch)


def test_a_create_time_batch_is_its_stored_bytes_behind_a_new_base_offset() -> None:
    rng = random.Random(1)
    stored = _batch(rng)
    block = b"x" * 100 + stored  # as in a cache block, at some position
    view = memoryview(block)[100 : 100 + len(stored)]
    info = _info(stored, 1000)

    parts = served_parts(info, view)

    assert len(parts) == 2 and parts[0] == (1000).to_bytes(8, "big")
    records = parts[1]
    assert isinstance(records, memoryview) and records.obj is block  # a view: nothing copied
    served = b"".join(parts)
    assert served == _kafka_served(stored, info)
    [decoded] = decode(served)  # CRC checked by kafka-python
    assert decoded.base_offset == 1000 and decoded.last_offset == 1004
    assert [r.offset for r in decoded.records] == list(range(1000, 1005))
    assert [r.value for r in decoded.records] == [r.value for r in decode(stored)[0].records]


def test_a_batch_already_at_its_base_offset_is_served_as_it_is_stored() -> None:
    stored = bytearray(_batch(random.Random(2)))
    set_base_offset(stored, 7)
    block = bytes(stored)
    parts = served_parts(_info(block, 7), memoryview(block))
    assert len(parts) == 1
    assert isinstance(parts[0], memoryview) and parts[0].obj is block


@pytest.mark.parametrize("seed", range(5))
def test_a_log_append_time_batch_gets_a_stamped_header_before_its_stored_records(
    seed: int,
) -> None:
    rng = random.Random(seed)
    stored = _batch(rng, records=rng.randrange(1, 20))
    info = _info(stored, rng.randrange(1 << 40), timestamp_type=TimestampType.LOG_APPEND_TIME)

    parts = served_parts(info, memoryview(stored))

    header, records = parts
    assert len(header) == HEADER_SIZE
    assert isinstance(records, memoryview) and records.obj is stored
    served = b"".join(parts)
    assert served == _kafka_served(stored, info)
    [decoded] = decode(served)
    assert decoded.base_offset == info.base_offset
    assert decoded.timestamp_type == 1  # LogAppendTime
    assert {r.timestamp for r in decoded.records} == {APPEND_TIME}
    assert stored == bytes(memoryview(stored))  # the stored bytes are untouched


def test_stored_bytes_are_checked_unless_the_caller_says_they_were() -> None:
    clean = _batch(random.Random(3))
    info = _info(clean, 0)
    stored = bytearray(clean)
    stored[-1] ^= 0xFF  # a record byte: only the CRC can tell
    with pytest.raises(CorruptBatch, match="CRC"):
        served_parts(info, memoryview(bytes(stored)))
    assert b"".join(served_parts(info, memoryview(bytes(stored)), checked=True)) == stored


async def test_a_cache_block_remembers_checked_batches_only_while_it_holds_their_bytes() -> None:
    store = MemoryObjectStore()
    data = bytes(random.Random(4).randbytes(4 * BLOCK))
    await store.put("obj", data)
    cache = ObjectCache(store, block_bytes=BLOCK, bytes_max=2 * BLOCK)

    view = await cache.read("obj", 100, 200, len(data))
    assert view == data[100:200] and not cache.checked("obj", 100, view)
    cache.mark_checked("obj", 100, view)
    again = await cache.read("obj", 100, 200, len(data))
    assert cache.checked("obj", 100, again)
    assert not cache.checked("obj", 300, again)  # another batch of the block
    across = await cache.read("obj", BLOCK - 10, BLOCK + 10, len(data))  # two blocks, joined
    cache.mark_checked("obj", BLOCK - 10, across)
    assert not cache.checked("obj", BLOCK - 10, across)

    await cache.read("obj", 2 * BLOCK, 2 * BLOCK + 1, len(data))  # evicts block 0
    await cache.read("obj", 3 * BLOCK, 3 * BLOCK + 1, len(data))
    reread = await cache.read("obj", 100, 200, len(data))
    assert not cache.checked("obj", 100, reread)  # a new block: its bytes were never checked
    assert not cache.checked("obj", 100, again)  # nor the old block's view, now
    assert again == data[100:200]  # which still holds its bytes


async def test_an_extended_block_forgets_what_was_checked_in_its_shorter_bytes() -> None:
    store = MemoryObjectStore()
    data = bytes(range(256)) * 16
    await store.put("obj", data)
    cache = ObjectCache(store, block_bytes=BLOCK, bytes_max=2 * BLOCK)
    view = await cache.read("obj", 0, 100)  # size unknown: the block holds [0, 100)
    cache.mark_checked("obj", 0, view)
    assert cache.checked("obj", 0, view)
    longer = await cache.read("obj", 0, 200)  # extended: a new block
    assert longer == data[:200]
    assert not cache.checked("obj", 0, longer)


async def test_a_fetch_checks_a_cached_batch_once_and_serves_it_exactly_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches of two partitions in shared WAL objects, served from the object cache: the first
    fetch checks each batch, the next ones serve the same bytes without checking them again."""
    rng = random.Random(5)
    store = MemoryObjectStore()
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 2)
    sent: dict[TopicPartition, list[bytes]] = {TopicPartition("t", p): [] for p in range(2)}
    async with DisklessBroker(1, store, coordinator) as writer:
        for _ in range(4):  # one WAL object per round, holding both partitions' batches
            batches = {}
            for tp, values in sent.items():
                batch = [rng.randbytes(rng.randrange(100, 3000)) for _ in range(5)]
                values.extend(batch)
                batches[tp] = build_batch(batch)
            await writer.produce(batches)

    checked: list[int] = []
    check = batches_module.check_stored_batch

    def counting_check(batch: Buffer, info: BatchInfo) -> None:
        checked.append(info.byte_offset)
        check(batch, info)

    monkeypatch.setattr(batches_module, "check_stored_batch", counting_check)
    reader = FetchReader(
        store, coordinator, object_cache=ObjectCache(store, block_bytes=1 << 20, bytes_max=4 << 20)
    )
    offsets = dict.fromkeys(sent, 0)
    served = []
    for _ in range(3):
        results = await reader.fetch(offsets, max_bytes=1 << 30, partition_max_bytes=1 << 30)
        served.append({tp: r.records for tp, r in results.items()})
        assert len(checked) == 8  # every batch once, on the first fetch only
    assert served[0] == served[1] == served[2]
    for tp, values in sent.items():
        decoded = decode(served[0][tp])  # CRC checked by kafka-python
        assert [b.base_offset for b in decoded] == [0, 5, 10, 15]
        assert [r.offset for b in decoded for r in b.records] == list(range(20))
        assert [r.value for b in decoded for r in b.records] == values
    await coordinator.close()


async def test_a_fetch_for_views_lends_the_stores_pages_and_adds_up_to_the_joined_records(
    tmp_path: Path,
) -> None:
    """Nothing copies the records on the broker: asked for views, a partition's records are
    read-only views, its batches' bytes the local store's mapped file, adding up to exactly what
    a joined fetch returns; a long poll counts them toward `min_bytes`."""
    rng = random.Random(6)
    store = LocalObjectStore(tmp_path)
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 2)
    tps = [TopicPartition("t", p) for p in range(2)]
    async with (
        DisklessBroker(1, store, coordinator) as writer,
        DisklessBroker(2, store, coordinator) as reader,  # no segment cache of the writer's
    ):
        for _ in range(3):  # one WAL object per round, each well past MAP_BYTES_MIN
            await writer.produce({tp: _batch(rng, records=40) for tp in tps})
        offsets = dict.fromkeys(tps, 0)
        joined = await reader.fetch(offsets)
        lent = await reader.fetch(offsets, views=True)
        for tp in tps:
            views = lent[tp].record_views
            assert lent[tp].records == b"" and joined[tp].record_views == ()
            assert b"".join(views) == joined[tp].records
            assert lent[tp].records_size == joined[tp].records_size == len(joined[tp].records)
            assert all(view.readonly for view in views if isinstance(view, memoryview))
            mapped = [v for v in views if isinstance(getattr(v, "obj", None), mmap.mmap)]
            assert sum(len(v) for v in mapped) > 0.9 * lent[tp].records_size
            assert [b.base_offset for b in decode(b"".join(views))] == [0, 40, 80]

        end = {tp: 120 for tp in tps}
        waiting = asyncio.create_task(
            reader.fetch(end, min_bytes=1, max_wait_ms=60_000, views=True)
        )
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await writer.produce({tps[1]: _batch(rng)})
        woken = await asyncio.wait_for(waiting, 30)
        assert woken[tps[0]].records_size == 0
        assert [b.base_offset for b in decode(b"".join(woken[tps[1]].record_views))] == [120]
    await coordinator.close()
