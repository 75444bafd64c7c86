"""Consolidation against its targets, each with its baseline measured in the same run, same data.

    .venv/bin/python -m benchmarks.bench_consolidation [--partitions N] [--megabytes N]
        [--rounds N] [--round-seconds S] [--commit-interval-ms MS]
        [--coordinator postgresql://...]

The embedded defaults: a SQLite coordinator in a file and a local-directory object store, both in
a temporary directory. A broker writes 16 KiB batches to every partition (each WAL object holds
batches of all of them); then, on the same data:

1. metadata: the bytes of batch metadata per retained GB, per-batch rows (the baseline) against
   extent rows after consolidation, both net of the empty schema (measured first, on the same
   file) so that only what grows with the data counts (`metadata_stats().stored_bytes`: on
   SQLite the bytes in use on the metadata's pages);
2. cold read-back: GETs per GB of reading each partition from offset 0 to its end through a cold
   broker (default settings, its object cache on), as a consumer of that partition would, from
   the WAL objects (the baseline) and from the consolidated objects;
3. consolidation throughput: the consolidator moving everything, against GETting the same WAL
   byte ranges and PUTting objects of the same sizes straight through the store (baseline time
   / consolidation time);
4. produce p99: a steady produce workload in rounds of a few seconds, alternately without and
   with a consolidator running (every 100 ms, min age 200 ms) on older data (a backlog produced
   before each round, and the workload's own aged batches); the ratio of p99s per pair of rounds,
   whose median is reported. Latency counts from each request's scheduled time, so a stalled
   event loop shows;
5. find_batches: the same seeded requests (random partitions and offsets) on the WAL rows and on
   the extents, best of several passes each.

The metadata and GETs per GB depend on the extents' size, here the data of one partition (8 MB
by default), not `object_bytes_max` (256 MiB): each extent costs one row and one index read, so
fewer megabytes per partition read worse; the run prints the bytes per extent row and what they
come to at full-size extents. The p99 workload uses the library's commit interval (250 ms);
`--commit-interval-ms` makes it more sensitive to stalls of the event loop.

`--coordinator postgresql://...` runs on PostgreSQL instead (use an empty database: the metadata
figures count every topic in it).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    ConsolidationCandidate,
    FindBatchesRequest,
    MetadataStats,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.read import Span, coalesce
from diskless.records import split_batches
from diskless.storage import LocalObjectStore, ObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch

GB: Final = 1e9
RECORD_BYTES: Final = 1000
RECORDS_PER_BATCH: Final = 16  # 16 records of 1000 bytes: a 16 KiB batch
INFLIGHT_MAX: Final = 64
"""Produce requests in flight while loading data: WAL objects fill to their size bound."""
FIND_CALLS: Final = 2000
FIND_PASSES: Final = 5
STEADY_RATE_PER_S: Final = 200
STEADY_PARTITIONS: Final = 8
BACKLOG_MB_PER_ROUND: Final = 16


TARGET_METADATA_KB_PER_GB: Final = 10.0
TARGET_GETS_PER_GB: Final = 200.0
TARGET_THROUGHPUT_SHARE: Final = 0.5
TARGET_P99_RATIO: Final = 1.10
TARGET_FIND_RATIO: Final = 1.0


class Line(NamedTuple):
    """One target: what was measured, against what, and whether it met the target."""

    name: str
    measured: str
    baseline: str
    ratio: str
    target: str
    met: bool


# --- loading data -------------------------------------------------------------------------------
async def produce(
    broker: DisklessBroker, tps: Sequence[TopicPartition], megabytes: float, seed: int
) -> None:
    """About `megabytes` of 16 KiB batches, one batch for every partition in each request."""
    rng = random.Random(seed)
    batch = build_batch([rng.randbytes(RECORD_BYTES) for _ in range(RECORDS_PER_BATCH)])
    requests = max(1, round(megabytes * 1e6 / (len(batch) * len(tps))))
    slots = asyncio.Semaphore(INFLIGHT_MAX)

    async def one() -> None:
        async with slots:
            results = await broker.produce(dict.fromkeys(tps, batch))
        assert all(r.error == ErrorCode.NONE for r in results.values()), results

    await asyncio.gather(*(one() for _ in range(requests)))


# --- 1. metadata --------------------------------------------------------------------------------
async def metadata(coordinator: BatchCoordinator) -> MetadataStats:
    stats = await coordinator.metadata_stats()
    assert stats.stored_bytes is not None, "the backend does not measure its metadata"
    return stats


def grown_bytes(now: MetadataStats, empty: MetadataStats) -> int:
    """What the metadata grew by since the schema was empty."""
    assert now.stored_bytes is not None and empty.stored_bytes is not None
    return now.stored_bytes - empty.stored_bytes


def kb_per_gb(now: MetadataStats, empty: MetadataStats) -> float:
    return grown_bytes(now, empty) / 1e3 / (now.retained_bytes / GB)


# --- 2. read-back -------------------------------------------------------------------------------
async def read_partition(broker: DisklessBroker, tp: TopicPartition) -> int:
    """Bytes of the partition read from offset 0 to its high watermark."""
    offset = total = 0
    while True:
        result = (await broker.fetch({tp: offset}))[tp]
        assert result.error == ErrorCode.NONE, result
        headers = split_batches(result.records) if result.records else []
        assert isinstance(headers, list), headers
        total += len(result.records)
        if not headers or headers[-1].last_offset + 1 >= result.high_watermark:
            return total
        offset = headers[-1].last_offset + 1


async def cold_read_gets_per_gb(
    store: ObjectStore, coordinator: BatchCoordinator, tps: Sequence[TopicPartition]
) -> tuple[float, int]:
    """(GETs per GB, GETs) of reading every partition through its own cold broker."""
    before = store.stats().ranged_gets
    size = 0
    for tp in tps:
        async with DisklessBroker(99, store, coordinator, BrokerConfig()) as broker:
            size += await read_partition(broker, tp)
    gets = store.stats().ranged_gets - before
    return gets / (size / GB), gets


async def shared_read_gets_per_gb(
    store: ObjectStore, coordinator: BatchCoordinator, tps: Sequence[TopicPartition]
) -> float:
    """GETs per GB of reading all partitions in each fetch through one cold broker (the best
    case of WAL objects: every block read serves all partitions)."""
    before = store.stats().ranged_gets
    size = 0
    async with DisklessBroker(98, store, coordinator, BrokerConfig()) as broker:
        sizes = await asyncio.gather(*(read_partition(broker, tp) for tp in tps))
        size = sum(sizes)
    return (store.stats().ranged_gets - before) / (size / GB)


# --- 3. throughput ------------------------------------------------------------------------------
async def raw_get_put_seconds(
    store: ObjectStore, candidates: list[ConsolidationCandidate]
) -> float:
    """GET each candidate's WAL byte ranges and PUT one object of its size, as the consolidator
    does one candidate at a time, straight through the store."""
    started = time.perf_counter()
    keys = []
    for i, candidate in enumerate(candidates):
        spans = coalesce(
            Span(b.object_key, b.byte_offset, b.byte_offset + b.size)
            for b in candidate.batches
            if b.object_key
        )
        chunks = await asyncio.gather(*(store.get_range(*span) for span in spans))
        keys.append(f"baseline/{i:08d}")
        await store.put(keys[-1], b"".join(chunks))
    elapsed = time.perf_counter() - started
    await store.delete_many(keys)
    return elapsed


async def consolidate_all(consolidator: Consolidator) -> float:
    started = time.perf_counter()
    while (await consolidator.run_once()).candidates:
        pass
    return time.perf_counter() - started


# --- 5. find_batches ----------------------------------------------------------------------------
def find_requests(ends: dict[TopicPartition, int], seed: int) -> list[list[FindBatchesRequest]]:
    """Fetch-shaped calls: one to four partitions each, at random offsets below their ends."""
    rng = random.Random(seed)
    tps = list(ends)
    calls = []
    for _ in range(FIND_CALLS):
        chosen = rng.sample(tps, rng.randint(1, min(4, len(tps))))
        calls.append(
            [FindBatchesRequest(tp, rng.randrange(ends[tp]), 1024 * 1024) for tp in chosen]
        )
    return calls


async def find_seconds(
    coordinator: BatchCoordinator, calls: list[list[FindBatchesRequest]]
) -> float:
    """The best of several passes over the calls, per call (the least disturbed by others)."""
    best = float("inf")
    for _ in range(FIND_PASSES):
        started = time.perf_counter()
        for requests in calls:
            await coordinator.find_batches(requests, 50 * 1024 * 1024)
        best = min(best, time.perf_counter() - started)
    return best / len(calls)


# --- 4. produce p99 -----------------------------------------------------------------------------
async def steady_latencies(
    broker: DisklessBroker, tps: Sequence[TopicPartition], seconds: float, batch: bytes
) -> list[float]:
    """Produce latencies (s) of an open-loop workload: one batch to one partition per request,
    at a fixed rate, each timed from when it was due."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []

    async def one(tp: TopicPartition, due: float) -> None:
        results = await broker.produce({tp: batch})
        assert results[tp].error == ErrorCode.NONE, results
        latencies.append(loop.time() - due)

    start = loop.time()
    tasks = []
    for i in range(int(seconds * STEADY_RATE_PER_S)):
        due = start + i / STEADY_RATE_PER_S
        await asyncio.sleep(max(0.0, due - loop.time()))
        tasks.append(asyncio.create_task(one(tps[i % len(tps)], due)))
    await asyncio.gather(*tasks)
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


async def p99_rounds(
    store: ObjectStore,
    coordinator: BatchCoordinator,
    rounds: int,
    seconds: float,
    commit_interval_ms: int,
) -> tuple[float, float, float, int]:
    """(median p99 ratio, median p99 without, median p99 with, extents committed): rounds in
    pairs, the order within a pair alternating, each after producing a fresh backlog."""
    steady = [TopicPartition("steady", p) for p in range(STEADY_PARTITIONS)]
    backlog = [TopicPartition("backlog", p) for p in range(STEADY_PARTITIONS)]
    await coordinator.create_topic("steady", STEADY_PARTITIONS)
    await coordinator.create_topic("backlog", STEADY_PARTITIONS)
    rng = random.Random(3)
    batch = build_batch([rng.randbytes(RECORD_BYTES) for _ in range(RECORDS_PER_BATCH)])
    config = ConsolidatorConfig(age_ms=200, period_ms=100)
    without: list[float] = []
    with_: list[float] = []
    extents = 0
    broker_config = BrokerConfig(wal=WalConfig(commit_interval_ms=commit_interval_ms))
    async with DisklessBroker(2, store, coordinator, broker_config) as broker:
        for i in range(2 * rounds):
            consolidating = (i % 2 == 0) == (i // 2 % 2 == 1)  # off-on, on-off, off-on...
            await produce(broker, backlog, BACKLOG_MB_PER_ROUND, seed=i)
            await asyncio.sleep(config.age_ms / 1000)  # the backlog is old enough to move
            if not consolidating:
                without.append(p99(await steady_latencies(broker, steady, seconds, batch)))
                continue
            async with Consolidator(store, coordinator, config) as consolidator:  # started
                with_.append(p99(await steady_latencies(broker, steady, seconds, batch)))
            extents += consolidator.stats().extents_committed
    ratios = [b / a for a, b in zip(without, with_, strict=True)]
    return statistics.median(ratios), statistics.median(without), statistics.median(with_), extents


# --- the run ------------------------------------------------------------------------------------
def open_coordinator(spec: str | None, directory: Path) -> BatchCoordinator:
    if spec is None:
        return SqliteBatchCoordinator(directory / "coordinator.db")
    if spec.startswith(("postgresql://", "postgres://")):
        return PostgresBatchCoordinator(spec)
    raise SystemExit(f"--coordinator: expected a postgresql:// DSN, got {spec!r}")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-consolidation-") as tmp:
        store = LocalObjectStore(Path(tmp) / "objects")
        coordinator = open_coordinator(args.coordinator, Path(tmp))
        try:
            lines = await run(store, coordinator, args)
        finally:
            await coordinator.close()
    print()
    header = ("target", "measured", "baseline", "ratio", "target", "verdict")
    rows = [(*line[:5], "PASS" if line.met else "MISS") for line in lines]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


async def run(
    store: ObjectStore,
    coordinator: BatchCoordinator,
    args: argparse.Namespace,
) -> list[Line]:
    tps = [TopicPartition("bulk", p) for p in range(args.partitions)]
    await coordinator.create_topic("bulk", args.partitions)
    empty = await metadata(coordinator)
    started = time.perf_counter()
    async with DisklessBroker(1, store, coordinator, BrokerConfig()) as broker:
        await produce(broker, tps, args.megabytes, seed=1)
    wal = await metadata(coordinator)
    print(
        f"loaded {wal.retained_bytes / 1e6:.0f} MB ({wal.batch_rows} batches of 16 KiB, "
        f"{store.stats().puts} WAL objects) in {time.perf_counter() - started:.1f} s"
    )
    ends = {tp: wal.batch_rows // len(tps) * RECORDS_PER_BATCH for tp in tps}
    calls = find_requests(ends, seed=2)
    find_wal = await find_seconds(coordinator, calls)
    wal_gets_gb, wal_gets = await cold_read_gets_per_gb(store, coordinator, tps)
    wal_shared = await shared_read_gets_per_gb(store, coordinator, tps)
    print(
        f"cold read-back of the WAL objects: {wal_gets} GETs a partition at a time; "
        f"{wal_shared:.0f} GETs/GB all partitions in each fetch"
    )

    config = ConsolidatorConfig(age_ms=0)
    candidates = await coordinator.consolidation_candidates(
        2**62, config.object_bytes_max, config.candidates_per_run_max
    )
    raw = await raw_get_put_seconds(store, candidates)
    consolidator = Consolidator(store, coordinator, config)
    took = await consolidate_all(consolidator)
    moved = consolidator.stats()
    print(
        f"consolidated {moved.bytes_moved / 1e6:.0f} MB into {moved.extents_committed} objects "
        f"in {took:.2f} s (raw GET + PUT of the same bytes: {raw:.2f} s)"
    )
    consolidated = await metadata(coordinator)
    assert consolidated.batch_rows == 0, consolidated
    find_extents = await find_seconds(coordinator, calls)
    ext_gets_gb, ext_gets = await cold_read_gets_per_gb(store, coordinator, tps)
    ext_shared = await shared_read_gets_per_gb(store, coordinator, tps)
    print(
        f"cold read-back of the consolidated objects: {ext_gets} GETs a partition at a time; "
        f"{ext_shared:.0f} GETs/GB all partitions in each fetch"
    )
    per_extent = grown_bytes(consolidated, empty) / consolidated.extent_rows
    print(
        f"metadata stored_bytes: {empty.stored_bytes} empty, "
        f"{wal.stored_bytes} per-batch rows, {consolidated.stored_bytes} consolidated; "
        f"{per_extent:.0f} B per extent row, {per_extent * GB / config.object_bytes_max / 1e3:.2f} "
        f"KB/GB at extents of object_bytes_max ({config.object_bytes_max >> 20} MiB)"
    )

    ratio, p99_without, p99_with, extents = await p99_rounds(
        store, coordinator, args.rounds, args.round_seconds, args.commit_interval_ms
    )
    print(
        f"produce p99 over {args.rounds} pairs of {args.round_seconds:.0f} s rounds "
        f"({extents} extents committed while producing)"
    )
    meta_wal = kb_per_gb(wal, empty)
    meta_ext = kb_per_gb(consolidated, empty)
    return [
        Line(
            "metadata per retained GB",
            f"{meta_ext:.1f} KB/GB",
            f"{meta_wal:.0f} KB/GB per-batch rows",
            f"{meta_ext / meta_wal:.4f}",
            f"<= {TARGET_METADATA_KB_PER_GB:.0f} KB/GB",
            meta_ext <= TARGET_METADATA_KB_PER_GB,
        ),
        Line(
            "cold read-back GETs per GB",
            f"{ext_gets_gb:.0f} GETs/GB",
            f"{wal_gets_gb:.0f} GETs/GB from WAL",
            f"{ext_gets_gb / wal_gets_gb:.3f}",
            f"<= {TARGET_GETS_PER_GB:.0f} GETs/GB",
            ext_gets_gb <= TARGET_GETS_PER_GB,
        ),
        Line(
            "consolidation throughput",
            f"{moved.bytes_moved / 1e6 / took:.0f} MB/s",
            f"{moved.bytes_moved / 1e6 / raw:.0f} MB/s raw GET+PUT",
            f"{raw / took:.2f}",
            f">= {TARGET_THROUGHPUT_SHARE:.2f}",
            raw / took >= TARGET_THROUGHPUT_SHARE,
        ),
        Line(
            "produce p99 while consolidating",
            f"{p99_with * 1e3:.0f} ms",
            f"{p99_without * 1e3:.0f} ms without",
            f"{ratio:.3f} (median of {args.rounds})",
            f"<= {TARGET_P99_RATIO:.2f}",
            ratio <= TARGET_P99_RATIO,
        ),
        Line(
            "find_batches per call",
            f"{find_extents * 1e6:.0f} us on extents",
            f"{find_wal * 1e6:.0f} us on batch rows",
            f"{find_extents / find_wal:.3f}",
            f"<= {TARGET_FIND_RATIO:.2f}",
            find_extents / find_wal <= TARGET_FIND_RATIO,
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--megabytes", type=float, default=128)
    parser.add_argument("--rounds", type=int, default=4, help="pairs of produce p99 rounds")
    parser.add_argument("--round-seconds", type=float, default=3.0)
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        default=WalConfig().commit_interval_ms,
        help="the produce p99 workload's WAL commit interval (default: the library's)",
    )
    parser.add_argument("--coordinator", help="postgresql://... (default: SQLite in a temp file)")
    asyncio.run(main(parser.parse_args()))
