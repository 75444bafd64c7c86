"""Conformance: ListTransactions reads every transaction record through `list_txns`, a page at a
time in transactional id order, the same on every backend."""

from __future__ import annotations

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.txn import TransactionCoordinator, TxnState

IDS = ["tx-c", "tx-a", "other", "tx-b", "tx-d"]


async def test_every_record_is_listed_in_id_order(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    producers = {tid: await tc.init_producer_id(tid, 60_000) for tid in IDS}
    ongoing = producers["tx-b"]
    added = await tc.add_partitions_to_txn(
        "tx-b", ongoing.producer_id, ongoing.producer_epoch, [TopicPartition("t", 0)]
    )
    assert added == [ErrorCode.NONE]

    listed = await coordinator.list_txns()
    assert [r.transactional_id for r in listed] == sorted(IDS)
    assert {r.transactional_id: r.producer_id for r in listed} == {
        tid: p.producer_id for tid, p in producers.items()
    }
    states = {r.transactional_id: r.state for r in listed}
    assert states.pop("tx-b") is TxnState.ONGOING
    assert set(states.values()) == {TxnState.EMPTY}


async def test_a_page_starts_after_the_id_given(coordinator: BatchCoordinator) -> None:
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    for tid in IDS:
        await tc.init_producer_id(tid, 60_000)
    after_a = await coordinator.list_txns("tx-a")
    assert [r.transactional_id for r in after_a] == ["tx-b", "tx-c", "tx-d"]
    assert await coordinator.list_txns("tx-d") == []
    assert await coordinator.list_txns("zzz") == []


async def test_nothing_to_list(coordinator: BatchCoordinator) -> None:
    assert await coordinator.list_txns() == []
