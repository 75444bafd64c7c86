"""Integration: what a consolidation run reads, and what a fetch over its extents asks.

When every WAL object a run touches fits in its cache, each object is read whole, once, for all
the partition ranges it holds batches of; when they do not fit, each range reads only its own
spans, and the result is the same. A fetch over an extent makes one coordinator call, on every
backend, and returns what it returned before."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from diskless import BrokerConfig, DisklessBroker, SystemClock, TopicPartition
from diskless.coordinator import BatchCoordinator, FindBatchesRequest, InMemoryBatchCoordinator
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.storage import MemoryObjectStore
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import build_batch, records_of
from tests.lifecycle._helpers import count_calls

PARTITIONS = 6
ROUNDS = 8
"""Produce calls, each committed in a WAL object of its own or shared with the next."""


@pytest.mark.parametrize("cache_bytes_max", [64 << 20, 1 << 14])
async def test_a_run_reads_each_wal_object_once_when_they_all_fit(cache_bytes_max: int) -> None:
    store, coordinator = MemoryObjectStore(), InMemoryBatchCoordinator()
    await coordinator.create_topic("t", PARTITIONS)
    rng = random.Random(3)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with DisklessBroker(1, store, coordinator, BrokerConfig()) as broker:
        for _ in range(ROUNDS):  # WAL objects holding every partition
            batches = {}
            for p in range(PARTITIONS):
                values = [rng.randbytes(300) for _ in range(4)]
                sent[p].extend(values)
                batches[TopicPartition("t", p)] = build_batch(values)
            await broker.produce(batches)
    tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
    requests = [FindBatchesRequest(tp, 0, 1 << 30) for tp in tps]
    found = await coordinator.find_batches(requests, 1 << 30)
    objects = {b.object_key for response in found for b in response.batches}
    await asyncio.sleep(0.01)  # every batch committed strictly before the run's cut-off
    gets = store.stats().ranged_gets
    config = ConsolidatorConfig(
        age_ms=0, cache_bytes_max=cache_bytes_max, cache_block_bytes=min(cache_bytes_max, 8 << 20)
    )
    run = await Consolidator(store, coordinator, config).run_once()
    assert run.extents_committed == PARTITIONS and run.failures == 0
    reads = store.stats().ranged_gets - gets
    if cache_bytes_max >= 64 << 20:
        assert reads == len(objects)  # each WAL object once, whole
    else:
        assert reads > len(objects)  # each range its own spans, so some objects more than once
    for p, tp in enumerate(tps):
        (found,) = await coordinator.find_batches([FindBatchesRequest(tp, 0, 1 << 20)], 1 << 20)
        assert [b.extent is not None for b in found.batches] == [True]
        async with DisklessBroker(2, store, coordinator) as reader:
            result = (await reader.fetch({tp: 0}))[tp]
        assert [r.value for r in records_of(result.records)] == sent[p]


@pytest.fixture(params=BACKENDS)
async def any_coordinator(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = open_coordinator(request.param, tmp_path, SystemClock())
    yield made
    await made.close()


async def test_a_fetch_over_an_extent_asks_the_coordinator_once(
    any_coordinator: BatchCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator counts the extent holding the fetch offset as empty, so its answer can
    end where its next row would not fit: the exact walk, whose budget the extent's tail
    spends first, does not reach that row either, and needs no second call to learn it."""
    coordinator, store = any_coordinator, MemoryObjectStore()
    tp = TopicPartition("t", 0)
    await coordinator.create_topic(tp.topic, 1)
    sizes = [900, 30, 900, 900, 900]  # value bytes: the extent's tail (30) is small
    async with DisklessBroker(1, store, coordinator, BrokerConfig()) as broker:
        for offset, size in enumerate(sizes):
            produced = await broker.produce({tp: build_batch([bytes([offset]) * size])})
            assert produced[tp].base_offset == offset
        rows = (await coordinator.find_batches([FindBatchesRequest(tp, 0, 1 << 20)], 1 << 20))[0]
        batch = [info.size for info in rows.batches]
        # offsets 1..3 fit with room to spare, 1..4 do not, and the coordinator counts 2..4
        # (the extent as empty) as too many: its answer ends before offset 4
        budget = batch[1] + batch[2] + batch[3] + 10
        assert batch[2] + batch[3] + batch[4] > budget
        fetch = {"max_bytes": 1 << 20, "partition_max_bytes": budget}
        before = (await broker.fetch({tp: 1}, **fetch))[tp]  # type: ignore[arg-type]
        await asyncio.sleep(0.01)  # committed strictly before the run's cut-off
        config = ConsolidatorConfig(age_ms=0, object_bytes_max=batch[0] + batch[1])
        run = await Consolidator(store, coordinator, config).run_once()
        assert run.extents_committed == 1 and run.batches_moved == 2, run
        (answer,) = await coordinator.find_batches([FindBatchesRequest(tp, 1, budget)], 1 << 20)
        assert [(b.base_offset, b.extent is not None) for b in answer.batches] == [
            (0, True),
            (2, False),
            (3, False),
        ]
        calls = count_calls(monkeypatch, coordinator, "find_batches")
        after = (await broker.fetch({tp: 1}, **fetch))[tp]  # type: ignore[arg-type]
    assert calls == [1]
    assert after == before
    assert [r.offset for r in records_of(after.records)] == [1, 2, 3]
