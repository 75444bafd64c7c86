"""Integration: every coordinator operation reports its outcome to the coordinator's availability
(the engine does, for every backend), which logs an outage as two lines whatever the number of
failed calls.

Real failures: a SQLite file another connection holds locked, a PostgreSQL server stopped and
started again. The in-memory backend never fails; it is checked to stay available.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from diskless._availability import SETTLE_S
from diskless._types import ErrorCode
from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator, SqliteBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from testkit.backends import open_coordinator
from testkit.postgres import server

FAILED_CALLS = 5


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "diskless.availability" and r.levelno >= logging.WARNING
    ]


async def _fail(coordinator: BatchCoordinator, calls: int) -> None:
    for i in range(calls):
        with pytest.raises(CoordinatorUnavailableError):
            await coordinator.create_topic(f"t{i}", 1)


async def _recover(coordinator: BatchCoordinator) -> None:
    """Answers for the settling time: the outage ends."""
    await coordinator.describe_topics(["t0"])
    await asyncio.sleep(SETTLE_S)
    await coordinator.describe_topics(["t0"])


async def test_a_locked_sqlite_file_is_one_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "diskless.availability")
    coordinator = SqliteBatchCoordinator(
        tmp_path / "c.db", ManualClock(), busy_timeout_ms=10, busy_retry_s=0.05
    )
    try:
        assert await coordinator.create_topic("before", 1) is ErrorCode.NONE
        assert coordinator.availability.available
        holder = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        await _fail(coordinator, FAILED_CALLS)
        assert not coordinator.availability.available
        assert coordinator.availability.failed_calls == FAILED_CALLS
        holder.execute("ROLLBACK")
        holder.close()
        await _recover(coordinator)
        assert coordinator.availability.available
        down, back = _outage_lines(caplog)
        assert down.startswith("coordinator unreachable (CoordinatorUnavailableError(")
        assert back.startswith("coordinator reachable again after ")
        assert back.endswith(f"; {FAILED_CALLS} calls failed meanwhile")
    finally:
        await coordinator.close()


async def test_a_stopped_postgresql_server_is_one_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "diskless.availability")
    pg = server()
    coordinator = open_coordinator("postgres", tmp_path, ManualClock(), connect_timeout_ms=2_000)
    try:
        assert await coordinator.create_topic("before", 1) is ErrorCode.NONE
        await asyncio.to_thread(pg.stop)
        try:
            await _fail(coordinator, FAILED_CALLS)
        finally:
            await asyncio.to_thread(pg.start)
        assert not coordinator.availability.available
        for _ in range(20):  # the first calls after a restart may meet broken connections
            try:
                await coordinator.describe_topics(["before"])
                break
            except CoordinatorUnavailableError:
                await asyncio.sleep(0.1)
        await _recover(coordinator)
        assert coordinator.availability.available
        assert coordinator.availability.outages == 1
        down, back = _outage_lines(caplog)
        assert down.startswith("coordinator unreachable (")
        assert "calls failed meanwhile" in back
    finally:
        await coordinator.close()


async def test_a_backend_that_answers_stays_available(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "diskless.availability")
    coordinator = open_coordinator("memory", tmp_path, ManualClock())
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    assert await coordinator.create_topic("t", 1) is ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(ValueError):
        await coordinator.create_topic("bad/name", 1)  # refused: not the store failing
    assert coordinator.availability.available and coordinator.availability.outages == 0
    assert _outage_lines(caplog) == []
    await coordinator.close()
