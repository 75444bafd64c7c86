"""Integration: a fetch resolves every partition it names in one batched lookup.

A store over a network pays a round trip per statement, and a fetch names many partitions: the
durable stores answer `find_batches` with one statement for the partitions' states and first rows
(and one more for the aborted transactions, when a READ_COMMITTED answer lists some), and
`partition_offsets` with one, whatever the number of partitions. Statements are counted on the
real databases: SQLite's trace callback on the read connection, and every statement the
PostgreSQL read view sends through its connection. A partition whose answer reaches past the
rows loaded first pages on, with the same answer on every backend, and the partitions that do
load their next rows together.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    FetchBudget,
    FindBatchesRequest,
    FindBatchesResponse,
)
from diskless.coordinator._backends.postgres_reads import PostgresReads
from diskless.coordinator._backends.sqlite_reads import SqliteReads
from diskless.coordinator._rules import fetch as fetch_rules
from diskless.coordinator._rules import reads as reads_rules
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS
from testkit.backends import open_coordinator
from testkit.commits import Committer, batch
from tests.coordinator._helpers import consolidate

TOPIC = "many"
PARTITIONS = 50
FEW = 5
STATEMENTS_MAX = 3
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
COMMITTED = IsolationLevel.READ_COMMITTED
PID = 7
ALL = 1 << 30


class _CountingConnection:
    """An asyncpg connection that notes each statement sent through it."""

    _SENDS = frozenset({"fetch", "fetchrow", "fetchval", "execute", "executemany"})

    def __init__(self, conn: Any, statements: list[str]) -> None:
        self._conn = conn
        self._statements = statements

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._conn, name)
        if name not in self._SENDS:
            return attr

        def sent(sql: str, *args: Any, **kwargs: Any) -> Any:
            self._statements.append(sql)
            return attr(sql, *args, **kwargs)

        return sent


@pytest.fixture(params=("sqlite", "postgres"))
async def counted(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[BatchCoordinator, list[str]]]:
    """A durable coordinator, and the statements its read views run (from the last clear)."""
    statements: list[str] = []
    if request.param == "sqlite":
        sqlite_init = SqliteReads.__init__

        def traced(self: SqliteReads, conn: sqlite3.Connection) -> None:
            sqlite_init(self, conn)
            conn.set_trace_callback(
                lambda sql: None if sql.startswith(("BEGIN", "COMMIT")) else statements.append(sql)
            )

        monkeypatch.setattr(SqliteReads, "__init__", traced)
    else:
        postgres_init = PostgresReads.__init__

        def counting(self: PostgresReads, conn: Any, *args: Any) -> None:
            postgres_init(self, _CountingConnection(conn, statements), *args)

        monkeypatch.setattr(PostgresReads, "__init__", counting)
    coordinator = open_coordinator(request.param, tmp_path, ManualClock())
    try:
        yield coordinator, statements
    finally:
        await coordinator.close()


async def _populate(coordinator: BatchCoordinator) -> None:
    """Every partition: two rows, an aborted transactional batch with its marker, one more row;
    partitions 0 and 1 have their first three rows consolidated into an extent."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    assert await coordinator.create_topic(TOPIC, PARTITIONS) is ErrorCode.NONE
    c = Committer(coordinator)
    await c.commit([batch(tp) for tp in tps for _ in range(2)])  # 0, 1
    assert await coordinator.add_partitions_to_txn(PID, 0, tps) == [ErrorCode.NONE] * PARTITIONS
    await c.commit([batch(tp, pid=PID, epoch=0, seq=0, txn=True) for tp in tps])  # 2
    markers = await coordinator.write_txn_markers(PID, 0, 1, False, 0, tps)  # 3
    assert markers == [ErrorCode.NONE] * PARTITIONS
    await c.commit([batch(tp) for tp in tps])  # 4


async def _fetch(
    coordinator: BatchCoordinator, statements: list[str], count: int, isolation: IsolationLevel
) -> tuple[list[FindBatchesResponse], int]:
    """A fetch of the first `count` partitions from offset 1; its answers and statements."""
    statements.clear()
    requests = [
        FindBatchesRequest(TopicPartition(TOPIC, p), 1, 1 << 20, isolation) for p in range(count)
    ]
    responses = await coordinator.find_batches(requests, ALL)
    return responses, len(statements)


def _spans(response: FindBatchesResponse) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in response.batches]


async def test_a_fetch_costs_the_same_statements_for_5_and_50_partitions(
    counted: tuple[BatchCoordinator, list[str]],
) -> None:
    coordinator, statements = counted
    await _populate(coordinator)
    for isolation in (UNCOMMITTED, COMMITTED):
        few, few_statements = await _fetch(coordinator, statements, FEW, isolation)
        many, many_statements = await _fetch(coordinator, statements, PARTITIONS, isolation)
        assert few == many[:FEW]
        for response in many:
            assert response.error is ErrorCode.NONE
            assert _spans(response) == [(1, 1), (2, 2), (3, 3), (4, 4)]
            listed = [(PID, 2)] if isolation is COMMITTED else []
            assert response.aborted_transactions == listed
        assert few_statements == many_statements <= STATEMENTS_MAX, (isolation, statements)


async def test_read_committed_without_aborted_transactions_needs_one_statement(
    counted: tuple[BatchCoordinator, list[str]],
) -> None:
    coordinator, statements = counted
    await _populate(coordinator)
    statements.clear()
    requests = [
        FindBatchesRequest(TopicPartition(TOPIC, p), 4, 1 << 20, COMMITTED)
        for p in range(PARTITIONS)
    ]
    for response in await coordinator.find_batches(requests, ALL):
        assert (_spans(response), response.aborted_transactions) == ([(4, 4)], [])
    assert len(statements) == 1, statements


async def test_partition_offsets_is_one_statement(
    counted: tuple[BatchCoordinator, list[str]],
) -> None:
    coordinator, statements = counted
    await _populate(coordinator)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    statements.clear()
    found = await coordinator.partition_offsets([*tps, TopicPartition("absent", 0)])
    assert len(statements) == 1, statements
    assert found[-1] is None
    for offsets in found[:-1]:
        assert offsets is not None
        assert (offsets.high_watermark, offsets.log_start_offset) == (5, 0)


@pytest.fixture
async def coordinator_with_extents(
    coordinator: BatchCoordinator, clock: ManualClock
) -> BatchCoordinator:
    """Partition 0: an extent of 4 rows, then 40 rows, an aborted transaction at 30 (marker at
    31) among them; partition 1: 3 rows."""
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert await coordinator.create_topic("t", 2) is ErrorCode.NONE
    c = Committer(coordinator)
    await c.commit([batch(tp0) for _ in range(4)])
    await consolidate(coordinator, clock)
    await c.commit([batch(tp0) for _ in range(26)] + [batch(tp1) for _ in range(3)])
    assert await coordinator.add_partitions_to_txn(PID, 0, [tp0]) == [ErrorCode.NONE]
    await c.one(batch(tp0, pid=PID, epoch=0, seq=0, txn=True))  # 30
    assert await coordinator.write_txn_markers(PID, 0, 1, False, 0, [tp0]) == [ErrorCode.NONE]
    await c.commit([batch(tp0) for _ in range(12)])  # 32..43
    return coordinator


@pytest.mark.parametrize("isolation", [UNCOMMITTED, COMMITTED])
async def test_an_answer_past_the_first_rows_pages_on(
    coordinator_with_extents: BatchCoordinator, isolation: IsolationLevel
) -> None:
    coordinator = coordinator_with_extents
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert FETCH_HEAD_ROWS < 40
    committed = isolation is COMMITTED
    full, others = await coordinator.find_batches(
        [FindBatchesRequest(tp0, 2, 1 << 20, isolation), FindBatchesRequest(tp1, 0, 1 << 20)],
        ALL,
    )
    assert _spans(full) == [(0, 3), *[(o, o) for o in range(4, 44)]]
    assert full.aborted_transactions == ([(PID, 30)] if committed else [])
    rows = full.batches[1:]  # past the extent, where the budgets are `FetchBudget`'s exactly
    for offset, partition_max, total in [
        (5, 1 << 20, ALL),
        (5, 2500, ALL),  # stops before the aborted transaction
        (5, 1 << 20, 2700),  # the response budget stops it
        (5, 1 << 20, 4000),
        (20, 1000, ALL),  # within the rows loaded first
        (31, 1 << 20, ALL),  # the aborted transaction's marker
        (32, 1 << 20, ALL),
    ]:
        first, second = await coordinator.find_batches(
            [
                FindBatchesRequest(tp0, offset, partition_max, isolation),
                FindBatchesRequest(tp1, 0, 1 << 20, isolation),
            ],
            total,
        )
        budget = FetchBudget(total)
        taken = budget.take([b for b in rows if b.last_offset >= offset], partition_max)
        assert _spans(first) == [(b.base_offset, b.last_offset) for b in taken], offset
        overlaps = committed and taken and offset <= 31 and taken[-1].last_offset >= 30
        assert first.aborted_transactions == ([(PID, 30)] if overlaps else []), offset
        assert first.high_watermark == 44
        later = budget.take(others.batches, 1 << 20)
        assert second.batches == later, offset


async def test_partitions_that_page_on_load_their_next_rows_together(
    counted: tuple[BatchCoordinator, list[str]],
) -> None:
    """A backlog deeper than the rows loaded first, on every partition: the partitions that
    reach past them load their next rows in one statement, whatever their number."""
    coordinator, statements = counted
    deep = 3 * FETCH_HEAD_ROWS
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    assert await coordinator.create_topic(TOPIC, PARTITIONS) is ErrorCode.NONE
    await Committer(coordinator).commit([batch(tp) for tp in tps for _ in range(deep)])
    counts = []
    for count in (FEW, PARTITIONS):
        statements.clear()
        requests = [FindBatchesRequest(tp, 0, 1 << 20) for tp in tps[:count]]
        for response in await coordinator.find_batches(requests, ALL):
            assert _spans(response) == [(o, o) for o in range(deep)]
        counts.append(len(statements))
    assert counts[0] == counts[1] <= STATEMENTS_MAX, statements


async def _paged(
    coordinator: BatchCoordinator,
    monkeypatch: pytest.MonkeyPatch,
    sizes: list[int],
    partition_max: int,
) -> tuple[list[tuple[int, int]], list[int]]:
    """One partition of batches of `sizes`, fetched from 0 within `partition_max`: the spans
    answered, and the rows a partition each page-on lookup loaded."""
    pages: list[int] = []
    heads_lookup = reads_rules.heads_lookup

    def recorded(wanted: list[tuple[TopicPartition, int]], rows: int) -> Any:
        pages.append(rows)
        return heads_lookup(wanted, rows)

    monkeypatch.setattr(fetch_rules, "heads_lookup", recorded)
    tp = TopicPartition(TOPIC, 0)
    assert await coordinator.create_topic(TOPIC, 1) is ErrorCode.NONE
    await Committer(coordinator).commit([batch(tp, size=size) for size in sizes])
    (response,) = await coordinator.find_batches([FindBatchesRequest(tp, 0, partition_max)], ALL)
    return _spans(response), pages


async def test_a_page_on_loads_the_rows_the_budget_leaves_room_for(
    counted: tuple[BatchCoordinator, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of one size: the page after the first rows holds what the partition's budget has
    left at their size, and one row more, in one lookup."""
    wanted = 3 * FETCH_HEAD_ROWS + 5
    spans, pages = await _paged(
        counted[0], monkeypatch, [1000] * 10 * FETCH_HEAD_ROWS, wanted * 1000
    )
    assert spans == [(o, o) for o in range(wanted)]
    assert pages == [wanted - FETCH_HEAD_ROWS + 1]


async def test_a_page_on_short_of_the_budget_pages_on_fourfold(
    counted: tuple[BatchCoordinator, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large rows first, then small ones: the sized page falls short, the next pages grow
    fourfold, and the answer is the budget's exactly."""
    sizes = [1000] * FETCH_HEAD_ROWS + [100] * 300
    small = 100
    spans, pages = await _paged(
        counted[0], monkeypatch, sizes, FETCH_HEAD_ROWS * 1000 + small * 100
    )
    assert spans == [(o, o) for o in range(FETCH_HEAD_ROWS + small)]
    assert len(pages) >= 2
    assert all(later >= 4 * earlier for earlier, later in itertools.pairwise(pages))
