"""Consolidation's coordinator side on every backend: candidates, the extent swap and its
refusals, and every read, retention and deletion rule over extents."""

from __future__ import annotations

import pytest

from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless._types import (
    ControlType,
    ErrorCode,
    IsolationLevel,
    OffsetSpec,
    TimestampType,
    TopicPartition,
)
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    DeleteRecordsRequest,
    FileState,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicConfig,
)
from testkit.commits import BASE_TS, Committer, batch, new_key
from tests.coordinator._helpers import candidates, consolidate, swap_of

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
OK = ErrorCode.NONE
COMMITTED = IsolationLevel.READ_COMMITTED


@pytest.fixture
async def c(coordinator: BatchCoordinator) -> Committer:
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    return Committer(coordinator)


async def fetch(
    coordinator: BatchCoordinator,
    offset: int,
    max_bytes: int = 1 << 20,
    tp: TopicPartition = TP,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    total: int = 1 << 30,
) -> FindBatchesResponse:
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(tp, offset, max_bytes, isolation)], total
    )
    return response


async def list_offset(
    coordinator: BatchCoordinator, timestamp: int, tp: TopicPartition = TP
) -> ListOffsetsResponse:
    (response,) = await coordinator.list_offsets([ListOffsetsRequest(tp, timestamp)])
    return response


def spans(batches: list[BatchInfo]) -> list[tuple[int, int, bool]]:
    return [(b.base_offset, b.last_offset, b.extent is not None) for b in batches]


async def states(coordinator: BatchCoordinator, keys: list[str]) -> list[FileState | None]:
    return [None if f is None else f.state for f in await coordinator.file_info(keys)]


async def commit_one_each(c: Committer, tp: TopicPartition, sizes: list[int]) -> list[str]:
    """One object per batch (one record each, timestamps BASE_TS + i); their keys."""
    keys = []
    for i, size in enumerate(sizes):
        keys.append(new_key())
        await c.one(batch(tp, size=size, ts=BASE_TS + i), keys[-1])
    return keys


# --- candidates -----------------------------------------------------------------------------
async def test_candidates_are_the_oldest_committed_rows_cut_at_bytes_max(
    c: Committer, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    await commit_one_each(c, TP1, [100])
    await clock.advance(1)
    await commit_one_each(c, TP, [100, 100, 100])
    await clock.advance(1)
    young = clock.now_ms()
    await commit_one_each(c, TP, [100])
    found = await coordinator.consolidation_candidates(young, 250, 10)
    assert [(x.topic_partition, spans(x.batches)) for x in found] == [
        (TP1, [(0, 0, False)]),
        (TP, [(0, 0, False), (1, 1, False)]),
    ]
    assert len(await coordinator.consolidation_candidates(young, 250, 1)) == 1
    big = (await coordinator.consolidation_candidates(young, 10, 10))[-1]
    assert spans(big.batches) == [(0, 0, False)]  # at least one batch, even a larger one
    swap = swap_of(found[1])
    assert (await coordinator.commit_extent(swap)).swapped
    (after,) = [x for x in await candidates(coordinator, clock) if x.topic_partition == TP]
    assert spans(after.batches) == [(2, 2, False), (3, 3, False)]  # after the extent


async def test_candidates_stop_at_the_last_stable_offset(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    await c.one(batch(TP))
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    await c.one(batch(TP))
    (found,) = await candidates(coordinator, clock)
    assert spans(found.batches) == [(0, 0, False)]
    assert await coordinator.write_txn_markers(1, 0, 1, True, 0, [TP]) == [OK]
    (found,) = await candidates(coordinator, clock)
    assert spans(found.batches) == [(i, i, False) for i in range(4)]
    assert found.batches[-1].control == ControlType.COMMIT


# --- the swap -------------------------------------------------------------------------------
async def test_swap_replaces_rows_by_one_extent_and_moves_file_states(
    c: Committer, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    own = await commit_one_each(c, TP, [100, 200])
    shared = new_key()
    await c.commit([batch(TP, size=50), batch(TP1, size=70)], shared)
    before = await coordinator.metadata_stats()
    assert (before.batch_rows, before.extent_rows, before.retained_bytes) == (4, 0, 420)
    (candidate,) = [x for x in await candidates(coordinator, clock) if x.topic_partition == TP]
    await clock.advance(5)
    swap = swap_of(candidate)
    assert (await coordinator.commit_extent(swap)).swapped
    response = await fetch(coordinator, 0)
    (extent,) = response.batches
    assert spans([extent]) == [(0, 2, True)]
    assert (extent.object_key, extent.byte_offset, extent.size) == (swap.object_key, 16, 350)
    assert extent.extent == swap.index and extent.max_timestamp == BASE_TS + 1
    assert response.high_watermark == response.last_stable_offset == 3
    assert await states(coordinator, [*own, shared, swap.object_key]) == [
        FileState.UNREFERENCED,
        FileState.UNREFERENCED,
        FileState.LIVE,
        FileState.LIVE,
    ]
    (info,) = await coordinator.file_info([own[0]])
    assert info is not None and info.since_ms == clock.now_ms()
    (new,) = await coordinator.file_info([swap.object_key])
    assert new is not None and new.size == swap.object_size
    after = await coordinator.metadata_stats()
    assert (after.batch_rows, after.extent_rows, after.retained_bytes) == (1, 1, 420)
    if after.stored_bytes is not None:
        assert after.stored_bytes > 0


async def test_a_swapped_candidate_is_refused_the_second_time(
    c: Committer, clock: ManualClock
) -> None:
    await commit_one_each(c, TP, [100, 100])
    (candidate,) = await candidates(c.coordinator, clock)
    assert (await c.coordinator.commit_extent(swap_of(candidate))).swapped
    again = swap_of(candidate)
    result = await c.coordinator.commit_extent(again)
    assert not result.swapped and "changed" in result.reason
    assert await states(c.coordinator, [again.object_key]) == [None]


async def test_swap_refused_when_retention_moved(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("r", 1, TopicConfig(retention_bytes=100))
    c = Committer(coordinator)
    tp = TopicPartition("r", 0)
    await commit_one_each(c, tp, [100])
    (candidate,) = await candidates(coordinator, clock)
    await commit_one_each(c, tp, [100])
    assert (await coordinator.enforce_retention()).batches_deleted == 1
    result = await coordinator.commit_extent(swap_of(candidate))
    assert not result.swapped and "changed" in result.reason


async def test_swap_refused_when_delete_records_moved(c: Committer, clock: ManualClock) -> None:
    await commit_one_each(c, TP, [100, 100, 100])
    (candidate,) = await candidates(c.coordinator, clock)
    await c.coordinator.delete_records([DeleteRecordsRequest(TP, 1)])
    result = await c.coordinator.commit_extent(swap_of(candidate))
    assert not result.swapped and "changed" in result.reason
    assert spans((await fetch(c.coordinator, 1)).batches) == [(1, 1, False), (2, 2, False)]


async def test_swap_refused_when_the_topic_was_recreated(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert await coordinator.write_txn_markers(1, 0, 1, False, 0, [TP]) == [OK]
    (candidate,) = await candidates(coordinator, clock)
    await coordinator.delete_topics(["t"])
    result = await coordinator.commit_extent(swap_of(candidate))
    assert not result.swapped and "no longer exists" in result.reason
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert await coordinator.write_txn_markers(1, 0, 1, False, 0, [TP]) == [OK]
    (recreated,) = await candidates(coordinator, clock)
    assert recreated.batches == candidate.batches  # the same rows, another partition
    result = await coordinator.commit_extent(swap_of(candidate))
    assert not result.swapped and "re-created" in result.reason


async def test_swap_refused_for_a_key_that_may_not_be_committed(
    c: Committer, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    taken = (await commit_one_each(c, TP, [100]))[0]
    (candidate,) = await candidates(coordinator, clock)
    condemned = new_key()
    assert await coordinator.condemn_objects([condemned]) == [condemned]
    stale = new_object_key(DEFAULT_OBJECT_PREFIX, 0, 1)
    for key, why in ((condemned, "condemned"), (taken, "live"), (stale, "ago")):
        result = await coordinator.commit_extent(swap_of(candidate, key))
        assert not result.swapped and why in result.reason, result
    assert await states(coordinator, [condemned, taken]) == [FileState.CONDEMNED, FileState.LIVE]
    assert spans((await fetch(coordinator, 0)).batches) == [(0, 0, False)]


# --- reads over extents ---------------------------------------------------------------------
async def test_fetch_inside_an_extent_and_budgets(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    await commit_one_each(c, TP, [100] * 4)
    await consolidate(coordinator, clock)  # extent 0..3, 400 bytes
    await commit_one_each(c, TP, [100] * 2)
    await consolidate(coordinator, clock)  # extent 4..5, 200 bytes
    await commit_one_each(c, TP, [100] * 3)  # rows 6, 7, 8
    assert spans((await fetch(coordinator, 2, max_bytes=150)).batches) == [
        (0, 3, True),  # holds the offset: counted as empty
        (4, 5, True),  # later extents are always taken, at their full size
    ]
    assert spans((await fetch(coordinator, 2, max_bytes=250)).batches) == [
        (0, 3, True),
        (4, 5, True),
    ]
    assert spans((await fetch(coordinator, 2, max_bytes=300)).batches) == [
        (0, 3, True),
        (4, 5, True),
        (6, 6, False),
    ]
    assert spans((await fetch(coordinator, 5, max_bytes=0)).batches) == [(4, 5, True)]
    assert spans((await fetch(coordinator, 7)).batches) == [(7, 7, False), (8, 8, False)]
    # Rows are charged to the response total; an extent holding the offset is still returned.
    (rows, extents) = await coordinator.find_batches(
        [FindBatchesRequest(TP, 6, 1 << 20), FindBatchesRequest(TP, 0, 1 << 20)], 250
    )
    assert spans(rows.batches) == [(6, 6, False), (7, 7, False)]
    assert spans(extents.batches) == [(0, 3, True), (4, 5, True)]


async def test_read_committed_over_extents_keeps_the_aborted_index(
    c: Committer, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))  # 0
    await c.one(batch(TP))  # 1
    assert await coordinator.write_txn_markers(1, 0, 1, False, 0, [TP]) == [OK]  # 2
    await c.one(batch(TP))  # 3
    before = [await fetch(coordinator, o, isolation=COMMITTED) for o in range(4)]
    assert before[0].aborted_transactions == [(1, 0)]
    (swap,) = await consolidate(coordinator, clock)
    assert [b.control for b in swap.candidate.batches] == [None, None, ControlType.ABORT, None]
    for offset in range(4):
        after = await fetch(coordinator, offset, isolation=COMMITTED)
        assert spans(after.batches) == [(0, 3, True)]
        assert after.aborted_transactions == before[offset].aborted_transactions
        assert after.last_stable_offset == before[offset].last_stable_offset == 4


def named(response: ListOffsetsResponse) -> list[tuple[int, int, bool]]:
    """The rows a lookup names for the read path."""
    return [] if response.lookup is None else spans(response.lookup.batches)


async def test_list_offsets_answered_with_an_extent(c: Committer, clock: ManualClock) -> None:
    """An extent is named like a row; the read path finds the record through its index."""
    coordinator = c.coordinator
    for ts in (10, 30, 20):
        await c.one(batch(TP, ts=BASE_TS + ts))
    (swap,) = await consolidate(coordinator, clock)
    await c.one(batch(TP, ts=BASE_TS + 25))  # 3, a row
    top = await list_offset(coordinator, OffsetSpec.MAX_TIMESTAMP)
    assert (top.offset, top.timestamp, named(top)) == (0, BASE_TS + 30, [(0, 2, True)])
    assert top.lookup is not None and top.lookup.target == BASE_TS + 30
    (extent,) = top.lookup.batches
    assert extent.object_key == swap.object_key and extent.extent == swap.index
    by_time = await list_offset(coordinator, BASE_TS + 15)
    assert (by_time.offset, named(by_time)) == (-1, [(0, 2, True)])
    assert by_time.lookup is not None and by_time.lookup.target == BASE_TS + 15
    past = await list_offset(coordinator, BASE_TS + 31)
    assert (past.offset, past.timestamp, past.lookup) == (-1, -1, None)
    await c.coordinator.delete_records([DeleteRecordsRequest(TP, 2)])
    cut = await list_offset(coordinator, BASE_TS + 15)  # the log start cuts the extent
    assert named(cut) == [(0, 2, True), (3, 3, False)]
    assert cut.lookup is not None and cut.lookup.start_offset == 2
    await c.one(batch(TP, ts=BASE_TS + 40))  # 4
    row = await list_offset(coordinator, OffsetSpec.MAX_TIMESTAMP)
    assert (row.offset, row.timestamp, named(row)) == (4, BASE_TS + 40, [(4, 4, False)])
    assert (await list_offset(coordinator, OffsetSpec.EARLIEST)).offset == 2


async def test_list_offsets_on_log_append_time(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic(
        "lat", 1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    c = Committer(coordinator)
    tp = TopicPartition("lat", 0)
    start = clock.now_ms()
    await c.one(batch(tp, ts=5))
    await clock.advance(0.01)
    await c.one(batch(tp, ts=1))
    await clock.advance(0.01)
    (swap,) = await consolidate(coordinator, clock)
    top = await list_offset(coordinator, OffsetSpec.MAX_TIMESTAMP, tp)
    assert (top.offset, top.timestamp, named(top)) == (0, start + 10, [(0, 1, True)])
    assert top.lookup is not None and top.lookup.batches[0].max_timestamp == start + 10
    (extent,) = (await fetch(coordinator, 1, tp=tp)).batches
    assert extent.timestamp_type == TimestampType.LOG_APPEND_TIME and extent.extent == swap.index


# --- retention and deletion over extents ----------------------------------------------------
async def test_delete_records_inside_and_past_an_extent(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    await commit_one_each(c, TP, [100] * 3)
    (swap,) = await consolidate(coordinator, clock)
    await commit_one_each(c, TP, [100])
    (response,) = await coordinator.delete_records([DeleteRecordsRequest(TP, 2)])
    assert (response.error, response.low_watermark) == (OK, 2)
    inside = await fetch(coordinator, 2)
    assert spans(inside.batches) == [(0, 2, True), (3, 3, False)]
    assert inside.log_start_offset == 2
    assert (await fetch(coordinator, 1)).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert await states(coordinator, [swap.object_key]) == [FileState.LIVE]
    assert (await coordinator.metadata_stats()).extent_rows == 1
    await coordinator.delete_records([DeleteRecordsRequest(TP, 3)])
    assert spans((await fetch(coordinator, 3)).batches) == [(3, 3, False)]
    assert await states(coordinator, [swap.object_key]) == [FileState.UNREFERENCED]
    stats = await coordinator.metadata_stats()
    assert (stats.batch_rows, stats.extent_rows, stats.retained_bytes) == (1, 0, 100)


async def test_retention_by_time_takes_an_extent_once_its_newest_batch_is_old(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("r", 1, TopicConfig(retention_ms=1000))
    c = Committer(coordinator)
    tp = TopicPartition("r", 0)
    now = clock.now_ms()
    await c.one(batch(tp, ts=now - 5000))
    await c.one(batch(tp, ts=now - 10))
    (swap,) = await consolidate(coordinator, clock)
    await c.one(batch(tp, ts=now - 6000))  # old, but behind the extent
    assert (await coordinator.enforce_retention()).batches_deleted == 0
    await clock.advance(1)
    result = await coordinator.enforce_retention()
    assert (result.batches_deleted, result.bytes_deleted) == (2, 300)
    assert await states(coordinator, [swap.object_key]) == [FileState.UNREFERENCED]
    assert (await list_offset(coordinator, OffsetSpec.EARLIEST, tp)).offset == 3


async def test_retention_by_size_takes_an_extent_whole(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("s", 1, TopicConfig(retention_bytes=250))
    c = Committer(coordinator)
    tp = TopicPartition("s", 0)
    await commit_one_each(c, tp, [100, 100])
    await consolidate(coordinator, clock)  # 200 bytes
    await commit_one_each(c, tp, [100, 100])
    assert (await coordinator.enforce_retention()).batches_deleted == 0  # 200 would be left
    await commit_one_each(c, tp, [100])
    result = await coordinator.enforce_retention()
    assert (result.batches_deleted, result.bytes_deleted) == (1, 200)
    assert spans((await fetch(coordinator, 2, tp=tp)).batches) == [(i, i, False) for i in (2, 3, 4)]


async def test_topic_deletion_drops_extents(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    await commit_one_each(c, TP, [100, 100])
    (swap,) = await consolidate(coordinator, clock)
    await coordinator.delete_topics(["t"])
    assert await states(coordinator, [swap.object_key]) == [FileState.UNREFERENCED]
    stats = await coordinator.metadata_stats()
    assert (stats.batch_rows, stats.extent_rows, stats.retained_bytes) == (0, 0, 0)
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    assert (await fetch(coordinator, 0)).batches == []


async def test_producer_state_survives_consolidation(c: Committer, clock: ManualClock) -> None:
    """Duplicates are found in the producer's own entries, not in the batch rows."""
    coordinator = c.coordinator
    first = await c.one(batch(TP, pid=7, epoch=0, seq=0, count=2))
    await c.one(batch(TP, pid=7, epoch=0, seq=2))
    await consolidate(coordinator, clock)
    again = await c.one(batch(TP, pid=7, epoch=0, seq=0, count=2))
    assert again.duplicate and again.base_offset == first.base_offset == 0
    assert (await c.one(batch(TP, pid=7, epoch=0, seq=3))).base_offset == 3
    (snapshot,) = await coordinator.describe_producers(TP)
    assert snapshot.last_sequence == 3
