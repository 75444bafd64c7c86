"""Integration: a cold consumer reading the partitions of shared WAL objects one at a time costs
one GET per object block, on every coordinator backend: the coordinator tells the read path each
object's size, so the shared object cache reads whole blocks instead of extending a block by one
GET per batch."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker, TopicPartition
from diskless.clock import SystemClock
from diskless.coordinator import FindBatchesRequest
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import build_batch, records_of

PARTITIONS = 8
ROUNDS = 6


@pytest.mark.parametrize("backend", BACKENDS)
async def test_reading_partitions_one_by_one_costs_one_get_per_object(
    backend: str, tmp_path: Path
) -> None:
    store = MemoryObjectStore()
    coordinator = open_coordinator(backend, tmp_path, SystemClock())
    try:
        await coordinator.create_topic("t", PARTITIONS)
        rng = random.Random(7)
        sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        async with DisklessBroker(1, store, coordinator, BrokerConfig(wal=WalConfig())) as writer:
            for _ in range(ROUNDS):  # each produce call fills one WAL object with every partition
                batches = {}
                for p in range(PARTITIONS):
                    values = [rng.randbytes(200) for _ in range(3)]
                    sent[p].extend(values)
                    batches[TopicPartition("t", p)] = build_batch(values)
                await writer.produce(batches)
        objects = {
            b.object_key
            for response in await coordinator.find_batches(
                [FindBatchesRequest(TopicPartition("t", p), 0, 1 << 30) for p in range(PARTITIONS)],
                1 << 30,
            )
            for b in response.batches
        }
        assert len(objects) == ROUNDS
        gets_before = store.stats().ranged_gets
        async with DisklessBroker(2, store, coordinator) as reader:  # cold: no segment cache
            for p in range(PARTITIONS):
                tp = TopicPartition("t", p)
                result = (await reader.fetch({tp: 0}))[tp]
                assert [r.value for r in records_of(result.records)] == sent[p]
        assert store.stats().ranged_gets - gets_before == len(objects)
    finally:
        await coordinator.close()
