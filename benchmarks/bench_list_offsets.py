"""Lookups by time through the time marks, against a lookup by offset in the same run.

    .venv/bin/python -m benchmarks.bench_list_offsets [--batches N] [--lookups N]
        [--postgres DSN | --no-postgres]

One partition holds N batches of 10 records, timestamps rising. The durable backends index only
the batches holding a multiple of 1024 offsets (the time marks), so a lookup by time is a probe of
that index and a walk of at most about a hundred rows here (fewer than 1024 in any partition).
The baseline is `find_batches` of one batch at a random offset: one primary-key probe. Ratios,
not absolute times, carry over between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from diskless import TopicPartition
from diskless._types import OffsetSpec
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    FindBatchesRequest,
    ListOffsetsRequest,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)

TP = TopicPartition("bench", 0)
RECORDS_PER_BATCH = 10
BATCHES_PER_COMMIT = 1000
BASE_TS = 1_700_000_000_000


async def fill(coordinator: BatchCoordinator, batches: int) -> None:
    await coordinator.create_topic(TP.topic, 1)
    epoch = await coordinator.register_broker(1)
    for start in range(0, batches, BATCHES_PER_COMMIT):
        objects = [
            CommitBatch(
                topic_partition=TP,
                byte_offset=i * 100,
                size=100,
                record_count=RECORDS_PER_BATCH,
                base_timestamp=BASE_TS + n,
                max_timestamp=BASE_TS + n,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
            )
            for i, n in enumerate(range(start, min(start + BATCHES_PER_COMMIT, batches)))
        ]
        key = f"obj/{start:012d}"
        outcome = await coordinator.commit_file(key, 1, epoch, 100 * len(objects), objects)
        assert outcome.refused is None and all(r.error == 0 for r in outcome.batches)


async def per_lookup(lookup: Callable[[], Awaitable[object]], count: int) -> float:
    """Median microseconds of `count` lookups."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await lookup()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


async def measure(coordinator: BatchCoordinator, batches: int, lookups: int) -> list[float]:
    rng = random.Random(7)
    await fill(coordinator, batches)
    records = batches * RECORDS_PER_BATCH

    async def by_offset() -> None:
        request = FindBatchesRequest(TP, rng.randrange(records), 1)
        (found,) = await coordinator.find_batches([request], 1)
        assert found.batches

    async def by_time() -> None:
        ts = BASE_TS + rng.randrange(batches)
        (answer,) = await coordinator.list_offsets([ListOffsetsRequest(TP, ts)])
        assert answer.offset == (ts - BASE_TS) * RECORDS_PER_BATCH, answer

    async def max_timestamp() -> None:
        request = ListOffsetsRequest(TP, OffsetSpec.MAX_TIMESTAMP)
        (answer,) = await coordinator.list_offsets([request])
        assert answer.offset == records - RECORDS_PER_BATCH, answer

    return [await per_lookup(f, lookups) for f in (by_offset, by_time, max_timestamp)]


@contextlib.asynccontextmanager
async def opened(backend: str, postgres_dsn: str | None) -> AsyncIterator[BatchCoordinator]:
    """A coordinator of `backend` over fresh state, closed (and its state dropped) after."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-list-offsets-") as directory:
            coordinator: BatchCoordinator = SqliteBatchCoordinator(Path(directory) / "c.db")
            try:
                yield coordinator
            finally:
                await coordinator.close()
        return
    from benchmarks._coordinator_postgres import fresh_database_async, server

    with server(postgres_dsn) as admin_dsn:
        async with fresh_database_async(admin_dsn) as database:
            coordinator = PostgresBatchCoordinator(database)
            try:
                yield coordinator
            finally:
                await coordinator.close()


async def main_async(args: argparse.Namespace) -> None:
    print(
        f"one partition of {args.batches:,} batches; median of {args.lookups} lookups each"
        f"\n{'backend':>10} | {'by offset us':>12} | {'by time us':>10} | {'ratio':>5} |"
        f" {'max ts us':>9} | {'ratio':>5}"
    )
    for backend in ("sqlite",) if args.no_postgres else ("sqlite", "postgres"):
        async with opened(backend, args.postgres) as coordinator:
            offset, by_time, top = await measure(coordinator, args.batches, args.lookups)
        print(
            f"{backend:>10} | {offset:>12.0f} | {by_time:>10.0f} | {by_time / offset:>5.2f} |"
            f" {top:>9.0f} | {top / offset:>5.2f}"
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
