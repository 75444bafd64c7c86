"""Oracle under faults: share-partitions (KIP-932) driven by broker processes that are SIGKILLed
at random points, against a coordinator that restarts, checked against KIP-932's state machine.

Several OS processes (`_share_child`: brokers, each with members acquiring, holding,
acknowledging with every type and leaving) work one share group over one coordinator: a
PostgreSQL server of this test's own, which is also SIGKILLed and started again (a coordinator
restart), or one SQLite file on disk. Each process journals every request before it goes and
every answer it received, with the coordinator's clock around them; the test SIGKILLs brokers
at random (half of them while a request of theirs is in flight) and starts new ones, and now and
then deletes records (DeleteRecords a little past a share-partition's start, so that records in
flight go too; the brokers acquire at the log start they read). Then every broker is killed,
the locks run out, the test drains what is left, and the journals are checked against the
model (`_share_model`), which knows a step only by the interval [sent, answered] it ran in:

- no record is ever acquired by two members at once: of any two acquisitions of a record, one
  came first (their delivery counts and intervals allow it) and its holder lost the record
  before the other's step (its lock had run out by then, or it released it, or left);
- delivery counts never go back and never pass the limit;
- an acknowledgement answered NONE was for records the member held (their lock not yet out,
  and no other member surely holding them), or records already finished; no record it finished
  is ever acquired again, and it is in the state before the drain (so no answered
  acknowledgement is lost, across the restarts too);
- every record ends finished, each by an acknowledgement, the delivery limit or a deletion;
- records held by killed brokers are delivered again once their locks run out.

The seed is printed (SHARE_FAULTS_SEED replays the test's choices; the processes' timing is
not replayable).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import SystemClock
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    BatchCoordinator,
    DeleteRecordsRequest,
    PostgresBatchCoordinator,
    ShareFetchPartition,
    SqliteBatchCoordinator,
)
from diskless.errors import CoordinatorError
from testkit.commits import Committer, batch
from testkit.postgres import PostgresServer, bindir_or_skip

from ._share_child import GROUP, LIMITS, PARTITIONS, TOPIC, now_ms
from ._share_model import LIMIT, LOCK_MS, History, check

SEED: Final = int(os.environ.get("SHARE_FAULTS_SEED", random.randrange(1 << 32)))
BROKERS: Final = 3
HANG_GUARD_S: Final = 120
KILLS_MIN: Final = 3
"""Brokers killed in a run, at least (and DeleteRecords sent, `DELETES_MIN`)."""
DELETES_MIN: Final = 2
DELETE_CHANCE: Final = 0.3
"""That the test's next move is DeleteRecords rather than a kill."""
MID_REQUEST_WAIT_S: Final = 1.0


# --- the run ---------------------------------------------------------------------------------


class Brokers:
    """The broker processes, each incarnation journalling to a file of its own."""

    def __init__(
        self, backend: str, target: str, directory: Path, records: int, rng: random.Random
    ) -> None:
        self.backend, self.target, self.directory, self.rng = backend, target, directory, rng
        self.records = records
        self.running: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
        self.journals: list[tuple[Path, bool]] = []
        self.incarnations = 0

    async def start(self, broker: int) -> None:
        """Start the broker and wait until it serves (so that a kill finds it at work)."""
        journal = self.directory / f"journal-{broker}-{self.incarnations}"
        self.incarnations += 1
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.coordinator._share_child",
                self.backend,
                self.target,
                str(journal),
                str(broker),
                str(self.rng.randrange(1 << 32)),
                str(self.records),
            ],
            stdout=subprocess.PIPE,
        )
        self.running[broker] = (process, journal)
        assert process.stdout is not None
        ready = await asyncio.to_thread(process.stdout.readline)
        assert ready == b"ready\n", "a broker did not start"

    async def kill_mid_request(self, broker: int) -> None:
        """SIGKILL the broker while a request of its is sent and not answered (as its journal
        says; within `MID_REQUEST_WAIT_S`, else at once)."""
        _, journal = self.running[broker]
        deadline = asyncio.get_running_loop().time() + MID_REQUEST_WAIT_S
        while asyncio.get_running_loop().time() < deadline:
            lines = journal.read_bytes().splitlines()[-1:] if journal.exists() else []
            if lines and b'"t1"' not in lines[0] and lines[0].endswith(b"}"):
                break
            await asyncio.sleep(0.002)
        self.kill(broker)

    def kill(self, broker: int, *, mid_run: bool = True) -> None:
        """SIGKILL the broker (`mid_run`: its members' records are to be delivered again)."""
        process, journal = self.running.pop(broker)
        process.send_signal(signal.SIGKILL)
        process.wait(HANG_GUARD_S)
        if process.stdout is not None:
            process.stdout.close()
        assert process.returncode == -signal.SIGKILL, "a broker died by itself"
        if journal.exists():
            self.journals.append((journal, mid_run))

    def kill_all(self) -> None:
        for broker in list(self.running):
            self.kill(broker, mid_run=False)


@contextlib.contextmanager
def brokers(
    backend: str, target: str, directory: Path, records: int, rng: random.Random
) -> Iterator[Brokers]:
    running = Brokers(backend, target, directory, records, rng)
    try:
        yield running
    finally:
        for process, _ in running.running.values():
            process.kill()
            process.wait(HANG_GUARD_S)
            if process.stdout is not None:
                process.stdout.close()


@contextlib.asynccontextmanager
async def coordinator_target(
    backend: str, directory: Path
) -> AsyncIterator[tuple[str, PostgresServer | None]]:
    if backend == "sqlite":
        yield str(directory / "coordinator.db"), None
        return
    pg = PostgresServer(bindir_or_skip())
    try:
        yield pg.dsn(pg.database(directory, "share")), pg
    finally:
        pg.close()


def open_parent(backend: str, target: str) -> BatchCoordinator:
    if backend == "sqlite":
        return SqliteBatchCoordinator(target, clock=SystemClock())
    return PostgresBatchCoordinator(target, connect_timeout_ms=2_000, resolve_timeout_ms=10_000)


async def restart_server(pg: PostgresServer) -> None:
    """SIGKILL the server's postmaster and start it again once its old backends left."""
    pid = int((pg.data / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    for _ in range(HANG_GUARD_S * 5):
        try:
            await asyncio.to_thread(pg.start)
            return
        except RuntimeError:
            await asyncio.sleep(0.2)
    raise AssertionError("the server did not start again")


async def _produce(coordinator: BatchCoordinator, records: int) -> None:
    await coordinator.create_topic(TOPIC, PARTITIONS)
    committer = Committer(coordinator)
    for partition in range(PARTITIONS):
        tp = TopicPartition(TOPIC, partition)
        for _ in range(records // 40):
            await committer.commit([batch(tp, count=40)])


async def _delete_some(
    coordinator: BatchCoordinator, history: History, rng: random.Random, records: int
) -> None:
    """DeleteRecords on a partition, a little past its share-partition's start (so records in
    flight go too), journalled before it is sent; failures (the server restarting) left."""
    tp = TopicPartition(TOPIC, rng.randrange(PARTITIONS))
    with contextlib.suppress(CoordinatorError):
        offsets = await coordinator.share_offsets(GROUP, [tp])
        start = offsets[tp].start if tp in offsets else 0
        offset = min(records, max(0, start) + rng.randint(0, 12))
        sent = now_ms()
        history.deleted.append((sent, None, tp.partition, offset))
        (answer,) = await coordinator.delete_records([DeleteRecordsRequest(tp, offset)])
        if answer.error == ErrorCode.NONE:
            history.deleted[-1] = (sent, now_ms(), tp.partition, offset)


async def _drain(coordinator: BatchCoordinator, history: History, records: int) -> None:
    """A last member takes every record left and accepts it, journalled as the brokers'."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    for n in range(records * LIMIT):
        member = f"drain.{n}"
        read_at = now_ms()
        offsets = await coordinator.partition_offsets(tps)
        asked = [
            ShareFetchPartition(tp, records, records, o.log_start_offset, 0)
            for tp, o in zip(tps, offsets, strict=True)
            if o is not None
        ]
        t0 = now_ms()
        got = await coordinator.acquire_share_records(GROUP, member, asked, LIMITS)
        answer = {
            str(tp.partition): [[r.first, r.last, r.delivery_count] for r in a.acquired]
            for tp, a in got.items()
        }
        started = {"k": "acq", "m": member, "t0": t0, "r": read_at}
        history.add(started, {"t1": now_ms(), "a": answer})
        if all(a.start == records for a in got.values()):
            return
        acks = {
            tp: [
                AcknowledgeBatch(r.first, r.last, (int(AcknowledgeType.ACCEPT),))
                for r in a.acquired
            ]
            for tp, a in got.items()
            if a.acquired
        }
        if not acks:
            continue
        t0 = now_ms()
        codes = await coordinator.acknowledge_share_records(GROUP, member, acks, LIMITS)
        pairs = {
            str(tp.partition): [
                [o, int(AcknowledgeType.ACCEPT)] for b in bs for o in range(b.first, b.last + 1)
            ]
            for tp, bs in acks.items()
        }
        history.add(
            {"k": "ack", "m": member, "t0": t0, "p": pairs},
            {"t1": now_ms(), "a": {str(tp.partition): int(c) for tp, c in codes.items()}},
        )
    raise AssertionError("the drain did not finish the share-partitions")


async def _until(deadline: float, what: Any) -> Any:
    """`what` retried through a coordinator that is starting again."""
    while True:
        try:
            return await what()
        except CoordinatorError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def run(
    backend: str, directory: Path, *, records: int, seconds: float, server_restarts: int
) -> None:
    print(f"SHARE_FAULTS_SEED={SEED}")
    rng = random.Random(SEED)
    loop = asyncio.get_running_loop()
    history = History()
    async with coordinator_target(backend, directory) as (target, pg):
        parent = open_parent(backend, target)
        try:
            await _produce(parent, records)
            with brokers(backend, target, directory, records, rng) as running:
                await asyncio.gather(*(running.start(b) for b in range(BROKERS)))
                end = loop.time() + seconds
                restarts = sorted(rng.uniform(0.2, 0.8) * seconds for _ in range(server_restarts))
                started = loop.time()
                kills = 0
                while loop.time() < end or kills < KILLS_MIN or len(history.deleted) < DELETES_MIN:
                    await asyncio.sleep(rng.uniform(0.3, 1.0))
                    if pg is not None and restarts and loop.time() - started >= restarts[0]:
                        restarts.pop(0)
                        await restart_server(pg)
                    elif rng.random() < DELETE_CHANCE:
                        await _delete_some(parent, history, rng, records)
                    else:
                        broker = rng.randrange(BROKERS)
                        if rng.random() < 0.5:
                            await running.kill_mid_request(broker)
                        else:
                            running.kill(broker)
                        kills += 1
                        await asyncio.sleep(rng.uniform(0.0, 0.3))
                        await running.start(broker)
                running.kill_all()
                journals = running.journals
            await asyncio.sleep(LOCK_MS / 1000 + 0.1)  # the killed brokers' locks run out
            for journal, killed in journals:
                history.read(journal, killed)
            deadline = loop.time() + HANG_GUARD_S
            states_at = now_ms()
            states = await _until(deadline, lambda: parent.share_partition_states(GROUP))
            await _drain(parent, history, records)
        finally:
            await parent.close()
    figures = check(history, states, states_at, records)
    print(f"broker kills: {kills}, deletions: {len(history.deleted)}, {figures}")
    assert figures["answered"] > 100, figures
    assert figures["redelivered_after_kill"] > 0, "no killed broker held a record"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_share_partitions_hold_under_broker_kills_and_coordinator_restarts(
    backend: str, tmp_path: Path
) -> None:
    await run(backend, tmp_path, records=400, seconds=6.0, server_restarts=1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_share_partitions_hold_under_faults_long(backend: str, tmp_path: Path) -> None:
    await run(backend, tmp_path, records=4000, seconds=60.0, server_restarts=4)
