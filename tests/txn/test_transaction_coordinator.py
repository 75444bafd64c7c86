"""The transaction coordinator's state machine (Kafka TV2), against a recording participant.

The participant here only records calls: the partitions' side (verification, barrier, markers)
is exercised against the real batch coordinators in the transaction integration tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.errors import CoordinatorUnavailableError
from diskless.txn._coordinator import TransactionCoordinator, TxnState

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class RecordingParticipant:
    def __init__(self) -> None:
        self.next_id = 1000
        self.added: list[tuple[int, int, list[TopicPartition]]] = []
        self.markers: list[tuple[int, int, int, bool, list[TopicPartition]]] = []
        self.fail_markers = 0
        self.marker_gate: asyncio.Event | None = None
        self.marker_errors: dict[TopicPartition, ErrorCode] = {}

    async def allocate_producer_ids(self, count: int) -> int:
        first, self.next_id = self.next_id, self.next_id + count
        return first

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        self.added.append((producer_id, producer_epoch, list(partitions)))
        return [ErrorCode.NONE] * len(partitions)

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        if self.marker_gate is not None:
            await self.marker_gate.wait()
        if self.fail_markers:
            self.fail_markers -= 1
            raise CoordinatorUnavailableError("injected")
        self.markers.append((producer_id, producer_epoch, marker_epoch, commit, list(partitions)))
        return [self.marker_errors.get(tp, ErrorCode.NONE) for tp in partitions]


@pytest.fixture
def participant() -> RecordingParticipant:
    return RecordingParticipant()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def tc(participant: RecordingParticipant, clock: ManualClock) -> TransactionCoordinator:
    return TransactionCoordinator(participant, clock=clock, coordinator_epoch=7)


async def test_idempotent_producers_get_distinct_ids_at_epoch_zero(
    tc: TransactionCoordinator,
) -> None:
    first = await tc.init_producer_id(None)
    second = await tc.init_producer_id(None)
    assert (first.error, second.error) == (ErrorCode.NONE, ErrorCode.NONE)
    assert first.producer_id != second.producer_id
    assert first.producer_epoch == second.producer_epoch == 0


async def test_producer_ids_span_allocation_blocks(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    ids = {(await tc.init_producer_id(None)).producer_id for _ in range(2500)}
    assert len(ids) == 2500
    assert participant.next_id == 1000 + 3 * 1000


async def test_commit_bumps_epoch_and_places_markers_with_the_new_epoch(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx", 10_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP0, TP1]) == [
        ErrorCode.NONE,
        ErrorCode.NONE,
    ]
    assert participant.added == [(pid, epoch, [TP0, TP1])]
    end = await tc.end_txn("tx", pid, epoch, commit=True)
    assert end.error is ErrorCode.NONE
    assert end.producer_epoch == epoch + 1
    assert participant.markers == [(pid, epoch, epoch + 1, True, [TP0, TP1])]
    description = tc.describe("tx")
    assert description is not None
    assert description.state is TxnState.COMPLETE_COMMIT
    assert description.partitions == []


async def test_re_adding_a_partition_does_not_register_it_twice(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx")
    await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0])
    await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0, TP1])
    assert [added for _, _, added in participant.added] == [[TP0], [TP1]]


async def test_reinit_aborts_the_open_transaction_and_fences_the_old_epoch(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    first = await tc.init_producer_id("tx")
    await tc.add_partitions_to_txn("tx", first.producer_id, first.producer_epoch, [TP0])
    second = await tc.init_producer_id("tx")
    assert second.producer_id == first.producer_id
    # The abort bumped once (its marker epoch), the re-init once more.
    assert participant.markers == [
        (first.producer_id, first.producer_epoch, first.producer_epoch + 1, False, [TP0])
    ]
    assert second.producer_epoch == first.producer_epoch + 2
    stale = await tc.add_partitions_to_txn("tx", first.producer_id, first.producer_epoch, [TP1])
    assert stale == [ErrorCode.PRODUCER_FENCED]
    stale_end = await tc.end_txn("tx", first.producer_id, first.producer_epoch, commit=True)
    assert stale_end.error is ErrorCode.PRODUCER_FENCED


async def test_errors_for_unknown_ids_and_wrong_states(tc: TransactionCoordinator) -> None:
    assert (await tc.end_txn("nobody", 1, 0, commit=True)).error is (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions_to_txn("tx", pid + 1, epoch, [TP0]) == [
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    ]
    assert await tc.add_partitions_to_txn("tx", pid, epoch + 1, [TP0]) == [
        ErrorCode.INVALID_PRODUCER_EPOCH
    ]
    # Nothing is open yet: ending is an invalid state transition.
    assert (await tc.end_txn("tx", pid, epoch, commit=True)).error is ErrorCode.INVALID_TXN_STATE
    assert (await tc.init_producer_id("tx", 0)).error is ErrorCode.INVALID_REQUEST


async def test_end_txn_retry_is_answered_again_but_a_different_outcome_is_not(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    first = await tc.end_txn("tx", pid, epoch, commit=True)
    retry = await tc.end_txn("tx", pid, epoch, commit=True)
    assert retry == first
    assert len(participant.markers) == 1
    other = await tc.end_txn("tx", pid, epoch, commit=False)
    assert other.error is ErrorCode.PRODUCER_FENCED


async def test_next_transaction_runs_at_the_bumped_epoch(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    for round_number in range(3):
        await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
        end = await tc.end_txn("tx", pid, epoch, commit=round_number % 2 == 0)
        assert end.error is ErrorCode.NONE
        assert end.producer_epoch == epoch + 1
        epoch = end.producer_epoch
    assert [marker[2] for marker in participant.markers] == [
        init.producer_epoch + 1,
        init.producer_epoch + 2,
        init.producer_epoch + 3,
    ]


async def test_timeout_aborts_and_fences(
    tc: TransactionCoordinator, participant: RecordingParticipant, clock: ManualClock
) -> None:
    init = await tc.init_producer_id("tx", 5_000)
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    await clock.advance(4.0)
    assert await tc.abort_expired() == []
    await clock.advance(2.0)
    assert await tc.abort_expired() == ["tx"]
    assert participant.markers == [(pid, epoch, epoch + 1, False, [TP0])]
    assert (await tc.end_txn("tx", pid, epoch, commit=True)).error is ErrorCode.PRODUCER_FENCED


async def test_timeout_loop_runs_on_the_injected_clock(
    tc: TransactionCoordinator, participant: RecordingParticipant, clock: ManualClock
) -> None:
    async with tc:
        init = await tc.init_producer_id("tx", 1_000)
        await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0])
        await clock.advance(3.0)
        assert [marker[3] for marker in participant.markers] == [False]


async def test_failed_markers_leave_the_transaction_prepared_until_a_retry_lands(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    participant.fail_markers = 1
    failed = await tc.end_txn("tx", pid, epoch, commit=True)
    assert failed.error is ErrorCode.CONCURRENT_TRANSACTIONS
    description = tc.describe("tx")
    assert description is not None and description.state is TxnState.PREPARE_COMMIT
    # The producer may not change its mind once the outcome is prepared.
    assert (await tc.end_txn("tx", pid, epoch, commit=False)).error is (ErrorCode.INVALID_TXN_STATE)
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP1]) == [
        ErrorCode.CONCURRENT_TRANSACTIONS
    ]
    done = await tc.end_txn("tx", pid, epoch, commit=True)
    assert (done.error, done.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert participant.markers == [(pid, epoch, epoch + 1, True, [TP0])]


async def test_concurrent_end_and_add_are_serialized(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    participant.marker_gate = asyncio.Event()
    ending = asyncio.create_task(tc.end_txn("tx", pid, epoch, commit=True))
    await asyncio.sleep(0)
    adding = asyncio.create_task(tc.add_partitions_to_txn("tx", pid, epoch, [TP1]))
    await asyncio.sleep(0)
    participant.marker_gate.set()
    assert (await ending).error is ErrorCode.NONE
    # The add waited for the end, by which time its epoch was stale.
    assert await adding == [ErrorCode.PRODUCER_FENCED]


async def test_epoch_exhaustion_moves_to_a_fresh_producer_id(
    tc: TransactionCoordinator,
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    # Walk the epoch to the int16 limit through transactions.
    while True:
        await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
        end = await tc.end_txn("tx", pid, epoch, commit=True)
        assert end.error is ErrorCode.NONE
        if end.producer_id != pid:
            break
        epoch = end.producer_epoch
        assert epoch <= 32767
    assert (end.producer_id, end.producer_epoch) != (pid, epoch)
    assert end.producer_epoch == 0


async def test_a_failed_partition_keeps_it_prepared_and_a_deleted_one_is_skipped(
    tc: TransactionCoordinator, participant: RecordingParticipant
) -> None:
    """EndTxn answers with an EndTxn error: a partition's marker failure is not passed on."""
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0, TP1])
    participant.marker_errors = {
        TP0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        TP1: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    }
    failed = await tc.end_txn("tx", pid, epoch, commit=False)
    assert failed.error is ErrorCode.CONCURRENT_TRANSACTIONS
    description = tc.describe("tx")
    assert description is not None and description.state is TxnState.PREPARE_ABORT
    assert description.partitions == [TP1]  # the deleted one is dropped, as Kafka does
    participant.marker_errors = {}
    done = await tc.end_txn("tx", pid, epoch, commit=False)
    assert (done.error, done.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert [m[4] for m in participant.markers] == [[TP0, TP1], [TP1]]
