"""The retention scheduler: applies topics' retention.ms / retention.bytes, a bounded bit at a time.

Each run calls `enforce_retention(max_batches=batches_per_call_max)` (one coordinator
transaction each) while the coordinator reports `more`, at most `calls_per_run_max` times; what
is left waits for the next run, so one run never holds the coordinator for long. Batches it
deletes leave files UNREFERENCED; the file manager deletes those objects after their grace.
"""

from __future__ import annotations

import asyncio
import logging

from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator
from diskless.lifecycle._config import RetentionSchedulerConfig
from diskless.lifecycle._periodic import Periodic, PeriodicService
from diskless.lifecycle._stats import RetentionRun, RetentionStats

logger = logging.getLogger(__name__)


class RetentionScheduler(PeriodicService):
    """Runs retention every `period_ms`; safe on several brokers (the coordinator decides)."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        config: RetentionSchedulerConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._config = config if config is not None else RetentionSchedulerConfig()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._run_lock = asyncio.Lock()
        self._stats = RetentionStats()
        self._periodic = Periodic(
            "diskless-retention", self.run_once, self._config.period_ms / 1000, self._clock
        )

    @property
    def config(self) -> RetentionSchedulerConfig:
        return self._config

    def stats(self) -> RetentionStats:
        return self._stats

    async def run_once(self) -> RetentionRun:
        """One bounded run; a coordinator failure propagates after counting the work done."""
        async with self._run_lock:
            calls = batches = size = 0
            more = True
            try:
                while more and calls < self._config.calls_per_run_max:
                    result = await self._coordinator.enforce_retention(
                        max_batches=self._config.batches_per_call_max
                    )
                    calls += 1
                    assert 0 <= result.batches_deleted <= self._config.batches_per_call_max, (
                        result.batches_deleted
                    )
                    batches += result.batches_deleted
                    size += result.bytes_deleted
                    more = result.more
            except BaseException:
                self._account(calls, batches, size, more=True, failed=True)
                raise
            self._account(calls, batches, size, more=more, failed=False)
            if batches:
                logger.info(
                    "retention deleted %d batches (%d bytes)%s",
                    batches,
                    size,
                    "; more left" if more else "",
                )
            return RetentionRun(calls=calls, batches_deleted=batches, bytes_deleted=size, more=more)

    def _account(self, calls: int, batches: int, size: int, *, more: bool, failed: bool) -> None:
        old = self._stats
        self._stats = RetentionStats(
            runs=old.runs + 1,
            run_errors=old.run_errors + (1 if failed else 0),
            calls=old.calls + calls,
            batches_deleted=old.batches_deleted + batches,
            bytes_deleted=old.bytes_deleted + size,
            runs_with_work_left=old.runs_with_work_left + (1 if more else 0),
        )
