"""The background services a server process runs beside its brokers: retention, consolidation,
the cleaner of compacted topics (at the consolidation's age and period) and the file manager.

Each of them is safe in several processes over the same coordinator and store, but in several
they would repeat each other's work (consolidators racing for the same ranges upload objects that
only one swap keeps). So every process runs them, and each run happens only in the process
holding the cluster's lowest live broker id; when that process goes, the next one takes over at
its next period. `--no-lifecycle` leaves them to other processes. Without any of them, retention
configs are never enforced, per-batch metadata and WAL objects only grow, and objects that lost
their commit are never reclaimed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection

import msgspec

from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._coordination.cluster_view import ClusterView
from diskless.lifecycle import (
    Cleaner,
    CleanerConfig,
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
    cleaner_map_bytes: int = CleanerConfig().map_bytes
    """The cleaner's key-to-offset map (Kafka's log.cleaner.dedupe.buffer.size)."""

    def __post_init__(self) -> None:
        self.retention()  # their checks run now, not when the services start
        self.cleaning()

    def retention(self) -> RetentionSchedulerConfig:
        return RetentionSchedulerConfig(period_ms=self.retention_check_interval_ms)

    def cleaning(self) -> CleanerConfig:
        """The cleaner's: the consolidation's age (records younger are not cleaned, the part
        of Kafka's active segment), period, object names and index density, and its map."""
        consolidation = self.consolidation
        return CleanerConfig(
            prefix=consolidation.prefix,
            node_id=consolidation.node_id,
            period_ms=consolidation.period_ms,
            age_ms=consolidation.age_ms,
            index_interval_bytes=consolidation.index_interval_bytes,
            map_bytes=self.cleaner_map_bytes,
        )


def lowest_live_broker(view: ClusterView, own: Collection[int]) -> Callable[[], bool]:
    """Whether this process (brokers `own`) holds the cluster's lowest live broker id now."""

    def on_duty() -> bool:
        brokers = view.brokers()
        return bool(brokers) and brokers[0].broker_id in own

    return on_duty


@contextlib.asynccontextmanager
async def running_lifecycle(
    store: ObjectStore,
    coordinator: BatchCoordinator,
    config: LifecycleConfig,
    on_duty: Callable[[], bool] | None = None,
) -> AsyncIterator[list[object]]:
    """Run the services while the block runs (none when disabled), each run only when
    `on_duty` answers True; yields them."""
    if not config.enabled:
        yield []
        return
    services = [
        RetentionScheduler(coordinator, config.retention()),
        Consolidator(store, coordinator, config.consolidation),
        Cleaner(store, coordinator, config.cleaning()),
        FileManager(store, coordinator, config.file_manager),
    ]
    async with contextlib.AsyncExitStack() as stack:
        for service in services:
            service.start(only_when=on_duty)
            stack.push_async_callback(service.close)
        _log.info(
            "lifecycle: retention every %d ms, consolidation of batches older than %d ms every"
            " %d ms, file manager every %d ms",
            config.retention_check_interval_ms,
            config.consolidation.age_ms,
            config.consolidation.period_ms,
            config.file_manager.period_ms,
        )
        yield list(services)
