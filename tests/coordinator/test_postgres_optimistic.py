"""PostgreSQL's optimistic commits: planned on rows read without locks (or remembered from
earlier commits), moved onto the state they land on, and planned again on locked rows when what
they decided on has changed.

Each test has another coordinator (another broker, on its own connections) change the state
between a commit's planning and its apply, where an optimistic step holds no lock.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import (
    CommitBatch,
    CommitRefusal,
    DeleteRecordsRequest,
    FindBatchesRequest,
    PostgresBatchCoordinator,
    TopicConfig,
)
from diskless.coordinator._backends import postgres_txn
from diskless.coordinator._backends.postgres_optimistic import CommitCache, Peeked
from diskless.coordinator._rules.rows import PartitionState
from diskless.coordinator._store import Needs
from diskless.txn import ProducerEntry
from tests._postgres import database_dsn

from ._helpers import BASE_TS, batch, new_key

TOPIC = "optimistic"
P0 = TopicPartition(TOPIC, 0)
P1 = TopicPartition(TOPIC, 1)
PID = 7


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[PostgresBatchCoordinator, ...]]:
    """Two coordinators (brokers 1 and 2) over one fresh database with a 2-partition topic."""
    dsn = database_dsn(tmp_path)
    first, second = PostgresBatchCoordinator(dsn), PostgresBatchCoordinator(dsn)
    try:
        await first.create_topic(TOPIC, 2)
        yield first, second
    finally:
        await first.close()
        await second.close()


@pytest.fixture
def before_the_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[Callable[[], Awaitable[Any]]], None]:
    """Runs the given coroutine function once, at the next optimistic apply, before it."""
    pending: list[Callable[[], Awaitable[Any]]] = []
    original = postgres_txn.apply_rebased

    async def intercepted(*args: Any) -> Any:
        if pending:
            await pending.pop()()
        return await original(*args)

    monkeypatch.setattr(postgres_txn, "apply_rebased", intercepted)
    return pending.append


async def test_appends_landing_after_the_peek_move_the_commit_after_them(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
    before_the_apply: Callable[[Callable[[], Awaitable[Any]]], None],
    tmp_path: Path,
) -> None:
    """Broker 2 appends to both partitions (and deletes records of one) while broker 1's commit
    is planned: broker 1's batches land after broker 2's, with offsets, log starts, running
    max timestamps and its producer's retained batches moved accordingly."""
    first, second = two
    epoch1, epoch2 = await first.register_broker(1), await second.register_broker(2)
    early = await first.commit_file(
        new_key(), 1, epoch1, 100, [batch(P0, pid=PID, epoch=0, seq=0, count=2)]
    )
    assert [r.base_offset for r in early.batches] == [0]

    async def intrude() -> None:
        result = await second.commit_file(
            new_key(),
            2,
            epoch2,
            100,
            [batch(P0, count=3, ts=BASE_TS + 50), batch(P1, count=2, ts=BASE_TS + 50)],
        )
        assert [r.base_offset for r in result.batches] == [2, 0]
        (deleted,) = await second.delete_records([DeleteRecordsRequest(P1, 1)])
        assert deleted.error is ErrorCode.NONE

    before_the_apply(intrude)
    retried_batch = batch(P0, pid=PID, epoch=0, seq=2, count=4, ts=BASE_TS + 10)
    moved = await first.commit_file(
        new_key(), 1, epoch1, 100, [retried_batch, batch(P1, count=1, ts=BASE_TS + 10)]
    )
    assert [(r.error, r.base_offset, r.log_start_offset) for r in moved.batches] == [
        (ErrorCode.NONE, 5, 0),
        (ErrorCode.NONE, 2, 1),
    ]

    # The producer's entry kept the moved offsets: a retry of the batch is a duplicate there,
    # and its next batch follows it.
    again = await first.commit_file(new_key(), 1, epoch1, 100, [retried_batch])
    assert [(r.base_offset, r.duplicate) for r in again.batches] == [(5, True)]
    (entry,) = await first.describe_producers(P0)
    assert [b[2:] for b in entry.retained_batches] == [(0, 1), (5, 8)]
    after = await first.commit_file(
        new_key(), 1, epoch1, 100, [batch(P0, pid=PID, epoch=0, seq=6, count=1)]
    )
    assert [(r.error, r.base_offset) for r in after.batches] == [(ErrorCode.NONE, 9)]

    (p0, p1) = await first.find_batches(
        [FindBatchesRequest(P0, 0, 1 << 20), FindBatchesRequest(P1, 1, 1 << 20)], 1 << 20
    )
    assert [(b.base_offset, b.last_offset) for b in p0.batches] == [(0, 1), (2, 4), (5, 8), (9, 9)]
    assert (p0.high_watermark, p1.high_watermark, p1.log_start_offset) == (10, 3, 1)
    assert [(b.base_offset, b.last_offset) for b in p1.batches] == [(0, 1), (2, 2)]

    # The moved batches' running maximum timestamps include the intruder's later ones.
    conn = await asyncpg.connect(database_dsn(tmp_path))
    try:
        marks = await conn.fetch(
            "SELECT partition_id, base_offset, ts_running_max FROM batches"
            " ORDER BY partition_id, base_offset"
        )
    finally:
        await conn.close()
    assert [(m[1], m[2] - BASE_TS) for m in marks] == [
        (0, 0),
        (2, 50),
        (5, 50),
        (9, 50),
        (0, 50),
        (2, 50),
    ]


async def test_a_producer_entry_changed_after_the_peek_is_decided_on_locked_rows(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
    before_the_apply: Callable[[Callable[[], Awaitable[Any]]], None],
) -> None:
    """The same batch, sent to broker 1 and, on a retry, to broker 2: broker 2 commits it
    while broker 1's commit is planned. Broker 1 must answer it as the duplicate it now is."""
    first, second = two
    epoch1, epoch2 = await first.register_broker(1), await second.register_broker(2)
    sent = batch(P0, pid=PID, epoch=0, seq=0, count=2)
    landed: list[int] = []

    async def intrude() -> None:
        result = await second.commit_file(new_key(), 2, epoch2, 100, [batch(P0, count=3), sent])
        landed.extend(r.base_offset for r in result.batches)

    before_the_apply(intrude)
    result = await first.commit_file(new_key(), 1, epoch1, 100, [sent])
    assert landed == [0, 3]
    assert [(r.error, r.base_offset, r.duplicate) for r in result.batches] == [
        (ErrorCode.NONE, 3, True)
    ]
    # Its next commit of the producer follows the entry broker 2 left.
    after = await first.commit_file(
        new_key(), 1, epoch1, 100, [batch(P0, pid=PID, epoch=0, seq=2, count=1)]
    )
    assert [(r.error, r.base_offset) for r in after.batches] == [(ErrorCode.NONE, 5)]


async def test_a_broker_fenced_after_the_peek_commits_nothing(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
    before_the_apply: Callable[[Callable[[], Awaitable[Any]]], None],
) -> None:
    """Broker 1 registers again (a new incarnation) while its old incarnation's commit is
    planned: once the registration has returned, no commit of the old epoch may land."""
    first, second = two
    old_epoch = await first.register_broker(1)

    async def intrude() -> None:
        assert await second.register_broker(1) == old_epoch + 1

    before_the_apply(intrude)
    result = await first.commit_file(new_key(), 1, old_epoch, 100, [batch(P0)])
    assert result.refused is CommitRefusal.BROKER_FENCED
    (p0,) = await first.find_batches([FindBatchesRequest(P0, 0, 1 << 20)], 1 << 20)
    assert p0.high_watermark == 0


async def test_an_object_key_committed_after_the_peek_is_a_conflict(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
    before_the_apply: Callable[[Callable[[], Awaitable[Any]]], None],
) -> None:
    first, second = two
    epoch1, epoch2 = await first.register_broker(1), await second.register_broker(2)
    key = new_key()

    async def intrude() -> None:
        result = await second.commit_file(key, 2, epoch2, 100, [batch(P1)])
        assert result.refused is None

    before_the_apply(intrude)
    result = await first.commit_file(key, 1, epoch1, 100, [batch(P0)])
    assert result.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    (p0,) = await first.find_batches([FindBatchesRequest(P0, 0, 1 << 20)], 1 << 20)
    assert p0.high_watermark == 0


async def test_a_refusal_planned_on_remembered_rows_is_decided_again(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
) -> None:
    """Broker 1's store remembers its epoch from its last commit; the broker registers again
    through another store. A commit of the new epoch, refused on what was remembered, applies
    nothing that could check it: it must be decided again on the rows themselves."""
    first, second = two
    old_epoch = await first.register_broker(1)
    assert (await first.commit_file(new_key(), 1, old_epoch, 100, [batch(P0)])).refused is None
    new_epoch = await second.register_broker(1)
    result = await first.commit_file(new_key(), 1, new_epoch, 100, [batch(P0)])
    assert (result.refused, [r.base_offset for r in result.batches]) == (None, [1])


async def test_a_commit_remembered_late_does_not_take_its_partitions_back(
    two: tuple[PostgresBatchCoordinator, PostgresBatchCoordinator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two commits of one broker to one partition land in one order and are remembered in the
    other (their COMMITs' answers came back that way). The first remembered its producer entry
    and the partition after it; the second, told last, the partition as it was before the
    first. A commit planned on those memories, on a producer entry written after the partition
    it remembers, must still move only its own batches: a retry of the first commit's batch is
    a duplicate at the offsets it was given."""
    first, _ = two
    epoch = await first.register_broker(1)
    setup = await first.commit_file(
        new_key(),
        1,
        epoch,
        100,
        [batch(P0, pid=PID, epoch=0, seq=0, count=1), batch(P0, pid=8, epoch=0, seq=0, count=1)],
    )
    assert [r.base_offset for r in setup.batches] == [0, 1]

    held: list[postgres_txn.PostgresTxn] = []
    remember_now = postgres_txn.PostgresTxn.committed

    def committed_later(txn: postgres_txn.PostgresTxn) -> None:
        held.append(txn)

    # Producer 8's commit lands first; what it leaves is remembered only after producer 7's.
    monkeypatch.setattr(postgres_txn.PostgresTxn, "committed", committed_later)
    other = await first.commit_file(
        new_key(), 1, epoch, 100, [batch(P0, pid=8, epoch=0, seq=1, count=2)]
    )
    assert [r.base_offset for r in other.batches] == [2]
    monkeypatch.setattr(postgres_txn.PostgresTxn, "committed", remember_now)
    sent = batch(P0, pid=PID, epoch=0, seq=1, count=3)
    landed = await first.commit_file(new_key(), 1, epoch, 100, [sent])
    assert [r.base_offset for r in landed.batches] == [4]
    (late,) = held
    remember_now(late)

    after = await first.commit_file(
        new_key(), 1, epoch, 100, [batch(P0, pid=PID, epoch=0, seq=4, count=1)]
    )
    assert [(r.error, r.base_offset) for r in after.batches] == [(ErrorCode.NONE, 7)]
    again = await first.commit_file(new_key(), 1, epoch, 100, [sent])
    assert [(r.base_offset, r.duplicate) for r in again.batches] == [(4, True)]
    described = {e.producer_id: e for e in await first.describe_producers(P0)}
    assert [b[2:] for b in described[PID].retained_batches] == [(0, 0), (4, 6), (7, 7)]


SEED = int(os.environ.get("OPTIMISTIC_SEED", random.randrange(1 << 30)))


async def test_brokers_racing_on_shared_producers_and_partitions_agree_with_kafka(
    tmp_path: Path,
) -> None:
    """Two brokers commit at once, over and over, to the same partitions for the same
    producers, each batch sent to one broker and its retry to the other: every commit lands on
    state the other just changed (moved offsets, changed producer entries, stale memories).
    Every new batch must be appended once, every retry answered as its duplicate at the same
    offsets, and each partition's log must tile its offsets. The seed is printed
    (OPTIMISTIC_SEED replays it)."""
    print(f"OPTIMISTIC_SEED={SEED}")
    rng = random.Random(SEED)
    dsn = database_dsn(tmp_path)
    brokers = [PostgresBatchCoordinator(dsn), PostgresBatchCoordinator(dsn)]
    try:
        await brokers[0].create_topic(TOPIC, 4)
        epochs = [await b.register_broker(i + 1) for i, b in enumerate(brokers)]
        pairs = [(TopicPartition(TOPIC, p), pid) for p in range(4) for pid in (1, 2, 3)]
        next_seq = dict.fromkeys(pairs, 0)
        sent: dict[tuple[TopicPartition, int, int], int] = {}  # (tp, pid, seq) -> base offset
        last: dict[tuple[TopicPartition, int], CommitBatch] = {}

        async def commit(side: int, batches: list[CommitBatch]) -> list[Any]:
            result = await brokers[side].commit_file(
                new_key(), side + 1, epochs[side], 100, batches
            )
            assert result.refused is None, result
            return list(zip(batches, result.batches, strict=True))

        for _ in range(40):
            objects: list[list[CommitBatch]] = [[] for _ in range(4)]
            retries: list[list[CommitBatch]] = [[] for _ in range(4)]
            for tp, pid in rng.sample(pairs, 8):
                count = rng.randint(1, 3)
                new = batch(tp, pid=pid, epoch=0, seq=next_seq[(tp, pid)], count=count)
                next_seq[(tp, pid)] += count
                objects[rng.randrange(4)].append(new)
                if (tp, pid) in last and rng.random() < 0.5:
                    retries[rng.randrange(4)].append(last[(tp, pid)])
                last[(tp, pid)] = new
            rounds = await asyncio.gather(
                *(commit(i % 2, o) for i, o in enumerate(objects) if o),
                *(commit(1 - i % 2, r) for i, r in enumerate(retries) if r),
            )
            answers = [pair for answered in rounds for pair in answered]
            for b, answer in answers:
                key = (b.topic_partition, b.producer_id, b.base_sequence)
                assert answer.error is ErrorCode.NONE, (SEED, b, answer)
                if key in sent:
                    assert (answer.duplicate, answer.base_offset) == (True, sent[key]), SEED
                else:
                    assert not answer.duplicate, (SEED, b, answer)
                    sent[key] = answer.base_offset

        for p in range(4):
            (found,) = await brokers[1].find_batches(
                [FindBatchesRequest(TopicPartition(TOPIC, p), 0, 1 << 30)], 1 << 30
            )
            offset = 0
            for info in found.batches:
                assert info.base_offset == offset, (SEED, p, found.batches)
                offset = info.last_offset + 1
            assert offset == found.high_watermark, SEED
            appended = sorted(o for (tp, _, _), o in sent.items() if tp.partition == p)
            assert appended == [info.base_offset for info in found.batches], SEED
    finally:
        for b in brokers:
            await b.close()


def test_the_commit_cache_answers_only_when_it_knows_everything_and_stays_bounded() -> None:
    state = PartitionState(5, P0, TopicConfig(), 10, 0, 100, BASE_TS)
    entry = ProducerEntry(PID, 0)
    cache = CommitCache(entries_max=2)
    cache.remember(Peeked({P0: state}, {(5, PID): (entry, 77), (5, 8): (None, None)}, {1: 3}))
    needs = Needs(partitions={P0}, producers={(P0, PID)}, brokers=(1,), files={"k"})
    known = cache.lookup(needs)
    assert known is not None
    assert (known.partitions, known.producers, known.broker_epochs) == (
        {P0: state},
        {(5, PID): (entry, 77)},
        {1: 3},
    )
    assert cache.lookup(Needs(partitions={P0, P1}, files={"k"})) is None
    assert cache.lookup(Needs(partitions={P0}, producers={(P0, 9)}, files={"k"})) is None
    assert cache.lookup(Needs(partitions={P0}, brokers=(2,), files={"k"})) is None
    # A third entry is over the bound: the cache starts over with what it is told last.
    cache.remember(Peeked({P0: state}, {(5, 9): (None, None)}, {}))
    assert cache.lookup(needs) is None
    assert cache.lookup(Needs(partitions={P0}, producers={(P0, 9)}, files={"k"})) is not None


def test_the_commit_cache_keeps_the_latest_state_of_a_partition_whatever_the_order_told() -> None:
    """A peek or a commit told after a later one does not take a partition back under the
    producer entries remembered with the later one; a topic created again (a larger id) or a
    raised log start is newer."""
    entry = ProducerEntry(PID, 0)
    before = PartitionState(5, P0, TopicConfig(), 10, 0, 100, BASE_TS)
    after = PartitionState(5, P0, TopicConfig(), 13, 0, 130, BASE_TS)
    trimmed = PartitionState(5, P0, TopicConfig(), 13, 4, 90, BASE_TS)
    again = PartitionState(6, P0, TopicConfig(), 0, 0, 0, BASE_TS)
    needs = Needs(partitions={P0}, files={"k"})
    cache = CommitCache()
    told = []
    for state in (after, before, trimmed, after, again, trimmed):
        cache.remember(Peeked({P0: state}, {(state.key, PID): (entry, 1)}, {}))
        known = cache.lookup(needs)
        assert known is not None
        told.append(known.partitions[P0])
    assert told == [after, after, trimmed, trimmed, again, again]
