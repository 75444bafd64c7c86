"""Conformance: share-partition states (KIP-932) kept by the batch coordinator, on every backend:
any process acquires and acknowledges any share-partition, locks run out by the coordinator's
clock, and the state survives a restart and is shared between processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diskless import ErrorCode, ManualClock, TopicConfig, TopicPartition
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    AcquiredRange,
    BatchCoordinator,
    DeleteRecordsRequest,
    ShareAcknowledge,
    ShareAcquire,
    ShareFetchPartition,
    ShareLimits,
    ShareOffset,
    ShareRelease,
    ShareStepQueue,
)
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import Committer
from testkit.commits import batch as commit_batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LIMITS = ShareLimits(delivery_count_limit=2, lock_duration_ms=1_000, max_record_locks=50)
LOCK = LIMITS.lock_duration_ms
"""When the earliest lock runs out, after a step that acquired on a clock that stood still."""
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def fetch(tp: TopicPartition, n: int = 10, end: int = 100, start: int = 0) -> ShareFetchPartition:
    return ShareFetchPartition(tp, n, end, log_start=0, initial_start=start)


def batch(first: int, last: int, kind: int = ACCEPT) -> list[AcknowledgeBatch]:
    return [AcknowledgeBatch(first, last, (kind,))]


async def test_acquire_several_partitions_in_one_step_and_acknowledge(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("t", 2)
    got = await coordinator.acquire_share_records(
        "g", "a", [fetch(TP0, 5), fetch(TP1, 3, start=7)], LIMITS
    )
    assert got[TP0].acquired == (AcquiredRange(0, 4, 1),)
    assert got[TP1].acquired == (AcquiredRange(7, 9, 1),)
    got = await coordinator.acquire_share_records("g", "b", [fetch(TP0, 5)], LIMITS)
    assert got[TP0].acquired == (AcquiredRange(5, 9, 1),)
    other = await coordinator.acquire_share_records("h", "b", [fetch(TP0, 2)], LIMITS)
    assert other[TP0].acquired == (AcquiredRange(0, 1, 1),)  # another group: its own state
    answers = await coordinator.acknowledge_share_records(
        "g", "a", {TP0: batch(0, 5), TP1: batch(7, 9)}, LIMITS
    )
    assert answers == {TP0: ErrorCode.INVALID_RECORD_STATE, TP1: ErrorCode.NONE}
    answers = await coordinator.acknowledge_share_records("g", "a", {TP0: batch(0, 4)}, LIMITS)
    assert answers == {TP0: ErrorCode.NONE}
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(5, 0), TP1: ShareOffset(10, 0)}
    assert await coordinator.share_offsets("g", [TP1, TopicPartition("t", 9)]) == {
        TP1: ShareOffset(10, 0)
    }
    no_state = await coordinator.acknowledge_share_records("z", "a", {TP0: batch(0, 0)}, LIMITS)
    assert no_state == {TP0: ErrorCode.INVALID_RECORD_STATE}


async def test_a_lock_runs_out_by_the_coordinators_clock(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("t", 1)
    await coordinator.acquire_share_records("g", "a", [fetch(TP0, 3, end=3)], LIMITS)
    await clock.advance(1.0)
    got = await coordinator.acquire_share_records("g", "b", [fetch(TP0, 3, end=3)], LIMITS)
    assert got[TP0].acquired == (AcquiredRange(0, 2, 2),)
    late = await coordinator.acknowledge_share_records("g", "a", {TP0: batch(0, 2)}, LIMITS)
    assert late == {TP0: ErrorCode.INVALID_RECORD_STATE}
    await coordinator.acknowledge_share_records("g", "b", {TP0: batch(0, 0, RELEASE)}, LIMITS)
    await clock.advance(1.0)  # delivered twice, the limit: archived, never delivered again
    got = await coordinator.acquire_share_records("g", "c", [fetch(TP0, 3, end=3)], LIMITS)
    assert got[TP0] == ((), 0, 3, 3, None)  # nothing held: no lock to run out


async def test_release_member_and_the_state_epoch_fence(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    await coordinator.acquire_share_records("g", "a", [fetch(TP0, 4, end=4)], LIMITS)
    await coordinator.release_share_member("g", "a", [TP0, TP1], LIMITS)
    got = await coordinator.acquire_share_records("g", "b", [fetch(TP0, 4, end=4)], LIMITS)
    assert got[TP0].acquired == (AcquiredRange(0, 3, 1),)  # a's delivery given back
    assert await coordinator.alter_share_offsets("g", {TP0: 2, TopicPartition("x", 0): 1}) == {
        TP0: ErrorCode.NONE,
        TopicPartition("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    fenced = await coordinator.acknowledge_share_records(
        "g", "b", {TP0: batch(2, 3)}, LIMITS, state_epochs={TP0: 0}
    )
    assert fenced == {TP0: ErrorCode.FENCED_STATE_EPOCH}
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(2, 1)}
    got = await coordinator.acquire_share_records("g", "b", [fetch(TP0, 9, end=4)], LIMITS)
    assert got[TP0] == ((AcquiredRange(2, 3, 1),), 1, 2, 4, LOCK)
    assert await coordinator.delete_share_offsets("g", [TP0]) == {TP0: ErrorCode.NONE}
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(-1, 2)}
    got = await coordinator.acquire_share_records("g", "b", [fetch(TP0, 9, end=6, start=5)], LIMITS)
    assert got[TP0] == ((AcquiredRange(5, 5, 1),), 2, 5, 6, LOCK)
    await coordinator.delete_share_group("g")
    assert await coordinator.share_offsets("g") == {}


async def test_share_states_of_a_deleted_topic_go_with_it(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    await coordinator.create_topic("u", 1)
    keep = TopicPartition("u", 0)
    await coordinator.acquire_share_records("g", "a", [fetch(TP0), fetch(keep)], LIMITS)
    await coordinator.delete_topics(["t"])
    assert set(await coordinator.share_offsets("g")) == {keep}


async def test_records_below_the_log_start_leave(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    await coordinator.acquire_share_records("g", "a", [fetch(TP0, 5, end=5)], LIMITS)
    trimmed = ShareFetchPartition(TP0, 10, 10, log_start=3, initial_start=0)
    got = await coordinator.acquire_share_records("g", "b", [trimmed], LIMITS)
    assert got[TP0] == ((AcquiredRange(5, 9, 1),), 0, 3, 10, LOCK)
    (state,) = (await coordinator.share_partition_states("g")).values()
    assert (state.start, state.end, state.ranges[0].first) == (3, 10, 3)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_share_states_survive_a_restart_and_are_shared(backend: str, tmp_path: Path) -> None:
    clock = ManualClock()
    first = open_coordinator(backend, tmp_path, clock)
    second = open_coordinator(backend, tmp_path, clock)  # another broker process
    try:
        await first.create_topic("t", 1)
        got = await first.acquire_share_records("g", "a", [fetch(TP0, 4)], LIMITS)
        assert got[TP0].acquired == (AcquiredRange(0, 3, 1),)
        got = await second.acquire_share_records("g", "b", [fetch(TP0, 4)], LIMITS)
        assert got[TP0].acquired == (AcquiredRange(4, 7, 1),)  # never what the first handed out
        acked = await second.acknowledge_share_records("g", "a", {TP0: batch(0, 3)}, LIMITS)
        assert acked == {TP0: ErrorCode.NONE}  # any process acknowledges
    finally:
        await first.close()
        await second.close()
    reopened = open_coordinator(backend, tmp_path, clock)
    try:
        assert await reopened.share_offsets("g") == {TP0: ShareOffset(4, 0)}
        await clock.advance(1.0)
        got = await reopened.acquire_share_records("g", "c", [fetch(TP0, 9, end=8)], LIMITS)
        assert got[TP0].acquired == (AcquiredRange(4, 7, 2),)
    finally:
        await reopened.close()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_processes_racing_for_one_share_partition_never_share_a_record(
    backend: str, tmp_path: Path
) -> None:
    """Two coordinators over one store (two broker processes) acquire concurrently from a
    share-partition that has no state yet (both may find it absent: one insert loses and its
    step runs again) and then from the state they share: every record goes to one member."""
    clock = ManualClock()
    processes = [open_coordinator(backend, tmp_path, clock) for _ in range(2)]
    try:
        await processes[0].create_topic("t", 1)

        async def member(index: int) -> list[int]:
            coordinator = processes[index % 2]
            taken = []
            for _ in range(5):
                got = await coordinator.acquire_share_records(
                    "g", f"m{index}", [fetch(TP0, 3, end=200)], LIMITS
                )
                taken += [o for r in got[TP0].acquired for o in range(r.first, r.last + 1)]
            return taken

        results = await asyncio.gather(*(member(i) for i in range(6)))
        everything = sorted(o for taken in results for o in taken)
        assert everything == list(range(len(everything)))  # none twice, none skipped
        assert len(everything) == min(6 * 5 * 3, LIMITS.max_record_locks)
        for group in range(20):  # each a fresh share-partition, both processes at once
            answers = await asyncio.gather(
                *(
                    c.acquire_share_records(f"fresh{group}", f"m{i}", [fetch(TP0, 3)], LIMITS)
                    for i, c in enumerate(processes)
                )
            )
            taken = sorted(
                o for a in answers for r in a[TP0].acquired for o in range(r.first, r.last + 1)
            )
            assert taken == list(range(6))
    finally:
        for coordinator in processes:
            await coordinator.close()


async def test_share_steps_answer_as_the_operations_one_by_one(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """Several members' requests, of two groups, in one step: each answered as if alone, on
    the state the earlier ones left."""
    await coordinator.create_topic("t", 2)
    answers = await coordinator.share_steps(
        [
            ShareAcquire("g", "a", [fetch(TP0, 4), fetch(TP1, 2)], LIMITS),
            ShareAcquire("g", "b", [fetch(TP0, 4)], LIMITS),
            ShareAcknowledge("g", "a", {TP0: batch(0, 3), TP1: batch(0, 5)}, LIMITS),
            ShareAcquire("h", "a", [fetch(TP0, 1)], LIMITS),
            ShareRelease("g", "b", [TP0], LIMITS),
            ShareAcquire("g", "c", [fetch(TP0, 5)], LIMITS),
            ShareAcknowledge("g", "c", {TP1: batch(0, 0)}, LIMITS),
        ]
    )
    assert answers == [
        {
            TP0: ((AcquiredRange(0, 3, 1),), 0, 0, 4, LOCK),
            TP1: ((AcquiredRange(0, 1, 1),), 0, 0, 2, LOCK),
        },
        {TP0: ((AcquiredRange(4, 7, 1),), 0, 0, 8, LOCK)},
        {TP0: ErrorCode.NONE, TP1: ErrorCode.INVALID_RECORD_STATE},
        {TP0: ((AcquiredRange(0, 0, 1),), 0, 0, 1, LOCK)},
        None,
        {TP0: ((AcquiredRange(4, 8, 1),), 0, 4, 9, LOCK)},  # b gave its delivery back
        {TP1: ErrorCode.INVALID_RECORD_STATE},
    ]
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(4, 0), TP1: ShareOffset(0, 0)}


async def test_the_queue_sends_what_waits_in_one_step(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    queue = ShareStepQueue(coordinator)
    requests = [ShareAcquire("g", f"m{i}", [fetch(TP0, 2)], LIMITS) for i in range(10)]
    answers = await asyncio.gather(*(queue.run(r) for r in requests))
    assert queue.steps == 1  # all queued before the first step went: one step for the ten
    taken = [a[TP0].acquired for a in answers if isinstance(a, dict)]  # type: ignore[union-attr]
    assert taken == [(AcquiredRange(2 * i, 2 * i + 1, 1),) for i in range(10)]
    first = asyncio.ensure_future(queue.run(requests[0]))
    await asyncio.sleep(0)  # its step is in flight: the next ones wait and go together
    rest = await asyncio.gather(*(queue.run(r) for r in requests[1:4]))
    await first
    assert queue.steps == 3
    assert [a[TP0].acquired for a in rest] == [  # type: ignore[index]
        (AcquiredRange(22, 23, 1),),
        (AcquiredRange(24, 25, 1),),
        (AcquiredRange(26, 27, 1),),
    ]
    bad = ShareAcknowledge("g", "m0", {TP0: [AcknowledgeBatch(1, 0, (ACCEPT,))]}, LIMITS)
    assert await queue.run(bad) == {TP0: ErrorCode.INVALID_REQUEST}
    await queue.close()


async def _log_start(coordinator: BatchCoordinator, tp: TopicPartition) -> int:
    (offsets,) = await coordinator.partition_offsets([tp])
    assert offsets is not None
    return offsets.log_start_offset


async def test_delete_records_leaves_the_share_partition_as_kafka_says(
    coordinator: BatchCoordinator,
) -> None:
    """Kafka's `SharePartition.updateCacheAndOffsets`: once the log start passes the
    share-partition's start, the records below it leave and the start moves up to it; an
    acknowledgement of a record deleted meanwhile is answered NONE and changes nothing (Kafka
    skips in-flight batches below its start before checking who holds them)."""
    await coordinator.create_topic("t", 1)
    await Committer(coordinator).commit([commit_batch(TP0, count=10)])

    def fetch_at(log_start: int) -> ShareFetchPartition:
        return ShareFetchPartition(TP0, 6, 10, log_start, initial_start=0)

    got = await coordinator.acquire_share_records("g", "a", [fetch_at(0)], LIMITS)
    assert got[TP0].acquired == (AcquiredRange(0, 5, 1),)
    assert await coordinator.acknowledge_share_records("g", "a", {TP0: batch(0, 1)}, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    (deleted,) = await coordinator.delete_records([DeleteRecordsRequest(TP0, 4)])
    assert (deleted.error, deleted.low_watermark) == (ErrorCode.NONE, 4)
    log_start = await _log_start(coordinator, TP0)
    got = await coordinator.acquire_share_records("g", "b", [fetch_at(log_start)], LIMITS)
    assert got[TP0] == ((AcquiredRange(6, 9, 1),), 0, 4, 10, LOCK)  # a still holds 4 and 5
    (state,) = (await coordinator.share_partition_states("g")).values()
    assert (state.start, state.ranges[0].first, state.ranges[0].member) == (4, 4, "a")
    late = {TP0: batch(2, 3)}  # deleted since a acquired them
    assert await coordinator.acknowledge_share_records("g", "a", late, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    assert await coordinator.acknowledge_share_records("g", "c", late, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    assert await coordinator.share_partition_states("g") == {TP0: state}
    across = {TP0: batch(2, 5, REJECT)}  # 2-3 deleted, 4-5 held: rejected
    assert await coordinator.acknowledge_share_records("g", "a", across, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(6, 0)}
    # Every record of the log deleted, b's included: the share-partition starts at the log's
    # start again, with nothing in flight.
    await coordinator.delete_records([DeleteRecordsRequest(TP0, 10)])
    log_start = await _log_start(coordinator, TP0)
    got = await coordinator.acquire_share_records("g", "c", [fetch_at(log_start)], LIMITS)
    assert got[TP0] == ((), 0, 10, 10, None)
    assert await coordinator.acknowledge_share_records("g", "b", {TP0: batch(6, 9)}, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    (state,) = (await coordinator.share_partition_states("g")).values()
    assert (state.start, state.end, state.ranges) == (10, 10, ())


async def test_retention_leaves_the_share_partition_and_a_new_one_starts_at_the_log_start(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("r", 1, TopicConfig(retention_ms=1000))
    tp = TopicPartition("r", 0)
    committer = Committer(coordinator)
    now = clock.now_ms()
    await committer.commit([commit_batch(tp, ts=now - 5000, count=5)])
    await committer.commit([commit_batch(tp, ts=now, count=5)])

    def fetch_at(log_start: int, initial_start: int) -> ShareFetchPartition:
        return ShareFetchPartition(tp, 3, 10, log_start, initial_start)

    got = await coordinator.acquire_share_records("g", "a", [fetch_at(0, 0)], LIMITS)
    assert got[tp].acquired == (AcquiredRange(0, 2, 1),)
    result = await coordinator.enforce_retention()
    assert result.batches_deleted == 1
    log_start = await _log_start(coordinator, tp)
    assert log_start == 5
    got = await coordinator.acquire_share_records("g", "b", [fetch_at(log_start, 0)], LIMITS)
    assert got[tp] == ((AcquiredRange(5, 7, 1),), 0, 5, 8, LOCK)  # 0-4 gone, a's 0-2 with them
    assert await coordinator.acknowledge_share_records("g", "a", {tp: batch(0, 2)}, LIMITS) == {
        tp: ErrorCode.NONE
    }
    # A group with no state yet, initialized from a stale read (earliest: 0), starts at the log's.
    got = await coordinator.acquire_share_records("h", "a", [fetch_at(log_start, 0)], LIMITS)
    assert got[tp] == ((AcquiredRange(5, 7, 1),), 0, 5, 8, LOCK)


async def test_gap_acknowledgements_archive_offsets_only_their_holder_names(
    coordinator: BatchCoordinator,
) -> None:
    """GAP (an offset that holds no record: a transaction marker, a record compacted away) is
    acknowledged as any type: by the member holding the offset, which it archives."""
    await coordinator.create_topic("t", 1)
    await coordinator.acquire_share_records("g", "a", [fetch(TP0, 5, end=5)], LIMITS)
    gap = AcknowledgeType.GAP
    mixed = {TP0: [AcknowledgeBatch(0, 4, (ACCEPT, gap, gap, REJECT, ACCEPT))]}
    assert await coordinator.acknowledge_share_records("g", "b", mixed, LIMITS) == {
        TP0: ErrorCode.INVALID_RECORD_STATE
    }
    (state,) = (await coordinator.share_partition_states("g")).values()
    assert [(r.first, r.last, r.member) for r in state.ranges] == [(0, 4, "a")]
    assert await coordinator.acknowledge_share_records("g", "a", mixed, LIMITS) == {
        TP0: ErrorCode.NONE
    }
    assert await coordinator.share_offsets("g") == {TP0: ShareOffset(5, 0)}
    got = await coordinator.acquire_share_records("g", "c", [fetch(TP0, 5, end=5)], LIMITS)
    assert got[TP0].acquired == ()  # archived, never delivered
