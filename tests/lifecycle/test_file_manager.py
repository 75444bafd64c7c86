"""Unit tests of the file manager on virtual time, the in-memory store and coordinator."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from diskless import ManualClock
from diskless._object_keys import probe_key
from diskless.coordinator import FileInfo, FileState, FileStats
from diskless.errors import CoordinatorUnavailableError
from diskless.lifecycle import FileManager, FileManagerConfig, required_orphan_grace_ms
from diskless.storage import Fault, FaultyObjectStore, MemoryObjectStore, StoreOp
from tests.lifecycle._helpers import (
    GRACE_MS,
    PREFIX,
    UNREFERENCED_GRACE_MS,
    CommitRefused,
    CoordinatorFactory,
    YieldingStore,
    cluster,
    config,
    run_virtual,
)

SECOND = 1.0


# --- orphans ----------------------------------------------------------------------------------
async def test_orphan_is_condemned_only_after_grace_and_deleted_after_that(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    orphan = await c.upload()

    await c.clock.advance(GRACE_MS / 1000 - 1)  # 1 s short of the grace
    report = await manager.run_cycle()
    assert report.orphans_condemned == 0
    assert await c.state(orphan) is None
    assert await c.keys() == [orphan]

    await c.clock.advance(2 * SECOND)  # past the grace: condemned, kept while its grace runs
    report = await manager.run_cycle()
    assert report.orphans_condemned == 1
    assert await c.state(orphan) is FileState.CONDEMNED
    assert await c.keys() == [orphan]
    assert manager.stats().condemned_objects == 1
    assert manager.stats().condemned_bytes == 100

    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    report = await manager.run_cycle()
    assert report.deleted_objects == 1
    assert report.deleted_bytes == 100
    assert await c.keys() == []
    assert await c.state(orphan) is None  # forgotten once deleted
    stats = manager.stats()
    assert (stats.condemned_objects, stats.condemned_bytes, stats.deleted_objects) == (0, 0, 1)


async def test_condemned_orphan_cannot_be_committed(new_coordinator: CoordinatorFactory) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    orphan = await c.upload()
    await c.clock.advance(GRACE_MS / 1000 + 1)
    await manager.run_cycle()

    with pytest.raises(CommitRefused):
        await c.commit(orphan)
    assert await c.state(orphan) is FileState.CONDEMNED


async def test_committed_objects_are_never_deleted_while_live(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    live = [await c.committed() for _ in range(5)]
    for _ in range(10):
        await c.clock.advance(GRACE_MS / 1000)
        report = await manager.run_cycle()
        assert report.orphans_condemned == 0
        assert report.deleted_objects == 0
    assert await c.keys() == sorted(live)
    assert {await c.state(key) for key in live} == {FileState.LIVE}
    assert manager.stats().live_objects == 5
    assert manager.stats().live_bytes == 500


async def test_unreferenced_objects_are_deleted_after_their_grace(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    keys = [await c.committed(size=200) for _ in range(3)]
    await c.unreference_all()
    assert {await c.state(key) for key in keys} == {FileState.UNREFERENCED}

    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 - 1)
    report = await manager.run_cycle()
    assert report.deleted_objects == 0
    assert await c.keys() == sorted(keys)
    assert manager.stats().unreferenced_objects == 3
    assert manager.stats().unreferenced_bytes == 600

    await c.clock.advance(2 * SECOND)
    report = await manager.run_cycle()
    assert (report.deleted_objects, report.deleted_bytes) == (3, 600)
    assert await c.keys() == []
    assert [await c.state(key) for key in keys] == [None] * 3
    assert manager.stats().unreferenced_objects == 0


async def test_object_without_a_key_time_ages_by_last_modified(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    foreign = f"{PREFIX}not-a-wal-key"
    await c.store.put(foreign, b"x" * 10)
    await c.clock.advance(GRACE_MS / 1000 - 1)
    assert (await manager.run_cycle()).orphans_condemned == 0
    await c.clock.advance(2 * SECOND)
    assert (await manager.run_cycle()).orphans_condemned == 1
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    await manager.run_cycle()
    assert await c.keys() == []


async def test_a_write_probe_left_behind_is_never_condemned(
    new_coordinator: CoordinatorFactory,
) -> None:
    """A broker's write probe (`probe_key`) left by a crash between its put and its delete is
    neither an orphan nor a WAL object: its broker's next probe overwrites and deletes it."""
    c = await cluster(new_coordinator)
    manager = c.manager()
    probe = probe_key(PREFIX, 3)
    await c.store.put(probe, b"")
    await c.clock.advance(GRACE_MS / 1000 + UNREFERENCED_GRACE_MS / 1000 + 10)
    for _ in range(3):
        report = await manager.run_cycle()
        assert report.orphans_condemned == 0
        await c.clock.advance(GRACE_MS / 1000)
    assert await c.keys() == [probe]
    assert await c.state(probe) is None


# --- the watermark ----------------------------------------------------------------------------
async def test_watermark_skips_reconciled_keys(new_coordinator: CoordinatorFactory) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager(list_page_objects_max=10)
    old = [await c.committed() for _ in range(50)]
    await c.clock.advance(GRACE_MS / 1000 + 1)

    first = await manager.run_cycle()
    assert first.objects_listed == 50
    assert first.listing_calls == 5
    assert first.complete
    assert manager.watermark_ms == c.clock.now_ms() - GRACE_MS

    lists_before = c.store.stats().lists
    second = await manager.run_cycle()
    assert second.objects_listed == 0  # everything before the watermark is skipped
    assert second.listing_calls == 1
    assert c.store.stats().lists - lists_before == 1

    new = [await c.committed() for _ in range(7)]
    third = await manager.run_cycle()
    assert third.objects_listed == 7
    assert await c.keys() == sorted(old + new)


async def test_watermark_stops_at_unresolved_orphan_until_it_is_deleted(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    await c.committed()
    orphan = await c.upload()
    await c.committed()
    await c.clock.advance(GRACE_MS / 1000 + 1)

    orphan_ms = int(orphan[len(PREFIX) :].split("-")[0])
    await manager.run_cycle()  # condemns it; deletion waits for the unreferenced grace
    assert manager.watermark_ms == orphan_ms
    assert manager.stats().reconciliation_lag_ms == c.clock.now_ms() - orphan_ms
    # Waiting out its grace, the orphan is re-checked by name, not by listing everything again.
    await c.clock.advance(SECOND)
    report = await manager.run_cycle()
    assert (report.objects_listed, report.deleted_objects) == (0, 0)
    assert manager.watermark_ms == orphan_ms

    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    report = await manager.run_cycle()
    assert report.deleted_objects == 1
    assert manager.watermark_ms == c.clock.now_ms() - GRACE_MS
    assert manager.stats().reconciliation_lag_ms == GRACE_MS


async def test_too_many_pending_orphans_hold_the_listing_at_the_oldest(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager(pending_orphans_max=0)
    orphan = await c.upload()
    await c.committed()
    await c.clock.advance(GRACE_MS / 1000 + 1)
    assert (await manager.run_cycle()).orphans_condemned == 1
    report = await manager.run_cycle()
    assert report.objects_listed == 2  # listed again from the orphan on
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    await manager.run_cycle()
    assert orphan not in await c.keys()
    assert (await manager.run_cycle()).objects_listed == 0


async def test_an_orphan_deleted_by_another_manager_releases_the_watermark(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    fast_grace_ms = config().clock_skew_max_ms + 1
    assert fast_grace_ms < UNREFERENCED_GRACE_MS
    slow, fast = c.manager(), c.manager(unreferenced_grace_ms=fast_grace_ms)
    orphan = await c.upload()
    await c.clock.advance(GRACE_MS / 1000 + 1)
    assert (await slow.run_cycle()).orphans_condemned == 1
    assert slow.watermark_ms < c.clock.now_ms() - GRACE_MS
    await c.clock.advance(fast_grace_ms / 1000 + 1)
    assert (await fast.run_cycle()).deleted_objects == 1  # deleted and forgotten by the other
    assert await c.state(orphan) is None
    report = await slow.run_cycle()
    assert report.deleted_objects == 0
    assert slow.watermark_ms == c.clock.now_ms() - GRACE_MS
    assert slow.stats().condemned_bytes == 0


async def test_watermark_never_passes_now_minus_grace(new_coordinator: CoordinatorFactory) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager()
    young = await c.upload()  # unknown and within its grace: maybe its commit is on its way
    await c.clock.advance(3 * SECOND)
    await manager.run_cycle()
    assert manager.watermark_ms <= c.clock.now_ms() - GRACE_MS
    # ...so a cycle past its grace still lists it, and finds it.
    await c.clock.advance(GRACE_MS / 1000)
    assert (await manager.run_cycle()).orphans_condemned == 1
    assert await c.state(young) is FileState.CONDEMNED


async def test_rescan_finds_an_orphan_that_appeared_below_the_watermark(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager(rescan_interval_ms=60_000, rescan_objects_per_cycle_max=5)
    for _ in range(12):
        await c.committed()
    await c.clock.advance(GRACE_MS / 1000 + 1)
    await manager.run_cycle()
    # A zombie's very late upload, named long ago: the watermark has passed its time.
    late = await c.upload(age_ms=GRACE_MS + 500)
    assert late < f"{PREFIX}{manager.watermark_ms:013d}"
    await c.clock.advance(SECOND)
    assert (await manager.run_cycle()).orphans_condemned == 0  # the frontier cannot see it

    await c.clock.advance(60)
    condemned = 0
    for _ in range(4):  # 13 keys below the watermark, 5 per cycle
        condemned += (await manager.run_cycle()).orphans_condemned
    assert condemned == 1
    assert await c.state(late) is FileState.CONDEMNED
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    await manager.run_cycle()
    assert late not in await c.keys()
    assert len(await c.keys()) == 12


# --- bounded work -----------------------------------------------------------------------------
async def test_each_cycle_does_bounded_work_and_all_orphans_go_eventually(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager(
        list_objects_per_cycle_max=30,
        list_page_objects_max=10,
        deletes_per_cycle_max=25,
        delete_batch_objects_max=10,
    )
    orphans = [await c.upload() for _ in range(100)]
    await c.clock.advance(GRACE_MS / 1000 + UNREFERENCED_GRACE_MS / 1000 + 1)
    deleted = 0
    for _ in range(20):
        before = c.store.stats()
        report = await manager.run_cycle()
        spent = c.store.stats().minus(before)
        assert report.objects_listed <= 30
        assert spent.lists <= 3
        assert report.deleted_objects <= 25
        assert spent.delete_requests <= 3
        deleted += report.deleted_objects
        await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    assert deleted == len(orphans)
    assert await c.keys() == []
    assert manager.stats().deleted_objects == 100


async def test_failed_deletes_are_not_forgotten_and_are_retried(
    new_coordinator: CoordinatorFactory,
) -> None:
    clock = ManualClock()
    store = YieldingStore(MemoryObjectStore(clock))
    c = await cluster(new_coordinator, store=store, clock=clock)
    manager = c.manager()
    keys = [await c.committed() for _ in range(4)]
    await c.unreference_all()
    store.fail_deletes_of = {keys[0], keys[2]}
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)

    report = await manager.run_cycle()
    assert report.deleted_objects == 2
    assert report.delete_failures == 2
    assert await c.keys() == sorted([keys[0], keys[2]])
    assert await c.state(keys[0]) is FileState.UNREFERENCED  # still in the books
    assert await c.state(keys[1]) is None

    store.fail_deletes_of = set()
    report = await manager.run_cycle()
    assert report.deleted_objects == 2
    assert await c.keys() == []
    assert manager.stats().delete_failures == 2


async def test_a_failing_store_fails_the_step_not_the_cycle(
    new_coordinator: CoordinatorFactory,
) -> None:
    clock = ManualClock()
    faulty = FaultyObjectStore(MemoryObjectStore(clock), random.Random(1), clock=clock)
    c = await cluster(new_coordinator, store=faulty, clock=clock)
    manager = c.manager()
    key = await c.committed()
    await c.unreference_all()
    await c.clock.advance(UNREFERENCED_GRACE_MS / 1000 + 1)
    faulty.schedule(StoreOp.LIST, Fault.FAIL)
    faulty.schedule(StoreOp.DELETE, Fault.FAIL)
    report = await manager.run_cycle()
    assert report.errors == 1  # the listing; the failed delete is a retried failure
    assert report.delete_failures == 1
    assert await c.state(key) is FileState.UNREFERENCED
    report = await manager.run_cycle()
    assert report.errors == 0
    assert report.deleted_objects == 1
    assert await c.keys() == []


async def test_a_first_cycle_that_lists_nothing_reports_no_watermark_lag(
    new_coordinator: CoordinatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A new manager whose first listing fails has no watermark (0): its cycle line and its
    statistics say so, rather than a lag measured from 1970 (once logged as 57 years)."""
    caplog.set_level(logging.INFO, logger="diskless.lifecycle")
    clock = ManualClock()
    faulty = FaultyObjectStore(MemoryObjectStore(clock), random.Random(1), clock=clock)
    c = await cluster(new_coordinator, store=faulty, clock=clock)
    manager = c.manager()
    faulty.schedule(StoreOp.LIST, Fault.FAIL)
    report = await manager.run_cycle()
    assert (report.errors, report.watermark_ms) == (1, 0)
    assert manager.stats().reconciliation_lag_ms == 0
    (line,) = [r.getMessage() for r in caplog.records if "file manager cycle" in r.getMessage()]
    assert line.endswith("1 errors, nothing reconciled yet"), line
    await c.clock.advance(GRACE_MS / 1000)
    watermark_ms = (await manager.run_cycle()).watermark_ms  # a listing: the watermark is set
    assert watermark_ms > 0
    caplog.clear()
    faulty.schedule(StoreOp.LIST, Fault.FAIL)  # a lag is measured from it
    await c.clock.advance(1)
    report = await manager.run_cycle()
    assert report.watermark_ms == watermark_ms
    assert manager.stats().reconciliation_lag_ms == c.clock.now_ms() - watermark_ms
    (line,) = [r.getMessage() for r in caplog.records if "file manager cycle" in r.getMessage()]
    assert line.endswith(f"watermark lag {c.clock.now_ms() - watermark_ms} ms"), line


# --- several managers -------------------------------------------------------------------------
async def test_two_managers_concurrently_agree(new_coordinator: CoordinatorFactory) -> None:
    clock = ManualClock()
    c = await cluster(new_coordinator, store=YieldingStore(MemoryObjectStore(clock)), clock=clock)
    one, two = c.manager(list_page_objects_max=7), c.manager(list_page_objects_max=5)
    doomed = [await c.committed() for _ in range(20)]
    await c.unreference_all()
    live = [await c.committed() for _ in range(20)]
    orphans = [await c.upload() for _ in range(30)]
    for _ in range(12):
        await c.clock.advance(3 * SECOND)
        await asyncio.gather(one.run_cycle(), two.run_cycle())
        for key in live:  # a live object is never touched, at any point
            assert await c.state(key) is FileState.LIVE
    assert await c.keys() == sorted(live)
    stats = await c.coordinator.file_stats()
    assert (stats.unreferenced_objects, stats.condemned_objects) == (0, 0)
    assert (stats.live_objects, stats.live_bytes) == (20, 2000)
    # Each doomed object was deleted by at least one of them (both may count one).
    assert one.stats().deleted_objects + two.stats().deleted_objects >= len(doomed + orphans)
    assert one.stats().watermark_ms == two.stats().watermark_ms == c.clock.now_ms() - GRACE_MS


# --- running in the background ----------------------------------------------------------------
async def test_start_runs_cycles_every_period_and_close_stops_them(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = c.manager(period_ms=1_000)
    orphan = await c.upload()
    manager.start()
    await run_virtual(c.clock, (GRACE_MS + UNREFERENCED_GRACE_MS) / 1000 + 3, step_s=1.0)
    assert manager.stats().cycles >= 15
    assert await c.keys() == []
    assert await c.state(orphan) is None
    await manager.close()
    cycles = manager.stats().cycles
    await c.clock.advance(10 * SECOND)
    assert manager.stats().cycles == cycles
    await manager.close()  # idempotent


async def test_background_loop_survives_coordinator_failures(
    new_coordinator: CoordinatorFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = await cluster(new_coordinator)
    failures = 3
    real = c.coordinator.files_to_delete

    async def flaky(older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        nonlocal failures
        if failures:
            failures -= 1
            raise CoordinatorUnavailableError("injected")
        return await real(older_than_ms, limit)

    c.coordinator.files_to_delete = flaky  # type: ignore[method-assign]
    key = await c.committed()
    await c.unreference_all()
    with caplog.at_level(logging.DEBUG, logger="diskless.lifecycle"):
        async with c.manager(period_ms=1_000) as manager:
            await run_virtual(c.clock, UNREFERENCED_GRACE_MS / 1000 + 5, step_s=1.0)
    assert failures == 0
    assert manager.stats().cycle_errors == 3
    assert await c.state(key) is None
    # Each failed call at DEBUG: the coordinator's availability logs an outage once.
    failed = [r for r in caplog.records if "sweep failed" in r.getMessage()]
    assert len(failed) == 3 and {r.levelno for r in failed} == {logging.DEBUG}


async def test_close_ends_the_loop_when_a_cycle_turns_its_cancellation_into_an_error(
    new_coordinator: CoordinatorFactory,
) -> None:
    """A call cancelled by `close` that fails with a retriable error instead of CancelledError
    (a layer below swallowed the cancellation) does not keep the loop running."""
    c = await cluster(new_coordinator)
    called = asyncio.Event()

    async def swallowing() -> FileStats:
        called.set()
        try:
            await asyncio.get_running_loop().create_future()  # answers only when cancelled
        except asyncio.CancelledError:
            raise CoordinatorUnavailableError("the connection broke") from None
        raise AssertionError("unreachable")

    c.coordinator.file_stats = swallowing  # type: ignore[method-assign]
    manager = c.manager(period_ms=1_000)
    manager.start()
    await asyncio.wait_for(called.wait(), 10)
    await asyncio.wait_for(manager.close(), 10)


# --- configuration ----------------------------------------------------------------------------
def test_config_rejects_a_grace_shorter_than_a_commit_can_take() -> None:
    with pytest.raises(ValueError, match="must exceed"):
        FileManagerConfig(
            orphan_grace_ms=60_000, commit_deadline_ms=50_000, clock_skew_max_ms=10_000
        )
    FileManagerConfig(orphan_grace_ms=60_001, commit_deadline_ms=50_000, clock_skew_max_ms=10_000)


@pytest.mark.parametrize(
    "overrides",
    [
        {"list_page_objects_max": 1001},
        {"delete_batch_objects_max": 0},
        {"list_objects_per_cycle_max": 0},
        {"prefix": "wal"},
        {"period_ms": 0},
        {"unreferenced_grace_ms": -1},
        {"unreferenced_grace_ms": 0},
        {"unreferenced_grace_ms": 1_000, "clock_skew_max_ms": 1_000},
        {"rescan_interval_ms": 10},
    ],
)
def test_config_rejects_bad_limits(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        config(**overrides)


def test_required_orphan_grace_covers_every_upload_attempt_and_the_commit() -> None:
    grace = required_orphan_grace_ms(
        upload_attempts_max=3,
        upload_attempt_timeout_ms=10_000,
        upload_backoff_max_ms=400,
        commit_timeout_ms=5_000,
        rotation_interval_ms=250,
        clock_skew_max_ms=1_000,
    )
    assert grace == 250 + 3 * 10_400 + 5_000 + 1_000 + 1
    with pytest.raises(ValueError):
        required_orphan_grace_ms(
            upload_attempts_max=-1,
            upload_attempt_timeout_ms=0,
            upload_backoff_max_ms=0,
            commit_timeout_ms=0,
        )


async def test_manager_without_config_uses_safe_defaults(
    new_coordinator: CoordinatorFactory,
) -> None:
    c = await cluster(new_coordinator)
    manager = FileManager(c.store, c.coordinator, clock=c.clock)
    assert manager.config.orphan_grace_ms > (
        manager.config.commit_deadline_ms + manager.config.clock_skew_max_ms
    )
    await c.upload()
    await c.clock.advance(60)
    assert (await manager.run_cycle()).orphans_condemned == 0


async def test_a_live_file_offered_for_deletion_is_kept(
    new_coordinator: CoordinatorFactory,
) -> None:
    """Defence in depth: a coordinator bug listing a LIVE file must not cost its data."""
    c = await cluster(new_coordinator)
    live = await c.committed()
    real = c.coordinator.file_info

    async def files_to_delete(older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        return [info for info in await real([live]) if info is not None]

    c.coordinator.files_to_delete = files_to_delete  # type: ignore[method-assign]
    manager = c.manager()
    await c.clock.advance(GRACE_MS / 1000 + UNREFERENCED_GRACE_MS / 1000)
    report = await manager.run_cycle()
    assert report.deleted_objects == 0
    assert await c.keys() == [live]
    assert await c.state(live) is FileState.LIVE


def test_config_rejects_an_unreferenced_grace_within_the_clock_skew() -> None:
    """The condemned record lives `unreferenced_grace_ms - clock_skew_max_ms` on the
    coordinator's clock: at or below the skew it may be forgotten as soon as it is written."""
    with pytest.raises(ValueError, match=r"unreferenced_grace_ms .* clock_skew_max_ms"):
        config(unreferenced_grace_ms=1_000, clock_skew_max_ms=1_000)
    assert config(unreferenced_grace_ms=1_001, clock_skew_max_ms=1_000)
