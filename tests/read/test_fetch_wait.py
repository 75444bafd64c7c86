"""The fetch purgatory: a fetch that finds too little parks and is woken by what changes.

The waiting broker runs on a virtual clock that the tests never move unless they test the
timeout: a parked fetch that answers with records was woken by the change, it cannot have
timed out. The writing broker runs on the real clock (its WAL rotates in real time). Every test
runs on the three coordinator backends; "another process" is another coordinator over the same
state (SQLite file, PostgreSQL database), which hears commits only through the change feed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker, ErrorCode, FetchResult, TopicPartition
from diskless._types import IsolationLevel
from diskless.clock import ManualClock, SystemClock
from diskless.coordinator import BatchCoordinator, DeleteRecordsRequest
from diskless.read._purgatory import TICK_S
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import batch_builder, build_batch

TP = TopicPartition("wait", 0)
LONG_MS = 600_000
"""A wait the virtual clock never reaches: only a wake-up can end it."""
CONFIG = BrokerConfig(wal=WalConfig(commit_interval_ms=5), fetch_view_reconcile_ms=10**9)
"""The view is never reconciled on its own: only the change feed can wake a fetch."""
GUARD_S = 30.0
"""How long a test waits for something that must happen before failing (not a duration
asserted: a hang guard)."""


class Rig:
    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.store = MemoryObjectStore()
        self.coordinator = open_coordinator(backend, tmp_path, SystemClock())
        self.clock = ManualClock()
        self.waiting = DisklessBroker(1, self.store, self.coordinator, CONFIG, clock=self.clock)
        self.others: list[BatchCoordinator] = []

    def elsewhere(self) -> BatchCoordinator:
        """Another coordinator over the same state, as another broker process holds (in memory,
        where there is no other process, the same one)."""
        if self.backend == "memory":
            return self.coordinator
        other = open_coordinator(self.backend, self.tmp_path, SystemClock())
        self.others.append(other)
        return other

    def fetch(
        self,
        offsets: dict[TopicPartition, int],
        *,
        wait_ms: int = LONG_MS,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> asyncio.Task[dict[TopicPartition, FetchResult]]:
        return asyncio.ensure_future(
            self.waiting.fetch(offsets, min_bytes=1, max_wait_ms=wait_ms, isolation_level=isolation)
        )

    async def parked(self, count: int = 1) -> None:
        """Until `count` fetches are parked."""
        for _ in range(int(GUARD_S / 0.005)):
            if len(self.waiting._purgatory) >= count:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{len(self.waiting._purgatory)} parked, expected {count}")


@pytest.fixture(params=BACKENDS)
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(request.param, tmp_path)
    await rig.coordinator.create_topic("wait", 2)
    await rig.waiting.start()
    try:
        yield rig
    finally:
        await rig.waiting.close(flush=False)
        for other in rig.others:
            await other.close()
        await rig.coordinator.close()


async def _produce(coordinator: BatchCoordinator, store: MemoryObjectStore, value: bytes) -> None:
    async with DisklessBroker(7, store, coordinator, CONFIG) as writer:
        result = await writer.produce({TP: build_batch([value])})
        assert result[TP].error is ErrorCode.NONE, result


async def test_a_commit_of_this_process_wakes_a_parked_fetch(rig: Rig) -> None:
    task = rig.fetch({TP: 0})
    await rig.parked()
    await _produce(rig.coordinator, rig.store, b"here")
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].records and results[TP].high_watermark == 1
    assert len(rig.waiting._purgatory) == 0


@pytest.mark.parametrize("rig", ["sqlite", "postgres"], indirect=True)
async def test_a_commit_of_another_process_wakes_a_parked_fetch(rig: Rig) -> None:
    elsewhere = rig.elsewhere()
    task = rig.fetch({TP: 0})
    await rig.parked()
    await _produce(elsewhere, rig.store, b"there")
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].records


async def test_a_parked_fetch_answers_empty_at_its_max_wait(rig: Rig) -> None:
    task = rig.fetch({TP: 0}, wait_ms=1_000)
    await rig.parked()
    await rig.clock.advance(0.999)
    assert not task.done()
    await rig.clock.advance(0.001 + TICK_S)  # answered within one tick of the purgatory
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].error is ErrorCode.NONE and not results[TP].records


async def test_min_bytes_zero_is_answered_at_once(rig: Rig) -> None:
    """Kafka answers a fetch of min_bytes 0 without waiting: the virtual clock never moves, so
    an answer cannot come from the wait running out."""
    for _ in range(2):  # before the view knows the partition, and after
        results = await asyncio.wait_for(
            rig.waiting.fetch({TP: 0}, min_bytes=0, max_wait_ms=LONG_MS), GUARD_S
        )
        assert results[TP].error is ErrorCode.NONE and not results[TP].records
    assert len(rig.waiting._purgatory) == 0


async def test_an_idle_fetch_at_the_end_asks_the_coordinator_nothing(rig: Rig) -> None:
    first = rig.fetch({TP: 0}, wait_ms=1)  # learns the partition
    await rig.clock.advance(0.002 + TICK_S)
    await asyncio.wait_for(first, GUARD_S)
    await _settled(rig)
    before = rig.waiting._reader.stats().fetches
    for _ in range(50):
        task = rig.fetch({TP: 0}, wait_ms=10)
        await rig.parked()
        await rig.clock.advance(0.011 + TICK_S)
        assert not (await asyncio.wait_for(task, GUARD_S))[TP].records
    assert rig.waiting._reader.stats().fetches == before


async def test_many_parked_fetches_are_all_woken_by_one_commit(rig: Rig) -> None:
    other = TopicPartition("wait", 1)
    tasks = [rig.fetch({TP: 0, other: 0} if i % 2 else {TP: 0}) for i in range(300)]
    await rig.parked(300)
    await _produce(rig.coordinator, rig.store, b"all")
    for results in await asyncio.wait_for(asyncio.gather(*tasks), GUARD_S):
        assert results[TP].records
    assert len(rig.waiting._purgatory) == 0


async def test_deleting_the_topic_wakes_a_parked_fetch(rig: Rig) -> None:
    task = rig.fetch({TP: 0})
    await rig.parked()
    await rig.elsewhere().delete_topics(["wait"])
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_moved_log_start_wakes_a_parked_fetch_which_parks_again(rig: Rig) -> None:
    await _produce(rig.coordinator, rig.store, b"one")
    task = rig.fetch({TP: 1}, wait_ms=5_000)
    await rig.parked()
    version = rig.waiting._view.version(TP)
    passes = rig.waiting._waiting.answered_by_view
    await rig.elsewhere().delete_records([DeleteRecordsRequest(TP, 1)])
    view = rig.waiting._view
    for _ in range(int(GUARD_S / 0.005)):  # woken, looked again, found nothing, parked again
        held = view.offsets().get(TP)
        moved = held is not None and held.log_start_offset == 1
        looked = rig.waiting._waiting.answered_by_view > passes
        if moved and looked and len(rig.waiting._purgatory) and not view.busy:
            break
        await asyncio.sleep(0.005)
    assert rig.waiting._view.version(TP) > version
    assert not task.done()
    await rig.clock.advance(5.001 + TICK_S)
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].log_start_offset == 1 and not results[TP].records


async def test_read_committed_is_woken_when_the_last_stable_offset_moves(rig: Rig) -> None:
    pid = 4242
    assert await rig.coordinator.add_partitions_to_txn(pid, 0, [TP]) == [ErrorCode.NONE]
    async with DisklessBroker(7, rig.store, rig.coordinator, CONFIG) as writer:
        result = await writer.produce({TP: _transactional_batch(pid, b"in txn")})
        assert result[TP].error is ErrorCode.NONE, result
    task = rig.fetch({TP: 0}, isolation=IsolationLevel.READ_COMMITTED)
    await rig.parked()  # the high watermark is 1, the last stable offset 0
    assert await rig.elsewhere().write_txn_markers(pid, 0, 1, True, 0, [TP]) == [ErrorCode.NONE]
    results = await asyncio.wait_for(task, GUARD_S)
    assert results[TP].records and results[TP].last_stable_offset == 2


async def test_closing_the_broker_answers_its_parked_fetches(rig: Rig) -> None:
    tasks = [rig.fetch({TP: 0}) for _ in range(3)]
    await rig.parked(3)
    await rig.waiting.close()
    for results in await asyncio.wait_for(asyncio.gather(*tasks), GUARD_S):
        assert results[TP].error is ErrorCode.NONE and not results[TP].records


async def _settled(rig: Rig) -> None:
    """Until the view holds the partition's offsets and no notice is pending (SQLite's first
    change check, which says "everything", comes within its 20 ms interval)."""
    await asyncio.sleep(0.1)
    view = rig.waiting._view
    for _ in range(int(GUARD_S / 0.005)):
        if view.offsets().get(TP) is not None and not view.busy:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the view never settled")


def _transactional_batch(pid: int, value: bytes) -> bytes:
    builder = batch_builder(transactional=True, producer_id=pid, producer_epoch=0, base_sequence=0)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())
