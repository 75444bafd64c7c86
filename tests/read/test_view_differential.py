"""Differential: the broker-local view of partition offsets against the coordinator, with the
change feed's notices dropped, held back and delivered out of order.

A seeded workload commits batches, opens and ends transactions, moves log starts, deletes and
creates topics again, and grows them, on every backend. Between steps the view is asked about
random fetches, and every answer it gives must be one the coordinator gave at some moment: the
offsets it answers with must be a state the partition really had (so a stale view can only
delay). After a reconcile the view must equal the coordinator exactly, whatever was lost.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    DeleteRecordsRequest,
    FindBatchesRequest,
    PartitionChanges,
    PartitionOffsets,
)
from diskless.read import FetchPurgatory, PartitionView
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import Committer, batch

TOPICS = ("a", "b")
PARTITIONS_MAX = 3
STEPS = 120
GUARD_S = 30.0


class LossyFeed:
    """Stands between the coordinator's feed and the view: notices are held, then delivered,
    dropped or delivered late and out of order, as the test's rng decides."""

    def __init__(self, coordinator: BatchCoordinator, rng: random.Random) -> None:
        self._coordinator = coordinator
        self._rng = rng
        self._held: list[PartitionChanges] = []
        self._listener: Callable[[PartitionChanges], None] | None = None
        self.dropped = 0

    def subscribe(self, listener: Callable[[PartitionChanges], None]) -> Callable[[], None]:
        self._listener = listener
        return self._coordinator.watch_changes(lambda notice: self._held.append(notice))

    def shuffle(self) -> None:
        """Deliver some held notices in a random order, drop some, keep the rest for later."""
        assert self._listener is not None
        self._rng.shuffle(self._held)
        kept = []
        for notice in self._held:
            draw = self._rng.random()
            if draw < 0.3:
                self.dropped += 1
            elif draw < 0.7:
                self._listener(notice)
            else:
                kept.append(notice)
        self._held = kept

    def deliver_all(self) -> None:
        assert self._listener is not None
        held, self._held = self._held, []
        for notice in held:
            self._listener(notice)


class Workload:
    def __init__(self, coordinator: BatchCoordinator, rng: random.Random) -> None:
        self.coordinator = coordinator
        self.rng = rng
        self.committer = Committer(coordinator)
        self.partitions = dict.fromkeys(TOPICS, 0)
        self.open_txns: dict[TopicPartition, int] = {}
        self.pids = itertools.count(1000)

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS_MAX)]

    def live(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, n in self.partitions.items() for p in range(n)]

    async def create(self, topic: str) -> None:
        count = self.rng.randint(1, PARTITIONS_MAX - 1)
        assert await self.coordinator.create_topic(topic, count) is ErrorCode.NONE
        self.partitions[topic] = count

    async def step(self) -> str:
        rng = self.rng
        missing = [t for t, n in self.partitions.items() if n == 0]
        if missing:
            await self.create(rng.choice(missing))
            return "create"
        tp = rng.choice(self.live())
        draw = rng.random()
        if draw < 0.45:
            await self.committer.commit([batch(tp, count=rng.randint(1, 3))])
            return "commit"
        if draw < 0.6 and tp not in self.open_txns:
            pid = next(self.pids)
            assert await self.coordinator.add_partitions_to_txn(pid, 0, [tp]) == [ErrorCode.NONE]
            await self.committer.commit([batch(tp, pid=pid, epoch=0, seq=0, txn=True)])
            self.open_txns[tp] = pid
            return "open txn"
        if draw < 0.7 and tp in self.open_txns:
            pid = self.open_txns.pop(tp)
            commit = rng.random() < 0.5
            assert await self.coordinator.write_txn_markers(pid, 0, 1, commit, 0, [tp]) == [
                ErrorCode.NONE
            ]
            return "end txn"
        if draw < 0.8:
            (state,) = await self.coordinator.partition_offsets([tp])
            assert state is not None
            target = rng.randint(state.log_start_offset, state.high_watermark)
            await self.coordinator.delete_records([DeleteRecordsRequest(tp, target)])
            return "delete records"
        if draw < 0.9 and self.partitions[tp.topic] < PARTITIONS_MAX:
            grown = self.partitions[tp.topic] + 1
            assert await self.coordinator.create_partitions(tp.topic, grown) is ErrorCode.NONE
            self.partitions[tp.topic] = grown
            return "grow"
        await self.coordinator.delete_topics([tp.topic])
        self.partitions[tp.topic] = 0
        self.open_txns = {p: pid for p, pid in self.open_txns.items() if p.topic != tp.topic}
        return "delete topic"


async def _settle(view: PartitionView) -> None:
    for _ in range(int(GUARD_S / 0.002)):
        await asyncio.sleep(0.002)
        if not view.busy:
            return
    raise AssertionError("the view never settled")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_view_answers_only_what_the_coordinator_said(
    backend: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DISKLESS_SEED", random.randrange(2**32)))
    print(f"seed {seed} (DISKLESS_SEED={seed} replays it)")
    rng = random.Random(seed)
    coordinator = open_coordinator(backend, tmp_path, ManualClock())
    feed = LossyFeed(coordinator, rng)
    view = PartitionView(
        coordinator, FetchPurgatory(ManualClock()), reconcile_ms=10**9, subscribe=feed.subscribe
    )
    view.start()
    workload = Workload(coordinator, rng)
    every = workload.all_partitions()
    history: dict[TopicPartition, set[PartitionOffsets | None]] = {tp: {None} for tp in every}

    async def record() -> dict[TopicPartition, PartitionOffsets | None]:
        now = dict(zip(every, await coordinator.partition_offsets(every), strict=True))
        for tp, state in now.items():
            history[tp].add(state)
        return now

    answered = delayed = 0
    try:
        for topic in TOPICS:
            await workload.create(topic)
        await record()
        for step in range(STEPS):
            await workload.step()
            now = await record()
            feed.shuffle()
            await asyncio.sleep(0)
            for _ in range(4):
                tp = rng.choice(every)
                isolation = rng.choice(list(IsolationLevel))
                state = now[tp]
                offset = rng.randint(0, (state.high_watermark if state else 0) + 1)
                answer = view.answer(tp, offset, isolation)
                if not isinstance(answer, FetchResult):
                    continue  # the coordinator answers, or the view reads first
                answered += 1
                said = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
                had = {
                    (h.high_watermark, h.last_stable_offset, h.log_start_offset)
                    for h in history[tp]
                    if h is not None
                }
                assert said in had, (step, tp, offset, isolation, said, had)
                (truth,) = await coordinator.find_batches(
                    [FindBatchesRequest(tp, offset, 1 << 20, isolation)], 1 << 20
                )
                current = (truth.high_watermark, truth.last_stable_offset, truth.log_start_offset)
                if truth.error is not ErrorCode.NONE or truth.batches or current != said:
                    delayed += 1  # stale: allowed, it only delays
            if step % 20 == 19:
                feed.deliver_all()
                view.reconcile()
                await _settle(view)
                now = await record()
                for tp, held in view.offsets().items():
                    assert held == now[tp], (step, tp, held, now[tp])
        print(f"{answered} answers from the view, {delayed} of them stale; "
              f"{feed.dropped} notices dropped")  # fmt: skip
        assert answered > 0
    finally:
        await view.close()
        await coordinator.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_without_losses_the_feed_alone_keeps_the_view_exact(
    backend: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DISKLESS_SEED", random.randrange(2**32)))
    print(f"seed {seed} (DISKLESS_SEED={seed} replays it)")
    rng = random.Random(seed)
    coordinator = open_coordinator(backend, tmp_path, ManualClock())
    view = PartitionView(coordinator, FetchPurgatory(ManualClock()), reconcile_ms=10**9)
    view.start()
    workload = Workload(coordinator, rng)
    every = workload.all_partitions()
    try:
        for topic in TOPICS:
            await workload.create(topic)
        for tp in every:
            view.answer(tp, 0, IsolationLevel.READ_UNCOMMITTED)  # tracked from now on
        for step in range(STEPS // 2):
            await workload.step()
            await _settle(view)
            now = await coordinator.partition_offsets(every)
            for tp, state in zip(every, now, strict=True):
                assert view.offsets().get(tp) == state, (step, tp)
    finally:
        await view.close()
        await coordinator.close()
