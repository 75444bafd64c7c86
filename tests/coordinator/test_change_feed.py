"""Contract: the change feed (`watch_changes`) and `partition_offsets`, on every backend.

This process's commits are told at once, naming what changed; another coordinator over the same
state (as another broker process would hold) hears them through its backend's feed: PostgreSQL's
NOTIFY naming the partitions, SQLite's per-interval check saying "everything".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    DeleteRecordsRequest,
    FindBatchesRequest,
    PartitionChanges,
    PartitionOffsets,
)
from diskless.coordinator._rules.fetch import at_visible_end
from testkit.backends import open_coordinator
from testkit.commits import Committer, batch

TP0 = TopicPartition("feed", 0)
TP1 = TopicPartition("feed", 1)


class Heard:
    """What a listener was told, in order."""

    def __init__(self) -> None:
        self.changes: list[PartitionChanges] = []
        self.arrived = asyncio.Event()

    def __call__(self, changes: PartitionChanges) -> None:
        self.changes.append(changes)
        self.arrived.set()

    def take(self) -> list[PartitionChanges]:
        taken, self.changes = self.changes, []
        self.arrived.clear()
        return taken

    async def next(self, timeout_s: float = 20.0) -> list[PartitionChanges]:
        await asyncio.wait_for(self.arrived.wait(), timeout_s)
        return self.take()


async def test_each_committed_step_names_what_it_changed(coordinator: BatchCoordinator) -> None:
    # Told before the call returns. (A PostgreSQL coordinator also hears "everything" when its
    # feed connects, and its own NOTIFYs echoed later: the notices named here must be among
    # those heard, and none may name something else.)
    heard = Heard()
    stop = coordinator.watch_changes(heard)

    def named(expected: PartitionChanges) -> None:
        told = [c for c in heard.take() if not c.everything]
        assert expected in told, told

    await coordinator.create_topic("feed", 2)
    named(PartitionChanges(topics=frozenset({"feed"})))
    await Committer(coordinator).commit([batch(TP0, count=3)])
    named(PartitionChanges(frozenset({TP0})))
    await coordinator.delete_records([DeleteRecordsRequest(TP0, 2)])
    named(PartitionChanges(frozenset({TP0})))
    await coordinator.create_partitions("feed", 3)
    named(PartitionChanges(topics=frozenset({"feed"})))
    await coordinator.delete_topics(["feed"])
    named(PartitionChanges(topics=frozenset({"feed"})))

    stop()
    await coordinator.create_topic("quiet", 1)
    await asyncio.sleep(0.1)
    assert heard.take() == []


async def test_a_read_changes_nothing_and_is_not_told(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("feed", 1)
    heard = Heard()
    coordinator.watch_changes(heard)
    await coordinator.partition_offsets([TP0])
    await coordinator.describe_topics(["feed"])
    assert [c for c in heard.take() if not c.everything] == []  # (PostgreSQL: its feed connected)


async def test_partition_offsets_are_a_fetchs_view_of_the_partition(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("feed", 2)
    committer = Committer(coordinator)
    await committer.commit([batch(TP0, count=4), batch(TP1, count=1)])
    await coordinator.delete_records([DeleteRecordsRequest(TP0, 1)])
    found = await coordinator.partition_offsets([TP0, TP1, TopicPartition("none", 0)])
    assert found[2] is None
    first, second, _ = found
    assert first is not None and second is not None
    assert (first.high_watermark, first.last_stable_offset, first.log_start_offset) == (4, 4, 1)
    assert (second.high_watermark, second.last_stable_offset, second.log_start_offset) == (1, 1, 0)
    # The view's "nothing new yet" agrees with the coordinator's own answer.
    for offset in range(0, 6):
        for isolation in IsolationLevel:
            (answer,) = await coordinator.find_batches(
                [FindBatchesRequest(TP0, offset, 1 << 20, isolation)], 1 << 20
            )
            empty = answer.error is ErrorCode.NONE and not answer.batches
            assert at_visible_end(first, offset, isolation) == empty, (offset, isolation)


async def test_a_topic_created_again_is_another_incarnation(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("feed", 1)
    (before,) = await coordinator.partition_offsets([TP0])
    await coordinator.delete_topics(["feed"])
    await coordinator.create_topic("feed", 1)
    (after,) = await coordinator.partition_offsets([TP0])
    assert isinstance(before, PartitionOffsets) and isinstance(after, PartitionOffsets)
    assert before.incarnation != after.incarnation


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_another_coordinator_over_the_same_state_hears_the_commit(
    backend: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    writer = open_coordinator(backend, tmp_path, clock)
    watcher = open_coordinator(backend, tmp_path, clock)
    try:
        await writer.create_topic("feed", 2)
        await watcher.partition_offsets([TP0])  # the schema exists for both
        heard = Heard()
        watcher.watch_changes(heard)
        if backend == "postgres":
            await heard.next()  # (re)connecting tells "everything": nothing was heard before
        await Committer(writer).commit([batch(TP1, count=2)])
        told = await heard.next()
        assert any(c.covers(TP1) for c in told)
        if backend == "postgres":  # NOTIFY names exactly what changed
            assert told == [PartitionChanges(frozenset({TP1}))]
        (offsets,) = await watcher.partition_offsets([TP1])
        assert offsets is not None and offsets.high_watermark == 2
    finally:
        await watcher.close()
        await writer.close()


def test_a_notice_too_large_for_notify_says_everything() -> None:
    many = PartitionChanges(frozenset(TopicPartition(f"topic-{i:04d}", i) for i in range(2000)))
    assert PartitionChanges.decode(many.encode()).everything
    few = PartitionChanges(frozenset({TP0}), frozenset({"t"}))
    assert PartitionChanges.decode(few.encode()) == few
    assert PartitionChanges.decode("not json").everything
