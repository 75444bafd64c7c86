"""Conformance: what a broker needs to bridge a transaction version 1 producer is in the batch
coordinator, the same on every backend and from every process.

A version 1 producer (librdkafka, kafka-python) keeps the epoch InitProducerId gave it and counts
sequences on across transactions, while the coordinator bumps the epoch at every end and starts
each epoch at sequence 0. The transaction record keeps the producer's epoch, the coordinator epoch
it stands for, and per partition the producer's sequence at which that epoch began; each
registration (AddPartitionsToTxn) carries the last two, so any broker reads them with the
(partition, producer id) of a batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import BatchCoordinator, RegisteredTxn
from diskless.txn import TransactionCoordinator, TxnState
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import Committer, batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TID = "bridged"


async def _transaction(
    coordinator: BatchCoordinator,
    tc: TransactionCoordinator,
    pid: int,
    epoch: int,
    writes: dict[TopicPartition, int],
    commit: bool = True,
) -> int:
    """One transaction at `epoch` writing `writes[tp]` records (from sequence 0) to each
    partition; returns the epoch after its end."""
    partitions = list(writes)
    assert await tc.add_partitions_to_txn(TID, pid, epoch, partitions) == [ErrorCode.NONE] * len(
        partitions
    )
    results = await Committer(coordinator).commit(
        [batch(tp, pid=pid, epoch=epoch, seq=0, count=n, txn=True) for tp, n in writes.items()]
    )
    assert all(r.error is ErrorCode.NONE for r in results), results
    ended = await tc.end_txn(TID, pid, epoch, commit)
    assert ended.error is ErrorCode.NONE
    return ended.producer_epoch


async def test_each_end_moves_the_bridge_on(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 2)
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    init = await tc.init_producer_id(TID, 60_000)
    pid = init.producer_id
    record = await tc.describe(TID)
    assert record is not None
    assert (record.client_epoch, record.bridged_epoch, record.sequence_bases) == (0, 0, ())
    epoch = await _transaction(coordinator, tc, pid, 0, {TP0: 3, TP1: 2})
    epoch = await _transaction(coordinator, tc, pid, epoch, {TP0: 4}, commit=False)
    record = await tc.describe(TID)
    assert record is not None
    assert (record.producer_epoch, record.client_epoch, record.bridged_epoch) == (2, 0, 2)
    assert dict(record.sequence_bases) == {TP0: 7, TP1: 2}
    assert await tc.add_partitions_to_txn(TID, pid, epoch, [TP0, TP1]) == [ErrorCode.NONE] * 2
    assert await coordinator.describe_txn_registrations(
        [(TP0, pid), (TP1, pid), (TP0, pid + 1)]
    ) == [RegisteredTxn(2, False, 0, 7), RegisteredTxn(2, False, 0, 2), None]


async def test_a_timeout_leaves_the_producer_behind(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """A transaction the coordinator aborts on its own does not move the bridge: the producer's
    epoch still stands for the old one, so its next request is fenced."""
    await coordinator.create_topic("t", 2)
    tc = TransactionCoordinator(coordinator, clock=clock)
    pid = (await tc.init_producer_id(TID, 1_000)).producer_id
    assert await tc.add_partitions_to_txn(TID, pid, 0, [TP0]) == [ErrorCode.NONE]
    await clock.advance(60)
    assert await tc.abort_expired() == [TID]
    record = await tc.describe(TID)
    assert record is not None
    assert record.state is TxnState.COMPLETE_ABORT
    assert (record.producer_epoch, record.client_epoch, record.bridged_epoch) == (1, 0, 0)
    assert await tc.add_partitions_to_txn(TID, pid, record.bridged_epoch, [TP0]) == [
        ErrorCode.PRODUCER_FENCED
    ]


async def test_init_starts_the_producer_afresh(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 2)
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    pid = (await tc.init_producer_id(TID, 60_000)).producer_id
    await _transaction(coordinator, tc, pid, 0, {TP0: 5})
    again = await tc.init_producer_id(TID, 60_000)
    assert (again.producer_id, again.producer_epoch) == (pid, 2)
    record = await tc.describe(TID)
    assert record is not None
    assert (record.client_epoch, record.bridged_epoch, record.sequence_bases) == (2, 2, ())
    assert await tc.add_partitions_to_txn(TID, pid, 2, [TP0]) == [ErrorCode.NONE]
    assert await coordinator.describe_txn_registrations([(TP0, pid)]) == [
        RegisteredTxn(2, False, 2, 0)
    ]


async def test_the_ending_mark_keeps_the_bridge(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    pid = (await tc.init_producer_id(TID, 60_000)).producer_id
    epoch = await _transaction(coordinator, tc, pid, 0, {TP0: 3})
    assert await tc.add_partitions_to_txn(TID, pid, epoch, [TP0]) == [ErrorCode.NONE]
    (prepared,) = [await coordinator.txn_end(TID, pid, epoch, True)]
    assert prepared.record is not None and prepared.record.state is TxnState.PREPARE_COMMIT
    assert await coordinator.describe_txn_registrations([(TP0, pid)]) == [
        RegisteredTxn(1, True, 0, 3)
    ]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_every_process_reads_the_same_bridge(backend: str, tmp_path: Path) -> None:
    first = open_coordinator(backend, tmp_path, ManualClock())
    second = open_coordinator(backend, tmp_path, ManualClock())  # another broker process
    try:
        await first.create_topic("t", 2)
        tc = TransactionCoordinator(first, clock=ManualClock())
        pid = (await tc.init_producer_id(TID, 60_000)).producer_id
        epoch = await _transaction(first, tc, pid, 0, {TP1: 6})
        assert await tc.add_partitions_to_txn(TID, pid, epoch, [TP1]) == [ErrorCode.NONE]
        expected = [RegisteredTxn(1, False, 0, 6)]
        assert await second.describe_txn_registrations([(TP1, pid)]) == expected
    finally:
        await first.close()
        await second.close()
    reopened = open_coordinator(backend, tmp_path, ManualClock())
    try:
        assert await reopened.describe_txn_registrations([(TP1, pid)]) == expected
        (record,) = await reopened.describe_txns([TID])
        assert record is not None and dict(record.sequence_bases) == {TP1: 6}
    finally:
        await reopened.close()
