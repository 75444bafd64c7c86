"""Commit throughput of both coordinator backends against plain SQLite writes of the same rows.

    .venv/bin/python -m benchmarks.bench_coordinator [--dir DIR] [--seconds S] [--rounds N]

Every case commits objects of 1, 100 or 1000 batches spread over PARTITIONS partitions, each
partition written by one idempotent producer with in-order sequences. The baselines write, with
`executemany` and no reads, rows computed before the clock starts into the same schema with the
same settings (WAL, synchronous=FULL), one transaction per object:
- "all rows": exactly what the SQLite coordinator writes per commit (the file row, the batch
  rows, the producer-state rows and the partition counters), so the ratio is the price of the
  coordinator itself: reading state, the rules, building rows;
- "batch rows": only the file and batch rows, for scale (it leaves out writes the coordinator
  cannot skip: every idempotent batch updates its producer's state and its partition's high
  watermark).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from diskless import TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    InMemoryBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.coordinator._backends.sqlite_schema import migrate
from diskless.txn import RetainedBatch

PARTITIONS = 1000
BATCHES_PER_OBJECT = (1, 100, 1000)
BATCHES_PER_CASE_MAX = 200_000
TOPIC = "bench"


# The batch columns every schema version has (later migrations add columns with defaults).
_INSERT_BATCH_ROW = (
    "INSERT INTO batches (partition_id, base_offset, last_offset, file_id, byte_offset, size,"
    " max_timestamp, log_append_time, timestamp, ts_running_max, producer_id, producer_epoch)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Workload:
    """Objects of batches with valid producer sequences, the same for every backend."""

    def __init__(self, batches_per_object: int, seed: int = 1) -> None:
        self.batches_per_object = batches_per_object
        self.rng = random.Random(seed)
        self.sequences = [0] * PARTITIONS

    def objects(self) -> list[list[CommitBatch]]:
        """Enough objects for a whole case, built before the clock starts."""
        return [self.next_object() for _ in range(BATCHES_PER_CASE_MAX // self.batches_per_object)]

    def next_object(self) -> list[CommitBatch]:
        batches = []
        for i in range(self.batches_per_object):
            partition = self.rng.randrange(PARTITIONS)
            seq = self.sequences[partition]
            self.sequences[partition] = seq + 10
            batches.append(
                CommitBatch(
                    topic_partition=TopicPartition(TOPIC, partition),
                    byte_offset=i * 1000,
                    size=1000,
                    record_count=10,
                    base_timestamp=1_700_000_000_000,
                    max_timestamp=1_700_000_000_000 + i,
                    producer_id=partition,
                    producer_epoch=0,
                    base_sequence=seq,
                )
            )
        return batches


async def run_coordinator(
    coordinator: BatchCoordinator, batches_per_object: int, seconds: float
) -> tuple[float, float]:
    """Batches per second committed through the coordinator, by wall time and by CPU time."""
    await coordinator.create_topic(TOPIC, PARTITIONS)
    epoch = await coordinator.register_broker(1)
    workload = Workload(batches_per_object).objects()
    count = objects = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
        batches = workload[objects]
        results = (
            await coordinator.commit_file(
                f"obj/{objects:09d}", 1, epoch, 1000 * len(batches), batches
            )
        ).batches
        assert all(r.error == 0 and not r.duplicate for r in results)
        count += len(batches)
        objects += 1
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return count / wall, count / cpu


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA cache_size = -16384")
    migrate(conn)
    return conn


class BaselineRows(NamedTuple):
    """Everything one SQLite commit writes, computed before the clock starts."""

    file: tuple[int, str, int, int]
    batches: Sequence[tuple[int, ...]]
    producers: Sequence[tuple[object, ...]]
    partitions: Sequence[tuple[int, int, int, int]]


def baseline_rows(batches_per_object: int) -> list[BaselineRows]:
    """The rows the SQLite coordinator writes for the workload (same values, same shapes)."""
    high_watermarks = [0] * PARTITIONS
    sizes = [0] * PARTITIONS
    retained: list[tuple[RetainedBatch, ...]] = [()] * PARTITIONS
    encoder = msgspec.msgpack.Encoder()
    out = []
    for index, batches in enumerate(Workload(batches_per_object).objects()):
        file_id = index + 1
        rows, producers, partitions = [], {}, {}
        for b in batches:
            partition = b.topic_partition.partition
            base = high_watermarks[partition]
            last = base + b.record_count - 1
            high_watermarks[partition] = last + 1
            sizes[partition] += b.size
            ts = b.max_timestamp
            rows.append(
                (
                    partition + 1,
                    base,
                    last,
                    file_id,
                    b.byte_offset,
                    b.size,
                    ts,
                    -1,
                    ts,
                    ts,
                    b.producer_id,
                    b.producer_epoch,
                )
            )
            last_seq = b.base_sequence + b.record_count - 1
            kept = (
                *retained[partition][-4:],
                RetainedBatch(b.base_sequence, last_seq, base, last, ts),
            )
            retained[partition] = kept
            producers[partition] = (
                partition + 1,
                b.producer_id,
                0,
                ts,
                0,
                -1,
                None,
                encoder.encode(kept),
            )
            partitions[partition] = (last + 1, sizes[partition], ts, partition + 1)
        out.append(
            BaselineRows(
                (file_id, f"obj/{index:09d}", 1000 * len(batches), len(batches)),
                rows,
                list(producers.values()),
                list(partitions.values()),
            )
        )
    return out


def run_baseline(path: Path, batches_per_object: int, seconds: float, every_row: bool) -> float:
    """Batches per second for plain executemany writes of the coordinator's rows, same schema.

    With `every_row`, the rows are all that a commit writes (file, batches, producer state,
    partition counters); otherwise only the file and batch rows.
    """
    conn = _connect(path)
    try:
        conn.executemany(
            "INSERT INTO partitions (topic_id, partition) VALUES (1, ?)",
            [(p,) for p in range(PARTITIONS)],
        )
        workload = baseline_rows(batches_per_object)
        count = objects = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
            rows = workload[objects]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO files (file_id, key, state, size, since_ms, live_batches)"
                " VALUES (?, ?, 0, ?, 0, ?)",
                rows.file,
            )
            conn.executemany(_INSERT_BATCH_ROW, rows.batches)
            if every_row:
                conn.executemany(
                    "INSERT OR REPLACE INTO producers VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows.producers,
                )
                conn.executemany(
                    "UPDATE partitions SET high_watermark = ?, size_bytes = ?, ts_running_max = ?"
                    " WHERE partition_id = ?",
                    rows.partitions,
                )
            conn.execute("COMMIT")
            count += len(rows.batches)
            objects += 1
        return count / (time.perf_counter() - started)
    finally:
        conn.close()


async def run_round(directory: Path, bpo: int, seconds: float, tag: str) -> tuple[float, ...]:
    memory = InMemoryBatchCoordinator()
    try:
        in_memory, in_memory_cpu = await run_coordinator(memory, bpo, seconds)
    finally:
        await memory.close()
    sqlite = SqliteBatchCoordinator(directory / f"coordinator-{bpo}-{tag}.db")
    try:
        in_sqlite, _ = await run_coordinator(sqlite, bpo, seconds)
    finally:
        await sqlite.close()
    raw = run_baseline(directory / f"baseline-{bpo}-{tag}.db", bpo, seconds, every_row=True)
    raw_batches = run_baseline(directory / f"batches-{bpo}-{tag}.db", bpo, seconds, every_row=False)
    return in_memory, in_memory_cpu, in_sqlite, raw, raw_batches


def run_case(directory: Path, bpo: int, seconds: float, rounds: int) -> tuple[float, ...]:
    """The best of `rounds` interleaved rounds, so that a burst of load elsewhere on the machine
    does not land on one side of a ratio only."""
    best = (0.0, 0.0, 0.0, 0.0, 0.0)
    for index in range(rounds):
        result = asyncio.run(run_round(directory, bpo, seconds, str(index)))
        best = tuple(max(a, b) for a, b in zip(best, result, strict=True))  # type: ignore[assignment]
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per backend and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best counts")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-coordinator-", dir=args.dir))
    try:
        print(
            f"{PARTITIONS} partitions, idempotent producers;"
            f" best of {args.rounds} rounds of {args.seconds:g} s per backend;"
            f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        print(
            f"{'batches/object':>14} | {'in-memory b/s':>13} | {'(per CPU s)':>11} |"
            f" {'sqlite b/s':>10} |"
            f" {'raw, all rows':>13} | {'sqlite/raw':>10} | {'raw, batch rows':>15} |"
            f" {'sqlite/raw':>10}"
        )
        for bpo in BATCHES_PER_OBJECT:
            in_memory, in_memory_cpu, in_sqlite, raw, raw_batches = run_case(
                directory, bpo, args.seconds, args.rounds
            )
            print(
                f"{bpo:>14} | {in_memory:>13,.0f} | {in_memory_cpu:>11,.0f} |"
                f" {in_sqlite:>10,.0f} | {raw:>13,.0f} |"
                f" {in_sqlite / raw:>10.0%} | {raw_batches:>15,.0f} |"
                f" {in_sqlite / raw_batches:>10.0%}"
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
