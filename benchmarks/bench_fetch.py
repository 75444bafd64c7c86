"""Fetch throughput with ranged reads coalesced per object, against one GET per batch.

    .venv/bin/python -m benchmarks.bench_fetch [--partitions N] [--batches N]
        [--rounds-per-object N] [--latency-ms MS] [--coordinator memory|sqlite|postgres]
        [--postgres DSN] [--partition-max-bytes N]

A broker writes small batches spread over many partitions (so every WAL object holds batches of
many partitions, as in production); then a consumer-style loop fetches every partition from offset
0 to its high watermark, all partitions in each fetch, through a store that adds a fixed latency to
every request (object storage is latency-bound, not bandwidth-bound). The segment cache is off, so
every byte comes from the store. The baseline is the same read path with coalescing replaced by one
ranged GET per batch. Reported: records/s, GETs issued and bytes read for both, and their ratio.
The coordinator is in memory unless `--coordinator` names a durable one (SQLite in a temporary
file; PostgreSQL at `--postgres DSN`, by default a throwaway server), whose lookups then count
too.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Iterable
from unittest import mock

from benchmarks._fresh_coordinator import fresh_coordinator
from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
)
from diskless.read import FetchReader, Span, _reader
from diskless.storage import FaultyObjectStore, MemoryObjectStore, ObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch

RECORDS_PER_BATCH = 4
RECORD_BYTES = 100
FETCH_MAX_BYTES = 50 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024


async def populate(
    store: ObjectStore,
    coordinator: BatchCoordinator,
    partitions: int,
    batches: int,
    rounds_per_object: int,
) -> list[TopicPartition]:
    tps = [TopicPartition("bench", p) for p in range(partitions)]
    await coordinator.create_topic("bench", partitions)
    rng = random.Random(7)
    payload = rng.randbytes(RECORD_BYTES)
    config = BrokerConfig(wal=WalConfig(commit_interval_ms=10))
    batch = build_batch([payload] * RECORDS_PER_BATCH)
    async with DisklessBroker(0, store, coordinator, config) as broker:
        rounds = batches // partitions
        for first in range(0, rounds, rounds_per_object):
            # Each wave of requests (one batch for every partition each) lands in one object, so
            # objects interleave all partitions as they do in production.
            wave = [
                broker.produce(dict.fromkeys(tps, batch))
                for _ in range(min(rounds_per_object, rounds - first))
            ]
            for results in await asyncio.gather(*wave):
                assert all(r.error == ErrorCode.NONE for r in results.values())
    return tps


def one_span_per_batch(ranges: Iterable[Span], gap_bytes_max: int = 0) -> list[Span]:
    """The baseline: no merging, each batch's range is its own GET."""
    return sorted(set(ranges))


async def read_everything(
    reader: FetchReader, tps: list[TopicPartition], partition_max_bytes: int
) -> tuple[int, float, int]:
    """Records read, seconds taken and fetches made to fetch every partition to its high
    watermark."""
    position = dict.fromkeys(tps, 0)
    records = fetches = 0
    started = time.perf_counter()
    while True:
        fetches += 1
        results = await reader.fetch(
            {tp: position[tp] for tp in tps},
            max_bytes=FETCH_MAX_BYTES,
            partition_max_bytes=partition_max_bytes,
        )
        progressed = False
        for tp, result in results.items():
            assert result.error == ErrorCode.NONE, result
            if result.records:
                # Count by offsets: the last batch's end is base offset + records in this fetch.
                before = position[tp]
                position[tp] = _end_offset(result.records)
                records += position[tp] - before
                progressed = True
        if not progressed:
            return records, time.perf_counter() - started, fetches


def _end_offset(records: bytes) -> int:
    """The offset after the last batch of a fetch response (base offset + last offset delta + 1)."""
    position, end = 0, 0
    view = memoryview(records)
    while position < len(view):
        base = int.from_bytes(view[position : position + 8], "big", signed=True)
        length = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        delta = int.from_bytes(view[position + 23 : position + 27], "big", signed=True)
        end = base + delta + 1
        position += 12 + length
    return end


async def measure(
    inner: MemoryObjectStore,
    coordinator: BatchCoordinator,
    tps: list[TopicPartition],
    latency_s: float,
    coalesced: bool,
    partition_max_bytes: int,
) -> tuple[int, float, int, int, int]:
    store = FaultyObjectStore(inner, random.Random(0), latency_s=latency_s)
    reader = FetchReader(store, coordinator, cache=None, gets_inflight_max=16)
    before = inner.stats()
    if coalesced:
        records, elapsed, fetches = await read_everything(reader, tps, partition_max_bytes)
    else:
        with mock.patch.object(_reader, "coalesce", one_span_per_batch):
            records, elapsed, fetches = await read_everything(reader, tps, partition_max_bytes)
    used = inner.stats().minus(before)
    return records, elapsed, fetches, used.ranged_gets, used.bytes_out


async def main(args: argparse.Namespace) -> None:
    async with fresh_coordinator(args.coordinator, args.postgres) as coordinator:
        await run(coordinator, args)


async def run(coordinator: BatchCoordinator, args: argparse.Namespace) -> None:
    partitions, batches, latency_ms = args.partitions, args.batches, args.latency_ms
    inner = MemoryObjectStore()
    tps = await populate(inner, coordinator, partitions, batches, args.rounds_per_object)
    objects = sum(1 for _ in [o async for o in inner.list_all("wal/")])
    print(
        f"{partitions} partitions, {batches // partitions * partitions} batches of "
        f"{RECORDS_PER_BATCH} x {RECORD_BYTES} B records in {objects} objects; "
        f"store latency {latency_ms:.1f} ms per request, 16 GETs in flight, no segment cache; "
        f"{args.coordinator} coordinator"
    )
    rows = {}
    for label, coalesced in (("one GET per batch", False), ("coalesced per object", True)):
        records, elapsed, fetches, gets, nbytes = await measure(
            inner, coordinator, tps, latency_ms / 1000, coalesced, args.partition_max_bytes
        )
        rows[label] = records / elapsed
        print(
            f"{label:<22} {records:>8} records {elapsed:7.2f} s {records / elapsed:11.0f} rec/s "
            f"{fetches:>5} fetches {elapsed / fetches * 1000:8.2f} ms/fetch "
            f"{gets:>7} GETs {nbytes / 1024 / 1024:8.2f} MiB"
        )
    ratio = rows["coalesced per object"] / rows["one GET per batch"]
    print(f"speed-up of coalescing: {ratio:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4096)
    parser.add_argument("--rounds-per-object", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--coordinator", choices=("memory", "sqlite", "postgres"), default="memory")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL DSN (default: throwaway)")
    parser.add_argument("--partition-max-bytes", type=int, default=PARTITION_MAX_BYTES)
    asyncio.run(main(parser.parse_args()))
