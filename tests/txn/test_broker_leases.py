"""DisklessBroker.produce and transaction leases: one coordinator call per request, per-partition
failures, the lease id carried to the commit (integration, both backends)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, TopicPartition
from diskless.broker._txn_leases import RELEASE_BACKOFF_MS
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitFileResult,
    FaultyBatchCoordinator,
    FileCommit,
    LeaseRequest,
    LeaseResult,
)
from diskless.errors import CoordinatorUnavailableError
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch
from testkit.clocks import drive

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
OK = ErrorCode.NONE
CONFIG = BrokerConfig(wal=WalConfig(commit_interval_ms=10))


class Watching(FaultyBatchCoordinator):
    """Counts lease calls, records committed batches, and can fail the lease call."""

    def __init__(self, inner: BatchCoordinator) -> None:
        super().__init__(inner, random.Random(0))
        self.lease_calls: list[list[LeaseRequest]] = []
        self.committed: list[CommitBatch] = []
        self.fail_leases = False
        self.first_call_gate: asyncio.Event | None = None
        """When set, the first lease call waits for it (so that later requests queue meanwhile)."""
        self.release_calls = 0
        self.release_failures = 0
        """The first this many release calls fail, as when the coordinator is out of reach."""

    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        self.lease_calls.append(list(requests))
        if self.first_call_gate is not None and len(self.lease_calls) == 1:
            await self.first_call_gate.wait()
        if self.fail_leases:
            raise CoordinatorUnavailableError("injected")
        return await super().acquire_txn_leases(broker_id, broker_epoch, requests, ttl_ms)

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        self.committed.extend(b for f in files for b in f.batches)
        return await super().commit_files(broker_id, broker_epoch, files)

    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        self.release_calls += 1
        if self.release_calls <= self.release_failures:
            raise CoordinatorUnavailableError("injected")
        await super().release_txn_leases(lease_ids)


def txn(pid: int, seq: int = 0, epoch: int = 0) -> bytes:
    return build_batch(
        [b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


@pytest.fixture
async def watching(coordinator: BatchCoordinator) -> Watching:
    assert await coordinator.create_topic("t", 3) is ErrorCode.NONE
    return Watching(coordinator)


async def test_one_lease_call_per_request_and_per_partition_refusals(
    watching: Watching, clock: ManualClock
) -> None:
    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    async with DisklessBroker(1, MemoryObjectStore(), watching, CONFIG, clock=clock) as broker:
        results = await drive(
            clock, broker.produce({T0: txn(5), T1: txn(5), T2: build_batch([b"plain"])})
        )
        assert {tp: r.error for tp, r in results.items()} == {
            T0: OK,
            T1: ErrorCode.INVALID_TXN_STATE,  # not registered there
            T2: OK,
        }
        assert [[r.topic_partition for r in call] for call in watching.lease_calls] == [[T0, T1]]
        (leased,) = [b for b in watching.committed if b.is_transactional]
        assert leased.topic_partition == T0 and leased.lease_id is not None
        plain = [b for b in watching.committed if not b.is_transactional]
        assert [b.lease_id for b in plain] == [None]
        # The commit released the lease: the end does not wait.
        started = clock.now_ms()
        assert await drive(clock, watching.write_txn_markers(5, 0, 1, True, 0, [T0])) == [OK]
        assert clock.now_ms() - started < 1000


async def test_no_lease_call_without_transactional_batches(
    watching: Watching, clock: ManualClock
) -> None:
    async with DisklessBroker(1, MemoryObjectStore(), watching, CONFIG, clock=clock) as broker:
        results = await drive(clock, broker.produce({T0: build_batch([b"a"])}))
        assert results[T0].error is OK
        assert watching.lease_calls == []


async def test_a_failed_lease_call_fails_only_the_transactional_partitions(
    watching: Watching, clock: ManualClock
) -> None:
    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    watching.fail_leases = True
    async with DisklessBroker(1, MemoryObjectStore(), watching, CONFIG, clock=clock) as broker:
        results = await drive(clock, broker.produce({T0: txn(5), T2: build_batch([b"plain"])}))
        assert results[T0].error is ErrorCode.KAFKA_STORAGE_ERROR
        assert results[T2].error is OK


async def test_a_fenced_broker_gets_no_lease(watching: Watching, clock: ManualClock) -> None:
    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    async with DisklessBroker(1, MemoryObjectStore(), watching, CONFIG, clock=clock) as broker:
        await watching.register_broker(1)  # a newer incarnation of broker 1
        results = await drive(clock, broker.produce({T0: txn(5)}))
        assert results[T0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_concurrent_requests_share_lease_calls(
    watching: Watching, clock: ManualClock
) -> None:
    for pid, tp in ((5, T0), (6, T1), (7, T2)):
        assert await watching.add_partitions_to_txn(pid, 0, [tp]) == [OK]
    watching.first_call_gate = gate = asyncio.Event()
    async with DisklessBroker(1, MemoryObjectStore(), watching, CONFIG, clock=clock) as broker:
        requests = [broker.produce({tp: txn(pid)}) for pid, tp in ((5, T0), (6, T1), (7, T2))]
        produced = asyncio.gather(*requests)
        # While the first call is held, the later requests join it or queue behind it (they
        # describe their topic first, on the coordinator's reader thread: real time).
        for _ in range(5_000):
            in_call = sum(len(call) for call in watching.lease_calls)
            queued = sum(len(reqs) for reqs, _ in broker._produce_path._leases._group._queued)
            if in_call + queued == 3:
                break
            await asyncio.sleep(0.001)
        gate.set()
        results = await drive(clock, produced)
        assert [r[tp].error for r, tp in zip(results, (T0, T1, T2), strict=True)] == [OK] * 3
        assert sum(len(call) for call in watching.lease_calls) == 3
        assert len(watching.lease_calls) < 3  # grouped
        assert len({b.lease_id for b in watching.committed}) == 3


async def test_a_failed_segment_gives_its_leases_back(
    watching: Watching, clock: ManualClock
) -> None:
    from diskless.storage._faulty import FaultyObjectStore

    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    store = FaultyObjectStore(MemoryObjectStore(), random.Random(0), put_fail_rate=1.0)
    async with DisklessBroker(1, store, watching, CONFIG, clock=clock) as broker:
        results = await drive(clock, broker.produce({T0: txn(5)}))
        assert results[T0].error is ErrorCode.KAFKA_STORAGE_ERROR
    # The abort does not wait for the lease to expire (about 100 s with the default WAL).
    started = clock.now_ms()
    assert await drive(clock, watching.write_txn_markers(5, 0, 1, False, 0, [T0])) == [OK]
    assert clock.now_ms() - started < 1000
    assert CONFIG.txn_lease_ttl_ms > 60_000


async def test_a_failed_release_is_retried_while_the_broker_runs(
    watching: Watching, clock: ManualClock
) -> None:
    """A segment that failed because the coordinator was out of reach cannot give its leases
    back at once either: the broker tries again, so that an end waits for the coordinator to be
    back, not for the leases to expire."""
    from diskless.storage._faulty import FaultyObjectStore

    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    watching.release_failures = 2
    store = FaultyObjectStore(MemoryObjectStore(), random.Random(0), put_fail_rate=1.0)
    async with DisklessBroker(1, store, watching, CONFIG, clock=clock) as broker:
        results = await drive(clock, broker.produce({T0: txn(5)}))
        assert results[T0].error is ErrorCode.KAFKA_STORAGE_ERROR
        started = clock.now_ms()
        assert await drive(clock, watching.write_txn_markers(5, 0, 1, False, 0, [T0])) == [OK]
        waited = clock.now_ms() - started
    assert watching.release_calls == 3
    assert waited < RELEASE_BACKOFF_MS * (1 + 2) + 1000 < CONFIG.txn_lease_ttl_ms


async def test_released_leases_cannot_commit(watching: Watching, clock: ManualClock) -> None:
    assert await watching.add_partitions_to_txn(5, 0, [T0]) == [OK]
    epoch = await watching.register_broker(1)
    (lease,) = await watching.acquire_txn_leases(1, epoch, [LeaseRequest(T0, 5, 0)], 60_000)
    await watching.release_txn_leases([lease.lease_id, 424242])  # unknown ids are ignored
    from testkit.commits import batch

    (result,) = (
        await watching.commit_file("k", 1, epoch, 100, [batch(T0, pid=5, epoch=0, seq=0, txn=True)])
    ).batches
    assert result.error is OK  # without a lease: allowed while ONGOING
    import msgspec

    leased = msgspec.structs.replace(
        batch(T0, pid=5, epoch=0, seq=1, txn=True), lease_id=lease.lease_id
    )
    (late,) = (await watching.commit_file("k2", 1, epoch, 100, [leased])).batches
    assert late.error is ErrorCode.INVALID_TXN_STATE
