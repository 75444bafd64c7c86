"""The background services a server process runs beside its brokers: retention, consolidation
and the file manager.

Each of them is safe to run in several processes over the same coordinator and store, so every
server process may run them; `--no-lifecycle` leaves them to other processes. Without any of
them, retention configs are never enforced, per-batch metadata and WAL objects only grow, and
objects that lost their commit are never reclaimed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import msgspec

from diskless.coordinator import BatchCoordinator
from diskless.lifecycle import (
    Consolidator,
    ConsolidatorConfig,
    FileManager,
    FileManagerConfig,
    RetentionScheduler,
    RetentionSchedulerConfig,
)
from diskless.storage import ObjectStore

_log = logging.getLogger(__name__)


class LifecycleConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Which services run in this process, and how often."""

    enabled: bool = True
    retention_check_interval_ms: int = 300_000
    """Kafka's log.retention.check.interval.ms."""
    consolidation: ConsolidatorConfig = ConsolidatorConfig()
    file_manager: FileManagerConfig = FileManagerConfig()


@contextlib.asynccontextmanager
async def running_lifecycle(
    store: ObjectStore, coordinator: BatchCoordinator, config: LifecycleConfig
) -> AsyncIterator[list[object]]:
    """Run the services while the block runs (none when disabled); yields them."""
    if not config.enabled:
        yield []
        return
    services = [
        RetentionScheduler(
            coordinator,
            RetentionSchedulerConfig(period_ms=config.retention_check_interval_ms),
        ),
        Consolidator(store, coordinator, config.consolidation),
        FileManager(store, coordinator, config.file_manager),
    ]
    async with contextlib.AsyncExitStack() as stack:
        for service in services:
            await stack.enter_async_context(service)
        _log.info(
            "lifecycle: retention every %d ms, consolidation of batches older than %d ms every"
            " %d ms, file manager every %d ms",
            config.retention_check_interval_ms,
            config.consolidation.age_ms,
            config.consolidation.period_ms,
            config.file_manager.period_ms,
        )
        yield list(services)
