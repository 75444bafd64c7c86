"""The retention scheduler: bounded work per run, and storage converging to the retention bound."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from diskless import BrokerConfig, DisklessBroker, ManualClock, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    FaultyBatchCoordinator,
    RetentionResult,
    TopicConfig,
)
from diskless.errors import CoordinatorUnavailableError
from diskless.lifecycle import RetentionScheduler, RetentionSchedulerConfig
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.wal import sized_batch
from tests.lifecycle._helpers import (
    GRACE_MS,
    PREFIX,
    UNREFERENCED_GRACE_MS,
    CoordinatorFactory,
    cluster,
    run_virtual,
)

BATCH_BYTES = 400


class ScriptedRetention(FaultyBatchCoordinator):
    """Answers `enforce_retention` from a script (None raises), recording each `max_batches`."""

    def __init__(self, inner: BatchCoordinator, script: list[RetentionResult | None]) -> None:
        super().__init__(inner, random.Random(0))
        self.script: Iterator[RetentionResult | None] = iter(script)
        self.asked: list[int] = []

    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:
        self.asked.append(max_batches)
        result = next(self.script, RetentionResult(0, 0, more=False))
        if result is None:
            raise CoordinatorUnavailableError("injected")
        return result


async def test_as_a_context_manager_it_runs_every_period_and_stops_on_exit(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    scripted = ScriptedRetention(c.coordinator, [None])  # the first run fails, later runs go on
    config = RetentionSchedulerConfig(period_ms=1_000)
    async with RetentionScheduler(scripted, config, c.clock) as scheduler:
        await c.clock.advance(0)
        assert len(scripted.asked) == 1  # a run at start
        await c.clock.advance(2.5)
        assert len(scripted.asked) == 3  # and one a period
    await c.clock.advance(10)
    assert len(scripted.asked) == 3  # none after the scheduler closed
    stats = scheduler.stats()
    assert (stats.runs, stats.run_errors) == (3, 1)


async def test_a_run_loops_while_more_within_its_budget(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    more = RetentionResult(batches_deleted=5, bytes_deleted=50, more=True)
    scripted = ScriptedRetention(c.coordinator, [more] * 7 + [RetentionResult(2, 20, more=False)])
    scheduler = RetentionScheduler(
        scripted, RetentionSchedulerConfig(batches_per_call_max=5, calls_per_run_max=3), c.clock
    )
    first = await scheduler.run_once()
    assert (first.calls, first.batches_deleted, first.bytes_deleted, first.more) == (
        3,
        15,
        150,
        True,
    )
    assert scripted.asked == [5, 5, 5]
    second = await scheduler.run_once()
    assert (second.calls, second.more) == (3, True)
    third = await scheduler.run_once()
    assert (third.calls, third.batches_deleted, third.more) == (2, 7, False)
    stats = scheduler.stats()
    assert (stats.runs, stats.calls, stats.batches_deleted, stats.runs_with_work_left) == (
        3,
        8,
        37,
        2,
    )


async def test_a_failed_run_counts_and_the_loop_goes_on(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    scripted = ScriptedRetention(c.coordinator, [RetentionResult(1, 10, more=True), None])
    scheduler = RetentionScheduler(scripted, RetentionSchedulerConfig(period_ms=1_000), c.clock)
    with pytest.raises(CoordinatorUnavailableError):
        await scheduler.run_once()
    assert scheduler.stats().run_errors == 1
    assert scheduler.stats().batches_deleted == 1

    scripted.script = iter([None, None, RetentionResult(4, 40, more=False)])
    async with scheduler:
        await run_virtual(c.clock, 5, step_s=1.0)
    assert scheduler.stats().run_errors == 3
    assert scheduler.stats().batches_deleted == 5
    assert scheduler.stats().runs >= 6


def test_config_rejects_unbounded_work() -> None:
    with pytest.raises(ValueError):
        RetentionSchedulerConfig(batches_per_call_max=0)
    with pytest.raises(ValueError):
        RetentionSchedulerConfig(calls_per_run_max=10**9)
    with pytest.raises(ValueError):
        RetentionSchedulerConfig(period_ms=0)


# --- convergence through real brokers -------------------------------------------------------
async def _produce_second(
    broker: DisklessBroker, clock: ManualClock, partitions: list[TopicPartition], tag: int
) -> None:
    """One batch per partition, each its own object, within one virtual second."""
    started = clock.monotonic()
    for tp in partitions:
        batch = sized_batch(BATCH_BYTES, tag=tag, timestamp_ms=clock.now_ms())
        task = asyncio.create_task(broker.produce({tp: batch}))
        while not task.done():
            await asyncio.sleep(0.0005)
            await clock.advance(0.005)
        [result] = task.result().values()
        assert result.error == 0, result
    await clock.advance(started + 1.0 - clock.monotonic())


@pytest.mark.parametrize(
    ("retention", "kept_min", "kept_max"),
    [
        # Kafka keeps at least retention.bytes: 10 batches and one byte means 11 batches.
        (TopicConfig(retention_bytes=10 * BATCH_BYTES + 1), 11, 11),
        # One batch a second, 20 s retention: 20 batches, 21 if one sits on the boundary.
        (TopicConfig(retention_ms=20_000), 20, 21),
    ],
    ids=["retention.bytes", "retention.ms"],
)
async def test_storage_converges_to_the_retention_bound(
    new_coordinator: CoordinatorFactory, retention: TopicConfig, kept_min: int, kept_max: int
) -> None:
    clock = ManualClock()
    c = await cluster(new_coordinator, store=MemoryObjectStore(clock), clock=clock)
    await c.coordinator.create_topic("retained", 2, retention)
    partitions = [TopicPartition("retained", p) for p in range(2)]
    config = BrokerConfig(wal=WalConfig(commit_interval_ms=1), request_timeout_ms=3_600_000)
    manager = c.manager(deletes_per_cycle_max=50)
    scheduler = RetentionScheduler(
        c.coordinator,
        RetentionSchedulerConfig(batches_per_call_max=4, calls_per_run_max=2),
        clock,
    )
    grace_s = UNREFERENCED_GRACE_MS // 1000
    async with DisklessBroker(1, c.store, c.coordinator, config, clock=clock) as broker:
        for second in range(40):  # a backlog first: retention is not running yet
            await _produce_second(broker, clock, partitions, second)
        assert len(await c.keys()) == 80
        for second in range(40, 100):  # then steady state: retention and the manager keep up
            await _produce_second(broker, clock, partitions, second)
            run = await scheduler.run_once()
            assert run.batches_deleted <= 8
            await manager.run_cycle()
            if second >= 70:  # the bound, plus what waits out its unreferenced grace
                assert len(await c.keys()) <= 2 * (kept_max + 2 * (grace_s + 1))
    assert scheduler.stats().runs_with_work_left > 0  # the backlog took several bounded runs

    while (await scheduler.run_once()).more:
        pass
    await clock.advance(grace_s + 1)
    await manager.run_cycle()
    remaining = [info async for info in c.store.list_all(PREFIX)]
    object_bytes = remaining[0].size
    assert {info.size for info in remaining} == {object_bytes}
    stats = await c.coordinator.file_stats()
    assert (stats.unreferenced_objects, stats.condemned_objects) == (0, 0)
    assert (stats.live_objects, stats.live_bytes) == (len(remaining), len(remaining) * object_bytes)
    # The store holds exactly the retained batches' objects: the retention bound.
    assert 2 * kept_min <= len(remaining) <= 2 * kept_max
    deleted = 200 - len(remaining)
    assert scheduler.stats().batches_deleted == deleted
    assert manager.stats().deleted_objects == deleted
    assert manager.stats().deleted_bytes == deleted * object_bytes
    assert GRACE_MS > 0
