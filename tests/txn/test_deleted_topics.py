"""Transactions whose topics are deleted before they end, on both batch coordinators.

Kafka's transaction coordinator skips the markers of partitions that no longer exist and
completes the transaction; here too: the end completes with its outcome, the remaining
partitions get their markers (LSO back at the high watermark), the transactional id is usable
again, and the timeout sweep completes such a transaction once instead of retrying forever. A
topic re-created under the deleted one's name is a different topic (the partition key plays
Kafka's topic id): it gets no marker and its LSO is untouched.
"""

from __future__ import annotations

import msgspec
import pytest

from diskless._types import ControlType, ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator, FindBatchesRequest, LeaseRequest
from diskless.txn import TransactionCoordinator, TxnState
from testkit.clocks import drive
from testkit.commits import Committer, batch

OK = ErrorCode.NONE
A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
B1 = TopicPartition("b", 1)
TTL_MS = 60_000


@pytest.fixture
async def c(coordinator: BatchCoordinator) -> Committer:
    # "b" is created last, so SQLite hands its partition ids out again when it is re-created.
    assert await coordinator.create_topic("a", 2) is ErrorCode.NONE
    assert await coordinator.create_topic("b", 2) is ErrorCode.NONE
    return Committer(coordinator)


@pytest.fixture
def tc(coordinator: BatchCoordinator, clock: ManualClock) -> TransactionCoordinator:
    return TransactionCoordinator(coordinator, clock=clock)


async def produce(
    c: Committer, tp: TopicPartition, pid: int, epoch: int, seq: int, txn: bool = True
) -> int:
    """Commit one transactional batch of two records through a lease; returns its offset."""
    if c.epoch is None:
        c.epoch = await c.coordinator.register_broker(c.broker_id)
    b = batch(tp, pid=pid, epoch=epoch, seq=seq, count=2, txn=txn)
    if txn:
        (lease,) = await c.coordinator.acquire_txn_leases(
            c.broker_id, c.epoch, [LeaseRequest(tp, pid, epoch)], TTL_MS
        )
        assert lease.error is OK, lease
        b = msgspec.structs.replace(b, lease_id=lease.lease_id)
    result = await c.one(b)
    assert result.error is OK, result
    return result.base_offset


async def open_txn(
    tc: TransactionCoordinator, c: Committer, name: str, partitions: list[TopicPartition]
) -> tuple[int, int]:
    init = await tc.init_producer_id(name, 10_000)
    assert init.error is OK
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions_to_txn(name, pid, epoch, partitions) == [OK] * len(partitions)
    for tp in partitions:
        await produce(c, tp, pid, epoch, 0)
    return pid, epoch


async def log(
    coordinator: BatchCoordinator, tp: TopicPartition
) -> tuple[list[ControlType | None], int, int]:
    """(control types of the batches in order, high watermark, last stable offset)."""
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED)], 1 << 30
    )
    assert response.error is OK, response
    return (
        [b.control for b in response.batches],
        response.high_watermark,
        response.last_stable_offset,
    )


async def check_usable_again(
    tc: TransactionCoordinator, c: Committer, clock: ManualClock, name: str, pid: int, epoch: int
) -> None:
    """InitProducerId bumps the epoch and a new transaction commits on every partition left."""
    init = await tc.init_producer_id(name, 10_000)
    assert init.error is OK
    assert (init.producer_id, init.producer_epoch) == (pid, epoch)
    assert await tc.add_partitions_to_txn(name, pid, epoch, [A0]) == [OK]
    await produce(c, A0, pid, epoch, 0)
    ended = await drive(clock, tc.end_txn(name, pid, epoch, commit=True))
    assert (ended.error, ended.producer_epoch) == (OK, epoch + 1)
    controls, high_watermark, lso = await log(c.coordinator, A0)
    assert controls[-1] is ControlType.COMMIT and lso == high_watermark


@pytest.mark.parametrize("commit", [True, False])
async def test_an_end_after_its_topic_was_deleted_completes(
    c: Committer, tc: TransactionCoordinator, clock: ManualClock, commit: bool
) -> None:
    pid, epoch = await open_txn(tc, c, "tx", [A0, A1, B0, B1])
    await c.coordinator.delete_topics(["b"])
    ended = await drive(clock, tc.end_txn("tx", pid, epoch, commit=commit))
    assert (ended.error, ended.producer_epoch) == (OK, epoch + 1)
    description = await tc.describe("tx")
    assert description is not None
    assert description.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert description.partitions == ()
    marker = ControlType.COMMIT if commit else ControlType.ABORT
    for tp in (A0, A1):
        assert await log(c.coordinator, tp) == ([None, marker], 3, 3)
    # A retry of the end is answered again; the id is usable again.
    again = await tc.end_txn("tx", pid, epoch, commit=commit)
    assert (again.error, again.producer_epoch) == (OK, epoch + 1)
    await check_usable_again(tc, c, clock, "tx", pid, epoch + 2)


async def test_init_producer_id_completes_a_transaction_whose_topic_was_deleted(
    c: Committer, tc: TransactionCoordinator, clock: ManualClock
) -> None:
    pid, epoch = await open_txn(tc, c, "tx", [A0, B0])
    await c.coordinator.delete_topics(["b"])
    init = await drive(clock, tc.init_producer_id("tx", 10_000))
    # The open transaction was aborted (at epoch + 1), then the epoch bumped again.
    assert (init.error, init.producer_id, init.producer_epoch) == (OK, pid, epoch + 2)
    assert await log(c.coordinator, A0) == ([None, ControlType.ABORT], 3, 3)


async def test_the_timeout_sweep_completes_it_once(
    c: Committer, tc: TransactionCoordinator, clock: ManualClock
) -> None:
    pid, epoch = await open_txn(tc, c, "tx", [A0, B0, B1])
    await c.coordinator.delete_topics(["b"])
    await clock.advance(11.0)
    assert await drive(clock, tc.abort_expired()) == ["tx"]
    description = await tc.describe("tx")
    assert description is not None and description.state is TxnState.COMPLETE_ABORT
    assert await drive(clock, tc.abort_expired()) == []  # nothing left to retry
    assert await log(c.coordinator, A0) == ([None, ControlType.ABORT], 3, 3)
    await check_usable_again(tc, c, clock, "tx", pid, epoch + 2)


async def test_a_re_created_topic_gets_no_marker_of_its_predecessors_transaction(
    c: Committer, tc: TransactionCoordinator, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    pid, epoch = await open_txn(tc, c, "tx", [A0, B0])
    await coordinator.delete_topics(["b"])
    assert await coordinator.create_topic("b", 2) is ErrorCode.NONE
    # The new b-0 carries nothing of the transaction: no lease for it, no inherited state.
    assert c.epoch is not None
    (refused,) = await coordinator.acquire_txn_leases(
        c.broker_id, c.epoch, [LeaseRequest(B0, pid, epoch)], TTL_MS
    )
    assert refused.error is ErrorCode.INVALID_TXN_STATE
    # Another producer's transaction is open on the new b-0; it keeps holding the LSO.
    other = await tc.init_producer_id("other", 10_000)
    assert await tc.add_partitions_to_txn(
        "other", other.producer_id, other.producer_epoch, [B0]
    ) == [OK]
    await produce(c, B0, other.producer_id, other.producer_epoch, 0)
    assert await log(coordinator, B0) == ([None], 2, 0)
    ended = await drive(clock, tc.end_txn("tx", pid, epoch, commit=True))
    assert ended.error is OK
    assert await log(coordinator, B0) == ([None], 2, 0)  # no stray marker, LSO unchanged
    assert await log(coordinator, B1) == ([], 0, 0)
    assert await log(coordinator, A0) == ([None, ControlType.COMMIT], 3, 3)
    # The other transaction ends normally; then the id uses the new topic like any other.
    ended = await drive(
        clock, tc.end_txn("other", other.producer_id, other.producer_epoch, commit=True)
    )
    assert ended.error is OK
    assert await log(coordinator, B0) == ([None, ControlType.COMMIT], 3, 3)
    epoch += 1
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [B0]) == [OK]
    await produce(c, B0, pid, epoch, 0)
    ended = await drive(clock, tc.end_txn("tx", pid, epoch, commit=False))
    assert ended.error is OK
    assert await log(coordinator, B0) == ([None, ControlType.COMMIT, None, ControlType.ABORT], 6, 6)


async def test_the_participant_answers_unknown_for_deleted_and_skips_re_created_partitions(
    c: Committer, clock: ManualClock
) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [A0, B0, B1]) == [OK, OK, OK]
    await produce(c, B0, 1, 0, 0)
    await coordinator.delete_topics(["b"])
    assert await coordinator.create_topic("b", 1) is OK  # b-0 again; b-1 stays deleted
    ended = await drive(clock, coordinator.write_txn_markers(1, 0, 1, False, 0, [A0, B0, B1]))
    assert ended == [OK, OK, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await log(coordinator, A0) == ([ControlType.ABORT], 1, 1)
    assert await log(coordinator, B0) == ([], 0, 0)
    assert await coordinator.describe_producers(B0) == []
