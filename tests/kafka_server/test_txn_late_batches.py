"""Late transactional batches through the version 1 bridge: stale, never out of sequence.

A broker paused (SIGSTOP) with a producer's request queued, or a client retrying a request whose
answer it never saw, delivers a transactional batch after its transaction ended. Transaction
version 2 answers any such batch INVALID_PRODUCER_EPOCH (47). OUT_OF_ORDER_SEQUENCE_NUMBER (45)
would be wrong, and librdkafka treats it as fatal.

The bridge (`TransactionFront`) rewrites a version 1 producer's batch from its partition's
registration, read when the batch arrives. The next transaction may have registered the
partition by then, at a newer epoch and a later sequence base. The late batch's sequence is
behind that base: shifted into the new epoch, it would wrap around and be answered 45. The
bridge leaves such a batch at the client's epoch, which the coordinator refuses as stale.

Each test runs TransactionFront and a DisklessBroker on every coordinator backend, on a virtual
clock. A batch's late arrival is its rewrite and produce after the events that overtook it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker, ErrorCode, ManualClock, TopicPartition
from diskless.kafka_server import TransactionFront
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import build_batch
from testkit.clocks import drive

TP = TopicPartition("t", 0)
TID = "late"
CONFIG = BrokerConfig(wal=WalConfig(commit_interval_ms=10))


class Bridge:
    """A version 1 producer's view: the front end's coordinator APIs and its produce path."""

    def __init__(self, front: TransactionFront, broker: DisklessBroker, clock: ManualClock):
        self.front, self.broker, self.clock = front, broker, clock
        self.pid = -1

    async def init(self, timeout_ms: int = 60_000) -> None:
        result = await self.front.init_producer_id(TID, timeout_ms)
        assert result.error is ErrorCode.NONE and result.producer_epoch == 0, result
        self.pid = result.producer_id

    def batch(self, sequence: int, count: int = 1) -> bytes:
        """A transactional batch at the client's epoch (0), as librdkafka sends it."""
        return build_batch(
            [b"v"] * count,
            producer_id=self.pid,
            producer_epoch=0,
            base_sequence=sequence,
            transactional=True,
        )

    async def add(self) -> ErrorCode:
        (error,) = await self.front.add_partitions_to_txn(TID, self.pid, 0, [TP])
        return error

    async def end(self, commit: bool) -> ErrorCode:
        return (await drive(self.clock, self.front.end_txn(TID, self.pid, 0, commit))).error

    async def rewrite(self, data: bytes) -> bytes:
        """What a broker hands the library for `data` (the registration is read now)."""
        partitions = {TP: data}
        rewritten = await self.front.rewrite_batches(
            partitions, self.front.transactional(partitions)
        )
        return rewritten[TP]

    async def write(self, rewritten: bytes) -> tuple[ErrorCode, int]:
        (result,) = (await drive(self.clock, self.broker.produce({TP: rewritten}))).values()
        return result.error, result.base_offset

    async def produce(self, data: bytes) -> tuple[ErrorCode, int]:
        return await self.write(await self.rewrite(data))


@pytest.fixture(params=BACKENDS)
async def bridge(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bridge]:
    clock = ManualClock()
    coordinator = open_coordinator(request.param, tmp_path, clock)
    try:
        await coordinator.create_topic("t", 1)
        front = TransactionFront(coordinator, clock=clock)
        async with DisklessBroker(1, MemoryObjectStore(), coordinator, CONFIG, clock=clock) as b:
            yield Bridge(front, b, clock)
    finally:
        await coordinator.close()


STALE = ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
async def test_a_late_batch_is_stale_once_the_next_transaction_registered_its_partition(
    bridge: Bridge, commit: bool
) -> None:
    await bridge.init()
    assert await bridge.add() is ErrorCode.NONE
    first, second = bridge.batch(0, 3), bridge.batch(3, 2)
    assert (await bridge.produce(first))[0] is ErrorCode.NONE
    assert (await bridge.produce(second))[0] is ErrorCode.NONE
    assert await bridge.end(commit) is ErrorCode.NONE
    # The next transaction registers the partition at epoch 1, the client's sequence 5 its 0.
    assert await bridge.add() is ErrorCode.NONE
    for late in (first, second):  # a paused broker's queued copy, or the client's retry
        assert (await bridge.produce(late))[0] is STALE
    # The next transaction is untouched: its batch lands, and its retry is a duplicate.
    following = bridge.batch(5, 1)
    error, offset = await bridge.produce(following)
    assert error is ErrorCode.NONE
    assert await bridge.produce(following) == (ErrorCode.NONE, offset)
    # A batch ahead of the next sequence is still a gap in the current epoch.
    assert (await bridge.produce(bridge.batch(7, 1)))[0] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


async def test_a_batch_rewritten_before_its_transaction_ended_is_stale(bridge: Bridge) -> None:
    """The paused broker had read the registration (epoch 0) before the producer's end: the
    batch carries the ended epoch, which the coordinator refuses as stale."""
    await bridge.init()
    assert await bridge.add() is ErrorCode.NONE
    late = bridge.batch(0, 2)
    held = await bridge.rewrite(late)  # the paused broker's copy, rewritten, not yet written
    assert (await bridge.produce(late))[0] is ErrorCode.NONE  # the client's retry, elsewhere
    assert await bridge.end(True) is ErrorCode.NONE
    assert await bridge.add() is ErrorCode.NONE
    assert (await bridge.write(held))[0] is STALE


async def test_a_retry_after_the_transaction_timed_out_is_stale(bridge: Bridge) -> None:
    """The coordinator aborted the transaction on its timeout while the broker holding the
    producer's batch was paused: the batch, rewritten before the abort or after it (no
    registration left), is stale; the producer is fenced on the coordinator APIs."""
    await bridge.init(timeout_ms=1_000)
    assert await bridge.add() is ErrorCode.NONE
    assert (await bridge.produce(bridge.batch(0, 2)))[0] is ErrorCode.NONE
    queued = bridge.batch(2, 3)
    held = await bridge.rewrite(queued)
    await bridge.clock.advance(5)
    assert await bridge.front.coordinator.abort_expired() == [TID]
    assert (await bridge.write(held))[0] is STALE
    assert (await bridge.produce(queued))[0] is STALE
    assert await bridge.add() is ErrorCode.PRODUCER_FENCED
    assert await bridge.end(True) is ErrorCode.PRODUCER_FENCED
