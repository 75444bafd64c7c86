"""The transaction coordinator (Kafka TV2) over both batch coordinators' transaction records.

A recording wrapper around the real backend sees which steps run; what they do to the
partitions (registrations, markers) is the real backend's.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CommittedOffset,
    FaultyBatchCoordinator,
    FindBatchesRequest,
)
from diskless.errors import CoordinatorUnavailableError
from diskless.txn import (
    TRANSACTION_TIMEOUT_MS_MAX,
    PendingOffset,
    TransactionCoordinator,
    TxnRecord,
    TxnState,
    TxnStep,
)

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class Recording(FaultyBatchCoordinator):
    """Records the record steps and can fail or hold the completion step."""

    def __init__(self, inner: BatchCoordinator) -> None:
        super().__init__(inner, random.Random(0))
        self.added: list[tuple[int, int, list[TopicPartition]]] = []
        self.completed: list[tuple[int, int, bool, tuple[TopicPartition, ...]]] = []
        self.fail_completions = 0
        self.completion_gate: asyncio.Event | None = None

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        self.added.append((producer_id, producer_epoch, list(partitions)))
        return await super().txn_add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )

    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        if self.completion_gate is not None:
            await self.completion_gate.wait()
        if self.fail_completions:
            self.fail_completions -= 1
            raise CoordinatorUnavailableError("injected")
        step = await super().txn_complete(prepared, coordinator_epoch)
        if step.record is not None and step.record.state is not prepared.state:
            self.completed.append(
                (
                    prepared.producer_id,
                    prepared.producer_epoch,
                    prepared.commit,
                    prepared.partitions,
                )
            )
        return step


@pytest.fixture
async def participant(coordinator: BatchCoordinator) -> Recording:
    await coordinator.create_topic("t", 2)
    return Recording(coordinator)


@pytest.fixture
def tc(participant: Recording, clock: ManualClock) -> TransactionCoordinator:
    return TransactionCoordinator(participant, clock=clock, coordinator_epoch=7)


async def markers(coordinator: BatchCoordinator, tp: TopicPartition) -> list[tuple[int, int]]:
    """(producer epoch, control type) of every marker on `tp`."""
    (response,) = await coordinator.find_batches([FindBatchesRequest(tp, 0, 1 << 30)], 1 << 30)
    return [(b.producer_epoch, int(b.control)) for b in response.batches if b.control is not None]


COMMIT, ABORT = 1, 0


async def test_idempotent_producers_get_distinct_ids_at_epoch_zero(
    tc: TransactionCoordinator,
) -> None:
    first = await tc.init_producer_id(None)
    second = await tc.init_producer_id(None)
    assert (first.error, second.error) == (ErrorCode.NONE, ErrorCode.NONE)
    assert first.producer_id != second.producer_id
    assert first.producer_epoch == second.producer_epoch == 0


async def test_producer_ids_span_allocation_blocks_and_never_meet_transactional_ids(
    tc: TransactionCoordinator,
) -> None:
    ids = {(await tc.init_producer_id(None)).producer_id for _ in range(2500)}
    transactional = await tc.init_producer_id("tx")
    assert len(ids) == 2500
    assert transactional.producer_id not in ids


async def test_commit_bumps_epoch_and_places_markers_with_the_new_epoch(
    tc: TransactionCoordinator, participant: Recording, coordinator: BatchCoordinator
) -> None:
    init = await tc.init_producer_id("tx", 10_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP0, TP1]) == [
        ErrorCode.NONE,
        ErrorCode.NONE,
    ]
    end = await tc.end_txn("tx", pid, epoch, commit=True)
    assert (end.error, end.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert participant.completed == [(pid, epoch, True, (TP0, TP1))]
    assert (
        await markers(coordinator, TP0) == await markers(coordinator, TP1) == [(epoch + 1, COMMIT)]
    )
    description = await tc.describe("tx")
    assert description is not None
    assert description.state is TxnState.COMPLETE_COMMIT
    assert description.partitions == ()


async def test_re_adding_a_partition_keeps_it_once(
    tc: TransactionCoordinator, participant: Recording
) -> None:
    init = await tc.init_producer_id("tx")
    await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0])
    await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0, TP1])
    description = await tc.describe("tx")
    assert description is not None and description.partitions == (TP0, TP1)


async def test_reinit_aborts_the_open_transaction_and_fences_the_old_epoch(
    tc: TransactionCoordinator, participant: Recording, coordinator: BatchCoordinator
) -> None:
    first = await tc.init_producer_id("tx")
    await tc.add_partitions_to_txn("tx", first.producer_id, first.producer_epoch, [TP0])
    second = await tc.init_producer_id("tx")
    assert second.producer_id == first.producer_id
    # The abort bumped once (its marker epoch), the re-init once more.
    assert participant.completed == [(first.producer_id, first.producer_epoch, False, (TP0,))]
    assert await markers(coordinator, TP0) == [(first.producer_epoch + 1, ABORT)]
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
    for timeout_ms in (0, -1, TRANSACTION_TIMEOUT_MS_MAX + 1):
        refused = await tc.init_producer_id("tx", timeout_ms)
        assert refused.error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    unknown = await tc.add_partitions_to_txn("tx", pid, epoch, [TopicPartition("nope", 0)])
    assert unknown == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert (await tc.init_producer_id("tx", TRANSACTION_TIMEOUT_MS_MAX)).error is ErrorCode.NONE


async def test_end_txn_retry_is_answered_again_but_a_different_outcome_is_not(
    tc: TransactionCoordinator, participant: Recording, coordinator: BatchCoordinator
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    first = await tc.end_txn("tx", pid, epoch, commit=True)
    retry = await tc.end_txn("tx", pid, epoch, commit=True)
    assert retry == first
    assert len(participant.completed) == 1
    assert len(await markers(coordinator, TP0)) == 1
    other = await tc.end_txn("tx", pid, epoch, commit=False)
    assert other.error is ErrorCode.PRODUCER_FENCED


async def test_next_transaction_runs_at_the_bumped_epoch(
    tc: TransactionCoordinator, coordinator: BatchCoordinator
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    for round_number in range(3):
        await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
        end = await tc.end_txn("tx", pid, epoch, commit=round_number % 2 == 0)
        assert (end.error, end.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        epoch = end.producer_epoch
    assert await markers(coordinator, TP0) == [
        (init.producer_epoch + 1, COMMIT),
        (init.producer_epoch + 2, ABORT),
        (init.producer_epoch + 3, COMMIT),
    ]


async def test_timeout_aborts_and_fences(
    tc: TransactionCoordinator, clock: ManualClock, coordinator: BatchCoordinator
) -> None:
    init = await tc.init_producer_id("tx", 5_000)
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    await clock.advance(4.0)
    assert await tc.abort_expired() == []
    await clock.advance(2.0)
    assert await tc.abort_expired() == ["tx"]
    assert await markers(coordinator, TP0) == [(epoch + 1, ABORT)]
    assert (await tc.end_txn("tx", pid, epoch, commit=True)).error is ErrorCode.PRODUCER_FENCED


async def test_timeout_loop_runs_on_the_injected_clock(
    tc: TransactionCoordinator, clock: ManualClock, coordinator: BatchCoordinator
) -> None:
    """A minute-long timeout runs out on the injected clock within seconds of real time: only
    a loop on that clock can abort it (its abort, written to a real SQLite file, is waited for
    up to 10 s of real time, well under the minute a loop on the wall clock would need)."""
    async with tc:
        init = await tc.init_producer_id("tx", 60_000)
        await tc.add_partitions_to_txn("tx", init.producer_id, init.producer_epoch, [TP0])
        for _ in range(61):
            await clock.advance(1.0)
            await asyncio.sleep(0.005)
        expected = [(init.producer_epoch + 1, ABORT)]
        deadline = time.monotonic() + 10.0
        while await markers(coordinator, TP0) != expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    assert await markers(coordinator, TP0) == expected


async def test_failed_markers_leave_the_transaction_prepared_until_a_retry_lands(
    tc: TransactionCoordinator, participant: Recording, coordinator: BatchCoordinator
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    participant.fail_completions = 1
    failed = await tc.end_txn("tx", pid, epoch, commit=True)
    assert failed.error is ErrorCode.CONCURRENT_TRANSACTIONS
    description = await tc.describe("tx")
    assert description is not None and description.state is TxnState.PREPARE_COMMIT
    # The producer may not change its mind once the outcome is prepared.
    assert (await tc.end_txn("tx", pid, epoch, commit=False)).error is (ErrorCode.INVALID_TXN_STATE)
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP1]) == [
        ErrorCode.CONCURRENT_TRANSACTIONS
    ]
    done = await tc.end_txn("tx", pid, epoch, commit=True)
    assert (done.error, done.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert await markers(coordinator, TP0) == [(epoch + 1, COMMIT)]


async def test_a_prepared_transaction_left_behind_is_completed_by_the_sweeper(
    tc: TransactionCoordinator, participant: Recording, clock: ManualClock
) -> None:
    init = await tc.init_producer_id("tx", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    participant.fail_completions = 1
    assert (await tc.end_txn("tx", pid, epoch, commit=True)).error is (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert await tc.abort_expired() == []  # left to the instance that prepared it, for a while
    await clock.advance(10.0)
    assert await tc.abort_expired() == ["tx"]
    description = await tc.describe("tx")
    assert description is not None and description.state is TxnState.COMPLETE_COMMIT


async def test_an_add_racing_an_end_is_fenced_once_the_end_is_prepared(
    tc: TransactionCoordinator, participant: Recording
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0])
    participant.completion_gate = asyncio.Event()
    ending = asyncio.create_task(tc.end_txn("tx", pid, epoch, commit=True))
    for _ in range(50):
        description = await tc.describe("tx")
        assert description is not None
        if description.state is TxnState.PREPARE_COMMIT:
            break
        await asyncio.sleep(0.005)
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP1]) == [
        ErrorCode.CONCURRENT_TRANSACTIONS
    ]
    participant.completion_gate.set()
    assert (await ending).error is ErrorCode.NONE
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP1]) == [ErrorCode.PRODUCER_FENCED]


async def test_a_deleted_partition_is_skipped(
    tc: TransactionCoordinator, coordinator: BatchCoordinator
) -> None:
    await coordinator.create_topic("gone", 1)
    gone = TopicPartition("gone", 0)
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    await tc.add_partitions_to_txn("tx", pid, epoch, [TP0, gone])
    await coordinator.delete_topics(["gone"])
    done = await tc.end_txn("tx", pid, epoch, commit=False)
    assert (done.error, done.producer_epoch) == (ErrorCode.NONE, epoch + 1)
    assert await markers(coordinator, TP0) == [(epoch + 1, ABORT)]


async def test_offsets_committed_in_a_transaction_take_effect_with_it_and_only_then(
    tc: TransactionCoordinator, coordinator: BatchCoordinator
) -> None:
    await coordinator.commit_offsets("g", {TP0: CommittedOffset(5, "before")})
    for commit in (False, True):
        init = await tc.init_producer_id("tx")
        pid, epoch = init.producer_id, init.producer_epoch
        await tc.add_partitions_to_txn("tx", pid, epoch, [TP1])
        assert await tc.add_offsets_to_txn("tx", pid, epoch, "g") is ErrorCode.NONE
        offsets = [PendingOffset("g", TP0, 10, "in-txn"), PendingOffset("g", TP1, 3, None)]
        assert await tc.txn_offset_commit("tx", pid, epoch, "g", offsets) is ErrorCode.NONE
        assert await coordinator.fetch_offsets("g") == {
            TP0: CommittedOffset(5, "before")
        }  # not yet visible
        assert (await tc.end_txn("tx", pid, epoch, commit=commit)).error is ErrorCode.NONE
        expected = (
            {TP0: CommittedOffset(10, "in-txn"), TP1: CommittedOffset(3, None)}
            if commit
            else {TP0: CommittedOffset(5, "before")}
        )
        assert await coordinator.fetch_offsets("g") == expected


async def test_txn_offset_commit_needs_the_group_added_and_the_current_epoch(
    tc: TransactionCoordinator,
) -> None:
    init = await tc.init_producer_id("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    offsets = [PendingOffset("g", TP0, 1, None)]
    assert await tc.txn_offset_commit("tx", pid, epoch, "g", offsets) is (
        ErrorCode.INVALID_TXN_STATE
    )
    assert await tc.add_offsets_to_txn("tx", pid, epoch, "g") is ErrorCode.NONE
    assert await tc.txn_offset_commit("tx", pid, epoch, "other", offsets) is (
        ErrorCode.INVALID_TXN_STATE
    )
    await tc.init_producer_id("tx")  # a new incarnation aborts the open one and fences it
    assert await tc.txn_offset_commit("tx", pid, epoch, "g", offsets) is ErrorCode.PRODUCER_FENCED
    assert await tc.add_offsets_to_txn("tx", pid, epoch, "g") is ErrorCode.PRODUCER_FENCED
