"""The seeds' transaction safety scenarios, deterministic on a virtual clock, on both backends.

(a) a zombie broker: uploads a transactional batch, stalls past the transaction timeout; the
    transaction coordinator aborts it; the late commit is rejected and no read_committed reader
    ever sees the batch;
(b) the commit barrier: a COMMIT requested while a batch of the transaction is still uploading
    waits for it, and the batch lands before the marker;
(c) the LSO with interleaved transactions of many producers across many partitions, checked
    against a reference model after every step;
(d) a batch of an ended transaction, retried through another broker, is rejected.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import msgspec
import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ControlType, ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitBatchResult,
    CommitFileResult,
    FaultyBatchCoordinator,
    FileCommit,
    FindBatchesRequest,
    LeaseRequest,
    ListOffsetsRequest,
)
from diskless.storage import MemoryObjectStore
from diskless.txn import TransactionCoordinator, TxnState
from diskless.wal import WalConfig
from testkit.batches import build_batch
from testkit.clocks import drive, step
from testkit.commits import batch

from ._consumer import decode_all, read_committed

TP = TopicPartition("t", 0)
OK = ErrorCode.NONE
COMMITTED = IsolationLevel.READ_COMMITTED
CONFIG = BrokerConfig(wal=WalConfig(commit_interval_ms=10))
SEED = int(os.environ.get("DISKLESS_SEED", random.randrange(1 << 30)))


class GatedCommits(FaultyBatchCoordinator):
    """The broker's view of the coordinator: its commits wait while `gate` is closed."""

    def __init__(self, inner: BatchCoordinator) -> None:
        super().__init__(inner, random.Random(0))
        self.gate = asyncio.Event()
        self.waiting = 0
        self.results: list[list[CommitBatchResult]] = []

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        self.waiting += 1
        await self.gate.wait()
        outcomes = await super().commit_files(broker_id, broker_epoch, files)
        self.results.extend(outcome.batches for outcome in outcomes)
        return outcomes


class GatedPuts(MemoryObjectStore):
    """PUTs wait while `gate` is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = 0

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.waiting += 1
        await self.gate.wait()
        await super().put(key, data)


@contextlib.asynccontextmanager
async def opened_on_exit(gate: asyncio.Event) -> AsyncIterator[None]:
    """Open the gate when leaving, so that a failed assertion does not hang the brokers' close."""
    try:
        yield
    finally:
        gate.set()


@pytest.fixture
async def tc(
    coordinator: BatchCoordinator, clock: ManualClock
) -> AsyncIterator[TransactionCoordinator]:
    assert await coordinator.create_topic("t", 3) is ErrorCode.NONE
    yield TransactionCoordinator(coordinator, clock=clock)


async def begin(tc: TransactionCoordinator, name: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    init = await tc.init_producer_id(name, timeout_ms)
    assert init.error is OK
    added = await tc.add_partitions_to_txn(name, init.producer_id, init.producer_epoch, [TP])
    assert added == [OK]
    return init.producer_id, init.producer_epoch


async def read(broker: DisklessBroker, isolation: IsolationLevel) -> list[bytes | None]:
    result = (await broker.fetch({TP: 0}, isolation_level=isolation))[TP]
    assert result.error is OK
    if isolation is COMMITTED:
        return [d.value for d in read_committed(result.records, result.aborted_transactions)]
    return [d.value for d in decode_all(result.records)[0]]


# --- (a) -------------------------------------------------------------------------------------
async def test_a_zombie_commit_after_the_timeout_abort_is_rejected(
    coordinator: BatchCoordinator, clock: ManualClock, tc: TransactionCoordinator
) -> None:
    pid, epoch = await begin(tc, "zombie", timeout_ms=10_000)
    gated = GatedCommits(coordinator)
    store = MemoryObjectStore()
    async with (
        DisklessBroker(1, store, gated, CONFIG, clock=clock) as zombie,
        DisklessBroker(2, store, coordinator, CONFIG, clock=clock) as reader,
        opened_on_exit(gated.gate),
    ):
        data = build_batch([b"late"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                           transactional=True)  # fmt: skip
        produce = asyncio.ensure_future(zombie.produce({TP: data}, timeout_ms=600_000))
        for _ in range(1000):
            if gated.waiting:
                break
            await step(clock, 1)
        assert gated.waiting == 1, "the batch never reached its commit"
        assert len((await store.list_page("")).objects) == 1  # uploaded
        # The zombie stalls; the transaction times out and the coordinator aborts it. The abort
        # waits for the zombie's lease to expire (it never commits), then writes the marker.
        await clock.advance(11.0)
        aborted = await drive(clock, tc.abort_expired(), step_s=0.5)
        assert aborted == ["zombie"]
        description = await tc.describe("zombie")
        assert description is not None and description.state is TxnState.COMPLETE_ABORT
        assert await read(reader, COMMITTED) == []
        # The zombie wakes up and commits: rejected, never merged behind the marker.
        gated.gate.set()
        result = (await drive(clock, produce))[TP]
        assert result.error is ErrorCode.INVALID_PRODUCER_EPOCH, result
        assert [r.error for r in gated.results[-1]] == [ErrorCode.INVALID_PRODUCER_EPOCH]
        assert await read(reader, COMMITTED) == []
        assert await read(reader, IsolationLevel.READ_UNCOMMITTED) == []
        fetched = (await reader.fetch({TP: 0}))[TP]
        assert [m.commit for m in decode_all(fetched.records)[1]] == [False]
        assert fetched.high_watermark == 1  # the marker only


# --- (b) -------------------------------------------------------------------------------------
async def test_b_marker_waits_for_a_batch_still_uploading(
    coordinator: BatchCoordinator, clock: ManualClock, tc: TransactionCoordinator
) -> None:
    pid, epoch = await begin(tc, "slow")
    store = GatedPuts()
    async with (
        DisklessBroker(1, store, coordinator, CONFIG, clock=clock) as broker,
        opened_on_exit(store.gate),
    ):
        data = build_batch([b"first"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                           transactional=True)  # fmt: skip
        produce = asyncio.ensure_future(broker.produce({TP: data}))
        for _ in range(1000):
            if store.waiting:
                break
            await step(clock, 1)
        assert store.waiting == 1, "the upload never started"
        ending = asyncio.ensure_future(tc.end_txn("slow", pid, epoch, commit=True))
        await step(clock, 50)  # 0.5 s: the end waits for the uploading batch's lease
        assert not ending.done()
        store.gate.set()
        ended = await drive(clock, ending)
        assert ended.error is OK and ended.producer_epoch == epoch + 1
        produced = (await drive(clock, produce))[TP]
        assert produced.error is OK and produced.base_offset == 0
        fetched = (await broker.fetch({TP: 0}))[TP]
        records, markers = decode_all(fetched.records)
        assert [(r.offset, r.value) for r in records] == [(0, b"first")]
        assert [(m.offset, m.commit) for m in markers] == [(1, True)]
        assert await read(broker, COMMITTED) == [b"first"]


# --- (d) -------------------------------------------------------------------------------------
async def test_d_retry_of_an_ended_transaction_through_another_broker_is_rejected(
    coordinator: BatchCoordinator, clock: ManualClock, tc: TransactionCoordinator
) -> None:
    pid, epoch = await begin(tc, "retry")
    store = MemoryObjectStore()
    async with (
        DisklessBroker(1, store, coordinator, CONFIG, clock=clock) as first,
        DisklessBroker(2, store, coordinator, CONFIG, clock=clock) as second,
    ):
        data = build_batch([b"once"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                           transactional=True)  # fmt: skip
        produced = (await drive(clock, first.produce({TP: data})))[TP]
        assert produced.error is OK
        for commit in (True, False):
            # Ended (committed), and again after a second, aborted transaction on the next epoch.
            ended = await drive(clock, tc.end_txn("retry", pid, epoch, commit=commit))
            assert ended.error is OK
            retried = (await drive(clock, second.produce({TP: data})))[TP]
            assert retried.error is ErrorCode.INVALID_PRODUCER_EPOCH, retried
            epoch = ended.producer_epoch
            assert await tc.add_partitions_to_txn("retry", pid, epoch, [TP]) == [OK]
        assert await read(second, COMMITTED) == [b"once"]
        assert await read(second, IsolationLevel.READ_UNCOMMITTED) == [b"once"]


# --- (c) -------------------------------------------------------------------------------------
@dataclass
class Model:
    """The reference: per partition the high watermark, open transactions, aborted ones."""

    hw: dict[TopicPartition, int] = field(default_factory=dict)
    ongoing: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    aborted: dict[TopicPartition, list[tuple[int, int, int]]] = field(default_factory=dict)
    """(producer id, first offset, marker offset)."""

    def lso(self, tp: TopicPartition) -> int:
        return min(self.ongoing[tp].values(), default=self.hw[tp])


async def test_c_lso_with_interleaved_transactions_matches_a_model(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    print(f"seed {SEED} (set DISKLESS_SEED to replay)")
    rng = random.Random(SEED)
    partitions = [TopicPartition("m", p) for p in range(6)]
    producers = list(range(100, 110))
    assert await coordinator.create_topic("m", len(partitions)) is ErrorCode.NONE
    broker_epoch = await coordinator.register_broker(1)
    model = Model(
        {tp: 0 for tp in partitions},
        {tp: {} for tp in partitions},
        {tp: [] for tp in partitions},
    )
    epochs = dict.fromkeys(producers, 0)
    registered: dict[int, set[TopicPartition]] = {pid: set() for pid in producers}
    sequences: dict[tuple[int, TopicPartition], int] = {}
    keys = iter(range(1_000_000))

    async def commit(batches: list[CommitBatch]) -> list[CommitBatchResult]:
        outcome = await coordinator.commit_file(
            f"m/{next(keys)}", 1, broker_epoch, sum(b.size for b in batches), batches
        )
        return outcome.batches

    for step_number in range(300):
        pid = rng.choice(producers)
        action = rng.random()
        if action < 0.5:  # a transactional write on a few partitions, one commit
            chosen = rng.sample(partitions, k=rng.randint(1, 3))
            new = [tp for tp in chosen if tp not in registered[pid]]
            assert await coordinator.add_partitions_to_txn(pid, epochs[pid], new) == [OK] * len(new)
            registered[pid].update(new)
            leases = await coordinator.acquire_txn_leases(
                1, broker_epoch, [LeaseRequest(tp, pid, epochs[pid]) for tp in chosen], 60_000
            )
            assert [lease.error for lease in leases] == [OK] * len(chosen)
            batches = []
            for tp, lease in zip(chosen, leases, strict=True):
                count = rng.randint(1, 3)
                seq = sequences.get((pid, tp), 0)
                sequences[(pid, tp)] = seq + count
                b = batch(tp, pid=pid, epoch=epochs[pid], seq=seq, count=count, txn=True)
                batches.append(msgspec.structs.replace(b, lease_id=lease.lease_id))
            results = await commit(batches)
            for b, result in zip(batches, results, strict=True):
                tp = b.topic_partition
                assert result.error is OK and result.base_offset == model.hw[tp], result
                model.ongoing[tp].setdefault(pid, model.hw[tp])
                model.hw[tp] += b.record_count
        elif action < 0.65:  # plain data from an idempotent-less producer
            tp = rng.choice(partitions)
            (result,) = await commit([batch(tp, count=2)])
            assert result.base_offset == model.hw[tp]
            model.hw[tp] += 2
        elif registered[pid]:  # end the producer's transaction
            commit_it = rng.random() < 0.5
            ended = sorted(registered[pid])
            errors = await drive(
                clock,
                coordinator.write_txn_markers(
                    pid, epochs[pid], epochs[pid] + 1, commit_it, 0, ended
                ),
            )
            assert errors == [OK] * len(ended)
            for tp in ended:
                first = model.ongoing[tp].pop(pid, None)
                if not commit_it and first is not None:
                    model.aborted[tp].append((pid, first, model.hw[tp]))
                model.hw[tp] += 1
                sequences.pop((pid, tp), None)
            epochs[pid] += 1
            registered[pid] = set()
        # After every step, every partition against the model.
        responses = await coordinator.find_batches(
            [FindBatchesRequest(tp, 0, 1 << 30, COMMITTED) for tp in partitions], 1 << 40
        )
        offsets = await coordinator.list_offsets(
            [ListOffsetsRequest(tp, OffsetSpec.LATEST, COMMITTED) for tp in partitions]
        )
        for tp, response, latest in zip(partitions, responses, offsets, strict=True):
            where = f"step {step_number} {tp}"
            assert response.high_watermark == model.hw[tp], where
            assert response.last_stable_offset == latest.offset == model.lso(tp), where
            end = response.batches[-1].last_offset + 1 if response.batches else 0
            assert end == model.lso(tp), where
            assert response.aborted_transactions == [
                (p, first) for p, first, _ in model.aborted[tp] if first < end
            ], where
            markers = [b for b in response.batches if b.control is not None]
            assert all(b.object_key == "" for b in markers)
            assert sum(b.control is ControlType.ABORT for b in markers) >= sum(
                1 for _, _, marker in model.aborted[tp] if marker < end
            ), where
