"""Metric families read from the counters the library keeps anyway, at scrape time only.

The brokers' WAL and read-path counters (`DisklessBroker.stats()`), the object store's requests
(`ObjectStore.stats()`, priced at `StorageRates`), whether the coordinator and the store answer
(their `Availability`), and the lifecycle services' counters: none of them costs a request
anything, since nothing is recorded for the scrape that the library did not count already.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diskless import DisklessBroker
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._server.metrics.metrics_events import PREFIX
from diskless.lifecycle import Cleaner, Consolidator, FileManager, RetentionScheduler
from diskless.metrics import StorageRates
from diskless.storage import ObjectStore, StoreStats

WAL_COUNTERS: Final = (
    ("wal_segments_total", "segments_rotated", "WAL segments sealed for upload"),
    ("wal_objects_uploaded_total", "objects_uploaded", "WAL objects stored"),
    ("wal_uploaded_bytes_total", "object_bytes_uploaded", "Bytes of WAL objects stored"),
    (
        "wal_upload_attempts_failed_total",
        "upload_attempts_failed",
        "Failed WAL upload attempts (each one retried unless it was the last)",
    ),
    (
        "wal_uploads_failed_total",
        "segments_upload_failed",
        "WAL segments given up after every upload attempt failed",
    ),
    ("wal_objects_committed_total", "commits", "WAL objects committed"),
    ("wal_commit_steps_total", "commit_steps", "Coordinator steps that committed WAL objects"),
    (
        "wal_objects_commit_failed_total",
        "commits_failed",
        "WAL objects whose commit failed, was refused or has an unknown outcome",
    ),
    ("wal_batches_committed_total", "batches_committed", "Batches the coordinator answered"),
)
FETCH_COUNTERS: Final = (
    ("fetches_total", "fetches", "Fetches served by the read path"),
    ("fetch_object_gets_total", "gets_issued", "Object-store GETs issued by fetches"),
    ("fetch_object_bytes_read_total", "bytes_fetched", "Bytes fetches read from the store"),
    ("fetch_bytes_returned_total", "bytes_returned", "Bytes of batches fetches returned"),
    ("fetch_storage_errors_total", "storage_errors", "Fetch reads the object store failed"),
    ("fetch_corrupt_batches_total", "corrupt_batches", "Batches a fetch read back corrupt"),
)


class Sources:
    """What a scrape reads: the process's brokers (a callable: brokers come and go), its object
    store and coordinator, and the lifecycle services it runs (set once they start)."""

    def __init__(
        self,
        brokers: Callable[[], Sequence[DisklessBroker]],
        store: ObjectStore,
        coordinator: BatchCoordinator,
        rates: StorageRates,
    ) -> None:
        self.brokers = brokers
        self.store = store
        self.coordinator = coordinator
        self.rates = rates
        self.services: Sequence[object] = ()

    def families(self) -> Iterator[Metric]:
        brokers = sorted(self.brokers(), key=lambda b: b.broker_id)
        yield from _broker_families(brokers)
        yield from store_families(self.store.stats(), self.rates)
        retries = CounterMetricFamily(
            PREFIX + "coordinator_retries",
            "Coordinator statements or steps run again after losing a race for the database"
            " (SQLite's busy lock, PostgreSQL's serialization failures and deadlocks)",
        )
        retries.add_metric((), self.coordinator.step_retries)
        yield retries
        up = GaugeMetricFamily(
            PREFIX + "dependency_up",
            "Whether the coordinator or the object store answers, as this process last saw it",
            labels=("dependency",),
        )
        up.add_metric(("coordinator",), float(self.coordinator.availability.available))
        up.add_metric(("object_store",), float(self.store.availability.available))
        yield up
        yield from _lifecycle_families(self.services)


def _broker_families(brokers: Sequence[DisklessBroker]) -> Iterator[Metric]:
    stats = [(str(b.broker_id), b.stats()) for b in brokers]
    wals = [(broker, s.wal) for broker, s in stats if s.wal is not None]
    for name, field, help_text in WAL_COUNTERS:
        family = CounterMetricFamily(PREFIX + name, help_text, labels=("broker",))
        for broker, wal in wals:
            family.add_metric((broker,), getattr(wal, field))
        yield family
    inflight = GaugeMetricFamily(
        PREFIX + "wal_inflight_bytes",
        "Batch bytes buffered, uploading or committing (backpressure holds it below the bound)",
        labels=("broker",),
    )
    bound = GaugeMetricFamily(
        PREFIX + "wal_inflight_bytes_max",
        "The in-flight byte bound (WalConfig.inflight_bytes_max)",
        labels=("broker",),
    )
    for broker, wal in wals:
        inflight.add_metric((broker,), wal.inflight_bytes)
    for b in brokers:
        bound.add_metric((str(b.broker_id),), b.config.wal.inflight_bytes_max)
    yield inflight
    yield bound
    produce = CounterMetricFamily(
        PREFIX + "produce_partitions_failed_total",
        "Produce partitions answered with an error (validation or the write path)",
        labels=("broker",),
    )
    for broker, s in stats:
        produce.add_metric((broker,), s.produce.partitions_failed)
    yield produce
    for name, field, help_text in FETCH_COUNTERS:
        family = CounterMetricFamily(PREFIX + name, help_text, labels=("broker",))
        for broker, s in stats:
            family.add_metric((broker,), getattr(s.fetch, field))
        yield family
    hits = CounterMetricFamily(
        PREFIX + "fetch_cache_hits_total",
        "Fetch reads a cache answered: segment (the broker's recent WAL objects) or object"
        " (blocks of stored objects)",
        labels=("broker", "cache"),
    )
    misses = CounterMetricFamily(
        PREFIX + "fetch_cache_misses_total",
        "Fetch reads a cache could not answer: segment (ranges read elsewhere), object (blocks"
        " fetched with a GET)",
        labels=("broker", "cache"),
    )
    for broker, s in stats:
        fetch = s.fetch
        hits.add_metric((broker, "segment"), fetch.cache_hits)
        misses.add_metric((broker, "segment"), fetch.ranges_read - fetch.cache_hits)
        hits.add_metric((broker, "object"), fetch.object_cache_block_hits)
        misses.add_metric((broker, "object"), fetch.gets_issued)
    yield hits
    yield misses


def store_families(s: StoreStats, rates: StorageRates) -> Iterator[Metric]:
    """The object store's requests, bytes and their cost at `rates`."""
    requests = {
        "PUT": s.put_requests,
        "GET": s.gets + s.ranged_gets,
        "LIST": s.lists,
        "DELETE": s.delete_requests,
    }
    family = CounterMetricFamily(
        PREFIX + "object_store_requests_total",
        "Object-store requests by kind, as billed (failed ones included; a multipart upload"
        " counts each part)",
        labels=("kind",),
    )
    for kind, n in requests.items():
        family.add_metric((kind,), n)
    yield family
    moved = CounterMetricFamily(
        PREFIX + "object_store_bytes_total",
        "Bytes moved to (written) and from (read) the object store",
        labels=("direction",),
    )
    moved.add_metric(("written",), s.bytes_in)
    moved.add_metric(("read",), s.bytes_out)
    yield moved
    # LIST is billed at the PUT price on S3; DELETE is free.
    prices = {
        "PUT": rates.put_per_1000,
        "GET": rates.get_per_1000,
        "LIST": rates.put_per_1000,
        "DELETE": 0.0,
    }
    cost = CounterMetricFamily(
        PREFIX + "object_store_request_cost_dollars_total",
        "Estimated object-store request cost at the configured list prices, by kind",
        labels=("kind",),
    )
    for kind, n in requests.items():
        cost.add_metric((kind,), n * prices[kind] / 1000)
    yield cost


def _lifecycle_families(services: Iterable[object]) -> Iterator[Metric]:
    counters: list[tuple[str, str, float]] = []
    gauges: list[tuple[str, str, float]] = []
    for service in services:
        if isinstance(service, FileManager):
            f = service.stats()
            counters += [
                ("file_manager_cycles_total", "File manager cycles", f.cycles),
                (
                    "file_manager_cycle_errors_total",
                    "File manager cycles that failed",
                    f.cycle_errors,
                ),
                (
                    "file_manager_orphans_condemned_total",
                    "Uncommitted objects (orphans) found and condemned",
                    f.orphans_condemned,
                ),
                ("file_manager_deleted_objects_total", "Objects deleted", f.deleted_objects),
                (
                    "file_manager_deleted_bytes_total",
                    "Bytes reclaimed by deleting objects",
                    f.deleted_bytes,
                ),
                (
                    "file_manager_delete_failures_total",
                    "Object deletions that failed",
                    f.delete_failures,
                ),
            ]
            gauges += [
                (
                    "file_manager_condemned_objects",
                    "Objects condemned, waiting for deletion",
                    f.condemned_objects,
                ),
                (
                    "file_manager_unreferenced_objects",
                    "Committed objects no live batch uses, waiting for their grace",
                    f.unreferenced_objects,
                ),
                ("file_manager_live_bytes", "Bytes of objects live batches use", f.live_bytes),
            ]
        elif isinstance(service, RetentionScheduler):
            r = service.stats()
            counters += [
                ("retention_runs_total", "Retention runs", r.runs),
                ("retention_run_errors_total", "Retention runs that failed", r.run_errors),
                ("retention_batches_deleted_total", "Batches retention deleted", r.batches_deleted),
                ("retention_bytes_deleted_total", "Bytes retention deleted", r.bytes_deleted),
            ]
        elif isinstance(service, Consolidator):
            c = service.stats()
            counters += [
                ("consolidation_runs_total", "Consolidation runs", c.runs),
                ("consolidation_run_errors_total", "Consolidation runs that failed", c.run_errors),
                (
                    "consolidation_extents_committed_total",
                    "Consolidated extents committed",
                    c.extents_committed,
                ),
                ("consolidation_failures_total", "Extents that failed to consolidate", c.failures),
                (
                    "consolidation_batches_moved_total",
                    "Batches moved into consolidated objects",
                    c.batches_moved,
                ),
                (
                    "consolidation_bytes_moved_total",
                    "Bytes moved into consolidated objects",
                    c.bytes_moved,
                ),
            ]
        elif isinstance(service, Cleaner):
            k = service.stats()
            counters += [
                ("cleaner_runs_total", "Cleaner runs", k.runs),
                ("cleaner_run_errors_total", "Cleaner runs that failed", k.run_errors),
                ("cleaner_passes_total", "Cleaning passes swapped in", k.cleaned),
                (
                    "cleaner_swaps_refused_total",
                    "Cleaned objects whose swap was refused (orphans)",
                    k.swaps_refused,
                ),
                ("cleaner_failures_total", "Cleaning passes that failed", k.failures),
                ("cleaner_bytes_read_total", "Bytes the cleaner read", k.bytes_read),
                ("cleaner_bytes_written_total", "Bytes the cleaner kept", k.bytes_written),
            ]
            gauges += [
                (
                    "cleaner_max_dirty_percent",
                    "The dirtiest compacted partition's dirty part at the last run (Kafka's"
                    " max-dirty-percent)",
                    k.max_dirty_percent,
                ),
                (
                    "cleaner_recopy_percent",
                    "Bytes kept of bytes read by the last run (cleaner-recopy-percent)",
                    k.recopy_percent,
                ),
                (
                    "cleaner_max_clean_time_seconds",
                    "The last run's longest pass (max-clean-time-secs)",
                    k.max_clean_time_s,
                ),
                (
                    "cleaner_max_buffer_utilization_percent",
                    "The fullest the key map got in the last run (max-buffer-utilization-percent)",
                    k.max_buffer_utilization_percent,
                ),
            ]
    for name, help_text, value in counters:
        family = CounterMetricFamily(PREFIX + name, help_text)
        family.add_metric((), value)
        yield family
    for name, help_text, value in gauges:
        yield GaugeMetricFamily(PREFIX + name, help_text, value=value)
