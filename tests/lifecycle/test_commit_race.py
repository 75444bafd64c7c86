"""The race the grace exists for: a commit still in flight while the file manager runs.

A broker uploads an object and its commit stalls (held at a gate in the coordinator). While the
commit can still succeed — within the grace — the manager must leave the object alone. Once the
grace has passed the manager condemns it, and the late commit must then be rejected: the produce
gets an error, nothing is acknowledged, and the object is deleted.
"""

from __future__ import annotations

import asyncio

from diskless import BrokerConfig, DisklessBroker, ErrorCode, ManualClock
from diskless.coordinator import (
    CommitFileResult,
    CommitRefusal,
    FileState,
)
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.wal import build_batch
from tests.lifecycle._helpers import (
    GRACE_MS,
    TP,
    UNREFERENCED_GRACE_MS,
    Cluster,
    CoordinatorFactory,
    GatedCoordinator,
    clock_advance,
    cluster,
    read_all,
    settle,
)


async def _stalled_produce(
    new_coordinator: CoordinatorFactory,
) -> tuple[Cluster, GatedCoordinator, DisklessBroker, asyncio.Task[object], str]:
    """A produce whose object is uploaded and whose commit waits at the gate."""
    clock = ManualClock()
    c = await cluster(new_coordinator, store=MemoryObjectStore(clock), clock=clock)
    gated = GatedCoordinator(c.coordinator)
    broker = DisklessBroker(
        1,
        c.store,
        gated,
        BrokerConfig(wal=WalConfig(commit_interval_ms=10), request_timeout_ms=3_600_000),
        clock=clock,
    )
    await broker.start()
    produce: asyncio.Task[object] = asyncio.create_task(
        broker.produce({TP: build_batch([b"in-flight"])})
    )
    while not gated.arrived.is_set():
        await settle(clock)
        await clock.advance(0.01)
    [key] = await c.keys()
    assert await c.state(key) is None  # uploaded, not committed
    return c, gated, broker, produce, key


async def test_in_flight_commit_within_grace_is_never_disturbed(
    new_coordinator: CoordinatorFactory,
) -> None:
    c, gated, broker, produce, key = await _stalled_produce(new_coordinator)
    manager = c.manager()
    for _ in range(4):  # cycles all through the grace, the commit still stalled
        await clock_advance(c, (GRACE_MS - 1_500) / 4000)
        report = await manager.run_cycle()
        assert report.orphans_condemned == 0
        assert report.deleted_objects == 0
        assert await c.state(key) is None
        assert await c.keys() == [key]

    gated.gate.set()
    result = await produce
    assert isinstance(result, dict)
    assert result[TP].error == ErrorCode.NONE
    assert result[TP].base_offset == 0
    [outcome] = gated.outcomes
    assert isinstance(outcome, CommitFileResult) and outcome.refused is None

    for _ in range(3):  # long after: a committed object stays
        await clock_advance(c, (GRACE_MS + UNREFERENCED_GRACE_MS) / 1000)
        await manager.run_cycle()
    assert await c.keys() == [key]
    assert await c.state(key) is FileState.LIVE
    assert await read_all(c) == [b"in-flight"]
    await broker.close()


async def test_commit_after_condemnation_is_rejected_and_not_acknowledged(
    new_coordinator: CoordinatorFactory,
) -> None:
    c, gated, broker, produce, key = await _stalled_produce(new_coordinator)
    manager = c.manager()
    await clock_advance(c, GRACE_MS / 1000 + 1)
    report = await manager.run_cycle()
    assert report.orphans_condemned == 1
    assert await c.state(key) is FileState.CONDEMNED

    gated.gate.set()  # the zombie commit arrives after all
    result = await produce
    assert isinstance(result, dict)
    assert result[TP].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert result[TP].base_offset == -1
    [outcome] = gated.outcomes
    assert isinstance(outcome, CommitFileResult)
    assert outcome.refused is CommitRefusal.OBJECT_KEY_CONFLICT

    await clock_advance(c, UNREFERENCED_GRACE_MS / 1000 + 1)
    report = await manager.run_cycle()
    assert report.deleted_objects == 1
    assert await c.keys() == []
    assert await c.state(key) is None
    assert await read_all(c) == []  # nothing was acknowledged, nothing is readable
    await broker.close()
