"""Queues against consumer groups: what a share group (KIP-932) costs one broker process.

    .venv/bin/python -m benchmarks.bench_share [--mb 32] [--partitions 4] [--record-bytes 1024]
        [--members 3] [--idle 10] [--seconds 10] [--backend sqlite|postgres|all]
        [--postgres DSN] [--quick]

One broker process (`python -m diskless.kafka_server --brokers 1 --no-lifecycle`, through
`bench_fetch_idle`'s `serve` mode, which counts SQLite statements) serves one topic. This process
fills it with `--mb` MB of records, then, in one run:

- a classic consumer group (confluent-kafka `Consumer`) reads it all once unmeasured (the
  broker's caches warm), then again, measured: MB/s from the first record to the last;
- a share group (confluent-kafka `ShareConsumer`s, implicit acknowledgement, `--members` of
  them, in threads) reads it all: MB/s the same way, and the coordinator's work per MB read:
  transactions (PostgreSQL: `pg_stat_database.xact_commit` of the broker's database; SQLite:
  BEGINs) and, for SQLite, statements. Every share-partition step (acquire, acknowledge) is a
  coordinator transaction, batched by the broker's `ShareStepQueue`; the figure is what
  deciding every record's state in the coordinator, with no leader per share-partition, costs;
- `--idle` share consumers with nothing to read, polling: broker CPU (user + system of its
  process, as a share of one core) and coordinator transactions per second, beside the same
  window with none. An idle share consumer parks its fetch in the purgatory, as a Fetch does,
  and makes no coordinator step while nothing is in flight and nothing new is written.

The consumers run in this process's threads; records are counted, never decoded. `--quick` is
a smoke run (1 MB, 2 idle consumers, 1 s windows), not a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from benchmarks.bench_fetch_idle import (
    COUNTS_ENV,
    Broker,
    _xact_commits,
    postgres_database,
)

TOPIC: Final = "work"
GROUP_CLASSIC: Final = "classic"
GROUP_SHARE: Final = "queue"
READ_TIMEOUT_S: Final = 300.0
PG_STATS_SETTLE_S: Final = 1.5
"""PostgreSQL publishes `xact_commit` up to a second late: its count is read after this long
(the transactions of that wait are counted too, as the background traffic they are)."""


class ShareBroker(Broker):
    """`bench_fetch_idle`'s broker process, serving this benchmark's topic."""

    def __init__(self, data_dir: Path, coordinator: str | None, partitions: int) -> None:
        self.counts_path = data_dir / "counts"
        argv = [
            sys.executable, "-m", "benchmarks.bench_fetch_idle", "serve", "--",
            "--brokers", "1", "--racks", "1", "--no-lifecycle", "--log-level", "WARNING",
            "--data-dir", str(data_dir), "--topic", f"{TOPIC}:{partitions}",
        ]  # fmt: skip
        if coordinator is not None:
            argv += ["--coordinator", coordinator]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, COUNTS_ENV: str(self.counts_path)},
        )
        self.address = self._bootstrap()
        self._seq = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"


def fill(bootstrap: str, records: int, record_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"x" * record_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record")


def start_at_the_earliest(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, GROUP_SHARE, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    time.sleep(1.5)  # the broker's copy of the group configs refreshes every second


class Read:
    """How long consumers took from their first record to their last, and what they read (each
    record once: a share consumer may get a record another one got, if that one closed before
    acknowledging it: records it holds are released, as Kafka releases them)."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.first = 0.0
        self.last = 0.0
        self.again = 0
        """Records delivered more than once."""
        self._seen: set[tuple[int, int]] = set()

    def add(self, size: int, where: tuple[int, int] = (-1, -1)) -> None:
        now = time.monotonic()
        if where in self._seen:
            self.again += 1
            return
        if where != (-1, -1):
            self._seen.add(where)
        if not self.records:
            self.first = now
        self.records += 1
        self.bytes += size
        self.last = now

    @property
    def mb_per_s(self) -> float:
        seconds = self.last - self.first
        return self.bytes / 1e6 / seconds if seconds > 0 else 0.0


def read_classic(bootstrap: str, group: str, records: int) -> Read:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    read = Read()
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while read.records < records and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    read.add(len(m.value()))
    finally:
        consumer.close()
    return read


def read_share(bootstrap: str, records: int, members: int) -> Read:
    """`members` share consumers of one group, each in a thread, until they read `records`."""
    from confluent_kafka import ShareConsumer

    read = Read()
    lock = threading.Lock()
    deadline = time.monotonic() + READ_TIMEOUT_S

    def member() -> None:
        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": GROUP_SHARE, "max.poll.records": 2000}
        )
        consumer.subscribe([TOPIC])
        try:
            while read.records < records and time.monotonic() < deadline:
                for m in consumer.poll(0.5):
                    if m.error() is None:
                        with lock:
                            read.add(len(m.value()), (m.partition(), m.offset()))
            consumer.commit_sync(30)  # the last poll's records accepted (else closing releases)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member) for _ in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return read


class IdleShareConsumers:
    """Share consumers polling a topic with nothing to read, each in a thread of its own."""

    def __init__(self, bootstrap: str, count: int, group: str) -> None:
        self._stop = threading.Event()
        self.polls = 0
        self.records = 0
        self._threads = [
            threading.Thread(target=self._run, args=(bootstrap, group), daemon=True)
            for _ in range(count)
        ]
        for t in self._threads:
            t.start()

    def _run(self, bootstrap: str, group: str) -> None:
        from confluent_kafka import ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([TOPIC])
        try:
            while not self._stop.is_set():
                self.records += len(consumer.poll(0.5))
                self.polls += 1
        finally:
            consumer.close()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


async def counters(broker: ShareBroker, postgres: tuple[str, str] | None) -> tuple[int, int]:
    statements, transactions = await broker.statements()
    if postgres is not None:
        await asyncio.sleep(PG_STATS_SETTLE_S)
        commits = await _xact_commits(*postgres)
        return commits, commits
    return statements, transactions


@dataclass
class Result:
    backend: str
    members: int
    mb: float
    classic_mb_s: float
    share_mb_s: float
    share_records: int
    share_again: int
    statements_per_mb: float
    transactions_per_mb: float
    idle: int
    idle_cpu: float
    base_cpu: float
    idle_txn_per_s: float
    base_txn_per_s: float
    idle_polls_per_s: float


async def window(
    broker: ShareBroker, postgres: tuple[str, str] | None, seconds: float
) -> tuple[float, float]:
    """(broker CPU share, coordinator transactions per second) over `seconds`."""
    t0, cpu0, (_, x0) = time.monotonic(), broker.cpu_s(), await counters(broker, postgres)
    await asyncio.sleep(seconds)
    t1, cpu1, (_, x1) = time.monotonic(), broker.cpu_s(), await counters(broker, postgres)
    return (cpu1 - cpu0) / (t1 - t0), (x1 - x0) / (t1 - t0)


async def run_backend(backend: str, args: argparse.Namespace) -> Result:
    records = max(1, int(args.mb * 1e6 / args.record_bytes))
    async with contextlib.AsyncExitStack() as stack:
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-share-")))
        postgres = None
        coordinator = None
        if backend == "postgres":
            postgres = await stack.enter_async_context(postgres_database(args.postgres))
            coordinator = postgres[0].rsplit("/", 1)[0] + "/" + postgres[1]
        broker = ShareBroker(data_dir, coordinator, args.partitions)
        stack.callback(broker.close)
        await asyncio.to_thread(fill, broker.bootstrap, records, args.record_bytes)
        await asyncio.to_thread(start_at_the_earliest, broker.bootstrap)
        await asyncio.to_thread(read_classic, broker.bootstrap, GROUP_CLASSIC + "-warm", records)
        classic = await asyncio.to_thread(read_classic, broker.bootstrap, GROUP_CLASSIC, records)
        before = await counters(broker, postgres)
        share = await asyncio.to_thread(read_share, broker.bootstrap, records, args.members)
        after = await counters(broker, postgres)
        if share.records < records:
            raise SystemExit(f"the share consumer read {share.records} of {records} records")
        mb = share.bytes / 1e6
        base_cpu, base_txn = await window(broker, postgres, args.seconds)
        idle = IdleShareConsumers(broker.bootstrap, args.idle, GROUP_SHARE + "-idle")
        try:
            await asyncio.sleep(args.warmup)
            polls0 = idle.polls
            idle_cpu, idle_txn = await window(broker, postgres, args.seconds)
            polls = (idle.polls - polls0) / args.seconds
        finally:
            await asyncio.to_thread(idle.close)
        return Result(
            backend,
            args.members,
            mb,
            classic.mb_per_s,
            share.mb_per_s,
            share.records,
            share.again,
            (after[0] - before[0]) / mb,
            (after[1] - before[1]) / mb,
            args.idle,
            idle_cpu,
            base_cpu,
            idle_txn,
            base_txn,
            polls,
        )
    raise AssertionError("unreachable")


def report(r: Result) -> None:
    ratio = r.share_mb_s / r.classic_mb_s if r.classic_mb_s else 0.0
    print(f"\n{r.backend}: {r.mb:.1f} MB, one broker process")
    print(f"  classic consumer group   {r.classic_mb_s:8.1f} MB/s")
    members = f"share group ({r.members} members)"
    print(
        f"  {members:<24} {r.share_mb_s:8.1f} MB/s  ({ratio:.0%} of classic;"
        f" {r.share_again} records delivered twice)"
    )
    print(
        f"  coordinator per MB read  {r.transactions_per_mb:8.2f} transactions"
        + (f", {r.statements_per_mb:.1f} statements" if r.backend == "sqlite" else "")
    )
    print(
        f"  {r.idle} idle share consumers: broker CPU {r.idle_cpu:.1%} (none: {r.base_cpu:.1%}),"
        f" {r.idle_txn_per_s:.1f} coordinator txn/s (none: {r.base_txn_per_s:.1f}),"
        f" {r.idle_polls_per_s:.1f} polls/s"
    )


async def main(backends: Sequence[str], args: argparse.Namespace) -> list[Result]:
    results = []
    for backend in backends:
        result = await run_backend(backend, args)
        report(result)
        results.append(result)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=32.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--members", type=int, default=3, help="the share group's consumers")
    parser.add_argument("--idle", type=int, default=10, help="idle share consumers")
    parser.add_argument("--seconds", type=float, default=10.0, help="the idle windows")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--postgres", default=None, help="an admin DSN (default: a throwaway)")
    parser.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    args = parser.parse_args()
    if args.quick:
        args.mb, args.idle, args.seconds, args.warmup = 1.0, 2, 1.0, 1.0
    chosen = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    asyncio.run(main(chosen, args))
