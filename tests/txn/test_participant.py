"""The partitions' side of transactions, run against both batch coordinators (integration).

Registration (KIP-890), leases and the commit barrier, markers, coordinator-epoch fencing, the
LSO index and the aborted-transaction index, producer ids, and the commit-age bound.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless._types import ControlType, ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitRefusal,
    FindBatchesRequest,
    FindBatchesResponse,
    InMemoryBatchCoordinator,
    LeaseRequest,
    ListOffsetsRequest,
    SqliteBatchCoordinator,
)
from diskless.coordinator._rules.txn import CONTROL_BATCH_BYTES
from diskless.txn import TransactionParticipant
from testkit.clocks import drive, step
from testkit.commits import Committer, batch
from tests.txn._helpers import TTL_MS, end, leased

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
UNKNOWN = TopicPartition("nope", 0)
OK = ErrorCode.NONE
COMMITTED = IsolationLevel.READ_COMMITTED


@pytest.fixture
async def c(coordinator: BatchCoordinator) -> Committer:
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    return Committer(coordinator)


async def find(
    coordinator: BatchCoordinator,
    offset: int = 0,
    tp: TopicPartition = TP,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> FindBatchesResponse:
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(tp, offset, 1 << 20, isolation)], 1 << 30
    )
    assert response.error == OK
    return response


async def latest(coordinator: BatchCoordinator, isolation: IsolationLevel) -> int:
    (response,) = await coordinator.list_offsets(
        [ListOffsetsRequest(TP, OffsetSpec.LATEST, isolation)]
    )
    return response.offset


async def lease(c: Committer, pid: int, epoch: int, tp: TopicPartition = TP) -> int:
    if c.epoch is None:
        c.epoch = await c.coordinator.register_broker(c.broker_id)
    (result,) = await c.coordinator.acquire_txn_leases(
        c.broker_id, c.epoch, [LeaseRequest(tp, pid, epoch)], TTL_MS
    )
    assert result.error == OK, result
    return result.lease_id


def test_both_backends_are_transaction_participants() -> None:
    """Every participant operation is a coroutine of every backend, with the protocol's names."""
    import inspect

    operations = {
        name: inspect.signature(member)
        for name, member in vars(TransactionParticipant).items()
        if inspect.iscoroutinefunction(member)
    }
    assert operations
    for backend in (InMemoryBatchCoordinator, SqliteBatchCoordinator):
        for name, signature in operations.items():
            implementation = getattr(backend, name)
            assert inspect.iscoroutinefunction(implementation), (backend, name)
            assert inspect.signature(implementation).parameters.keys() == (
                signature.parameters.keys()
            ), (backend, name)


# --- producer ids ---------------------------------------------------------------------------
async def test_producer_ids_are_consecutive_blocks(coordinator: BatchCoordinator) -> None:
    first = await coordinator.allocate_producer_ids(10)
    second = await coordinator.allocate_producer_ids(5)
    assert second == first + 10
    with pytest.raises(ValueError):
        await coordinator.allocate_producer_ids(0)


async def test_producer_ids_unique_across_two_sqlite_coordinators_on_one_file(
    tmp_path: Path,
) -> None:
    a = SqliteBatchCoordinator(tmp_path / "shared.db")
    b = SqliteBatchCoordinator(tmp_path / "shared.db")
    try:
        blocks = await asyncio.gather(
            *(x.allocate_producer_ids(100) for _ in range(20) for x in (a, b))
        )
    finally:
        await a.close()
        await b.close()
    ids = [first + i for first in blocks for i in range(100)]
    assert len(set(ids)) == len(ids) == 4000


# --- registration ---------------------------------------------------------------------------
async def test_registration_errors(c: Committer) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 3, [TP, UNKNOWN, TP1]) == [
        OK,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        OK,
    ]
    assert await coordinator.add_partitions_to_txn(1, 3, [TP]) == [OK]  # idempotent
    assert await coordinator.add_partitions_to_txn(1, 2, [TP]) == [ErrorCode.INVALID_PRODUCER_EPOCH]


async def test_stale_epoch_from_producer_state(c: Committer) -> None:
    assert (await c.one(batch(TP, pid=1, epoch=5, seq=0))).error == OK
    assert await c.coordinator.add_partitions_to_txn(1, 4, [TP]) == [
        ErrorCode.INVALID_PRODUCER_EPOCH
    ]
    assert await c.coordinator.add_partitions_to_txn(1, 5, [TP]) == [OK]


async def test_transactional_batch_of_unregistered_epoch_is_rejected(c: Committer) -> None:
    assert await c.coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert (await c.one(batch(TP1, pid=1, epoch=0, seq=0, txn=True))).error == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))).error == OK


# --- leases ---------------------------------------------------------------------------------
async def test_leases_need_an_ongoing_registration_and_a_current_broker(c: Committer) -> None:
    coordinator = c.coordinator
    epoch = await coordinator.register_broker(1)
    assert await coordinator.add_partitions_to_txn(7, 1, [TP]) == [OK]
    results = await coordinator.acquire_txn_leases(
        1,
        epoch,
        [
            LeaseRequest(TP, 7, 1),
            LeaseRequest(TP1, 7, 1),
            LeaseRequest(TP, 7, 0),
            LeaseRequest(UNKNOWN, 7, 1),
        ],
        TTL_MS,
    )
    assert [r.error for r in results] == [
        OK,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert results[0].lease_id >= 0
    # A stale (or unknown) broker epoch is fenced, as a commit is: every request, nothing granted.
    for broker, stale in ((1, epoch + 1), (1, epoch - 1), (2, 1)):
        fenced = await coordinator.acquire_txn_leases(
            broker, stale, [LeaseRequest(TP, 7, 1), LeaseRequest(UNKNOWN, 7, 1)], TTL_MS
        )
        assert [r.error for r in fenced] == [ErrorCode.STALE_BROKER_EPOCH] * 2
        assert [r.lease_id for r in fenced] == [-1, -1]


async def test_commit_releases_its_lease(c: Committer, clock: ManualClock) -> None:
    assert await c.coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    lease_id = await lease(c, 1, 0)
    assert (await c.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id))).error == OK
    # Released: a second batch naming the same lease is refused, and the end does not wait.
    again = await c.one(leased(batch(TP, pid=1, epoch=0, seq=1, txn=True), lease_id))
    assert again.error == ErrorCode.INVALID_TXN_STATE
    start = clock.monotonic()
    assert await end(c.coordinator, clock, 1, 0, True, [TP]) == [OK]
    assert clock.monotonic() - start < 1


async def test_commit_after_lease_expiry_is_rejected(c: Committer, clock: ManualClock) -> None:
    assert await c.coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    lease_id = await lease(c, 1, 0)
    await clock.advance(TTL_MS / 1000)
    late = await c.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id))
    assert late.error == ErrorCode.INVALID_TXN_STATE
    assert (await find(c.coordinator)).batches == []


async def test_no_lease_once_the_end_began(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    held = await lease(c, 1, 0)
    ending = asyncio.ensure_future(coordinator.write_txn_markers(1, 0, 1, True, 0, [TP]))
    await step(clock)
    assert not ending.done()  # waits for the lease
    assert c.epoch is not None
    (refused,) = await coordinator.acquire_txn_leases(1, c.epoch, [LeaseRequest(TP, 1, 0)], TTL_MS)
    assert refused.error == ErrorCode.INVALID_TXN_STATE
    # Without a lease a batch cannot slip in either; with the held lease it lands first.
    unleased = await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    assert unleased.error == ErrorCode.INVALID_TXN_STATE
    landed = await c.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), held))
    assert landed.error == OK and landed.base_offset == 0
    assert await drive(clock, ending) == [OK]
    response = await find(coordinator)
    assert [(b.base_offset, b.control) for b in response.batches] == [
        (0, None),
        (1, ControlType.COMMIT),
    ]


async def test_end_waits_until_an_abandoned_lease_expires(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    lease_id = await lease(c, 1, 0)
    started = clock.now_ms()
    # Coarse virtual steps: the end polls for the lease through a whole TTL.
    assert await end(coordinator, clock, 1, 0, False, [TP], step_s=0.5) == [OK]
    assert clock.now_ms() - started >= TTL_MS
    late = await c.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id))
    assert late.error == ErrorCode.INVALID_PRODUCER_EPOCH  # the marker bumped the epoch


# --- markers, LSO and the aborted index -----------------------------------------------------
async def test_commit_marker_and_lso(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert (await c.one(batch(TP, count=2))).error == OK  # offsets 0-1, not transactional
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    first = await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3, txn=True))  # 2-4
    assert first.base_offset == 2
    assert (await c.one(batch(TP, count=1))).error == OK  # 5
    for isolation, expected in ((COMMITTED, 2), (IsolationLevel.READ_UNCOMMITTED, 6)):
        assert await latest(coordinator, isolation) == expected
        assert (await find(coordinator, isolation=isolation)).last_stable_offset == 2
    committed = await find(coordinator, isolation=COMMITTED)
    assert [b.base_offset for b in committed.batches] == [0]
    assert await end(coordinator, clock, 1, 0, True, [TP], coordinator_epoch=3) == [OK]
    response = await find(coordinator)
    assert response.high_watermark == response.last_stable_offset == 7
    marker = response.batches[-1]
    assert (marker.base_offset, marker.last_offset, marker.control) == (6, 6, ControlType.COMMIT)
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (1, 1, 3)
    assert marker.object_key == "" and marker.size == CONTROL_BATCH_BYTES
    (snapshot,) = await coordinator.describe_producers(TP)
    assert snapshot.producer_epoch == 1 and snapshot.current_txn_first_offset is None
    assert snapshot.retained_batches == [] and snapshot.coordinator_epoch == 3
    # TV2: the next transaction restarts at sequence 0 with the bumped epoch.
    assert await coordinator.add_partitions_to_txn(1, 1, [TP]) == [OK]
    assert (await c.one(batch(TP, pid=1, epoch=1, seq=3, txn=True))).error == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert (await c.one(batch(TP, pid=1, epoch=1, seq=0, txn=True))).error == OK
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=3, txn=True))).error == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )


async def test_abort_is_indexed_for_read_committed(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert await coordinator.add_partitions_to_txn(2, 0, [TP]) == [OK]
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))).base_offset == 0
    assert (await c.one(batch(TP, pid=2, epoch=0, seq=0, txn=True))).base_offset == 1
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=1, txn=True))).base_offset == 2
    assert await end(coordinator, clock, 1, 0, False, [TP]) == [OK]  # abort marker at 3
    assert (await find(coordinator)).last_stable_offset == 1  # producer 2 still open
    assert (await find(coordinator, isolation=COMMITTED)).batches[-1].last_offset == 0
    assert await end(coordinator, clock, 2, 0, True, [TP]) == [OK]  # commit marker at 4
    response = await find(coordinator, isolation=COMMITTED)
    assert response.last_stable_offset == 5
    assert [b.base_offset for b in response.batches] == [0, 1, 2, 3, 4]
    assert response.aborted_transactions == [(1, 0)]
    assert (await find(coordinator, 4, isolation=COMMITTED)).aborted_transactions == []
    assert (await find(coordinator, 3, isolation=COMMITTED)).aborted_transactions == [(1, 0)]
    assert (await find(coordinator)).aborted_transactions == []  # read_uncommitted: none
    # Deleting records past the abort drops it from the index.
    from diskless.coordinator import DeleteRecordsRequest

    await coordinator.delete_records([DeleteRecordsRequest(TP, 4)])
    assert (await find(coordinator, 4, isolation=COMMITTED)).aborted_transactions == []


async def test_a_batch_older_than_its_registration_is_stale_whatever_its_sequence(
    c: Committer, clock: ManualClock
) -> None:
    """A late batch of a transaction that ended, on a partition the next transactions left alone
    until one registered it again: its epoch is newer than the producer's entry there (the old
    marker's) but older than the registration. Its epoch is looked at before its sequence, as
    Kafka's verification comes before the log's checks: INVALID_PRODUCER_EPOCH, never
    OUT_OF_ORDER_SEQUENCE_NUMBER (fatal for librdkafka) nor INVALID_TXN_STATE."""
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert (await c.one(batch(TP, pid=1, epoch=0, seq=0, count=2, txn=True))).error == OK
    assert await end(coordinator, clock, 1, 0, True, [TP]) == [OK]  # TP's entry: epoch 1
    assert await coordinator.add_partitions_to_txn(1, 1, [TP1]) == [OK]
    assert await end(coordinator, clock, 1, 1, False, [TP1]) == [OK]  # epoch 1 ended
    assert await coordinator.add_partitions_to_txn(1, 2, [TP]) == [OK]
    for late in (0, 3):  # in sequence after the marker, or not: stale either way
        result = await c.one(batch(TP, pid=1, epoch=1, seq=late, txn=True))
        assert result.error == ErrorCode.INVALID_PRODUCER_EPOCH, (late, result)
    assert (await c.one(batch(TP, pid=1, epoch=2, seq=0, txn=True))).error == OK
    assert (await find(coordinator)).high_watermark == 4  # 2 records, a marker, 1 record


async def test_marker_without_data_takes_an_offset_only(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert await end(coordinator, clock, 1, 0, False, [TP]) == [OK]
    response = await find(coordinator, isolation=COMMITTED)
    assert response.high_watermark == response.last_stable_offset == 1
    assert [b.control for b in response.batches] == [ControlType.ABORT]
    assert response.aborted_transactions == []


async def test_retried_end_writes_no_second_marker(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    assert await end(coordinator, clock, 1, 0, True, [TP]) == [OK]
    assert await end(coordinator, clock, 1, 0, True, [TP, UNKNOWN]) == [
        OK,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert (await find(coordinator)).high_watermark == 1


async def test_coordinator_epoch_fencing(c: Committer, clock: ManualClock) -> None:
    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP, TP1]) == [OK, OK]
    assert await end(coordinator, clock, 1, 0, True, [TP, TP1], coordinator_epoch=5) == [OK, OK]
    assert await coordinator.add_partitions_to_txn(1, 1, [TP, TP1]) == [OK, OK]
    assert await end(coordinator, clock, 1, 1, True, [TP], coordinator_epoch=4) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    ]
    assert (await find(coordinator)).high_watermark == 1  # nothing written
    assert await end(coordinator, clock, 1, 1, False, [TP, TP1], coordinator_epoch=5) == [OK, OK]
    assert (await find(coordinator, tp=TP1)).high_watermark == 2


async def test_lso_never_below_log_start(c: Committer, clock: ManualClock) -> None:
    from diskless.coordinator import DeleteRecordsRequest

    coordinator = c.coordinator
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    await c.one(batch(TP, pid=1, epoch=0, seq=0, txn=True))
    await c.one(batch(TP, count=4))
    await coordinator.delete_records([DeleteRecordsRequest(TP, 3)])
    assert await latest(coordinator, COMMITTED) == 3


# --- the commit-age bound -------------------------------------------------------------------
async def test_commit_age_bound(coordinator: BatchCoordinator, clock: ManualClock) -> None:
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    epoch = await coordinator.register_broker(1)
    old = new_object_key(DEFAULT_OBJECT_PREFIX, clock.now_ms(), 1)
    fresh = new_object_key(DEFAULT_OBJECT_PREFIX, clock.now_ms(), 1)
    await clock.advance(240.0)  # the default bound, exactly: still in time
    (ok,) = (await coordinator.commit_file(fresh, 1, epoch, 100, [batch(TP)])).batches
    assert ok.error == OK
    await clock.advance(0.001)
    late = await coordinator.commit_file(old, 1, epoch, 100, [batch(TP)])
    assert late.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    assert (await coordinator.file_info([old])) == [None]  # no side effects
    assert (await find(coordinator)).high_watermark == 1
    # Keys this library did not name carry no time and are exempt.
    (other,) = (await coordinator.commit_file("elsewhere/x", 1, epoch, 100, [batch(TP)])).batches
    assert other.error == OK


def test_default_prefix_matches_the_wal() -> None:
    import inspect

    for cls in (InMemoryBatchCoordinator, SqliteBatchCoordinator):
        default = inspect.signature(cls.__init__).parameters["object_prefix"].default
        assert default == DEFAULT_OBJECT_PREFIX


def test_commit_age_bound_relations() -> None:
    from diskless import BrokerConfig
    from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT
    from diskless.broker import txn_lease_budget_ms
    from diskless.lifecycle import FileManager, FileManagerConfig
    from diskless.storage import MemoryObjectStore
    from diskless.wal import WalConfig

    # The WAL's whole budget (and so a healthy lease) fits inside the commit-age bound...
    assert txn_lease_budget_ms(WalConfig()) < COMMIT_AGE_MAX_MS_DEFAULT
    assert BrokerConfig().txn_lease_ttl_ms == txn_lease_budget_ms(WalConfig())
    # ...and the file manager's default grace exceeds the bound plus the skew.
    coordinator = InMemoryBatchCoordinator()
    assert coordinator.commit_bounds.commit_age_max_ms == COMMIT_AGE_MAX_MS_DEFAULT
    FileManager(MemoryObjectStore(), coordinator)
    with pytest.raises(ValueError, match=r"orphan_grace_ms .* commit_age_max_ms"):
        FileManager(MemoryObjectStore(), coordinator, FileManagerConfig(orphan_grace_ms=250_000))
    with pytest.raises(ValueError, match="txn_lease_ttl_ms"):
        BrokerConfig(txn_lease_ttl_ms=1_000)


def test_settings_that_disagree_with_the_coordinator_fail_at_construction() -> None:
    from diskless import BrokerConfig

    """Each link of the budget chain is checked where its two sides meet, naming both."""
    from diskless import DisklessBroker
    from diskless.lifecycle import FileManager, FileManagerConfig
    from diskless.storage import MemoryObjectStore
    from diskless.wal import WalConfig

    store = MemoryObjectStore()
    strict = InMemoryBatchCoordinator(commit_age_max_ms=60_000)
    slow_wal = BrokerConfig(wal=WalConfig(upload_timeout_ms=30_000))  # 3 attempts: 90 s
    with pytest.raises(ValueError, match=r"commit budget .* commit_age_max_ms"):
        DisklessBroker(1, store, strict, slow_wal)
    DisklessBroker(1, store, strict, BrokerConfig(wal=WalConfig(upload_timeout_ms=10_000)))
    with pytest.raises(ValueError, match=r"object_prefix .* object_prefix"):
        DisklessBroker(1, store, strict, BrokerConfig(wal=WalConfig(object_prefix="other/")))
    with pytest.raises(ValueError, match=r"FileManagerConfig\.prefix .* object_prefix"):
        FileManager(store, strict, FileManagerConfig(prefix="other/"))
    unbounded = InMemoryBatchCoordinator(commit_age_max_ms=None)
    DisklessBroker(1, store, unbounded, slow_wal)
    FileManager(store, unbounded, FileManagerConfig(orphan_grace_ms=250_000))


def test_lease_longer_than_the_coordinator_allows_is_a_config_error() -> None:
    from diskless import BrokerConfig
    from diskless._limits import LEASE_TTL_MS_MAX

    with pytest.raises(ValueError, match="exceeds"):
        BrokerConfig(txn_lease_ttl_ms=LEASE_TTL_MS_MAX + 1)
    assert BrokerConfig(txn_lease_ttl_ms=LEASE_TTL_MS_MAX).txn_lease_ttl_ms == LEASE_TTL_MS_MAX


async def test_end_in_one_sqlite_instance_waits_for_a_lease_held_through_another(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Two coordinators on one file (as two broker processes would): the barrier polls."""
    broker_side = SqliteBatchCoordinator(tmp_path / "shared.db", clock=clock)
    txn_side = SqliteBatchCoordinator(tmp_path / "shared.db", clock=clock)
    try:
        assert await broker_side.create_topic("t", 1) is ErrorCode.NONE
        c = Committer(broker_side)
        assert await txn_side.add_partitions_to_txn(1, 0, [TP]) == [OK]
        held = await lease(c, 1, 0)
        ending = asyncio.ensure_future(txn_side.write_txn_markers(1, 0, 1, False, 0, [TP]))
        await step(clock, 30)
        assert not ending.done()
        landed = await c.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), held))
        assert landed.error == OK and landed.base_offset == 0
        assert await drive(clock, ending) == [OK]
        response = await find(broker_side, isolation=COMMITTED)
        assert [b.control for b in response.batches] == [None, ControlType.ABORT]
        assert response.aborted_transactions == [(1, 0)]
    finally:
        await broker_side.close()
        await txn_side.close()
