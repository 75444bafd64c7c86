"""Commit throughput of the coordinator backends against plain writes of the same rows.

    .venv/bin/python -m benchmarks.bench_coordinator [--dir DIR] [--seconds S] [--rounds N]
        [--postgres DSN | --no-postgres]

Every case commits objects of 1, 100 or 1000 batches spread over PARTITIONS partitions, each
partition written by one idempotent producer with in-order sequences: one object per commit,
and (the "100 x8" case) objects of 100 batches eight per commit step (`commit_files`), as a
broker's WAL pipeline groups the uploaded objects that wait for their turn. The baselines
write, with `executemany` and no reads, rows computed before the clock starts into the same
schema with the same settings (WAL, synchronous=FULL, the checkpoint interval), one transaction
per commit step:
- "all rows": exactly what the SQLite coordinator writes per commit (the file row, the batch
  rows, the producer-state rows and the partition counters), so the ratio is the price of the
  coordinator itself: reading state, the rules, building rows;
- "batch rows": only the file and batch rows, for scale (it leaves out writes the coordinator
  cannot skip: every idempotent batch updates its producer's state and its partition's high
  watermark).

PostgreSQL (`--postgres DSN` of any database on a server, where the benchmark creates and drops
its own databases; by default a throwaway server started as the tests start theirs, with
fsync=off) is measured from 1 and from 4 broker processes at once, each figure against raw
asyncpg writes of the same rows on the same server (see `_coordinator_postgres`), with the
coordinator's commit latency (p50, p99).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from benchmarks._coordinator_workload import (
    BATCHES_PER_CASE_MAX,
    CASES,
    PARTITIONS,
    TOPIC,
    Case,
    Workload,
    baseline_rows,
    frozen_out_of_gc,
    in_groups,
)
from diskless.coordinator import (
    BatchCoordinator,
    FileCommit,
    InMemoryBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.coordinator._backends.sqlite import WAL_CHECKPOINT_PAGES
from diskless.coordinator._backends.sqlite_schema import migrate

# The batch columns every schema version has (later migrations add columns with defaults).
_INSERT_BATCH_ROW = (
    "INSERT INTO batches (partition_id, base_offset, last_offset, file_id, byte_offset, size,"
    " max_timestamp, log_append_time, timestamp, ts_running_max, producer_id, producer_epoch)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


async def run_coordinator(
    coordinator: BatchCoordinator, case: Case, seconds: float
) -> tuple[float, float]:
    """Batches per second committed through the coordinator, by wall time and by CPU time."""
    await coordinator.create_topic(TOPIC, PARTITIONS)
    epoch = await coordinator.register_broker(1)
    objects = Workload(case.batches_per_object).objects()
    steps = in_groups(
        [FileCommit(f"obj/{n:09d}", 1000 * len(b), b) for n, b in enumerate(objects)],
        case.objects_per_commit,
    )
    frozen_out_of_gc()
    count = step = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
        files = steps[step]
        for outcome in await coordinator.commit_files(1, epoch, files):
            assert all(r.error == 0 and not r.duplicate for r in outcome.batches)
        count += sum(len(f.batches) for f in files)
        step += 1
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return count / wall, count / cpu


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
    conn.execute("PRAGMA cache_size = -16384")
    migrate(conn)
    return conn


def run_baseline(path: Path, case: Case, seconds: float, every_row: bool) -> float:
    """Batches per second for plain executemany writes of the coordinator's rows, same schema,
    as many objects per transaction as the coordinator commits per step.

    With `every_row`, the rows are all that a commit writes (file, batches, producer state,
    partition counters); otherwise only the file and batch rows.
    """
    conn = _connect(path)
    try:
        conn.executemany(
            "INSERT INTO partitions (topic_id, partition) VALUES (1, ?)",
            [(p,) for p in range(PARTITIONS)],
        )
        workload = in_groups(baseline_rows(case.batches_per_object), case.objects_per_commit)
        frozen_out_of_gc()
        count = step = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
            conn.execute("BEGIN IMMEDIATE")
            for rows in workload[step]:
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
                        "UPDATE partitions SET high_watermark = ?, size_bytes = ?,"
                        " ts_running_max = ? WHERE partition_id = ?",
                        rows.partitions,
                    )
                count += len(rows.batches)
            conn.execute("COMMIT")
            step += 1
        return count / (time.perf_counter() - started)
    finally:
        conn.close()


async def run_round(directory: Path, case: Case, seconds: float, tag: str) -> tuple[float, ...]:
    memory = InMemoryBatchCoordinator()
    try:
        in_memory, in_memory_cpu = await run_coordinator(memory, case, seconds)
    finally:
        await memory.close()
    name = f"{case.batches_per_object}-{case.objects_per_commit}-{tag}"
    sqlite = SqliteBatchCoordinator(directory / f"coordinator-{name}.db")
    try:
        in_sqlite, _ = await run_coordinator(sqlite, case, seconds)
    finally:
        await sqlite.close()
    raw = run_baseline(directory / f"baseline-{name}.db", case, seconds, every_row=True)
    raw_batches = run_baseline(directory / f"batches-{name}.db", case, seconds, every_row=False)
    return in_memory, in_memory_cpu, in_sqlite, raw, raw_batches


def run_case(directory: Path, case: Case, seconds: float, rounds: int) -> tuple[float, ...]:
    """The best of `rounds` interleaved rounds, so that a burst of load elsewhere on the machine
    does not land on one side of a ratio only."""
    best = (0.0, 0.0, 0.0, 0.0, 0.0)
    for index in range(rounds):
        result = asyncio.run(run_round(directory, case, seconds, str(index)))
        best = tuple(max(a, b) for a, b in zip(best, result, strict=True))  # type: ignore[assignment]
    return best


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
        for case in CASES:
            in_memory, in_memory_cpu, in_sqlite, raw, raw_batches = run_case(
                directory, case, args.seconds, args.rounds
            )
            print(
                f"{case.label:>14} | {in_memory:>13,.0f} | {in_memory_cpu:>11,.0f} |"
                f" {in_sqlite:>10,.0f} | {raw:>13,.0f} |"
                f" {in_sqlite / raw:>10.0%} | {raw_batches:>15,.0f} |"
                f" {in_sqlite / raw_batches:>10.0%}"
            )
        if not args.no_postgres:
            from benchmarks._coordinator_postgres import postgres_table

            postgres_table(args.postgres, args.seconds, args.rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
