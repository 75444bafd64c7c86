"""Lookups by time through the time marks and one batch read, against lookups by offset.

    .venv/bin/python -m benchmarks.bench_list_offsets [--batches N] [--lookups N]
        [--postgres DSN | --no-postgres]

One partition holds N batches of 10 records, timestamps rising record by record, in objects of
1,000 batches each in an in-memory object store. The durable backends index only the batches
holding a multiple of 1024 offsets (the time marks), so the coordinator's part of a lookup by
time is a probe of that index and a walk of at most about a hundred rows here; the read path
then reads the one batch it names (a ranged GET) and walks its records to the exact one.
MAX_TIMESTAMP is answered the same way. Two baselines: `find_batches` of one batch at a random
offset (one primary-key probe), and a fetch of one batch at a random offset (that probe and the
same read of one batch). Ratios, not absolute times, carry over between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable

from benchmarks._fresh_coordinator import fresh_coordinator
from diskless import TopicPartition
from diskless._types import OffsetSpec
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    FindBatchesRequest,
    ListOffsetsRequest,
)
from diskless.read import FetchReader
from diskless.storage import MemoryObjectStore, ObjectStore
from testkit.batches import build_batch

TP = TopicPartition("bench", 0)
RECORDS_PER_BATCH = 10
VALUE_BYTES = 20
BATCHES_PER_COMMIT = 1000
BASE_TS = 1_700_000_000_000


def objects(batches: int) -> list[tuple[str, bytes, list[CommitBatch]]]:
    """The objects to commit, in order: record j of batch n holds offset and timestamp
    (10n + j, BASE_TS + 10n + j)."""
    values = [b"v" * VALUE_BYTES] * RECORDS_PER_BATCH
    made = []
    for start in range(0, batches, BATCHES_PER_COMMIT):
        body = bytearray()
        commits = []
        for n in range(start, min(start + BATCHES_PER_COMMIT, batches)):
            data = build_batch(values, timestamp_ms=BASE_TS + RECORDS_PER_BATCH * n)
            commits.append(
                CommitBatch(
                    topic_partition=TP,
                    byte_offset=len(body),
                    size=len(data),
                    record_count=RECORDS_PER_BATCH,
                    base_timestamp=BASE_TS + RECORDS_PER_BATCH * n,
                    max_timestamp=BASE_TS + RECORDS_PER_BATCH * (n + 1) - 1,
                    producer_id=-1,
                    producer_epoch=-1,
                    base_sequence=-1,
                )
            )
            body += data
        made.append((f"obj/{start:012d}", bytes(body), commits))
    return made


async def fill(
    coordinator: BatchCoordinator,
    store: ObjectStore,
    made: list[tuple[str, bytes, list[CommitBatch]]],
) -> None:
    await coordinator.create_topic(TP.topic, 1)
    epoch = await coordinator.register_broker(1)
    for key, body, commits in made:
        await store.put(key, body)
        outcome = await coordinator.commit_file(key, 1, epoch, len(body), commits)
        assert outcome.refused is None and all(r.error == 0 for r in outcome.batches)


async def per_lookup(lookup: Callable[[], Awaitable[object]], count: int) -> float:
    """Median microseconds of `count` lookups."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await lookup()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


async def measure(
    coordinator: BatchCoordinator,
    made: list[tuple[str, bytes, list[CommitBatch]]],
    lookups: int,
) -> list[float]:
    rng = random.Random(7)
    store = MemoryObjectStore()
    await fill(coordinator, store, made)
    reader = FetchReader(store, coordinator)
    records = sum(len(commits) for _, _, commits in made) * RECORDS_PER_BATCH

    async def by_offset() -> None:
        request = FindBatchesRequest(TP, rng.randrange(records), 1)
        (found,) = await coordinator.find_batches([request], 1)
        assert found.batches

    async def fetch() -> None:
        offset = rng.randrange(records)
        got = await reader.fetch({TP: offset}, max_bytes=1, partition_max_bytes=1)
        assert got[TP].error == 0 and got[TP].records, got

    async def by_time() -> None:
        offset = rng.randrange(records)
        answers = await coordinator.list_offsets([ListOffsetsRequest(TP, BASE_TS + offset)])
        (answer,) = await reader.resolve_list_offsets(answers)
        assert (answer.offset, answer.timestamp) == (offset, BASE_TS + offset), answer

    async def max_timestamp() -> None:
        request = ListOffsetsRequest(TP, OffsetSpec.MAX_TIMESTAMP)
        (answer,) = await reader.resolve_list_offsets(await coordinator.list_offsets([request]))
        assert answer.offset == records - 1, answer

    reads = reader.stats().time_lookup_batches_read
    figures = [await per_lookup(f, lookups) for f in (by_offset, fetch, by_time, max_timestamp)]
    reads = reader.stats().time_lookup_batches_read - reads
    assert reads == 2 * lookups, f"{reads} batches read for {2 * lookups} lookups"
    return figures


async def main_async(args: argparse.Namespace) -> None:
    made = objects(args.batches)
    print(
        f"one partition of {args.batches:,} batches; median of {args.lookups} lookups each;"
        " ratios against the lookup by offset (coordinator) and the fetch of one batch"
        f"\n{'backend':>10} | {'by offset us':>12} | {'fetch us':>8} | {'by time us':>10} |"
        f" {'ratio':>5} | {'vs fetch':>8} | {'max ts us':>9} | {'ratio':>5} | {'vs fetch':>8}"
    )
    for backend in ("sqlite",) if args.no_postgres else ("sqlite", "postgres"):
        async with fresh_coordinator(backend, args.postgres) as coordinator:
            offset, fetch, by_time, top = await measure(coordinator, made, args.lookups)
        print(
            f"{backend:>10} | {offset:>12.0f} | {fetch:>8.0f} | {by_time:>10.0f} |"
            f" {by_time / offset:>5.2f} | {by_time / fetch:>8.2f} | {top:>9.0f} |"
            f" {top / offset:>5.2f} | {top / fetch:>8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL DSN (default: throwaway)")
    parser.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
