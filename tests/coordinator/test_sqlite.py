"""SQLite-only behaviour: persistence across reopen, schema versioning, error translation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from diskless._types import TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import FindBatchesRequest, SqliteBatchCoordinator
from diskless.coordinator._sqlite_schema import SCHEMA_VERSION
from diskless.errors import CoordinatorUnavailableError

from ._helpers import Committer, batch

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
