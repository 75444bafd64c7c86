"""The consume phase's reader process: one broker, and one member of every consumer group.

Each execution task starts one (`consume.ConsumerProcess`) on its own host, so that the CPU time
of reading is a process's own: this process's CPU is the read side's (its broker and its members'
loops, whose decoding is timed apart), the execution task's is the produce side's. Each member
reads the task's share of the partitions (`verify.spread`) through this process's broker with
`DisklessBroker.fetch`, as the producers write through `DisklessBroker.produce`. The broker lends
views of its cache (`views=True`), as it would write them to a socket; the member joins them into
its own bytes as part of its decoding, as a client receives them.

With its parent it speaks: the plan as one line of JSON on stdin; one line `ready` on stdout once
its broker runs; then it waits for one more line on stdin, which its parent sends once its
producers' batches are built, so that the read side is measured over the same stretch as the
produce side, not while the batches are built; it answers `started` once its members run, and
the producers start after that; then it consumes until every execution task has put its
marker under `DONE_PREFIX` in the store and every member has caught up with the high watermarks
seen after that; then it measures two idle windows (members attached and long-polling, then
detached); the result goes as JSON to `plan.result_path`.

Every consumed record is kept as a run of records (consecutive offsets of one producer's
consecutive sequences with equal values' length, from one fetch), which the driver expands back
into records and audits against the acknowledgements (`consume_report`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import msgspec

from benchmarks.harness.audit import Marker, ReadRecord
from benchmarks.harness.coordinators import open_coordinator_type
from benchmarks.harness.env import open_broker, open_store
from benchmarks.harness.placement import TaskPlace, here
from benchmarks.harness.readback import (
    FETCH_BYTES_MAX,
    PARTITION_FETCH_BYTES_MAX,
    RecordRun,
    decode_runs,
    runs_join,
)
from benchmarks.harness.records import kafka_records
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from diskless import DisklessBroker, ErrorCode, FetchResult, TopicPartition
from diskless.coordinator import BatchCoordinator

DONE_PREFIX: Final = "harness/producers-done/"
"""Each execution task puts one empty object here once all its producers are answered."""
CONSUMER_BROKER_ID_BASE: Final = 30_000
"""Reader brokers' ids, far from the workload's, the read-back's and the consolidator's."""
MARKER_POLL_S: Final = 0.2
READY_LINE: Final = "ready"
STARTED_LINE: Final = "started"
RETRY_S: Final = 0.05
"""How long a member waits before asking again after its fetch failed."""

Run = tuple[int, int, int, int, int, int, bool, bool, float]
"""(offset, count, batch producer id, key producer id, first key sequence, value bytes, value ok,
transactional, time received): `count` records, the i-th at offset + i with sequence + i."""


def done_key(task: int) -> str:
    return f"{DONE_PREFIX}task-{task:05d}"


class ConsumerPlan(msgspec.Struct, frozen=True, kw_only=True):
    task: int
    tasks: int
    """Execution tasks whose markers mean that every producer is done."""
    broker_id: int
    rack: str
    groups: int
    partitions: list[tuple[str, int]]
    spec: WorkloadSpec
    run: RunSpec
    result_path: str
    producers_wait_s: float
    """How long to wait for the markers (a failed task never puts one)."""


class PartitionRead(msgspec.Struct, kw_only=True):
    """What one group's member read of one partition."""

    group: int
    topic: str
    partition: int
    log_start: int = 0
    high_watermark: int = -1
    read_bytes: int = 0
    errors: int = 0
    last_error: str = ""
    runs: list[Run] = msgspec.field(default_factory=list)
    markers: list[tuple[int, int, bool]] = msgspec.field(default_factory=list)

    def records(self) -> list[ReadRecord]:
        """The runs expanded back into the records they stand for."""
        out: list[ReadRecord] = []
        for offset, count, batch_pid, key_pid, seq, value_bytes, ok, txn, _ in self.runs:
            out.extend(
                ReadRecord(offset + i, batch_pid, key_pid, seq + i, value_bytes, ok, txn)
                for i in range(count)
            )
        return out

    def marker_list(self) -> list[Marker]:
        return [Marker(*m) for m in self.markers]


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """One measured stretch of the reader process."""

    seconds: float
    cpu_s: float
    """The process's CPU time (user + system, every thread)."""
    coordinator_calls: int
    fetches: int
    """`DisklessBroker.fetch` calls (a held consumer fetch makes several)."""
    polls: int
    """Consumer fetches answered (each one long poll)."""
    gets: int
    client_cpu_s: float
    """Of `cpu_s`, the members' own joining and decoding of what they read (timed on the loop
    thread)."""


class ConsumerResult(msgspec.Struct, kw_only=True):
    task: int
    broker_id: int
    members: int
    started_ts: float
    """When the members started (wall clock), as the producers did."""
    producers_done_ts: float
    caught_up_ts: float
    caught_up: bool
    """Whether every member reached the final high watermarks in time."""
    consume: Window
    """From the members' start, as the producers start, until every member caught up."""
    idle: Window
    """Members attached and long-polling, nothing produced."""
    baseline: Window
    """Members detached: the broker alone."""
    calls_by_method: dict[str, int]
    """Coordinator calls during the consume window, by BatchCoordinator method."""
    reads: list[PartitionRead]
    place: TaskPlace | None = None
    problem: str = ""


def counting_coordinator(run: RunSpec) -> tuple[BatchCoordinator, Counter[str]]:
    """The run's coordinator, every call of its public interface counted by method name."""
    base, args = open_coordinator_type(run.coordinator)
    calls: Counter[str] = Counter()

    def counted(name: str, method: Any) -> Any:
        async def call(self: Any, *a: Any, **k: Any) -> Any:
            calls[name] += 1
            return await method(self, *a, **k)

        return call

    methods = {
        name: counted(name, getattr(base, name))
        for name in dir(base)
        if not name.startswith("_")
        and name != "close"
        and inspect.iscoroutinefunction(getattr(base, name))
    }
    coordinator: BatchCoordinator = type(f"Counted{base.__name__}", (base,), methods)(*args)
    return coordinator, calls


async def long_poll(
    broker: DisklessBroker,
    offsets: Mapping[TopicPartition, int],
    wait_ms: int,
    stop: asyncio.Event,
    counter: Member,
) -> dict[TopicPartition, FetchResult]:
    """A consumer's fetch (min.bytes 1, max.wait `wait_ms`), which the broker holds until data
    arrives; a member being detached (`stop`) asks without waiting. Counted on `counter`."""
    counter.fetches += 1
    return await broker.fetch(
        offsets,
        max_bytes=FETCH_BYTES_MAX,
        partition_max_bytes=PARTITION_FETCH_BYTES_MAX,
        min_bytes=0 if stop.is_set() else 1,
        max_wait_ms=wait_ms,
        views=True,
    )


class Member:
    """One group's member: reads its partitions from offset 0, keeping what it read as runs."""

    def __init__(self, group: int, partitions: list[TopicPartition]) -> None:
        self.group = group
        self.offsets = dict.fromkeys(partitions, 0)
        self.reads = {
            tp: PartitionRead(group=group, topic=tp.topic, partition=tp.partition)
            for tp in partitions
        }
        self.final_hw: dict[TopicPartition, int] = {}
        self.draining = False
        """Set once every producer is done: high watermarks seen from then on are final."""
        self.caught_up = asyncio.Event()
        self.client_cpu_s = 0.0
        self.fetches = 0
        self.polls = 0

    async def run(self, broker: DisklessBroker, spec: WorkloadSpec, stop: asyncio.Event) -> None:
        while not stop.is_set():
            draining = self.draining
            try:
                answers = await long_poll(broker, self.offsets, spec.fetch_wait_ms, stop, self)
            except Exception as exc:  # an infrastructure failure: counted, then asked again
                for read in self.reads.values():
                    read.errors += 1
                    read.last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(RETRY_S)
                continue
            received = time.time()
            self.polls += 1
            started = time.thread_time()
            for tp, answer in answers.items():
                self._take(tp, answer, received, draining)
            self.client_cpu_s += time.thread_time() - started
            if draining and all(
                tp in self.final_hw and offset >= self.final_hw[tp]
                for tp, offset in self.offsets.items()
            ):
                self.caught_up.set()

    def _take(
        self, tp: TopicPartition, answer: FetchResult, received: float, draining: bool
    ) -> None:
        read = self.reads[tp]
        if answer.error != ErrorCode.NONE:
            read.errors += 1
            read.last_error = f"fetch at {self.offsets[tp]}: {ErrorCode(answer.error).name}"
            return
        read.log_start = answer.log_start_offset
        read.high_watermark = answer.high_watermark
        if draining:
            self.final_hw[tp] = answer.high_watermark
        if not answer.records_size:
            return
        read.read_bytes += answer.records_size
        offset = self.offsets[tp]
        try:  # the broker lent views of its cache; the member takes the bytes, as a client would
            runs, next_offset, markers = decode_runs(b"".join(answer.record_views))
        except ValueError as exc:
            read.errors += 1
            read.last_error = f"fetch at {offset}: {exc}"
            return
        read.runs.extend(runs_from(runs, offset, received))
        read.markers.extend(
            (m.offset, m.producer_id, m.commit) for m in markers if m.offset >= offset
        )
        if next_offset > offset:
            self.offsets[tp] = next_offset


def runs_from(runs: list[RecordRun], offset: int, received: float) -> list[Run]:
    """The runs' records from `offset` on (a fetch may answer from the start of a batch that
    began earlier, whose records before it a client drops), each stamped `received`."""
    out: list[Run] = []
    for first, count, batch_pid, key_pid, seq, value_bytes, ok, txn in runs:
        skip = min(max(offset - first, 0), count)
        if skip < count:
            out.append(
                (
                    first + skip,
                    count - skip,
                    batch_pid,
                    key_pid,
                    seq + skip,
                    value_bytes,
                    ok,
                    txn,
                    received,
                )
            )
    return out


def runs_of(records: list[ReadRecord], received: float) -> list[Run]:
    """Records as runs (`readback.runs_join`), each stamped `received`."""
    runs: list[list[Any]] = []
    runs_join(runs, records)
    return [(*run, received) for run in runs]


class _Meter:
    """Snapshots of what the windows measure."""

    def __init__(self, calls: Counter[str], store: Any, members: list[Member]) -> None:
        self.calls, self.store, self.members = calls, store, members

    def snapshot(self) -> tuple[float, ...]:
        store = self.store.stats()
        return (
            time.monotonic(),
            time.process_time(),
            sum(self.calls.values()),
            sum(m.fetches for m in self.members),
            sum(m.polls for m in self.members),
            store.gets + store.ranged_gets,
            sum(m.client_cpu_s for m in self.members),
        )

    @staticmethod
    def window(before: tuple[float, ...], after: tuple[float, ...]) -> Window:
        d = [a - b for a, b in zip(after, before, strict=True)]
        return Window(
            seconds=d[0],
            cpu_s=d[1],
            coordinator_calls=int(d[2]),
            fetches=int(d[3]),
            polls=int(d[4]),
            gets=int(d[5]),
            client_cpu_s=d[6],
        )


async def _producers_done(plan: ConsumerPlan) -> bool:
    """Wait until every execution task has put its marker (False: not within the wait)."""
    markers = open_store(plan.run.store)
    deadline = time.monotonic() + plan.producers_wait_s
    try:
        while time.monotonic() < deadline:
            found = [info async for info in markers.list_all(DONE_PREFIX)]
            if len(found) >= plan.tasks:
                return True
            await asyncio.sleep(MARKER_POLL_S)
        return False
    finally:
        await markers.close()


async def consume(
    plan: ConsumerPlan, go: Callable[[], Awaitable[object]] | None = None
) -> ConsumerResult:
    """The reader's whole life (see the module doc); its members start once `go` returns."""
    spec = plan.spec
    store = open_store(plan.run.store)
    coordinator, calls = counting_coordinator(plan.run)
    partitions = [TopicPartition(topic, partition) for topic, partition in plan.partitions]
    stop = asyncio.Event()
    problem = ""
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        stack.push_async_callback(coordinator.close)
        broker = await stack.enter_async_context(
            open_broker(plan.broker_id, plan.rack, store, coordinator, plan.run)
        )
        members = [Member(g, partitions) for g in range(plan.groups)] if partitions else []
        kafka_records()  # the members' codec, imported before the data flows, not on its 1st batch
        meter = _Meter(calls, store, members)
        print(READY_LINE, flush=True)
        if go is not None:
            await go()
        started_ts = time.time()
        calls.clear()
        start = meter.snapshot()
        loops = [asyncio.create_task(m.run(broker, spec, stop)) for m in members]
        print(STARTED_LINE, flush=True)
        try:
            if not await _producers_done(plan):
                problem = f"not every producer task finished within {plan.producers_wait_s:.0f} s"
            done_ts = time.time()
            for member in members:
                member.draining = True
            catching_up = [asyncio.create_task(m.caught_up.wait()) for m in members]
            caught_up = True
            if catching_up:
                _, late = await asyncio.wait(catching_up, timeout=plan.producers_wait_s)
                caught_up = not late
                for wait in late:
                    wait.cancel()
            if not caught_up:
                problem = problem or "a member did not reach the final high watermarks in time"
            caught_up_ts = time.time()
            consumed = meter.snapshot()
            by_method = dict(calls)
            await asyncio.sleep(spec.consume_idle_s)
            idle = meter.snapshot()
        finally:
            stop.set()
            await asyncio.gather(*loops, return_exceptions=True)
        detached = meter.snapshot()
        await asyncio.sleep(spec.consume_idle_s)
        baseline = meter.snapshot()
    return ConsumerResult(
        task=plan.task,
        broker_id=plan.broker_id,
        members=len(members),
        started_ts=started_ts,
        producers_done_ts=done_ts,
        caught_up_ts=caught_up_ts,
        caught_up=caught_up and not problem,
        consume=_Meter.window(start, consumed),
        idle=_Meter.window(consumed, idle),
        baseline=_Meter.window(detached, baseline),
        calls_by_method=dict(sorted(by_method.items())),
        reads=[read for m in members for read in m.reads.values()],
        place=here(),
        problem=problem,
    )


async def _parents_go() -> None:
    """The parent's second line (or the end of its stdin: a parent gone has nothing to wait for)."""
    await asyncio.to_thread(sys.stdin.buffer.readline)


def main() -> None:
    plan = msgspec.json.decode(sys.stdin.buffer.readline(), type=ConsumerPlan)
    result = asyncio.run(consume(plan, go=_parents_go))
    with open(plan.result_path, "wb") as out:
        out.write(msgspec.json.encode(result))


if __name__ == "__main__":
    main()
