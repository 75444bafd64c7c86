"""The coordinator contract, run against every backend (see conftest's `coordinator` fixture)."""

from __future__ import annotations

import pytest

from diskless._types import (
    CompressionType,
    ErrorCode,
    IsolationLevel,
    OffsetSpec,
    TimestampType,
    TopicPartition,
)
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitRefusal,
    CommittedOffset,
    DeleteRecordsRequest,
    FileState,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsRequest,
    TopicConfig,
)
from diskless.txn import (
    PRODUCER_BATCHES_RETAINED_MAX,
    SEQUENCE_MAX,
    PendingOffset,
    TransactionCoordinator,
)
from testkit.commits import BASE_TS, Committer, batch, new_key

from ._helpers import EXPIRATION_MS

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
OK = ErrorCode.NONE
OUT_OF_ORDER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.fixture
async def c(coordinator: BatchCoordinator) -> Committer:
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    return Committer(coordinator)


async def fetch(
    coordinator: BatchCoordinator, offset: int, max_bytes: int = 1 << 20, tp: TopicPartition = TP
) -> FindBatchesResponse:
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(tp, offset, max_bytes)], 1 << 30
    )
    return response


# --- offsets ----------------------------------------------------------------------------------
async def test_offsets_are_assigned_contiguously_per_partition(c: Committer) -> None:
    results = await c.commit([batch(TP, count=3), batch(TP1, count=2), batch(TP, count=4)])
    assert [(r.error, r.base_offset) for r in results] == [(OK, 0), (OK, 0), (OK, 3)]
    assert all(r.log_append_time == -1 and r.log_start_offset == 0 for r in results)
    assert (await c.one(batch(TP))).base_offset == 7
    response = await fetch(c.coordinator, 0)
    assert [(b.base_offset, b.last_offset) for b in response.batches] == [(0, 2), (3, 6), (7, 7)]
    assert response.high_watermark == response.last_stable_offset == 8


async def test_unknown_partition_fails_only_its_batch(c: Committer) -> None:
    results = await c.commit(
        [batch(TP), batch(TopicPartition("t", 2)), batch(TopicPartition("nope", 0)), batch(TP)]
    )
    assert [r.error for r in results] == [
        OK,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        OK,
    ]
    assert results[1].log_start_offset == -1 and results[1].base_offset == -1
    assert results[3].base_offset == 1


async def test_log_append_time(coordinator: BatchCoordinator, clock: ManualClock) -> None:
    config = TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
    await coordinator.create_topic("lat", 1, config)
    c = Committer(coordinator)
    tp = TopicPartition("lat", 0)
    result = await c.one(batch(tp, pid=1, epoch=0, seq=0, ts=5))
    assert result.log_append_time == clock.now_ms()
    await clock.advance(1)
    duplicate = await c.one(batch(tp, pid=1, epoch=0, seq=0, ts=5))
    assert duplicate.duplicate and duplicate.log_append_time == result.log_append_time
    (info,) = (await fetch(coordinator, 0, tp=tp)).batches
    assert info.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert info.log_append_time == result.log_append_time and info.max_timestamp == 5


# --- idempotence ------------------------------------------------------------------------------
async def test_sequences_follow_within_an_epoch(c: Committer) -> None:
    assert (await c.one(batch(TP, pid=7, epoch=0, seq=0, count=3))).error == OK
    assert (await c.one(batch(TP, pid=7, epoch=0, seq=3, count=2))).error == OK
    gap = await c.one(batch(TP, pid=7, epoch=0, seq=6))
    assert gap.error == OUT_OF_ORDER and gap.base_offset == -1 and gap.log_start_offset == 0
    assert (await c.one(batch(TP, pid=7, epoch=0, seq=4))).error == OUT_OF_ORDER
    assert (await c.one(batch(TP, pid=7, epoch=0, seq=5))).base_offset == 5


async def test_new_producer_accepts_any_first_sequence(c: Committer) -> None:
    result = await c.one(batch(TP, pid=9, epoch=3, seq=17, count=2))
    assert result.error == OK and not result.duplicate
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert (snapshot.producer_id, snapshot.producer_epoch, snapshot.last_sequence) == (9, 3, 18)


async def test_sequence_wraps_around(c: Committer) -> None:
    start = SEQUENCE_MAX - 1
    first = await c.one(batch(TP, pid=1, epoch=0, seq=start, count=2))
    assert first.error == OK
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert snapshot.last_sequence == SEQUENCE_MAX
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3))).error == OK
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=3))).error == OK
    # A batch that itself wraps: last sequence is computed modulo 2^31.
    assert (await c.one(batch(TP, pid=2, epoch=0, seq=SEQUENCE_MAX, count=3))).error == OK
    assert (await c.one(batch(TP, pid=2, epoch=0, seq=2))).error == OK
    # Wrapping to anything but 0 is out of order.
    await c.one(batch(TP, pid=3, epoch=0, seq=SEQUENCE_MAX))
    assert (await c.one(batch(TP, pid=3, epoch=0, seq=1))).error == OUT_OF_ORDER


async def test_epoch_bump_restarts_at_zero(c: Committer) -> None:
    await c.one(batch(TP, pid=1, epoch=0, seq=0, count=5))
    assert (await c.one(batch(TP, pid=1, epoch=1, seq=5))).error == OUT_OF_ORDER
    assert (await c.one(batch(TP, pid=1, epoch=1, seq=0))).error == OK
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert snapshot.producer_epoch == 1
    assert snapshot.retained_batches == [(0, 0, 5, 5)]  # the old epoch's batches are gone
    # The old epoch's batch is no duplicate any more: its epoch is stale.
    stale = await c.one(batch(TP, pid=1, epoch=0, seq=0, count=5))
    assert stale.error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert (await c.one(batch(TP, pid=1, epoch=1, seq=1))).error == OK


async def test_stale_epoch_is_rejected(c: Committer) -> None:
    await c.one(batch(TP, pid=1, epoch=5, seq=0))
    result = await c.one(batch(TP, pid=1, epoch=4, seq=1))
    assert result.error == ErrorCode.INVALID_PRODUCER_EPOCH and result.base_offset == -1
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert (snapshot.producer_epoch, snapshot.last_sequence) == (5, 0)


async def test_duplicates_return_original_offsets(c: Committer) -> None:
    await c.one(batch(TP, count=10))  # offsets 0..9 from a non-idempotent producer
    first = await c.one(batch(TP, pid=1, epoch=0, seq=0, count=2))
    second = await c.one(batch(TP, pid=1, epoch=0, seq=2, count=2))
    again = await c.commit(
        [batch(TP, pid=1, epoch=0, seq=0, count=2), batch(TP, pid=1, epoch=0, seq=2, count=2)]
    )
    assert [(r.error, r.base_offset, r.duplicate) for r in again] == [
        (OK, first.base_offset, True),
        (OK, second.base_offset, True),
    ]
    assert (first.base_offset, second.base_offset) == (10, 12)
    assert (await fetch(c.coordinator, 0)).high_watermark == 14


async def test_duplicate_window_is_five_batches(c: Committer) -> None:
    assert PRODUCER_BATCHES_RETAINED_MAX == 5
    results = [await c.one(batch(TP, pid=1, epoch=0, seq=i)) for i in range(6)]
    # seq 1 is the 5th most recent batch: still a duplicate.
    fifth = await c.one(batch(TP, pid=1, epoch=0, seq=1))
    assert fifth.duplicate and fifth.base_offset == results[1].base_offset
    # seq 0 is the 6th most recent: forgotten, hence out of order.
    sixth = await c.one(batch(TP, pid=1, epoch=0, seq=0))
    assert sixth.error == OUT_OF_ORDER and not sixth.duplicate
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert [b[0] for b in snapshot.retained_batches] == [1, 2, 3, 4, 5]


async def test_duplicate_needs_exact_sequence_range(c: Committer) -> None:
    await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3))
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, count=2))).error == OUT_OF_ORDER


async def test_several_batches_of_one_producer_in_one_commit(c: Committer) -> None:
    results = await c.commit(
        [
            batch(TP, pid=1, epoch=0, seq=0, count=2),
            batch(TP, pid=1, epoch=0, seq=2, count=2),
            batch(TP, pid=1, epoch=0, seq=2, count=2),  # duplicate of the previous one
            batch(TP, pid=1, epoch=0, seq=9),  # gap
            batch(TP, pid=1, epoch=0, seq=4),
        ]
    )
    assert [(r.error, r.base_offset, r.duplicate) for r in results] == [
        (OK, 0, False),
        (OK, 2, False),
        (OK, 2, True),
        (OUT_OF_ORDER, -1, False),
        (OK, 4, False),
    ]


async def test_mixed_valid_and_invalid_batches(c: Committer) -> None:
    await c.one(batch(TP, pid=2, epoch=3, seq=0))
    results = await c.commit(
        [
            batch(TP, pid=1, epoch=0, seq=0),
            batch(TP, pid=2, epoch=2, seq=1),  # stale epoch
            batch(TP1, pid=1, epoch=0, seq=0),  # other partition: own state
            batch(TopicPartition("gone", 0)),
            batch(TP, count=3),  # non-idempotent
            batch(TP, pid=2, epoch=3, seq=1),
        ]
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (OK, 1),
        (ErrorCode.INVALID_PRODUCER_EPOCH, -1),
        (OK, 0),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (OK, 2),
        (OK, 5),
    ]


async def test_non_idempotent_batches_skip_checks(c: Committer) -> None:
    for _ in range(3):
        assert (await c.one(batch(TP, pid=-1, epoch=-1, seq=-1))).error == OK
    assert await c.coordinator.describe_producers(TP) == []


async def test_non_transactional_batch_during_transaction(c: Committer) -> None:
    assert await c.coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    opened = await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=1, txn=True))).error == OK
    result = await c.one(batch(TP, pid=1, epoch=0, seq=2))
    assert result.error == ErrorCode.INVALID_TXN_STATE
    (snapshot,) = await c.coordinator.describe_producers(TP)
    assert snapshot.current_txn_first_offset == opened.base_offset == 0
    assert (await fetch(c.coordinator, 0)).last_stable_offset == 0  # the open transaction


async def test_transactional_batch_needs_a_registration(c: Committer) -> None:
    result = await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    assert result.error == ErrorCode.INVALID_TXN_STATE
    assert await c.coordinator.describe_producers(TP) == []


async def test_producer_state_expires(c: Committer, clock: ManualClock) -> None:
    await c.one(batch(TP, pid=1, epoch=0, seq=0))
    await clock.advance((EXPIRATION_MS - 1) / 1000)
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0))).duplicate
    assert len(await c.coordinator.describe_producers(TP)) == 1
    await clock.advance(EXPIRATION_MS / 1000)
    assert await c.coordinator.describe_producers(TP) == []
    # Expired: the retry is no duplicate any more, and any sequence is accepted again.
    result = await c.one(batch(TP, pid=1, epoch=0, seq=0))
    assert result.error == OK and not result.duplicate and result.base_offset == 1
    await clock.advance(2 * EXPIRATION_MS / 1000)
    await c.coordinator.enforce_retention()  # also purges expired state
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=42))).error == OK


async def test_open_transaction_never_expires(c: Committer, clock: ManualClock) -> None:
    assert await c.coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    await clock.advance(3 * EXPIRATION_MS / 1000)
    await c.coordinator.enforce_retention()
    assert len(await c.coordinator.describe_producers(TP)) == 1
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))).duplicate


async def test_log_start_advance_keeps_producer_state(c: Committer) -> None:
    first = await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3))
    await c.coordinator.delete_records([DeleteRecordsRequest(TP, -1)])
    again = await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3))
    assert again.duplicate and again.base_offset == first.base_offset
    assert again.log_start_offset == 3
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=4))).error == OUT_OF_ORDER


# --- find_batches -----------------------------------------------------------------------------
async def test_find_batches_budgets(c: Committer) -> None:
    await c.commit([batch(TP, size=100) for _ in range(5)] + [batch(TP1, size=100)])
    coordinator = c.coordinator

    async def find(requests: list[FindBatchesRequest], total: int) -> list[list[int]]:
        responses = await coordinator.find_batches(requests, total)
        assert all(r.error == OK for r in responses)
        return [[b.base_offset for b in r.batches] for r in responses]

    # Per-partition max_bytes.
    assert await find([FindBatchesRequest(TP, 0, 250)], 10_000) == [[0, 1]]
    # The total budget spans partitions.
    requests = [FindBatchesRequest(TP, 1, 1000), FindBatchesRequest(TP1, 0, 1000)]
    assert await find(requests, 300) == [[1, 2, 3], []]
    assert await find(requests, 450) == [[1, 2, 3, 4], []]
    assert await find(requests, 10_000) == [[1, 2, 3, 4], [0]]
    # At least one batch when nothing was returned yet in the response...
    assert await find([FindBatchesRequest(TP, 2, 10)], 10_000) == [[2]]
    assert await find([FindBatchesRequest(TP, 2, 1000)], 10) == [[2]]
    # ...but not once an earlier partition returned data.
    requests = [FindBatchesRequest(TP, 4, 100), FindBatchesRequest(TP1, 0, 50)]
    assert await find(requests, 10_000) == [[4], []]
    # An offset inside a batch starts from that batch.
    await c.one(batch(TP, count=10))
    assert await find([FindBatchesRequest(TP, 9, 1000)], 1000) == [[5]]


async def test_find_batches_out_of_range_and_empty(c: Committer) -> None:
    await c.commit([batch(TP, count=5), batch(TP, count=5)])
    at_hwm = await fetch(c.coordinator, 10)
    assert (at_hwm.error, at_hwm.batches, at_hwm.high_watermark) == (OK, [], 10)
    above = await fetch(c.coordinator, 11)
    assert above.error == ErrorCode.OFFSET_OUT_OF_RANGE and above.high_watermark == 10
    await c.coordinator.delete_records([DeleteRecordsRequest(TP, 6)])
    below = await fetch(c.coordinator, 5)
    assert below.error == ErrorCode.OFFSET_OUT_OF_RANGE and below.log_start_offset == 6
    inside = await fetch(c.coordinator, 6)
    assert [b.base_offset for b in inside.batches] == [5] and inside.log_start_offset == 6
    unknown = await fetch(c.coordinator, 0, tp=TopicPartition("x", 0))
    assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    empty = await fetch(c.coordinator, 0, tp=TP1)
    assert (empty.error, empty.batches, empty.high_watermark) == (OK, [], 0)


async def test_find_batches_reports_object_coordinates(c: Committer) -> None:
    key = new_key()
    await c.commit([batch(TP, byte_offset=0, size=70), batch(TP, byte_offset=70, size=30)], key)
    infos = (await fetch(c.coordinator, 0)).batches
    assert [(b.object_key, b.byte_offset, b.size) for b in infos] == [(key, 0, 70), (key, 70, 30)]


# --- list_offsets -----------------------------------------------------------------------------
async def test_list_offsets(c: Committer) -> None:
    """By time and MAX_TIMESTAMP the coordinator names the rows whose records answer (the read
    path reads them): the first row reaching the timestamp, and the next one when the log start
    cuts it. MAX_TIMESTAMP's own offset and timestamp answer should the log start have cut the
    record holding the largest timestamp."""
    coordinator = c.coordinator

    async def lookup(
        ts: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[ErrorCode, int, int, list[int]]:
        (response,) = await coordinator.list_offsets([ListOffsetsRequest(TP, ts, isolation)])
        rows: list[int] = []
        if response.lookup is not None:
            named = response.lookup
            target = ts if ts >= 0 else named.target
            assert (named.target, named.end_offset) == (target, 10), named
            rows = [b.base_offset for b in named.batches]
            assert all(b.object_key == key for b in named.batches), named
            start = (await coordinator.list_offsets([ListOffsetsRequest(TP, -2)]))[0].offset
            assert named.start_offset == start, named
        return response.error, response.offset, response.timestamp, rows

    assert await lookup(OffsetSpec.MAX_TIMESTAMP) == (OK, -1, -1, [])
    assert await lookup(0) == (OK, -1, -1, [])
    times = [BASE_TS + 10, BASE_TS + 30, BASE_TS + 20, BASE_TS + 30, BASE_TS + 5]
    key = new_key()
    await c.commit([batch(TP, count=2, ts=t) for t in times], key)  # offsets 0,2,4,6,8
    assert await lookup(OffsetSpec.EARLIEST) == (OK, 0, -1, [])
    assert await lookup(OffsetSpec.LATEST) == (OK, 10, -1, [])
    assert await lookup(OffsetSpec.LATEST, IsolationLevel.READ_COMMITTED) == (OK, 10, -1, [])
    assert await lookup(OffsetSpec.MAX_TIMESTAMP) == (OK, 2, BASE_TS + 30, [2])
    assert await lookup(BASE_TS) == (OK, -1, -1, [0])
    assert await lookup(BASE_TS + 11) == (OK, -1, -1, [2])
    assert await lookup(BASE_TS + 30) == (OK, -1, -1, [2])
    assert await lookup(BASE_TS + 31) == (OK, -1, -1, [])
    # The log start cuts the first row reaching the time: the next one is named too.
    await coordinator.delete_records([DeleteRecordsRequest(TP, 3)])
    assert await lookup(OffsetSpec.EARLIEST) == (OK, 3, -1, [])
    assert await lookup(BASE_TS) == (OK, -1, -1, [2, 4])
    assert await lookup(BASE_TS + 21) == (OK, -1, -1, [2, 6])
    assert await lookup(OffsetSpec.MAX_TIMESTAMP) == (OK, 3, BASE_TS + 30, [2])
    # Once the first max batch is gone, the next one with that timestamp answers.
    await coordinator.delete_records([DeleteRecordsRequest(TP, 4)])
    assert await lookup(OffsetSpec.MAX_TIMESTAMP) == (OK, 6, BASE_TS + 30, [6])
    assert await lookup(BASE_TS + 15) == (OK, -1, -1, [4])
    assert await lookup(BASE_TS + 25) == (OK, -1, -1, [6])
    await coordinator.delete_records([DeleteRecordsRequest(TP, 8)])
    assert await lookup(BASE_TS) == (OK, -1, -1, [8])
    assert await lookup(BASE_TS + 6) == (OK, -1, -1, [])
    (unknown,) = await coordinator.list_offsets([ListOffsetsRequest(TopicPartition("x", 0), -1)])
    assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_list_offsets_by_time_stop_at_the_last_stable_offset(c: Committer) -> None:
    """Kafka answers nothing it found at or past the last fetchable offset: the LSO for
    READ_COMMITTED, the high watermark otherwise."""
    coordinator = c.coordinator
    await c.one(batch(TP, count=3, ts=BASE_TS + 10))
    assert await coordinator.add_partitions_to_txn(4, 0, [TP]) == [OK]
    await c.one(batch(TP, pid=4, epoch=0, seq=0, count=2, ts=BASE_TS + 20, txn=True))
    await c.one(batch(TP, count=2, ts=BASE_TS + 30))

    async def lookup(ts: int, isolation: IsolationLevel) -> tuple[int, int, list[int]]:
        (response,) = await coordinator.list_offsets([ListOffsetsRequest(TP, ts, isolation)])
        if response.lookup is None:
            return response.offset, -1, []
        named = response.lookup
        return response.offset, named.end_offset, [b.base_offset for b in named.batches]

    committed, uncommitted = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
    assert await lookup(BASE_TS + 5, committed) == (-1, 3, [0])
    assert await lookup(BASE_TS + 5, uncommitted) == (-1, 7, [0])
    assert await lookup(BASE_TS + 15, committed) == (-1, -1, [])
    assert await lookup(BASE_TS + 15, uncommitted) == (-1, 7, [3])
    assert await lookup(OffsetSpec.MAX_TIMESTAMP, committed) == (-1, -1, [])
    assert await lookup(OffsetSpec.MAX_TIMESTAMP, uncommitted) == (5, 7, [5])


async def test_list_offsets_max_timestamp_log_append_time(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic(
        "lat", 1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    tp = TopicPartition("lat", 0)
    c = Committer(coordinator)
    await c.one(batch(tp, ts=BASE_TS + 10**9))
    await clock.advance(1)
    second = await c.one(batch(tp, ts=0))
    (response,) = await coordinator.list_offsets([ListOffsetsRequest(tp, OffsetSpec.MAX_TIMESTAMP)])
    assert (response.offset, response.timestamp) == (1, second.log_append_time)


# --- delete_records ---------------------------------------------------------------------------
async def test_delete_records(c: Committer) -> None:
    coordinator = c.coordinator
    key = new_key()
    await c.commit([batch(TP, count=5), batch(TP, count=5)], key)

    async def delete(offset: int, tp: TopicPartition = TP) -> tuple[ErrorCode, int]:
        (response,) = await coordinator.delete_records([DeleteRecordsRequest(tp, offset)])
        return response.error, response.low_watermark

    assert await delete(11) == (ErrorCode.OFFSET_OUT_OF_RANGE, 0)
    assert await delete(-2) == (ErrorCode.OFFSET_OUT_OF_RANGE, 0)
    assert await delete(3) == (OK, 3)  # inside the first batch: it stays
    assert [b.base_offset for b in (await fetch(coordinator, 3)).batches] == [0, 5]
    assert await delete(2) == (OK, 3)  # lower than the start: a no-op
    assert await delete(5) == (OK, 5)  # the first batch is now entirely below the start
    assert [b.base_offset for b in (await fetch(coordinator, 5)).batches] == [5]
    assert (await c.one(batch(TP))).log_start_offset == 5
    assert await delete(-1) == (OK, 11)
    assert (await fetch(coordinator, 11)).batches == []
    (info,) = await coordinator.file_info([key])
    assert info is not None and info.state is FileState.UNREFERENCED
    assert await delete(0, TopicPartition("x", 0)) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)


# --- retention --------------------------------------------------------------------------------
async def test_retention_by_time_is_bounded(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("r", 1, TopicConfig(retention_ms=1000))
    tp = TopicPartition("r", 0)
    c = Committer(coordinator)
    now = clock.now_ms()
    await c.commit([batch(tp, ts=now - 5000 + i, size=10) for i in range(5)])
    await c.commit([batch(tp, ts=now, size=10)])
    result = await coordinator.enforce_retention(max_batches=3)
    assert (result.batches_deleted, result.bytes_deleted, result.more) == (3, 30, True)
    result = await coordinator.enforce_retention(max_batches=3)
    assert (result.batches_deleted, result.more) == (2, False)
    assert (await fetch(coordinator, 5, tp=tp)).log_start_offset == 5
    await clock.advance(1.001)
    result = await coordinator.enforce_retention()
    assert (result.batches_deleted, result.more) == (1, False)
    response = await fetch(coordinator, 6, tp=tp)
    assert (response.log_start_offset, response.high_watermark, response.batches) == (6, 6, [])
    assert (await c.one(batch(tp))).base_offset == 6


async def test_retention_by_size(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("s", 1, TopicConfig(retention_bytes=250))
    tp = TopicPartition("s", 0)
    c = Committer(coordinator)
    await c.commit([batch(tp, size=100) for _ in range(5)])
    result = await coordinator.enforce_retention(max_batches=1)
    assert (result.batches_deleted, result.bytes_deleted, result.more) == (1, 100, True)
    result = await coordinator.enforce_retention()
    # Kafka's rule: a batch goes while what remains stays >= retention_bytes.
    assert (result.batches_deleted, result.more) == (1, False)
    assert (await fetch(coordinator, 2, tp=tp)).log_start_offset == 2
    assert (await coordinator.enforce_retention()).batches_deleted == 0


async def test_retention_leaves_a_compact_only_topic_to_the_cleaner(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """Kafka: retention.ms and retention.bytes apply when cleanup.policy holds delete."""
    for name, policy in (("compact", "compact"), ("both", "compact,delete")):
        config = TopicConfig(
            retention_ms=1000,
            retention_bytes=10,
            inapplicable_configs=(("cleanup.policy", policy),),
        )
        await coordinator.create_topic(name, 1, config)
        await Committer(coordinator).commit(
            [batch(TopicPartition(name, 0), ts=clock.now_ms() - 5000, size=10) for _ in range(3)]
        )
    assert (await coordinator.enforce_retention()).batches_deleted == 3
    assert (await fetch(coordinator, 0, tp=TopicPartition("compact", 0))).log_start_offset == 0
    assert (await fetch(coordinator, 3, tp=TopicPartition("both", 0))).log_start_offset == 3


async def test_retention_ignores_unlimited_topics(c: Committer, clock: ManualClock) -> None:
    await c.commit([batch(TP, ts=0) for _ in range(3)])
    await clock.advance(10**6)
    assert (await c.coordinator.enforce_retention()).batches_deleted == 0


# --- topics -----------------------------------------------------------------------------------
async def test_topics(coordinator: BatchCoordinator) -> None:
    kept = (("min.insync.replicas", "2"), ("segment.bytes", "104857600"))
    config = TopicConfig(retention_ms=5, inapplicable_configs=kept)
    assert await coordinator.create_topic("a", 2, config) is ErrorCode.NONE
    assert await coordinator.create_topic("a", 9) is ErrorCode.TOPIC_ALREADY_EXISTS
    assert await coordinator.create_topic("b", 1) is ErrorCode.NONE
    described = await coordinator.describe_topics()
    assert [(d.name, d.partitions, d.config) for d in described] == [
        ("a", 2, config),
        ("b", 1, TopicConfig()),
    ]
    assert await coordinator.create_partitions("a", 4) is ErrorCode.NONE
    assert await coordinator.create_partitions("a", 3) is ErrorCode.INVALID_PARTITIONS
    assert await coordinator.create_partitions("a", 4) is ErrorCode.INVALID_PARTITIONS
    assert await coordinator.create_partitions("zz", 4) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [d.partitions for d in await coordinator.describe_topics(["a", "zz"])] == [4]
    c = Committer(coordinator)
    assert (await c.one(batch(TopicPartition("a", 3)))).error == OK


async def test_every_topic_setting_is_stored(coordinator: BatchCoordinator) -> None:
    """Each field of a topic's config, none at its default, comes back as it was created."""
    config = TopicConfig(
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        retention_ms=11,
        retention_bytes=12,
        max_message_bytes=13,
        message_timestamp_before_max_ms=14,
        message_timestamp_after_max_ms=15,
        compression_type=CompressionType.ZSTD,
        compression_gzip_level=1,
        compression_lz4_level=17,
        compression_zstd_level=-7,
        inapplicable_configs=(("min.insync.replicas", "2"), ("segment.bytes", "1024")),
    )
    default = TopicConfig()
    same = [f for f in config.__struct_fields__ if getattr(config, f) == getattr(default, f)]
    assert not same, f"set {same} to something other than the default"
    assert await coordinator.create_topic("all", 1, config) is ErrorCode.NONE
    for kind in CompressionType:
        await coordinator.create_topic(kind.name.lower(), 1, TopicConfig(compression_type=kind))
    described = {d.name: d.config for d in await coordinator.describe_topics()}
    assert described["all"] == config
    for kind in CompressionType:
        assert described[kind.name.lower()] == TopicConfig(compression_type=kind)
        assert type(described[kind.name.lower()].compression_type) is CompressionType


async def test_a_topic_id_is_random_at_creation_and_new_for_a_recreated_topic(
    coordinator: BatchCoordinator,
) -> None:
    """KIP-516: the id tells a topic from one of the same name before it, so clients drop the
    old one's metadata (partition counts, leader epochs)."""
    await coordinator.create_topic("a", 2)
    await coordinator.create_topic("b", 1)
    first = {d.name: d.topic_id for d in await coordinator.describe_topics()}
    assert first["a"] != first["b"]
    assert all(i.int != 0 for i in first.values())
    await coordinator.create_partitions("a", 3)
    assert [d.topic_id for d in await coordinator.describe_topics(["a"])] == [first["a"]]
    await coordinator.delete_topics(["a"])
    await coordinator.create_topic("a", 1)
    (again,) = await coordinator.describe_topics(["a"])
    assert again.topic_id not in first.values()
    assert [d.topic_id for d in await coordinator.describe_topics(["b"])] == [first["b"]]


ILLEGAL_TOPIC_NAMES = {
    "empty": "",
    "slash": "a/b",
    "path": "../../etc",
    "dot": ".",
    "dot dot": "..",
    "too long": "x" * 250,
    "nul": "a\x00b",
    "non-ascii": "caf\u00e9",
    "space": "a b",
    "newline": "a\n",
}


@pytest.mark.parametrize("kind", sorted(ILLEGAL_TOPIC_NAMES))
async def test_an_illegal_topic_name_is_refused(coordinator: BatchCoordinator, kind: str) -> None:
    name = ILLEGAL_TOPIC_NAMES[kind]
    with pytest.raises(ValueError, match="topic"):
        await coordinator.create_topic(name, 1)
    assert await coordinator.describe_topics() == []


async def test_kafkas_legal_topic_names_are_accepted(coordinator: BatchCoordinator) -> None:
    names = ["a", "x" * 249, "A-Z_a.z-0.9", "...", "_", "-"]
    for name in names:
        assert await coordinator.create_topic(name, 1) is ErrorCode.NONE, name
    assert sorted(d.name for d in await coordinator.describe_topics()) == sorted(names)


async def test_delete_topics(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("a", 2)
    await coordinator.create_topic("b", 1)
    c = Committer(coordinator)
    shared, only_a = new_key(), new_key()
    await c.commit(
        [batch(TopicPartition("a", 0), pid=1, epoch=0, seq=0), batch(TopicPartition("b", 0))],
        shared,
    )
    await c.commit([batch(TopicPartition("a", 1))], only_a)
    assert await coordinator.delete_topics(["missing", "a"]) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NONE,
    ]
    assert await coordinator.delete_topics(["a"]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert [d.name for d in await coordinator.describe_topics()] == ["b"]
    assert (
        await c.one(batch(TopicPartition("a", 0)))
    ).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    states = [i.state if i else None for i in await coordinator.file_info([shared, only_a])]
    assert states == [FileState.LIVE, FileState.UNREFERENCED]
    # A recreated topic starts from scratch.
    await coordinator.create_topic("a", 1)
    assert await coordinator.describe_producers(TopicPartition("a", 0)) == []
    assert (await c.one(batch(TopicPartition("a", 0), pid=1, epoch=0, seq=5))).base_offset == 0


# --- fencing and object keys ------------------------------------------------------------------
async def test_broker_epoch_fencing(c: Committer) -> None:
    coordinator = c.coordinator
    first = await coordinator.register_broker(1)
    second = await coordinator.register_broker(1)
    assert second > first
    assert await coordinator.register_broker(2) >= 1
    key = new_key()
    for broker, epoch in ((1, first), (1, second + 1), (99, 1)):
        refused = await coordinator.commit_file(key, broker, epoch, 100, [batch(TP)])
        assert (refused.refused, refused.batches) == (CommitRefusal.BROKER_FENCED, [])
        assert f"broker {broker}" in refused.reason
    assert await coordinator.file_info([key]) == [None]
    assert (await fetch(coordinator, 0)).high_watermark == 0
    outcome = await coordinator.commit_file(key, 1, second, 100, [batch(TP)])
    assert outcome.refused is None and outcome.batches[0].base_offset == 0


async def test_object_key_conflict(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    key = new_key()
    await c.commit([batch(TP)], key)
    assert (await c.attempt([batch(TP)], key)).refused is CommitRefusal.OBJECT_KEY_CONFLICT
    assert (await fetch(coordinator, 0)).high_watermark == 1
    orphan = new_key()
    assert await coordinator.condemn_objects([orphan, key]) == [orphan]
    assert await coordinator.condemn_objects([orphan]) == [orphan]
    refused = await c.attempt([batch(TP, pid=1, epoch=0, seq=0)], orphan)
    assert refused.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    assert await coordinator.describe_producers(TP) == []
    assert (await fetch(coordinator, 0)).high_watermark == 1


# --- file lifecycle ---------------------------------------------------------------------------
async def test_file_lifecycle(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    t0 = clock.now_ms()
    live, rejected, orphan = new_key(), new_key(), new_key()
    await c.commit([batch(TP, size=60), batch(TP1, size=40)], live)
    await c.one(batch(TP, pid=1, epoch=0, seq=0))
    await c.commit([batch(TP, pid=1, epoch=0, seq=0), batch(TP, pid=1, epoch=0, seq=7)], rejected)
    await clock.advance(1)
    await coordinator.condemn_objects([orphan])
    infos = await coordinator.file_info([live, rejected, orphan, "never"])
    assert [(i.state, i.size, i.since_ms) if i else None for i in infos] == [
        (FileState.LIVE, 100, t0),
        (FileState.UNREFERENCED, 200, t0),
        (FileState.CONDEMNED, 0, t0 + 1000),
        None,
    ]
    stats = await coordinator.file_stats()
    assert (stats.live_objects, stats.unreferenced_objects, stats.condemned_objects) == (2, 1, 1)
    assert (stats.live_bytes, stats.unreferenced_bytes) == (200, 200)
    assert [f.key for f in await coordinator.files_to_delete(t0 + 1)] == [rejected]
    assert [f.key for f in await coordinator.files_to_delete(t0 + 1001)] == [rejected, orphan]
    assert [f.key for f in await coordinator.files_to_delete(t0 + 1001, limit=1)] == [rejected]
    # Deleting one of two batches keeps the file live; deleting the second releases it.
    await clock.advance(1)
    await coordinator.delete_records([DeleteRecordsRequest(TP, 1)])
    assert (await coordinator.file_info([live]))[0].state is FileState.LIVE  # type: ignore[union-attr]
    await coordinator.delete_records([DeleteRecordsRequest(TP1, -1)])
    (info,) = await coordinator.file_info([live])
    assert info is not None and (info.state, info.since_ms) == (FileState.UNREFERENCED, t0 + 2000)
    # Live files are never forgotten; the others are.
    await coordinator.forget_files([live, rejected, orphan, "never"])
    still = await coordinator.file_info([live, rejected, orphan])
    assert still == [None, None, None]
    await coordinator.forget_files([c_key := new_key()])
    await c.commit([batch(TP)], c_key)
    await coordinator.forget_files([c_key])
    assert (await coordinator.file_info([c_key]))[0] is not None


# --- committed group offsets ------------------------------------------------------------------
async def test_a_committed_offset_keeps_its_leader_epoch(coordinator: BatchCoordinator) -> None:
    """OffsetCommit's `committed_leader_epoch` (KIP-320) is stored with the offset and its
    metadata, and OffsetFetch answers it; a commit without one reads back as -1."""
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    committed = {TP: CommittedOffset(12, "m", 4), TP1: CommittedOffset(3, None)}
    assert await coordinator.commit_offsets("g", committed) == {TP: OK, TP1: OK}
    assert await coordinator.fetch_offsets("g") == committed
    assert (await coordinator.fetch_offsets("g"))[TP1].leader_epoch == -1
    assert await coordinator.commit_offsets("g", {TP: CommittedOffset(13, None, 5)}) == {TP: OK}
    assert (await coordinator.fetch_offsets("g"))[TP] == CommittedOffset(13, None, 5)


async def test_an_offset_committed_in_a_transaction_keeps_its_leader_epoch(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """TxnOffsetCommit's leader epoch takes effect, with its offset, when the transaction
    commits."""
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    tc = TransactionCoordinator(coordinator, clock=clock)
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_offsets_to_txn("tx", pid, epoch, "g") is OK
    offsets = [PendingOffset("g", TP, 20, "in-txn", 7), PendingOffset("g", TP1, 4, None)]
    assert await tc.txn_offset_commit("tx", pid, epoch, "g", offsets) is OK
    assert await coordinator.fetch_offsets("g") == {}
    assert (await tc.end_txn("tx", pid, epoch, commit=True)).error is OK
    assert await coordinator.fetch_offsets("g") == {
        TP: CommittedOffset(20, "in-txn", 7),
        TP1: CommittedOffset(4, None, -1),
    }
