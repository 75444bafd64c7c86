"""This machine's physical limits for the same work, measured in the same run.

- Raw object-store PUTs: objects of the run's observed mean object size, written by one Spark
  task per workload task with as many concurrent PUTs as that task's brokers may have in flight
  (brokers x uploads_inflight_max), to the same kind of store, with no broker in the way.
- Raw SQLite inserts: the run's mean batches-per-commit rows per transaction, `executemany` into a
  table shaped like batch metadata (with a primary-key index), one writer, WAL journal and full
  synchronous commits, in a fresh file beside the coordinator's.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from benchmarks.harness.env import open_store
from benchmarks.harness.spec import MB, RunSpec, StoreSpec, WorkloadSpec
from benchmarks.harness.workload import brokers_of_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BASELINE_PREFIX: Final = "baseline/"
PUT_SECONDS_DEFAULT: Final = 4.0
SQLITE_SECONDS_DEFAULT: Final = 3.0
UPLOADS_INFLIGHT_DEFAULT: Final = 8


class PutBaseline(msgspec.Struct, frozen=True, kw_only=True):
    object_bytes: int
    concurrency: int
    puts: int
    seconds: float
    puts_per_s: float
    mb_per_s: float
    latency_p50_ms: float
    latency_p99_ms: float


class SqliteBaseline(msgspec.Struct, frozen=True, kw_only=True):
    rows_per_txn: int
    rows: int
    txns: int
    seconds: float
    rows_per_s: float
    txns_per_s: float
    txn_p50_ms: float
    txn_p99_ms: float


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def _put_loop(
    store_spec: StoreSpec, object_bytes: int, concurrency: int, seconds: float, tag: str
) -> list[float]:
    store = open_store(store_spec)
    payload = os.urandom(object_bytes)
    latencies: list[float] = []
    keys: list[str] = []
    deadline = time.perf_counter() + seconds

    async def worker(worker_id: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            key = f"{BASELINE_PREFIX}{tag}-{worker_id}-{n}"
            n += 1
            started = time.perf_counter()
            await store.put(key, payload)
            latencies.append((time.perf_counter() - started) * 1000.0)
            keys.append(key)

    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        for start in range(0, len(keys), 1000):
            await store.delete_many(keys[start : start + 1000])
    finally:
        await store.close()
    return latencies


def put_baseline(
    spark: SparkSession,
    spec: WorkloadSpec,
    run: RunSpec,
    object_bytes: int,
    seconds: float = PUT_SECONDS_DEFAULT,
) -> PutBaseline:
    """Raw PUT throughput with the run's task layout and upload concurrency."""
    tasks = spec.effective_tasks
    inflight = run.wal.get("uploads_inflight_max", UPLOADS_INFLIGHT_DEFAULT)
    per_task = [max(1, len(brokers_of_task(spec, t)) * inflight) for t in range(tasks)]
    size = max(1, object_bytes)
    store_spec = run.store

    def run_partition(index: int, _: object) -> list[tuple[float, ...]]:
        started = time.perf_counter()
        lat = asyncio.run(_put_loop(store_spec, size, per_task[index], seconds, f"t{index}"))
        return [(time.perf_counter() - started, *lat)]

    per_task_results = (
        spark.sparkContext.parallelize(range(tasks), tasks)
        .mapPartitionsWithIndex(run_partition)
        .collect()
    )
    elapsed = max(r[0] for r in per_task_results)
    latencies = [x for r in per_task_results for x in r[1:]]
    puts = len(latencies)
    return PutBaseline(
        object_bytes=size,
        concurrency=sum(per_task),
        puts=puts,
        seconds=elapsed,
        puts_per_s=puts / elapsed,
        mb_per_s=puts * size / MB / elapsed,
        latency_p50_ms=percentile(latencies, 0.5),
        latency_p99_ms=percentile(latencies, 0.99),
    )


_TABLE: Final = """
CREATE TABLE batches (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, base_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL, object_key TEXT NOT NULL, byte_offset INTEGER NOT NULL,
    size INTEGER NOT NULL, base_timestamp INTEGER NOT NULL, max_timestamp INTEGER NOT NULL,
    log_append_time INTEGER NOT NULL, producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL, base_sequence INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, base_offset)
)
"""


def sqlite_baseline(
    path: str | Path, rows_per_txn: int, seconds: float = SQLITE_SECONDS_DEFAULT
) -> SqliteBaseline:
    """Raw SQLite insert rate for the run's commit shape, one durable transaction per commit."""
    rows_per_txn = max(1, rows_per_txn)
    target = Path(path)
    target.unlink(missing_ok=True)
    db = sqlite3.connect(target, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(_TABLE)
        txn_ms: list[float] = []
        offsets = [0] * 64
        started = time.perf_counter()
        deadline = started + seconds
        txn = 0
        while time.perf_counter() < deadline:
            key = f"wal/{txn:013d}-b0-0000.wal"
            rows = []
            for i in range(rows_per_txn):
                partition = (txn * rows_per_txn + i) % len(offsets)
                base = offsets[partition]
                offsets[partition] = base + 16
                rows.append(
                    (
                        "bench-0",
                        partition,
                        base,
                        base + 15,
                        key,
                        i * 16384,
                        16384,
                        0,
                        0,
                        -1,
                        1000 + i,
                        0,
                        base,
                    )
                )
            t0 = time.perf_counter()
            db.execute("BEGIN")
            db.executemany("INSERT INTO batches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("COMMIT")
            txn_ms.append((time.perf_counter() - t0) * 1000.0)
            txn += 1
        elapsed = time.perf_counter() - started
    finally:
        db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
    return SqliteBaseline(
        rows_per_txn=rows_per_txn,
        rows=txn * rows_per_txn,
        txns=txn,
        seconds=elapsed,
        rows_per_s=txn * rows_per_txn / elapsed,
        txns_per_s=txn / elapsed,
        txn_p50_ms=statistics.median(txn_ms) if txn_ms else 0.0,
        txn_p99_ms=percentile(txn_ms, 0.99),
    )
