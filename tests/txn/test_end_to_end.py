"""End to end: transactional producers through three brokers sharing one transaction coordinator.

Each transactional producer runs several transactions; every transaction writes kafka-python-built
transactional batches to a few partitions through random brokers, then commits or aborts at random
(seeded, printed). Read back:
- read_committed, filtered by the returned aborted-transaction list as kafka-python's fetcher
  does: exactly the committed records, in offset order;
- read_uncommitted: every acknowledged record plus one control batch per (transaction,
  partition), whose COMMIT/ABORT type matches the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator, SqliteBatchCoordinator
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig
from testkit.batches import build_batch

from ._consumer import decode_all, read_committed

TOPIC = "tx"
PARTITIONS = 4
PRODUCERS = 3
TRANSACTIONS = 5
ROUNDS = 3
CONFIG = BrokerConfig(
    wal=WalConfig(commit_interval_ms=5, buffer_max_bytes=64 * 1024),
    fetch_partition_max_bytes=2048,  # several fetch rounds per partition
)
SEED = int(os.environ.get("DISKLESS_SEED", random.randrange(1 << 30)))


@contextlib.asynccontextmanager
async def backends(
    kind: str, tmp_path: Path
) -> AsyncIterator[tuple[ObjectStore, BatchCoordinator]]:
    store: ObjectStore
    coordinator: BatchCoordinator
    if kind == "memory":
        store, coordinator = MemoryObjectStore(), InMemoryBatchCoordinator()
    else:
        store = LocalObjectStore(tmp_path / "objects")
        coordinator = SqliteBatchCoordinator(tmp_path / "coordinator.db")
    try:
        yield store, coordinator
    finally:
        await coordinator.close()
        await store.close()


@dataclass(frozen=True)
class Acked:
    tp: TopicPartition
    offset: int
    values: tuple[bytes, ...]
    producer_id: int
    committed: bool


async def run_producer(
    name: str,
    tc: TransactionCoordinator,
    brokers: list[DisklessBroker],
    rng: random.Random,
    acked: list[Acked],
    ends: list[tuple[int, TopicPartition, bool]],
) -> None:
    init = await tc.init_producer_id(name, 30_000)
    assert init.error is ErrorCode.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    for txn in range(TRANSACTIONS):
        partitions = [TopicPartition(TOPIC, p) for p in sorted(rng.sample(range(PARTITIONS), k=2))]
        added = await tc.add_partitions_to_txn(name, pid, epoch, partitions)
        assert set(added) == {ErrorCode.NONE}, added
        sequences = dict.fromkeys(partitions, 0)
        mine: list[tuple[TopicPartition, int, tuple[bytes, ...]]] = []
        for round_ in range(ROUNDS):
            request = {}
            values_of = {}
            for tp in partitions:
                values = tuple(
                    f"{name}/{txn}/{round_}/{tp.partition}/{i}".encode()
                    for i in range(rng.randint(1, 4))
                )
                values_of[tp] = values
                request[tp] = build_batch(
                    values,
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=sequences[tp],
                    transactional=True,
                )
                sequences[tp] += len(values)
            results = await rng.choice(brokers).produce(request)
            for tp, result in results.items():
                assert result.error is ErrorCode.NONE, (tp, result)
                mine.append((tp, result.base_offset, values_of[tp]))
        commit = rng.random() < 0.5
        ended = await tc.end_txn(name, pid, epoch, commit)
        assert ended.error is ErrorCode.NONE, ended
        assert ended.producer_epoch == epoch + 1  # TV2
        acked.extend(Acked(tp, offset, values, pid, commit) for tp, offset, values in mine)
        ends.extend((pid, tp, commit) for tp in partitions)
        epoch = ended.producer_epoch


async def fetch_all(
    broker: DisklessBroker, tp: TopicPartition, isolation: IsolationLevel
) -> list[tuple[bytes, list[tuple[int, int]]]]:
    """Every fetch response of one partition from offset 0 to its end: (records, aborted)."""
    responses: list[tuple[bytes, list[tuple[int, int]]]] = []
    offset = 0
    while True:
        result = (await broker.fetch({tp: offset}, isolation_level=isolation))[tp]
        assert result.error is ErrorCode.NONE, result
        end = (
            result.last_stable_offset
            if isolation is IsolationLevel.READ_COMMITTED
            else result.high_watermark
        )
        if offset >= end:
            return responses
        assert result.records, (tp, offset)
        responses.append((result.records, result.aborted_transactions))
        data, markers = decode_all(result.records)
        offset = max([d.offset for d in data] + [m.offset for m in markers]) + 1


@pytest.mark.parametrize("kind", ["memory", "local+sqlite"])
async def test_read_committed_sees_exactly_the_committed_transactions(
    kind: str, tmp_path: Path
) -> None:
    print(f"seed {SEED} (set DISKLESS_SEED to replay)")
    rng = random.Random(SEED)
    async with backends(kind, tmp_path) as (store, coordinator):
        assert await coordinator.create_topic(TOPIC, PARTITIONS) is ErrorCode.NONE
        brokers = [DisklessBroker(i, store, coordinator, CONFIG) for i in (1, 2, 3)]
        async with contextlib.AsyncExitStack() as stack:
            for broker in brokers:
                await stack.enter_async_context(broker)
            tc = await stack.enter_async_context(TransactionCoordinator(coordinator))
            acked: list[Acked] = []
            ends: list[tuple[int, TopicPartition, bool]] = []
            await asyncio.gather(
                *(
                    run_producer(f"p{i}", tc, brokers, random.Random(rng.random()), acked, ends)
                    for i in range(PRODUCERS)
                )
            )
            assert {a.committed for a in acked} == {True, False}, "seed decided one way only"
            for p in range(PARTITIONS):
                tp = TopicPartition(TOPIC, p)
                reader = brokers[p % 3]
                expected = [
                    v
                    for a in sorted(acked, key=lambda a: a.offset)
                    if a.tp == tp and a.committed
                    for v in a.values
                ]
                committed = [
                    d.value
                    for records, aborted in await fetch_all(
                        reader, tp, IsolationLevel.READ_COMMITTED
                    )
                    for d in read_committed(records, aborted)
                ]
                assert committed == expected, tp
                # read_uncommitted: all data, and every marker with its decision.
                data = []
                markers = []
                for records, aborted in await fetch_all(
                    reader, tp, IsolationLevel.READ_UNCOMMITTED
                ):
                    assert aborted == []
                    batch_data, batch_markers = decode_all(records)
                    data.extend(batch_data)
                    markers.extend(batch_markers)
                assert sorted(d.value or b"" for d in data) == sorted(
                    v for a in acked if a.tp == tp for v in a.values
                )
                assert sorted((m.producer_id, m.commit) for m in markers) == sorted(
                    (pid, commit) for pid, end_tp, commit in ends if end_tp == tp
                )
                offsets = sorted([d.offset for d in data] + [m.offset for m in markers])
                assert offsets == list(range(len(offsets)))  # contiguous, nothing lost
                latest = await reader.list_offsets(
                    {tp: OffsetSpec.LATEST}, isolation_level=IsolationLevel.READ_COMMITTED
                )
                assert latest[tp].offset == len(offsets)
