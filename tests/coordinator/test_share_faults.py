"""Oracle under faults: share-partitions (KIP-932) driven by broker processes that are SIGKILLed
at random points, against a coordinator that restarts, checked against KIP-932's state machine.

Several OS processes (`_share_child`: brokers, each with members acquiring, holding,
acknowledging with every type and leaving) work one share group over one coordinator: a
PostgreSQL server of this test's own, which is also SIGKILLed and started again (a coordinator
restart), or one SQLite file on disk. Each process journals every request before it goes and
every answer it received, with the coordinator's clock around them; the test SIGKILLs brokers
at random (half of them while a request of theirs is in flight) and starts new ones. Then every
broker is killed, the locks run out, the test drains what is left, and the journals are checked
against the model, which knows a step only by the interval [sent, answered] it ran in:

- no record is ever acquired by two members at once: of any two acquisitions of a record, one
  came first (their delivery counts and intervals allow it) and its holder lost the record
  before the other's step (its lock had run out by then, or it released it, or left);
- delivery counts never go back and never pass the limit;
- an acknowledgement answered NONE was for records the member held (their lock not yet out,
  and no other member surely holding them), or records already finished; no record it finished
  is ever acquired again, and it is in the state before the drain (so no answered
  acknowledgement is lost, across the restarts too);
- every record ends finished, each by an acknowledgement or the delivery limit;
- records held by killed brokers are delivered again once their locks run out.

The seed is printed (SHARE_FAULTS_SEED replays the test's choices; the processes' timing is
not replayable).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import SystemClock
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    BatchCoordinator,
    PostgresBatchCoordinator,
    RecordState,
    ShareFetchPartition,
    SqliteBatchCoordinator,
)
from diskless.errors import CoordinatorError
from testkit.commits import Committer, batch
from testkit.postgres import PostgresServer, bindir_or_skip

from ._share_child import GROUP, LIMITS, PARTITIONS, TOPIC, now_ms

SEED: Final = int(os.environ.get("SHARE_FAULTS_SEED", random.randrange(1 << 32)))
BROKERS: Final = 3
LOCK_MS: Final = LIMITS.lock_duration_ms
LIMIT: Final = LIMITS.delivery_count_limit
TERMINAL: Final = {
    int(AcknowledgeType.ACCEPT),
    int(AcknowledgeType.REJECT),
    int(AcknowledgeType.GAP),
}
HANG_GUARD_S: Final = 120
KILLS_MIN: Final = 3
MID_REQUEST_WAIT_S: Final = 1.0


@dataclass(frozen=True)
class Step:
    member: str
    t0: int
    t1: int | None
    """None: never answered (its process was killed) or failed: it may or may not have run."""


@dataclass(frozen=True)
class Acquisition:
    step: Step
    count: int


@dataclass(frozen=True)
class Ack:
    step: Step
    kind: int
    code: int | None
    """The partition's answer (None: unknown)."""

    @property
    def maybe_applied(self) -> bool:
        return self.code in (None, int(ErrorCode.NONE))


@dataclass
class History:
    """Everything the journals say happened to each record, and the members' departures."""

    acquired: dict[tuple[int, int], list[Acquisition]] = field(
        default_factory=lambda: defaultdict(list)
    )
    acks: dict[tuple[int, int], list[Ack]] = field(default_factory=lambda: defaultdict(list))
    left: list[Step] = field(default_factory=list)
    killed_members: set[str] = field(default_factory=set)
    answered: int = 0
    unknown: int = 0

    def add(self, started: dict[str, Any], ended: dict[str, Any] | None) -> None:
        t1 = ended["t1"] if ended is not None and "a" in ended else None
        step = Step(started["m"], started["t0"], t1)
        answer = ended.get("a") if t1 is not None and ended is not None else None
        if t1 is None:
            self.unknown += 1
        else:
            self.answered += 1
        if started["k"] == "acq":
            for partition, ranges in (answer or {}).items():
                for first, last, count in ranges:
                    for o in range(first, last + 1):
                        self.acquired[(int(partition), o)].append(Acquisition(step, count))
        elif started["k"] == "ack":
            for partition, pairs in started["p"].items():
                code = None if answer is None else answer[partition]
                for o, kind in pairs:
                    self.acks[(int(partition), o)].append(Ack(step, kind, code))
        else:
            self.left.append(step)

    def read(self, journal: Path, killed: bool) -> None:
        started: dict[int, dict[str, Any]] = {}
        ended: dict[int, dict[str, Any]] = {}
        for line in journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # torn by the SIGKILL: the last line only
                continue
            (ended if "t1" in entry else started)[entry["i"]] = entry
        for n, entry in started.items():
            self.add(entry, ended.get(n))
            if killed:
                self.killed_members.add(entry["m"])


def _before(a: Step, b: Step) -> bool:
    """Whether a's step may have run before b's (b answered)."""
    assert b.t1 is not None
    return a.t0 <= b.t1


def _released_between(
    history: History, member: str | None, key: tuple[int, int], a: Step, b: Step
) -> bool:
    """Whether `member` (None: anyone) may have given the record back (RELEASE, or leaving)
    after acquiring it in `a` and before `b`'s step."""
    assert a.t1 is not None and b.t1 is not None
    for left in history.left:
        if (member is None or left.member == member) and a.t0 <= left.t0 <= b.t1:
            return True
    if member is None:
        return False
    return any(
        ack.step.member == member
        and ack.kind == AcknowledgeType.RELEASE
        and ack.maybe_applied
        and a.t1 <= ack.step.t0 <= b.t1
        for ack in history.acks[key]
    )


def _explained(history: History, key: tuple[int, int], a: Acquisition, b: Acquisition) -> bool:
    """Whether `a` may have come before `b` with KIP-932's rules: its holder lost the record
    before b's step, and the delivery count went from a's to b's."""
    if not _before(a.step, b.step):
        return False
    assert b.step.t1 is not None
    if b.count < a.count:
        return False
    if b.count == a.count and not _released_between(history, None, key, a.step, b.step):
        return False  # only a member leaving gives a delivery back
    expired = b.step.t1 - a.step.t0 >= LOCK_MS
    return expired or _released_between(history, a.step.member, key, a.step, b.step)


def _held_at(history: History, key: tuple[int, int], b: Acquisition, k: Ack) -> bool:
    """Whether b's holder surely held the record at k's step: b was answered before k was
    sent, and neither its lock nor anything its holder sent may have ended it by then."""
    assert b.step.t1 is not None and k.step.t1 is not None
    if b.step.t1 > k.step.t0 or k.step.t1 - b.step.t0 >= LOCK_MS:
        return False
    if _released_between(history, b.step.member, key, b.step, k.step):
        return False
    return not any(
        ack.step.member == b.step.member
        and ack.kind in TERMINAL
        and ack.maybe_applied
        and b.step.t1 <= ack.step.t0 <= k.step.t1
        for ack in history.acks[key]
    )


def _finished_by(
    history: History, key: tuple[int, int], t: int, other_than: Ack | None = None
) -> bool:
    """Whether the record may have been finished (acknowledged, rejected, or archived at the
    delivery limit) by a step that began by `t` (`other_than` aside)."""
    if any(
        k.kind in TERMINAL and k.maybe_applied and k.step.t0 <= t and k is not other_than
        for k in history.acks[key]
    ):
        return True
    return any(a.count >= LIMIT and a.step.t0 <= t for a in history.acquired[key])


def check(
    history: History, states: dict[TopicPartition, Any], states_at: int, records: int
) -> dict[str, int]:
    """Every violation of the model, as one assertion listing them; some figures of the run.
    `states`: the share-partitions as read at `states_at`, before the drain."""
    violations: list[str] = []
    redelivered_after_kill = 0
    for key, acquisitions in history.acquired.items():
        for a in acquisitions:
            if not 1 <= a.count <= LIMIT:
                violations.append(f"{key}: delivery count {a.count} by {a.step}")
        for i, a in enumerate(acquisitions):
            for b in acquisitions[i + 1 :]:
                if not (_explained(history, key, a, b) or _explained(history, key, b, a)):
                    violations.append(f"{key}: held by two at once: {a} and {b}")
        for a in acquisitions:
            if a.step.member in history.killed_members and any(
                b.count > a.count and b.step.member not in history.killed_members
                for b in acquisitions
            ):
                redelivered_after_kill += 1
    for key, acks in history.acks.items():
        answered = [k for k in acks if k.code == ErrorCode.NONE]
        for k in answered:
            assert k.step.t1 is not None
            held = any(
                a.step.member == k.step.member
                and a.step.t1 is not None
                and a.step.t1 <= k.step.t0 < a.step.t1 + LOCK_MS
                for a in history.acquired[key]
            )
            if not held and not _finished_by(history, key, k.step.t1, other_than=k):
                violations.append(f"{key}: acknowledged NONE without holding it: {k}")
            for b in history.acquired[key]:
                if b.step.member != k.step.member and _held_at(history, key, b, k):
                    violations.append(f"{key}: acknowledged NONE while another held it: {k}, {b}")
            if k.kind in TERMINAL:
                for b in history.acquired[key]:
                    if b.step.t0 >= k.step.t1:
                        violations.append(f"{key}: acquired again after {k}: {b}")
    for (partition, offset), acks in history.acks.items():
        done = [
            k
            for k in acks
            if k.code == ErrorCode.NONE
            and k.kind in TERMINAL
            and k.step.t1 is not None
            and k.step.t1 <= states_at
        ]
        if not done:
            continue
        state = states.get(TopicPartition(TOPIC, partition))
        if state is None or offset < state.start:
            continue
        found = [r for r in state.ranges if r.first <= offset <= r.last]
        if len(found) != 1:
            violations.append(f"{(partition, offset)}: not in the state after {done}")
            continue
        held = found[0]
        maybe = [k for k in acks if k.kind in TERMINAL and k.maybe_applied]
        expected = {
            RecordState.ACKNOWLEDGED if k.kind == AcknowledgeType.ACCEPT else RecordState.ARCHIVED
            for k in maybe
        }
        if held.state not in expected:
            violations.append(f"{(partition, offset)}: {held} after {done}")
    for partition in range(PARTITIONS):
        for offset in range(records):
            key = (partition, offset)
            if not _finished_by(history, key, now_ms()):
                violations.append(f"{key}: finished without an acknowledgement or the limit")
    assert not violations, f"SHARE_FAULTS_SEED={SEED}: " + "\n".join(violations[:30])
    return {
        "answered": history.answered,
        "unknown": history.unknown,
        "acquisitions": sum(len(a) for a in history.acquired.values()),
        "redelivered_after_kill": redelivered_after_kill,
    }


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


async def _drain(coordinator: BatchCoordinator, history: History, records: int) -> None:
    """A last member takes every record left and accepts it, journalled as the brokers'."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    for n in range(records * LIMIT):
        member = f"drain.{n}"
        asked = [ShareFetchPartition(tp, records, records, 0, 0) for tp in tps]
        t0 = now_ms()
        got = await coordinator.acquire_share_records(GROUP, member, asked, LIMITS)
        answer = {
            str(tp.partition): [[r.first, r.last, r.delivery_count] for r in a.acquired]
            for tp, a in got.items()
        }
        history.add({"k": "acq", "m": member, "t0": t0}, {"t1": now_ms(), "a": answer})
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
    async with coordinator_target(backend, directory) as (target, pg):
        parent = open_parent(backend, target)
        try:
            await _produce(parent, records)
        finally:
            await parent.close()
        with brokers(backend, target, directory, records, rng) as running:
            await asyncio.gather(*(running.start(b) for b in range(BROKERS)))
            end = loop.time() + seconds
            restarts_at = sorted(rng.uniform(0.2, 0.8) * seconds for _ in range(server_restarts))
            started = loop.time()
            kills = 0
            while loop.time() < end or kills < KILLS_MIN:
                await asyncio.sleep(rng.uniform(0.3, 1.0))
                if pg is not None and restarts_at and loop.time() - started >= restarts_at[0]:
                    restarts_at.pop(0)
                    await restart_server(pg)
                    continue
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
        history = History()
        for journal, killed in journals:
            history.read(journal, killed)
        parent = open_parent(backend, target)
        try:
            deadline = loop.time() + HANG_GUARD_S
            states_at = now_ms()
            states = await _until(deadline, lambda: parent.share_partition_states(GROUP))
            await _drain(parent, history, records)
        finally:
            await parent.close()
    figures = check(history, states, states_at, records)
    print(f"broker kills: {kills}, {figures}")
    assert figures["answered"] > 100, figures
    assert figures["redelivered_after_kill"] > 0, "no killed broker held a record"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_share_partitions_hold_under_broker_kills_and_coordinator_restarts(
    backend: str, tmp_path: Path
) -> None:
    await run(backend, tmp_path, records=400, seconds=8.0, server_restarts=1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_share_partitions_hold_under_faults_long(backend: str, tmp_path: Path) -> None:
    await run(backend, tmp_path, records=4000, seconds=60.0, server_restarts=4)
