"""The file manager: keeps object storage the size of the live data.

Each cycle (bounded work, see FileManagerConfig):
  1. reconcile: list WAL objects past the watermark (and, periodically, a rescan below it),
     condemn those the coordinator never heard of once older than `orphan_grace_ms`;
  2. sweep: delete files CONDEMNED or UNREFERENCED for `unreferenced_grace_ms`, then forget them;
  3. advance the watermark past what is resolved, and refresh the statistics;
  4. now and then, reclaim the temp files of killed uploads (`temp_sweep_interval_ms`).

Safe to run several at once (one per broker, say): condemning is idempotent and decided by the
coordinator, which never condemns a committed key and never commits a condemned one; deleting an
absent key succeeds; forgetting happens only after a confirmed delete.
"""

from __future__ import annotations

import asyncio
import logging

from diskless._availability import log_failure
from diskless._limits import check_object_prefix, check_orphan_grace
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator, FileStats
from diskless.errors import CoordinatorError, StorageError
from diskless.lifecycle._config import FileManagerConfig
from diskless.lifecycle._periodic import Periodic, PeriodicService
from diskless.lifecycle._reconcile import ListingPass, Reconciler
from diskless.lifecycle._stats import CycleReport, FileManagerStats
from diskless.lifecycle._sweep import Sweeper, SweepPass
from diskless.storage import ObjectStore

logger = logging.getLogger(__name__)


class FileManager(PeriodicService):
    """Reclaims orphaned and unreferenced objects of one WAL prefix; see the module docstring."""

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: FileManagerConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._config = config if config is not None else FileManagerConfig()
        bounds = coordinator.commit_bounds
        check_object_prefix("FileManagerConfig.prefix", self._config.prefix, bounds)
        check_orphan_grace(self._config.orphan_grace_ms, self._config.clock_skew_max_ms, bounds)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._coordinator = coordinator
        self._store = store
        self._reconciler = Reconciler(store, coordinator, self._config)
        self._next_temp_sweep_ms: int | None = None
        self._sweeper = Sweeper(store, coordinator, self._config)
        self._cycle_lock = asyncio.Lock()
        self._stats = FileManagerStats()
        self._periodic = Periodic(
            "diskless-file-manager", self.run_cycle, self._config.period_ms / 1000, self._clock
        )

    @property
    def config(self) -> FileManagerConfig:
        return self._config

    @property
    def watermark_ms(self) -> int:
        return self._reconciler.watermark_ms

    def stats(self) -> FileManagerStats:
        """The figures as of the end of the last cycle."""
        return self._stats

    async def run_cycle(self) -> CycleReport:
        """One bounded pass: reconcile, sweep, advance the watermark, refresh the statistics.

        A storage or coordinator failure ends its step; the other steps still run, and what
        was not done is retried next cycle. Cycles of one manager never overlap.
        """
        async with self._cycle_lock:
            return await self._run_cycle()

    async def _run_cycle(self) -> CycleReport:
        now_ms = self._clock.now_ms()
        frontier, rescan, sweep = ListingPass(), ListingPass(), SweepPass()
        errors = 0
        try:
            await self._reconciler.recheck_pending(frontier)
            await self._reconciler.scan_frontier(now_ms, frontier)
        except (StorageError, CoordinatorError) as error:
            errors += 1
            log_failure(logger, error, "reconciliation listing failed")
        try:
            await self._reconciler.rescan_step(now_ms, rescan)
        except (StorageError, CoordinatorError) as error:
            errors += 1
            log_failure(logger, error, "rescan step failed")
        try:
            await self._sweeper.sweep(now_ms, sweep)
        except (StorageError, CoordinatorError) as error:
            errors += 1
            log_failure(logger, error, "sweep failed")
        # The coordinator's books carry no size for a condemned file: use the listed one.
        listed = {key: size for key, (_, size) in frontier.condemned_ms.items()}
        deleted_bytes = sum(
            size or listed.get(key) or self._reconciler.orphan_deleted(key)
            for key, size in sweep.deleted.items()
        )
        watermark_ms = self._reconciler.advance(frontier, now_ms, sweep.deleted)
        books: FileStats | None = None
        try:
            books = await self._coordinator.file_stats()
        except CoordinatorError as error:
            errors += 1
            log_failure(logger, error, "file_stats failed")
        try:
            await self._sweep_temp_files(now_ms)
        except StorageError as error:
            errors += 1
            log_failure(logger, error, "temp file sweep failed")
        report = CycleReport(
            listing_calls=frontier.listing_calls + rescan.listing_calls,
            objects_listed=frontier.objects_listed + rescan.objects_listed,
            orphans_condemned=frontier.condemned + rescan.condemned,
            deleted_objects=len(sweep.deleted),
            deleted_bytes=deleted_bytes,
            delete_failures=sweep.failures,
            errors=errors,
            watermark_ms=watermark_ms,
            complete=frontier.complete,
        )
        self._record(report, books, now_ms, frontier, rescan, sweep)
        if report.orphans_condemned or report.deleted_objects or errors:
            lag_ms = _lag_ms(now_ms, watermark_ms)
            logger.info(
                "file manager cycle: condemned %d, deleted %d objects (%d bytes), %d errors, %s",
                report.orphans_condemned,
                report.deleted_objects,
                report.deleted_bytes,
                errors,
                "nothing reconciled yet" if lag_ms is None else f"watermark lag {lag_ms} ms",
            )
        return report

    async def _sweep_temp_files(self, now_ms: int) -> None:
        """Remove the leftovers of uploads killed mid-write, when due."""
        interval_ms = self._config.temp_sweep_interval_ms
        if interval_ms is None:
            return
        if self._next_temp_sweep_ms is not None and now_ms < self._next_temp_sweep_ms:
            return
        self._next_temp_sweep_ms = now_ms + interval_ms
        await self._store.remove_stale_temp_files(self._config.orphan_grace_ms / 1000)

    def _record(
        self,
        report: CycleReport,
        books: FileStats | None,
        now_ms: int,
        frontier: ListingPass,
        rescan: ListingPass,
        sweep: SweepPass,
    ) -> None:
        old = self._stats
        if books is None:  # keep the last known books rather than report zeros
            books = FileStats(
                live_objects=old.live_objects,
                live_bytes=old.live_bytes,
                unreferenced_objects=old.unreferenced_objects,
                unreferenced_bytes=old.unreferenced_bytes,
                condemned_objects=old.condemned_objects,
                condemned_bytes=old.condemned_bytes,
            )
        self._stats = FileManagerStats(
            live_objects=books.live_objects,
            live_bytes=books.live_bytes,
            condemned_objects=books.condemned_objects,
            condemned_bytes=max(books.condemned_bytes, self._reconciler.orphan_bytes),
            unreferenced_objects=books.unreferenced_objects,
            unreferenced_bytes=books.unreferenced_bytes,
            cycles=old.cycles + 1,
            cycle_errors=old.cycle_errors + (1 if report.errors else 0),
            listing_calls=old.listing_calls + report.listing_calls,
            objects_listed=old.objects_listed + report.objects_listed,
            file_info_calls=old.file_info_calls
            + frontier.file_info_calls
            + rescan.file_info_calls
            + sweep.file_info_calls,
            orphans_condemned=old.orphans_condemned + report.orphans_condemned,
            deleted_objects=old.deleted_objects + report.deleted_objects,
            deleted_bytes=old.deleted_bytes + report.deleted_bytes,
            delete_failures=old.delete_failures + report.delete_failures,
            watermark_ms=report.watermark_ms,
            reconciliation_lag_ms=_lag_ms(now_ms, report.watermark_ms) or 0,
        )


def _lag_ms(now_ms: int, watermark_ms: int) -> int | None:
    """How far the watermark is behind `now_ms`; None while there is none (0: no listing has
    succeeded yet), which would otherwise read as the time since 1970."""
    return None if watermark_ms <= 0 else now_ms - watermark_ms
