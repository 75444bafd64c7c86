"""Commit throughput of the coordinator backends against plain writes of the same rows.

    .venv/bin/python -m benchmarks.bench_coordinator [--dir DIR] [--seconds S] [--rounds N]
        [--postgres DSN | --no-postgres]

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

PostgreSQL (`--postgres DSN` of any database on a server, where the benchmark creates and drops
its own databases; by default a throwaway server started as the tests start theirs, with
fsync=off) is compared with raw asyncpg writes of the same rows on the same server: the file
row, the batch rows by COPY, the producer-state rows and the partition counters by executemany,
one transaction per object.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import asyncpg
import msgspec

from diskless import TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.coordinator._backends.postgres_schema import migrate as migrate_postgres
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


# --- PostgreSQL -----------------------------------------------------------------------------
_databases = itertools.count()
_BATCH_COLUMNS = (
    "partition_id",
    "base_offset",
    "last_offset",
    "file_id",
    "byte_offset",
    "size",
    "max_timestamp",
    "log_append_time",
    "timestamp",
    "ts_running_max",
    "producer_id",
    "producer_epoch",
    "control",
    "coordinator_epoch",
)


@contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    """`dsn`, or a throwaway server's while the block runs."""
    if dsn is not None:
        yield dsn
        return
    from tests._postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries: pass --postgres DSN or --no-postgres")
    server = PostgresServer(bindir)
    try:
        yield server.dsn("postgres")
    finally:
        server.close()


async def _fresh_database(admin_dsn: str) -> tuple[str, str]:
    name = f"bench_coordinator_{next(_databases)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    return name, admin_dsn.rsplit("/", 1)[0] + "/" + name


async def _drop_database(admin_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


async def run_raw(dsn: str, batches_per_object: int, seconds: float) -> float:
    """Batches per second for raw writes of every row a commit writes, no reads."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_postgres(conn)
        await conn.execute(
            "INSERT INTO topics VALUES (1, 'bench', $1, 0, -1, -1, 1048588, 0, 0)", PARTITIONS
        )
        await conn.execute(
            "INSERT INTO partitions (partition_id, topic_id, partition)"
            " SELECT p + 1, 1, p FROM generate_series(0, $1 - 1) p",
            PARTITIONS,
        )
        workload: list[BaselineRows] = await asyncio.to_thread(baseline_rows, batches_per_object)
        count = objects = 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < seconds and count < BATCHES_PER_CASE_MAX:
            rows = workload[objects]
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO files (file_id, key, state, size, since_ms, live_batches)"
                    " VALUES ($1, $2, 0, $3, 0, $4)",
                    *rows.file,
                )
                await conn.copy_records_to_table(
                    "batches", records=[(*b, -1, 0) for b in rows.batches], columns=_BATCH_COLUMNS
                )
                await conn.executemany(
                    "INSERT INTO producers VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                    " ON CONFLICT (partition_id, producer_id) DO UPDATE SET"
                    " batches = excluded.batches, last_timestamp = excluded.last_timestamp",
                    rows.producers,
                )
                await conn.executemany(
                    "UPDATE partitions SET high_watermark = $1, size_bytes = $2,"
                    " ts_running_max = $3 WHERE partition_id = $4",
                    rows.partitions,
                )
            count += len(rows.batches)
            objects += 1
        return count / (loop.time() - started)
    finally:
        await conn.close()


async def _round(admin_dsn: str, bpo: int, seconds: float) -> tuple[float, float]:
    name, dsn = await _fresh_database(admin_dsn)
    try:
        coordinator = PostgresBatchCoordinator(dsn)
        try:
            in_postgres, _ = await run_coordinator(coordinator, bpo, seconds)
        finally:
            await coordinator.close()
    finally:
        await _drop_database(admin_dsn, name)
    name, dsn = await _fresh_database(admin_dsn)
    try:
        raw = await run_raw(dsn, bpo, seconds)
    finally:
        await _drop_database(admin_dsn, name)
    return in_postgres, raw


def postgres_table(dsn: str | None, seconds: float, rounds: int) -> None:
    """Print the PostgreSQL lines: best of `rounds` interleaved rounds per case."""
    with _server(dsn) as admin_dsn:
        print(
            f"PostgreSQL ({'given server' if dsn else 'throwaway server, fsync=off'}),"
            f" {PARTITIONS} partitions"
        )
        print(f"{'batches/object':>14} | {'postgres b/s':>12} | {'raw b/s':>10} | {'pg/raw':>6}")
        for bpo in BATCHES_PER_OBJECT:
            best = (0.0, 0.0)
            for _ in range(rounds):
                result = asyncio.run(_round(admin_dsn, bpo, seconds))
                best = (max(best[0], result[0]), max(best[1], result[1]))
            print(f"{bpo:>14} | {best[0]:>12,.0f} | {best[1]:>10,.0f} | {best[0] / best[1]:>6.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per backend and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best counts")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL DSN (default: throwaway)")
    parser.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
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
        if not args.no_postgres:
            postgres_table(args.postgres, args.seconds, args.rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
