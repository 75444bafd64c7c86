"""Mirror throughput against the raw fetch and produce rates of the same data, in one run.

    .venv/bin/python -m benchmarks.bench_mirror [--megabytes N] [--partitions N]
        [--record-bytes N] [--fetch-max-bytes N] [--fetchers N]

A source diskless cluster (one in-process broker, in-memory coordinator and store) gets N MB of
records from an idempotent confluent-kafka producer: the **produce** rate. The same data is then
read back with the mirror's own wire client (`SourceCluster.fetch`, the fetch sizes the mirror
uses), discarding it: the **raw fetch** rate, what the mirror could reach if writing cost
nothing. Last, a `Mirror` copies it into a destination of a SQLite coordinator and a local
object directory (durable, as `python -m diskless.mirror --data-dir` writes): the **mirror**
rate, and its ratio to the raw fetch. All in one process and one event loop, so the ratios, not
the absolute rates, carry over between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from diskless._types import TopicPartition
from diskless.coordinator import SqliteBatchCoordinator
from diskless.mirror import Mirror, MirrorConfig, SourceCluster
from diskless.storage import LocalObjectStore
from testkit.cluster import local_cluster

TOPIC = "bench"


def _produce(bootstrap: str, partitions: int, count: int, record_bytes: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 256 * 1024,
            "compression.type": "none",
        }
    )
    payload = b"x" * record_bytes
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(300) == 0


async def _raw_fetch(source: SourceCluster, ends: dict[TopicPartition, int], max_bytes: int) -> int:
    metadata = await source.metadata([TOPIC])
    positions = dict.fromkeys(ends, 0)
    read = 0
    while any(positions[tp] < end for tp, end in ends.items()):
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, position in positions.items():
            if position < ends[tp]:
                by_leader.setdefault(metadata.leaders[tp], {})[tp] = position
        for leader, offsets in by_leader.items():
            fetched = await source.fetch(leader, offsets, max_bytes, min(max_bytes, 1 << 20), 100)
            for tp, answer in fetched.items():
                read += len(answer.records)
                positions[tp] = max(positions[tp], _next_offset(answer.records, positions[tp]))
    return read


def _next_offset(records: bytes, position: int) -> int:
    """The offset after the last whole batch of `records` (Kafka's fetch may cut the last)."""
    at, end = 0, position
    while at + 61 <= len(records):
        length = int.from_bytes(records[at + 8 : at + 12], "big")
        if at + 12 + length > len(records):
            break
        base = int.from_bytes(records[at : at + 8], "big")
        end = base + int.from_bytes(records[at + 23 : at + 27], "big") + 1
        at += 12 + length
    return end


async def run(args: argparse.Namespace) -> None:
    count = args.megabytes * 1024 * 1024 // args.record_bytes
    async with local_cluster() as cluster:
        await cluster.create_topic(TOPIC, args.partitions)
        bootstrap = cluster.bootstrap()
        started = time.perf_counter()
        await asyncio.to_thread(_produce, bootstrap, args.partitions, count, args.record_bytes)
        produce_s = time.perf_counter() - started
        coordinator = cluster.coordinator
        tps = [TopicPartition(TOPIC, p) for p in range(args.partitions)]
        offsets = await coordinator.partition_offsets(tps)
        ends = {tp: o.high_watermark for tp, o in zip(tps, offsets, strict=True) if o is not None}
        source = SourceCluster(bootstrap)
        try:
            started = time.perf_counter()
            nbytes = await _raw_fetch(source, ends, args.fetch_max_bytes)
            fetch_s = time.perf_counter() - started
            with tempfile.TemporaryDirectory() as directory:
                destination = SqliteBatchCoordinator(Path(directory) / "coordinator.sqlite")
                store = LocalObjectStore(Path(directory) / "objects")
                config = MirrorConfig(
                    name="bench",
                    topics=(TOPIC,),
                    fetchers=args.fetchers,
                    fetch_max_bytes=args.fetch_max_bytes,
                    partition_max_bytes=min(args.fetch_max_bytes, 1 << 20),
                    group_sync_interval_ms=60_000,
                )
                mirror = Mirror(source, destination, store, config)
                await mirror.prepare()
                started = time.perf_counter()
                running = asyncio.create_task(mirror.run())
                while any(lag.mirrored_end < ends[lag.topic_partition] for lag in mirror.lag()):
                    if running.done():
                        running.result()
                    await asyncio.sleep(0.01)
                mirror_s = time.perf_counter() - started
                mirror.close()
                await running
                await destination.close()
                await store.close()
        finally:
            await source.close()
    megabytes = nbytes / 1e6
    print(f"data: {count} records of {args.record_bytes} B in {args.partitions} partitions,"
          f" {megabytes:.1f} MB of batches")  # fmt: skip
    for name, seconds in (("produce", produce_s), ("raw fetch", fetch_s), ("mirror", mirror_s)):
        print(f"{name:>10}: {megabytes / seconds:8.1f} MB/s ({seconds:.2f} s)")
    print(f"mirror / raw fetch: {fetch_s / mirror_s:.2f}", end="; ")
    print(f"mirror / produce: {produce_s / mirror_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--fetch-max-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--fetchers", type=int, default=1)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
