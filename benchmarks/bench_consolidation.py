"""Cold read-back GETs per GB before and after consolidation, on the same data in one run.

    .venv/bin/python -m benchmarks.bench_consolidation [--partitions N] [--rounds N]

A broker writes 16 KiB batches to every partition in each produce call (each WAL object holds
batches of many partitions); a fresh broker then reads everything back, all partitions in each
fetch, with and without the shared object cache. Then the consolidator moves all of it into
consolidated objects and the same read-back runs again. Reported: GETs per GB of each read-back
(the WAL read-back is the same-run baseline), the consolidation's own time, and the batch
metadata rows before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from diskless import BrokerConfig, DisklessBroker, TopicPartition
from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.records import split_batches
from diskless.storage import MemoryObjectStore, ObjectStore
from diskless.wal import WalConfig
from tests.broker._kafka import build_batch


async def read_back(
    store: ObjectStore, coordinator: BatchCoordinator, config: BrokerConfig, partitions: int
) -> tuple[int, int]:
    """(GETs, bytes) of reading every partition from 0 to its end with a cold broker."""
    async with DisklessBroker(99, store, coordinator, config) as broker:
        before = store.stats().ranged_gets
        offsets = {TopicPartition("t", p): 0 for p in range(partitions)}
        total = 0
        while offsets:
            results = await broker.fetch(offsets)
            following = {}
            for tp, result in results.items():
                total += len(result.records)
                headers = split_batches(result.records) if result.records else []
                assert isinstance(headers, list)
                if headers and headers[-1].last_offset + 1 < result.high_watermark:
                    following[tp] = headers[-1].last_offset + 1
            offsets = following
        return store.stats().ranged_gets - before, total


async def main(partitions: int, rounds: int) -> None:
    store, coordinator = MemoryObjectStore(), InMemoryBatchCoordinator()
    await coordinator.create_topic("t", partitions)
    rng = random.Random(1)
    payload = [rng.randbytes(1000) for _ in range(16)]
    config = BrokerConfig(wal=WalConfig(commit_interval_ms=50))
    async with DisklessBroker(1, store, coordinator, config) as broker:
        for _ in range(rounds):
            batch = build_batch(payload)
            await broker.produce({TopicPartition("t", p): batch for p in range(partitions)})
    rows_before = await coordinator.metadata_stats()
    settings = [
        ("without the object cache", BrokerConfig(fetch_cache_bytes_max=0)),
        ("with the object cache", BrokerConfig()),
    ]
    for label, read_config in settings:
        gets, size = await read_back(store, coordinator, read_config, partitions)
        print(f"WAL objects, {label}: {gets} GETs, {gets / (size / 1e9):.0f} GETs/GB")
    consolidator = Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0))
    started = time.perf_counter()
    while (await consolidator.run_once()).candidates:
        pass
    elapsed = time.perf_counter() - started
    stats = consolidator.stats()
    print(
        f"consolidated {stats.bytes_moved / 1e6:.0f} MB into {stats.extents_committed} objects "
        f"in {elapsed:.1f} s"
    )
    for label, read_config in settings:
        gets, size = await read_back(store, coordinator, read_config, partitions)
        print(f"consolidated, {label}: {gets} GETs, {gets / (size / 1e9):.0f} GETs/GB")
    rows_after = await coordinator.metadata_stats()
    print(f"metadata rows: {rows_before.batch_rows} batches -> {rows_after.extent_rows} extents")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    asyncio.run(main(args.partitions, args.rounds))
