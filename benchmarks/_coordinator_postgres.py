"""The PostgreSQL part of `bench_coordinator`: commits from 1 and from several broker processes.

Each case runs N processes at once against one fresh database, for the same time, started
together: either N `PostgresBatchCoordinator`s committing objects (each process with its own
broker id, its own idempotent producers and object keys, over the same partitions, so that
commits contend for the same partition rows), or N raw asyncpg writers of the same rows (the
file row, the batch rows by COPY, the producer-state rows and the partition counters by
executemany, in partition order, one transaction per commit step: per object, or per group of
objects in the grouped case). The rate is the sum of the processes' batches per second; commit
latencies (of a step) are pooled over every process.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import statistics
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from multiprocessing.synchronize import Barrier
from typing import Any, NamedTuple

import asyncpg

from benchmarks._coordinator_workload import (
    BATCHES_PER_CASE_MAX,
    CASES,
    PARTITIONS,
    TOPIC,
    BaselineRows,
    Case,
    Workload,
    baseline_rows,
    frozen_out_of_gc,
    in_groups,
)
from diskless.coordinator import FileCommit, PostgresBatchCoordinator
from diskless.coordinator._backends.postgres_rows import BATCH_TABLE_COLUMNS
from diskless.coordinator._backends.postgres_schema import migrate

PROCESSES = (1, 4)
START_TIMEOUT_S = 120.0
"""How long the processes may take to build their workloads before the clock starts."""
_OFFSET_STRIDE = 10**12
"""Raw writers shift their rows' offsets and file ids by this times their index: no collisions."""
_databases = itertools.count()


class Measured(NamedTuple):
    batches: int
    seconds: float
    latencies_s: list[float]


@contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """`dsn`, or a throwaway server's while the block runs."""
    if dsn is not None:
        yield dsn
        return
    from testkit.postgres_server import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries: pass --postgres DSN or --no-postgres")
    throwaway = PostgresServer(bindir)
    try:
        yield throwaway.dsn("postgres")
    finally:
        throwaway.close()


async def _admin(admin_dsn: str, statement: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


@contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new, empty database on the server of `admin_dsn` while the block runs (its DSN)."""
    name = f"bench_{os.getpid()}_{next(_databases)}"
    asyncio.run(_admin(admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    asyncio.run(_admin(admin_dsn, f"CREATE DATABASE {name}"))
    try:
        yield admin_dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(_admin(admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@asynccontextmanager
async def fresh_database_async(admin_dsn: str) -> AsyncIterator[str]:
    """`fresh_database`, from inside a running event loop."""
    name = f"bench_{os.getpid()}_{next(_databases)}"
    await _admin(admin_dsn, f"CREATE DATABASE {name}")
    try:
        yield admin_dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        await _admin(admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- one process ----------------------------------------------------------------------------


async def _commits(dsn: str, index: int, case: Case, seconds: float, barrier: Barrier) -> Measured:
    coordinator = PostgresBatchCoordinator(dsn, pool_size_max=2)
    try:
        epoch = await coordinator.register_broker(index + 1)
        workload = Workload(
            case.batches_per_object, seed=index + 1, producer_base=index * PARTITIONS
        )
        steps = in_groups(
            [
                FileCommit(f"obj/{index}/{n:09d}", 1000 * len(batches), batches)
                for n, batches in enumerate(workload.objects())
            ],
            case.objects_per_commit,
        )
        frozen_out_of_gc()
        await asyncio.to_thread(barrier.wait, START_TIMEOUT_S)
        latencies = []
        count = step = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
            files = steps[step]
            before = time.perf_counter()
            outcomes = await coordinator.commit_files(index + 1, epoch, files)
            latencies.append(time.perf_counter() - before)
            for outcome in outcomes:
                assert all(r.error == 0 and not r.duplicate for r in outcome.batches), outcome
            count += sum(len(f.batches) for f in files)
            step += 1
        return Measured(count, time.perf_counter() - started, latencies)
    finally:
        await coordinator.close()


async def _raw(dsn: str, index: int, case: Case, seconds: float, barrier: Barrier) -> Measured:
    conn = await asyncpg.connect(dsn)
    try:
        steps = [
            _raw_step(group, index)
            for group in in_groups(baseline_rows(case.batches_per_object), case.objects_per_commit)
        ]
        frozen_out_of_gc()
        await asyncio.to_thread(barrier.wait, START_TIMEOUT_S)
        latencies = []
        count = step = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and count < BATCHES_PER_CASE_MAX:
            files, batches, producers, partitions = steps[step]
            before = time.perf_counter()
            async with conn.transaction():
                await conn.executemany(
                    "INSERT INTO files (file_id, key, state, size, since_ms, live_batches)"
                    " VALUES ($1, $2, 0, $3, 0, $4)",
                    files,
                )
                await conn.copy_records_to_table(
                    "batches", records=batches, columns=BATCH_TABLE_COLUMNS
                )
                await conn.executemany(
                    "INSERT INTO producers VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                    " ON CONFLICT (partition_id, producer_id) DO UPDATE SET"
                    " batches = excluded.batches, last_timestamp = excluded.last_timestamp",
                    producers,
                )
                await conn.executemany(
                    "UPDATE partitions SET high_watermark = $1, size_bytes = $2,"
                    " ts_running_max = $3 WHERE partition_id = $4",
                    partitions,
                )
            latencies.append(time.perf_counter() - before)
            count += len(batches)
            step += 1
        return Measured(count, time.perf_counter() - started, latencies)
    finally:
        await conn.close()


def _raw_step(group: Sequence[BaselineRows], index: int) -> tuple[list[Any], ...]:
    """What raw writer `index` writes in one transaction for `group`: its files, its batches,
    and the last producer and partition rows of each key (partitions in key order, as row locks
    must be taken in one order by every writer)."""
    shift = index * _OFFSET_STRIDE
    files: list[tuple[int, str, int, int]] = []
    batches: list[tuple[int, ...]] = []
    producers: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    partitions: dict[int, tuple[int, int, int, int]] = {}
    for rows in group:
        file_id, key, size, live = rows.file
        files.append((file_id + shift, f"{index}/{key}", size, live))
        batches.extend(
            (
                b[0],
                b[1] + shift,
                b[2] + shift,
                b[3] + shift,
                *b[4:10],
                b[10] + index * PARTITIONS,
                b[11],
                -1,
                0,
            )
            for b in rows.batches
        )
        for p in rows.producers:
            producers[p[0], p[1]] = (p[0], p[1] + index * PARTITIONS, *p[2:])
        partitions.update((p[3], p) for p in rows.partitions)
    return files, batches, list(producers.values()), [partitions[k] for k in sorted(partitions)]


def _process(
    kind: str,
    dsn: str,
    index: int,
    case: Case,
    seconds: float,
    barrier: Barrier,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    run = _commits if kind == "coordinator" else _raw
    try:
        results.put(asyncio.run(run(dsn, index, case, seconds, barrier)))
    except BaseException as error:
        barrier.abort()
        results.put(RuntimeError(f"{kind} process {index}: {error!r}"))
        raise


# --- a case ---------------------------------------------------------------------------------
async def _prepare(dsn: str, kind: str) -> None:
    if kind == "coordinator":
        coordinator = PostgresBatchCoordinator(dsn)
        try:
            await coordinator.create_topic(TOPIC, PARTITIONS)
        finally:
            await coordinator.close()
        return
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(
            "INSERT INTO topics VALUES (1, $1, $2, 0, -1, -1, 1048588, 0, 0, gen_random_uuid())",
            TOPIC,
            PARTITIONS,
        )
        await conn.execute(
            "INSERT INTO partitions (partition_id, topic_id, partition)"
            " SELECT p + 1, 1, p FROM generate_series(0, $1 - 1) p",
            PARTITIONS,
        )
    finally:
        await conn.close()


def run_processes(
    admin_dsn: str, kind: str, processes: int, case: Case, seconds: float
) -> Measured:
    """`processes` processes of `kind` ("coordinator" or "raw") on one fresh database."""
    context = multiprocessing.get_context("spawn")
    with fresh_database(admin_dsn) as dsn:
        asyncio.run(_prepare(dsn, kind))
        barrier = context.Barrier(processes)
        results = context.Queue()
        children = [
            context.Process(
                target=_process, args=(kind, dsn, index, case, seconds, barrier, results)
            )
            for index in range(processes)
        ]
        for child in children:
            child.start()
        try:
            measured = [results.get(timeout=START_TIMEOUT_S + seconds * 10) for _ in children]
            for m in measured:
                if isinstance(m, Exception):
                    raise m
        finally:
            for child in children:
                child.join(timeout=30)
                if child.is_alive():
                    child.kill()
    return Measured(
        sum(m.batches for m in measured),
        max(m.seconds for m in measured),
        [latency for m in measured for latency in m.latencies_s],
    )


def _rate(m: Measured) -> float:
    return m.batches / m.seconds


def _percentile_ms(latencies: list[float], q: int) -> float:
    if len(latencies) < 2:
        return latencies[0] * 1000 if latencies else float("nan")
    return statistics.quantiles(latencies, n=100, method="inclusive")[q - 1] * 1000


def postgres_table(dsn: str | None, seconds: float, rounds: int) -> None:
    """Print the PostgreSQL lines: per case the best rate of `rounds` interleaved rounds (the
    coordinator's latencies are those of its best round)."""
    with server(dsn) as admin_dsn:
        print(
            f"PostgreSQL ({'given server' if dsn else 'throwaway server, fsync=off'}),"
            f" {PARTITIONS} partitions, rates summed over the processes"
        )
        print(
            f"{'processes':>9} | {'batches/object':>14} | {'postgres b/s':>12} |"
            f" {'raw b/s':>10} | {'pg/raw':>6} | {'p50 ms':>7} | {'p99 ms':>7}"
        )
        for processes in PROCESSES:
            for case in CASES:
                best: Measured | None = None
                best_raw = 0.0
                for _ in range(rounds):
                    measured = run_processes(admin_dsn, "coordinator", processes, case, seconds)
                    if best is None or _rate(measured) > _rate(best):
                        best = measured
                    raw = run_processes(admin_dsn, "raw", processes, case, seconds)
                    best_raw = max(best_raw, _rate(raw))
                assert best is not None
                rate = _rate(best)
                print(
                    f"{processes:>9} | {case.label:>14} | {rate:>12,.0f} | {best_raw:>10,.0f} |"
                    f" {rate / best_raw:>6.0%} | {_percentile_ms(best.latencies_s, 50):>7.1f} |"
                    f" {_percentile_ms(best.latencies_s, 99):>7.1f}",
                    flush=True,
                )
