"""SQLite-only behaviour: persistence across reopen, schema versioning, error translation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import CommittedOffset, FindBatchesRequest, SqliteBatchCoordinator
from diskless.coordinator._backends.sqlite_schema import MIGRATIONS, SCHEMA_VERSION
from diskless.errors import CommitOutcomeUnknownError, CoordinatorUnavailableError
from testkit.commits import Committer, batch

TP = TopicPartition("t", 0)


async def test_state_survives_reopen(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "c.db"
    first = SqliteBatchCoordinator(path, clock=clock)
    await first.create_topic("t", 1)
    c = Committer(first)
    await c.one(batch(TP, pid=1, epoch=0, seq=0, count=3))
    await first.close()
    second = SqliteBatchCoordinator(path, clock=clock)
    try:
        c2 = Committer(second)  # re-registering fences the old epoch
        assert (await c2.one(batch(TP, pid=1, epoch=0, seq=0, count=3))).duplicate
        assert (await c2.one(batch(TP, pid=1, epoch=0, seq=3))).base_offset == 3
        (response,) = await second.find_batches([FindBatchesRequest(TP, 0, 1 << 20)], 1 << 20)
        assert response.high_watermark == 4
    finally:
        await second.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


async def test_topics_of_an_older_schema_get_an_id_each_that_every_process_reads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:12]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 12")
    for name in ("a", "b"):
        conn.execute(
            "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
            " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
            " timestamp_after_max_ms) VALUES (?, 0, 0, -1, -1, 1048588, 0, 0)",
            (name,),
        )
    conn.close()
    first, second = SqliteBatchCoordinator(path), SqliteBatchCoordinator(path)
    try:
        ids = {d.name: d.topic_id for d in await first.describe_topics()}
        assert sorted(ids) == ["a", "b"]
        assert ids["a"] != ids["b"]
        assert {d.name: d.topic_id for d in await second.describe_topics()} == ids
    finally:
        await first.close()
        await second.close()


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    coordinator = SqliteBatchCoordinator(path)
    try:
        with pytest.raises(CoordinatorUnavailableError):
            await coordinator.describe_topics()
    finally:
        await coordinator.close()


async def test_offsets_committed_before_leader_epochs_were_kept_read_back_as_minus_one(
    tmp_path: Path,
) -> None:
    """A file of the schema before `group_offsets.leader_epoch` is brought up to date with its
    committed offsets intact, and stores leader epochs from then on."""
    path = tmp_path / "c.db"
    conn = sqlite3.connect(path)
    with conn:
        for statements in MIGRATIONS[:12]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 12")
        conn.execute("INSERT INTO group_offsets VALUES ('g', 't', 0, 5, 'm')")
    conn.close()
    coordinator = SqliteBatchCoordinator(path)
    try:
        await coordinator.create_topic("t", 1)
        assert await coordinator.fetch_offsets("g") == {TP: CommittedOffset(5, "m", -1)}
        await coordinator.commit_offsets("g", {TP: CommittedOffset(6, None, 3)})
        assert await coordinator.fetch_offsets("g") == {TP: CommittedOffset(6, None, 3)}
    finally:
        await coordinator.close()


async def test_sqlite_errors_are_translated(tmp_path: Path) -> None:
    path = tmp_path / "not-a-database"
    path.write_bytes(b"this is not sqlite" * 100)
    coordinator = SqliteBatchCoordinator(path)
    try:
        with pytest.raises(CoordinatorUnavailableError):
            await coordinator.create_topic("t", 1)
    finally:
        await coordinator.close()


async def test_closed_coordinator_refuses_work(tmp_path: Path) -> None:
    coordinator = SqliteBatchCoordinator(tmp_path / "c.db")
    await coordinator.close()
    await coordinator.close()
    with pytest.raises(RuntimeError):
        await coordinator.describe_topics()


class _FailingCommit:
    """A connection stand-in whose COMMIT fails, as when the disk goes away at that moment."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)  # type: ignore[arg-type]

    def executemany(self, sql: str, *args: object) -> sqlite3.Cursor:
        return self._conn.executemany(sql, *args)  # type: ignore[arg-type]

    def close(self) -> None:
        self._conn.close()


async def test_failed_commit_statement_is_an_unknown_outcome(tmp_path: Path) -> None:
    coordinator = SqliteBatchCoordinator(tmp_path / "c.db")
    try:
        await coordinator.create_topic("t", 1)
        c = Committer(coordinator)
        await c.one(batch(TP))
        real = coordinator._store._conn
        assert real is not None
        coordinator._store._conn = _FailingCommit(real)  # type: ignore[assignment]
        with pytest.raises(CommitOutcomeUnknownError):
            await c.one(batch(TP))
        coordinator._store._conn = real
        (response,) = await coordinator.find_batches([FindBatchesRequest(TP, 0, 1 << 20)], 1 << 20)
        assert response.high_watermark == 1  # rolled back here; another outcome was possible
    finally:
        await coordinator.close()


async def test_busy_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    coordinator = SqliteBatchCoordinator(path, busy_timeout_ms=10, busy_retry_s=0.2)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        await coordinator.create_topic("t", 1)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(CoordinatorUnavailableError):
            await coordinator.create_topic("u", 1)
        blocker.execute("ROLLBACK")
        assert await coordinator.create_topic("u", 1) is ErrorCode.NONE
    finally:
        blocker.close()
        await coordinator.close()
