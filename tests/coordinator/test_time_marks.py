"""Lookups by time over many time marks, on every backend, against a brute-force oracle.

The durable backends index only the batches that hold an offset divisible by
`TIME_MARK_OFFSETS` and walk the primary key from the last such mark below the target. These
tests give partitions many marks and timestamps in no order, then check the rows every answer
names (the read path reads their records) against the committed batches themselves, also after
trims that delete the batch carrying the largest timestamp (which the running max still
remembers).
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from diskless._types import ErrorCode, OffsetSpec, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    DeleteRecordsRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.coordinator._backends.sql_rows import (
    TIME_MARK,
    TIME_MARK_OFFSETS,
    first_reaching,
)
from testkit.commits import Committer, batch
from testkit.postgres import database_dsn

TP = TopicPartition("t", 0)
Batch = tuple[int, int, int]
"""(base offset, last offset, timestamp) of a committed batch."""


def _seed() -> int:
    seed = int(os.environ.get("TIME_MARKS_SEED", random.randrange(1 << 32)))
    print(f"TIME_MARKS_SEED={seed}")
    return seed


def expected(batches: list[Batch], log_start: int, ts: int) -> tuple[int, int, list[int]]:
    """The rows the coordinator names for the read path, as base offsets: the first retained
    batch whose timestamp is at least `ts`, and when the log start cuts it the next such batch
    (MAX_TIMESTAMP: the first with the largest timestamp, answered by its first kept offset
    should its records not); with the response's own offset and timestamp."""
    kept = [b for b in batches if b[1] >= log_start]
    if ts == OffsetSpec.MAX_TIMESTAMP:
        top = max((b[2] for b in kept), default=None)
        hits = [b for b in kept if b[2] == top][:1]
        if not hits:
            return -1, -1, []
        return max(hits[0][0], log_start), hits[0][2], [hits[0][0]]
    hits = [b for b in kept if b[2] >= ts]
    if hits and hits[0][0] >= log_start:
        hits = hits[:1]
    return -1, -1, [b[0] for b in hits[:2]]


def _named(answer: ListOffsetsResponse) -> tuple[int, int, list[int]]:
    rows = [] if answer.lookup is None else [b.base_offset for b in answer.lookup.batches]
    return answer.offset, answer.timestamp, rows


async def _commit_many(coordinator: BatchCoordinator, rng: random.Random, now: int) -> list[Batch]:
    """About 45 marks' worth of batches, whose timestamps rise with noise and jump now and then;
    the largest is in the middle."""
    committer = Committer(coordinator)
    committed: list[Batch] = []
    for index in range(30):
        specs: list[tuple[int, int]] = []
        for _ in range(12):
            count = rng.choice([1, 2, 7, 90, 300])
            drift = len(committed) * 1_000 + len(specs) * 80
            ts = now - 10_000_000 + drift + rng.choice([0, 0, 0, -50_000, 40_000, 3_000_000])
            specs.append((count, ts))
        if index == 12:
            specs[5] = (3, now)  # the largest timestamp, with many batches after it
        results = await committer.commit([batch(TP, count=c, ts=t) for c, t in specs])
        for (count, ts), result in zip(specs, results, strict=True):
            assert result.error == ErrorCode.NONE
            committed.append((result.base_offset, result.base_offset + count - 1, ts))
    return committed


async def _check_all(
    coordinator: BatchCoordinator, batches: list[Batch], log_start: int, rng: random.Random
) -> int:
    targets = [OffsetSpec.MAX_TIMESTAMP, 0, batches[-1][2] + 1]
    targets += [b[2] for b in rng.sample(batches, 40)]
    targets += [b[2] + 1 for b in rng.sample(batches, 20)]
    targets += [
        rng.randrange(batches[0][2] - 100_000, batches[-1][2] + 3_100_000) for _ in range(40)
    ]
    answers = await coordinator.list_offsets([ListOffsetsRequest(TP, ts) for ts in targets])
    for ts, answer in zip(targets, answers, strict=True):
        assert answer.error == ErrorCode.NONE
        assert _named(answer) == expected(batches, log_start, ts), (ts, log_start)
    return len(targets)


async def test_time_lookups_agree_with_the_committed_batches(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    rng = random.Random(_seed())
    await coordinator.create_topic(TP.topic, 1)
    batches = await _commit_many(coordinator, rng, clock.now_ms())
    marks = sum(1 for b in batches if -(-b[0] // TIME_MARK_OFFSETS) <= b[1] // TIME_MARK_OFFSETS)
    assert marks >= 20, marks
    await _check_all(coordinator, batches, 0, rng)

    # Trim into a batch, then past the batch with the largest timestamp (when it is later).
    top = max(range(len(batches)), key=lambda i: (batches[i][2], -i))
    log_start = 0
    for point in sorted((batches[len(batches) // 2][0] + 1, batches[top][1] + 1)):
        (deleted,) = await coordinator.delete_records([DeleteRecordsRequest(TP, point)])
        assert deleted.error == ErrorCode.NONE
        log_start = max(log_start, point)
        await _check_all(coordinator, batches, log_start, rng)


def test_a_time_lookup_probes_the_marks_index_then_walks_the_primary_key(tmp_path: Path) -> None:
    """Both halves of a lookup use an index: the marks' partial index (only if the query repeats
    its condition exactly) and the primary key."""
    path = tmp_path / "plan.db"

    async def create() -> None:
        coordinator = SqliteBatchCoordinator(path)
        await coordinator.create_topic(TP.topic, 1)
        await coordinator.close()

    asyncio.run(create())
    conn = sqlite3.connect(path)
    try:
        plan = " | ".join(
            str(row[-1])
            for row in conn.execute("EXPLAIN QUERY PLAN " + first_reaching("?1", "?2"), (1, 5))
        )
        indexes = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
    finally:
        conn.close()
    assert "INDEX batches_time_marks (partition_id=? AND ts_running_max<?)" in plan, plan
    assert "USING PRIMARY KEY (partition_id=? AND base_offset>?)" in plan, plan
    assert not {"batches_by_timestamp", "batches_by_running_max"} & indexes


@pytest.mark.parametrize("offsets", [(0, 0), (0, 1023), (1, 1023), (1, 1024), (1025, 2047)])
def test_a_batch_is_a_mark_when_it_holds_a_multiple_of_the_interval(
    tmp_path: Path, offsets: tuple[int, int]
) -> None:
    conn = sqlite3.connect(tmp_path / "marks.db")
    try:
        (is_mark,) = conn.execute(
            f"SELECT {TIME_MARK} FROM (SELECT ? AS base_offset, ? AS last_offset)", offsets
        ).fetchone()
    finally:
        conn.close()
    base, last = offsets
    holds = any(o % TIME_MARK_OFFSETS == 0 for o in range(base, last + 1))
    assert bool(is_mark) == holds


async def test_postgres_can_answer_a_time_lookup_from_the_partial_index(tmp_path: Path) -> None:
    """PostgreSQL uses a partial index only when it can prove the query implies its condition;
    with sequential scans priced out (the test table is tiny), the plan shows that it can."""
    dsn = database_dsn(tmp_path)
    coordinator = PostgresBatchCoordinator(dsn)
    try:
        await coordinator.create_topic(TP.topic, 1)
    finally:
        await coordinator.close()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + first_reaching("1", "5")))
        indexes = {
            row[0]
            for row in await conn.fetch(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'batches'"
            )
        }
    finally:
        await conn.close()
    assert "batches_time_marks" in plan, plan
    assert not {"batches_by_timestamp", "batches_by_running_max"} & indexes
