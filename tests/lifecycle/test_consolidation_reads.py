"""Integration: what a consolidation run reads. When every WAL object it touches fits in its
cache, each object is read whole, once, for all the partition ranges it holds batches of; when
they do not fit, each range reads only its own spans, and the result is the same."""

from __future__ import annotations

import asyncio
import random

import pytest

from diskless import BrokerConfig, DisklessBroker, TopicPartition
from diskless.coordinator import FindBatchesRequest, InMemoryBatchCoordinator
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.storage import MemoryObjectStore
from tests.broker._kafka import build_batch, records_of

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
