"""A commit that waits inside the SQLite coordinator is judged when it lands, not when it was sent.

The commit-age bound is what lets the file manager condemn, delete and forget an object nobody
committed. A commit that stalls on the coordinator's side — queued behind a busy worker, or
waiting for another process's write lock — must therefore read the clock inside its transaction:
checked at the time it was called, it would pass, land after the object was deleted and
forgotten, and acknowledge data that is gone. Both stalls run on one shared virtual clock.
(The in-memory backend applies every call at once: it has no such wait.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker, ErrorCode, ManualClock
from diskless.coordinator import CommitFileResult, CommitRefusal, SqliteBatchCoordinator
from diskless.lifecycle import FileManager
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.lock_holder import WriteLockHolder
from testkit.wal import build_batch
from tests.lifecycle._helpers import (
    TP,
    UNREFERENCED_GRACE_MS,
    Cluster,
    CommitRefused,
    GatedCoordinator,
    clock_advance,
    cluster,
    config,
    read_all,
)

COMMIT_AGE_MAX_MS = 25_000
"""Above the test WAL's commit budget (about 11 s), below what the manager's grace allows."""
ORPHAN_GRACE_MS = COMMIT_AGE_MAX_MS + 2_000  # skew 1 000 ms
WAL = WalConfig(commit_interval_ms=10, upload_timeout_ms=1_000, upload_attempts=1)


@pytest.fixture
async def sqlite_pair(tmp_path: Path) -> AsyncIterator[tuple[Cluster, SqliteBatchCoordinator]]:
    """A cluster whose coordinator the brokers use, and a second handle on the same file for
    the file manager (as another broker's process would have), on one virtual clock."""
    clock = ManualClock()
    db = tmp_path / "coordinator.db"
    handles: list[SqliteBatchCoordinator] = []

    def new(_: object) -> SqliteBatchCoordinator:
        handles.append(SqliteBatchCoordinator(db, clock=clock, commit_age_max_ms=COMMIT_AGE_MAX_MS))
        return handles[-1]

    c = await cluster(new, store=MemoryObjectStore(clock), clock=clock)
    try:
        yield c, new(clock)
    finally:
        for handle in handles:
            await handle.close()


def _manager(c: Cluster, coordinator: SqliteBatchCoordinator) -> FileManager:
    return FileManager(c.store, coordinator, config(orphan_grace_ms=ORPHAN_GRACE_MS), c.clock)


async def test_commit_held_behind_a_busy_worker_cannot_acknowledge_a_deleted_object(
    sqlite_pair: tuple[Cluster, SqliteBatchCoordinator],
) -> None:
    c, manager_handle = sqlite_pair
    assert isinstance(c.coordinator, SqliteBatchCoordinator)
    gated = GatedCoordinator(c.coordinator)
    gated.gate.set()  # no gate: only to see when the broker calls commit_file
    broker = DisklessBroker(
        1,
        c.store,
        gated,
        BrokerConfig(wal=WAL, request_timeout_ms=3_600_000),
        clock=c.clock,
    )
    await broker.start()
    # The coordinator's write worker is busy (with whatever came before) until `release`.
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(c.coordinator._store._executor, release.wait)
    try:
        produce = asyncio.create_task(broker.produce({TP: build_batch([b"late"])}))
        while not gated.arrived.is_set():
            await clock_advance(c, 0.01)
        [key] = await c.keys()  # uploaded; its commit was called while the key was young

        manager = _manager(c, manager_handle)
        await clock_advance(c, ORPHAN_GRACE_MS / 1000 + 1)
        assert (await manager.run_cycle()).orphans_condemned == 1
        await clock_advance(c, UNREFERENCED_GRACE_MS / 1000 + 1)
        assert (await manager.run_cycle()).deleted_objects == 1
        assert await c.keys() == []
        assert await manager_handle.file_info([key]) == [None]  # deleted and forgotten
        assert not produce.done()
    finally:
        release.set()
        await busy
    result = await produce
    assert isinstance(result, dict)
    assert result[TP].error == ErrorCode.KAFKA_STORAGE_ERROR, result
    [outcome] = gated.outcomes
    assert isinstance(outcome, CommitFileResult)
    assert outcome.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    assert await c.state(key) is None
    assert (
        await read_all(c, BrokerConfig(wal=WAL)) == []
    )  # nothing acknowledged, nothing pointing at a lost object
    await broker.close()


async def test_commit_waiting_for_another_process_lock_is_judged_when_it_lands(
    sqlite_pair: tuple[Cluster, SqliteBatchCoordinator], tmp_path: Path
) -> None:
    c, manager_handle = sqlite_pair
    key = await c.upload()
    with WriteLockHolder(tmp_path / "coordinator.db") as lock:
        late = asyncio.create_task(c.commit(key))  # young when called
        await asyncio.sleep(0.3)
        assert not late.done(), "the commit should be waiting for the other process's lock"
        await c.clock.advance(COMMIT_AGE_MAX_MS / 1000 + 1)  # old when it can land
        lock.release()
    with pytest.raises(CommitRefused):
        await asyncio.wait_for(late, 30)
    assert await c.state(key) is None

    # The object is an orphan like any other: condemned, then deleted, never acknowledged.
    manager = _manager(c, manager_handle)
    await c.clock.advance(ORPHAN_GRACE_MS / 1000)
    assert (await manager.run_cycle()).orphans_condemned == 1
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    assert (await manager.run_cycle()).deleted_objects == 1
    assert await c.keys() == []
    assert await read_all(c, BrokerConfig(wal=WAL)) == []
