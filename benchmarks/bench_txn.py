"""Transactions: produce throughput by transactional share, and the cost of ending a transaction.

    .venv/bin/python -m benchmarks.bench_txn [--seconds S] [--backend memory|sqlite|postgres|all]
        [--postgres DSN]

1. Produce throughput through three DisklessBrokers with 0% (the baseline: idempotent producers
   only), 50% and 100% of producers transactional. Transactional producers register their
   partitions, take a lease per batch (one coordinator call per request), and end every
   transaction (commit) after TXN_REQUESTS requests; idempotent producers send the same requests.
2. write_txn_markers latency with ENDS_PARTITIONS partitions in open transactions (ENDS producers,
   each with data on PARTITIONS_PER_TXN distinct partitions), against the baseline of a plain
   commit of the same number of batches (PARTITIONS_PER_TXN) on the same coordinator; then one
   transaction spanning all ENDS_PARTITIONS partitions against a plain commit of as many batches.
3. EndTxn latency through the TransactionCoordinator, whose state is a durable record in the
   batch coordinator (prepare, then markers and completion: two atomic steps with the record's
   compare-and-set), against bare write_txn_markers of the same transactions on the same
   coordinator: the ratio is the price of durable, leaderless transaction state.

Memory backends use the in-memory store and coordinator; sqlite uses a local directory store and
the SQLite coordinator (synchronous=FULL) in a temporary directory; postgres the same store and
the PostgreSQL coordinator, on a fresh database of a throwaway server (fsync=off) unless
--postgres names one. Wall-clock figures; run on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import struct
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import crc32c
import msgspec

from benchmarks._coordinator_postgres import fresh_database_async, server
from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig
from testkit.batches import batch_builder

PRODUCERS = 32
PARTITIONS = 64
RECORDS_PER_BATCH = 10
RECORD_BYTES = 100
TXN_REQUESTS = 5
"""Requests per transaction (each carries one batch for each of 2 partitions)."""
CONFIG = BrokerConfig(wal=WalConfig(commit_interval_ms=10))

ENDS = 100
PARTITIONS_PER_TXN = 100
ENDS_PARTITIONS = ENDS * PARTITIONS_PER_TXN


POSTGRES_ADMIN_DSN: str | None = None
"""The server the postgres backend makes a fresh database on (set by `main`)."""


@contextlib.asynccontextmanager
async def backends(kind: str) -> AsyncIterator[tuple[ObjectStore, BatchCoordinator]]:
    async with contextlib.AsyncExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-txn-"))
        store: ObjectStore
        coordinator: BatchCoordinator
        if kind == "memory":
            store, coordinator = MemoryObjectStore(), InMemoryBatchCoordinator()
        elif kind == "sqlite":
            store = LocalObjectStore(Path(tmp) / "objects", durable=False)
            coordinator = SqliteBatchCoordinator(Path(tmp) / "coordinator.db")
        else:
            assert POSTGRES_ADMIN_DSN is not None
            dsn = await stack.enter_async_context(fresh_database_async(POSTGRES_ADMIN_DSN))
            store = LocalObjectStore(Path(tmp) / "objects", durable=False)
            coordinator = PostgresBatchCoordinator(dsn)
        try:
            yield store, coordinator
        finally:
            await coordinator.close()
            await store.close()


def _template(transactional: bool) -> bytes:
    builder = batch_builder(
        transactional=transactional,
        producer_id=0,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(RECORDS_PER_BATCH):
        value = b"x" * RECORD_BYTES
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


_TEMPLATES = {txn: _template(txn) for txn in (False, True)}
_IDS = struct.Struct(">qhi")  # producer id, epoch, base sequence at byte 43


def _batch(pid: int, epoch: int, sequence: int, transactional: bool) -> bytes:
    """A kafka-python-built batch with its producer fields patched and its CRC recomputed (so
    that building batches stays out of the measured time)."""
    data = bytearray(_TEMPLATES[transactional])
    _IDS.pack_into(data, 43, pid, epoch, sequence)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


async def _producer(
    index: int,
    transactional: bool,
    tc: TransactionCoordinator,
    brokers: list[DisklessBroker],
    deadline: float,
) -> int:
    """Records acknowledged before `deadline` (whole transactions only, when transactional)."""
    name = f"p{index}"
    init = await tc.init_producer_id(name if transactional else None, 60_000)
    assert init.error is ErrorCode.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    partitions = [TopicPartition("bench", (2 * index + k) % PARTITIONS) for k in range(2)]
    broker = brokers[index % len(brokers)]
    sequences = dict.fromkeys(partitions, 0)
    records = 0
    while time.monotonic() < deadline:
        if transactional:
            added = await tc.add_partitions_to_txn(name, pid, epoch, partitions)
            assert set(added) == {ErrorCode.NONE}, added
        for _ in range(TXN_REQUESTS):
            request = {tp: _batch(pid, epoch, sequences[tp], transactional) for tp in partitions}
            results = await broker.produce(request)
            for tp, result in results.items():
                assert result.error is ErrorCode.NONE, result
                sequences[tp] += RECORDS_PER_BATCH
        if transactional:
            ended = await tc.end_txn(name, pid, epoch, commit=True)
            assert ended.error is ErrorCode.NONE, ended
            epoch = ended.producer_epoch
            sequences = dict.fromkeys(partitions, 0)
        records += TXN_REQUESTS * len(partitions) * RECORDS_PER_BATCH
    return records


async def produce_throughput(kind: str, share: float, seconds: float) -> float:
    async with backends(kind) as (store, coordinator):
        await coordinator.create_topic("bench", PARTITIONS)
        brokers = [DisklessBroker(i, store, coordinator, CONFIG) for i in range(3)]
        for broker in brokers:
            await broker.start()
        async with TransactionCoordinator(coordinator) as tc:
            transactional = round(PRODUCERS * share)
            started = time.monotonic()
            counts = await asyncio.gather(
                *(
                    _producer(i, i < transactional, tc, brokers, started + seconds)
                    for i in range(PRODUCERS)
                )
            )
            elapsed = time.monotonic() - started
        for broker in brokers:
            await broker.close()
    return sum(counts) / elapsed


def _commit_batch(tp: TopicPartition, pid: int = -1, txn: bool = False) -> CommitBatch:
    return CommitBatch(
        topic_partition=tp,
        byte_offset=0,
        size=1000,
        record_count=RECORDS_PER_BATCH,
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=txn,
    )


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def end_latency(kind: str) -> tuple[list[float], list[float]]:
    """Latencies (s) of ENDS marker writes, and of ENDS plain commits of as many batches."""
    async with backends(kind) as (_, coordinator):
        await coordinator.create_topic("ends", ENDS_PARTITIONS)
        epoch = await coordinator.register_broker(1)
        first_pid = await coordinator.allocate_producer_ids(ENDS)
        for n in range(ENDS):
            pid = first_pid + n
            tps = [
                TopicPartition("ends", n * PARTITIONS_PER_TXN + k)
                for k in range(PARTITIONS_PER_TXN)
            ]
            errors = await coordinator.add_partitions_to_txn(pid, 0, tps)
            assert set(errors) == {ErrorCode.NONE}
            batches = [_commit_batch(tp, pid, txn=True) for tp in tps]
            results = (await coordinator.commit_file(f"t/{n}", 1, epoch, 1000, batches)).batches
            assert {r.error for r in results} == {ErrorCode.NONE}
        ends = []
        for n in range(ENDS):
            pid = first_pid + n
            tps = [
                TopicPartition("ends", n * PARTITIONS_PER_TXN + k)
                for k in range(PARTITIONS_PER_TXN)
            ]
            started = time.perf_counter()
            errors = await coordinator.write_txn_markers(pid, 0, 1, True, 0, tps)
            ends.append(time.perf_counter() - started)
            assert set(errors) == {ErrorCode.NONE}
        commits = []
        for n in range(ENDS):
            batches = [
                _commit_batch(TopicPartition("ends", n * PARTITIONS_PER_TXN + k))
                for k in range(PARTITIONS_PER_TXN)
            ]
            started = time.perf_counter()
            await coordinator.commit_file(f"c/{n}", 1, epoch, 1000, batches)
            commits.append(time.perf_counter() - started)
    return ends, commits


async def end_latency_wide(kind: str, rounds: int = 5) -> tuple[list[float], list[float]]:
    """Latencies (s) of ending ONE transaction over ENDS_PARTITIONS partitions, and of a plain
    commit of ENDS_PARTITIONS batches, `rounds` times each."""
    async with backends(kind) as (_, coordinator):
        await coordinator.create_topic("wide", ENDS_PARTITIONS)
        epoch = await coordinator.register_broker(1)
        pid = await coordinator.allocate_producer_ids(1)
        tps = [TopicPartition("wide", p) for p in range(ENDS_PARTITIONS)]
        ends = []
        commits = []
        for n in range(rounds):
            errors = await coordinator.add_partitions_to_txn(pid, n, tps)
            assert set(errors) == {ErrorCode.NONE}
            batches = [
                msgspec.structs.replace(_commit_batch(tp, pid, txn=True), producer_epoch=n)
                for tp in tps
            ]
            results = (await coordinator.commit_file(f"w/{n}", 1, epoch, 1000, batches)).batches
            assert {r.error for r in results} == {ErrorCode.NONE}
            started = time.perf_counter()
            errors = await coordinator.write_txn_markers(pid, n, n + 1, True, 0, tps)
            ends.append(time.perf_counter() - started)
            assert set(errors) == {ErrorCode.NONE}
            plain = [_commit_batch(tp) for tp in tps]
            started = time.perf_counter()
            await coordinator.commit_file(f"p/{n}", 1, epoch, 1000, plain)
            commits.append(time.perf_counter() - started)
    return ends, commits


async def end_txn_latency(kind: str) -> tuple[list[float], list[float]]:
    """Latencies (s) of EndTxn through the transaction coordinator, whose state is a durable
    record changed by atomic steps (prepare, then markers and completion in one step), and of
    bare write_txn_markers of the same shape on the same coordinator (the partitions' side
    only): the difference is the cost of keeping the transaction state in the coordinator."""
    async with backends(kind) as (_, coordinator):
        await coordinator.create_topic("txn", PARTITIONS_PER_TXN)
        epoch = await coordinator.register_broker(1)
        tps = [TopicPartition("txn", k) for k in range(PARTITIONS_PER_TXN)]
        tc = TransactionCoordinator(coordinator)
        durable = []
        for n in range(ENDS):
            init = await tc.init_producer_id(f"tx-{n}", 60_000)
            pid, pepoch = init.producer_id, init.producer_epoch
            assert set(await tc.add_partitions_to_txn(f"tx-{n}", pid, pepoch, tps)) == {
                ErrorCode.NONE
            }
            batches = [
                msgspec.structs.replace(_commit_batch(tp, pid, txn=True), producer_epoch=pepoch)
                for tp in tps
            ]
            await coordinator.commit_file(f"d/{n}", 1, epoch, 1000, batches)
            started = time.perf_counter()
            end = await tc.end_txn(f"tx-{n}", pid, pepoch, commit=True)
            durable.append(time.perf_counter() - started)
            assert end.error is ErrorCode.NONE
        bare = []
        first_pid = await coordinator.allocate_producer_ids(ENDS)
        for n in range(ENDS):
            pid = first_pid + n
            assert set(await coordinator.add_partitions_to_txn(pid, 0, tps)) == {ErrorCode.NONE}
            batches = [_commit_batch(tp, pid, txn=True) for tp in tps]
            await coordinator.commit_file(f"b/{n}", 1, epoch, 1000, batches)
            started = time.perf_counter()
            errors = await coordinator.write_txn_markers(pid, 0, 1, True, 0, tps)
            bare.append(time.perf_counter() - started)
            assert set(errors) == {ErrorCode.NONE}
    return durable, bare


async def main(seconds: float, kinds: list[str]) -> None:
    print(f"# bench_txn  cpus={os.cpu_count()}  load={os.getloadavg()[0]:.2f}")
    print(
        f"## produce: {PRODUCERS} producers x 2 partitions, {RECORDS_PER_BATCH} x {RECORD_BYTES} B"
        f" records per batch, {TXN_REQUESTS} requests per transaction, {seconds:.0f} s per case"
    )
    for kind in kinds:
        baseline = None
        for share in (0.0, 0.5, 1.0):
            rate = await produce_throughput(kind, share, seconds)
            baseline = baseline or rate
            print(
                f"{kind:8s} transactional {share:4.0%}: {rate:10,.0f} records/s"
                f"  ({rate / baseline:5.2f} x baseline)"
            )
    print(
        f"## write_txn_markers with {ENDS_PARTITIONS} partitions in open transactions"
        f" ({ENDS} transactions x {PARTITIONS_PER_TXN} partitions) vs a plain commit of"
        f" {PARTITIONS_PER_TXN} batches"
    )
    for kind in kinds:
        ends, commits = await end_latency(kind)
        print(
            f"{kind:8s} end_txn p50 {statistics.median(ends) * 1e3:7.2f} ms"
            f" p99 {_p(ends, 0.99) * 1e3:7.2f} ms | commit p50"
            f" {statistics.median(commits) * 1e3:7.2f} ms p99 {_p(commits, 0.99) * 1e3:7.2f} ms"
            f" | p99 ratio {_p(ends, 0.99) / _p(commits, 0.99):5.2f}"
        )
    print(
        f"## EndTxn with durable transaction state ({PARTITIONS_PER_TXN} partitions) vs bare"
        " write_txn_markers of the same transaction shape (the partitions' side only)"
    )
    for kind in kinds:
        durable, bare = await end_txn_latency(kind)
        print(
            f"{kind:8s} EndTxn p50 {statistics.median(durable) * 1e3:7.2f} ms"
            f" p99 {_p(durable, 0.99) * 1e3:7.2f} ms | markers only p50"
            f" {statistics.median(bare) * 1e3:7.2f} ms p99 {_p(bare, 0.99) * 1e3:7.2f} ms"
            f" | p50 ratio {statistics.median(durable) / statistics.median(bare):5.2f}"
        )
    print(
        f"## one transaction over {ENDS_PARTITIONS} partitions: write_txn_markers vs a plain commit"
        f" of {ENDS_PARTITIONS} batches (5 rounds: median / max)"
    )
    for kind in kinds:
        ends, commits = await end_latency_wide(kind)
        print(
            f"{kind:8s} end_txn {statistics.median(ends) * 1e3:8.1f} / {max(ends) * 1e3:8.1f} ms"
            f" | commit {statistics.median(commits) * 1e3:8.1f} / {max(commits) * 1e3:8.1f} ms"
            f" | median ratio {statistics.median(ends) / statistics.median(commits):5.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--backend", choices=["memory", "sqlite", "postgres", "all"], default="all")
    parser.add_argument("--postgres", help="a PostgreSQL DSN (default: a throwaway server)")
    args = parser.parse_args()
    chosen = ["memory", "sqlite", "postgres"] if args.backend == "all" else [args.backend]
    if "postgres" not in chosen:
        asyncio.run(main(args.seconds, chosen))
    else:
        with server(args.postgres) as admin_dsn:
            POSTGRES_ADMIN_DSN = admin_dsn
            asyncio.run(main(args.seconds, chosen))
