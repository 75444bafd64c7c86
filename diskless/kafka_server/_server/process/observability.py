"""A broker process's metrics and health: one Prometheus registry, what feeds it, its endpoint.

`Observability` owns a `PrometheusMetrics` (the library's events: the cluster's brokers and
servers, and the coordinator's steps, report there), the scrape-time readers of the library's
counters (`metrics_snapshots`), the consumer lag (`metrics_lag`), the share groups' queues
(`metrics_share`), the standard process and Python collectors (CPU, memory, open files, GC),
and the HTTP endpoint (`metrics_http`). The
registry is its own, not `prometheus_client`'s global one, so two processes' worth of brokers
in one interpreter (tests, an embedding application) keep separate figures.

Ready (`/readyz`) means the brokers can take writes: they have started, none was fenced, each
holds a live registration in the coordinator (which therefore answers), and the object store
takes a write. Both are checked in the background (`readiness`), so the endpoint answers at once
from the last outcomes, and a check in flight for more than `READY_TIMEOUT_S` is the answer.

The store's check writes and deletes a small probe object (`probe_key`: under the WAL's prefix,
where writes must succeed, and named so that the file manager never takes it for an orphan or a
WAL object). A probe, rather than the outcome of the last WAL upload, because an idle broker
uploads nothing, and a store that fails only writes (a bucket deleted, credentials made
read-only, a read-only directory) still answers reads: only a write says a produce would be
taken. A probe every `STORE_PROBE_INTERVAL_S` (one PUT and one DELETE, a few cents a month on
S3), and every `STORE_PROBE_HURRY_S` while the store's availability sees real calls fail, so
that an outage under load is seen within a second of the first failed upload.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from diskless import DisklessBroker
from diskless._object_keys import probe_key
from diskless.coordinator import BatchCoordinator, ShareLimits
from diskless.kafka_server._server.metrics.metrics_events import PREFIX, PrometheusMetrics
from diskless.kafka_server._server.metrics.metrics_http import MetricsEndpoint
from diskless.kafka_server._server.metrics.metrics_lag import LagTracker
from diskless.kafka_server._server.metrics.metrics_share import ShareTracker
from diskless.kafka_server._server.metrics.metrics_snapshots import Sources
from diskless.kafka_server._server.metrics.readiness import BOUND_S, Check, Readiness
from diskless.kafka_server._server.process.cluster import KafkaCluster
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.metrics import STORAGE_RATES, StorageRates
from diskless.storage import ObjectStore

READY_TIMEOUT_S: Final = BOUND_S
COORDINATOR_CHECK_INTERVAL_S: Final = 1.0
COORDINATOR_CHECK_HURRY_S: Final = 0.2
"""While the coordinator's check fails (a registration not announced yet, an outage)."""
STORE_PROBE_INTERVAL_S: Final = 10.0
STORE_PROBE_HURRY_S: Final = 1.0
NOT_STARTED: Final = "the brokers have not started"


class Observability(Collector):
    """`attach` the cluster once built, `attach_services` once they run; `start` serves the
    endpoint, `close` stops it. Also usable without the endpoint: `scrape()` renders the text."""

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: ServerConfig | None = None,
        *,
        rates: StorageRates = STORAGE_RATES,
    ) -> None:
        self.config = config if config is not None else ServerConfig()
        self.store = store
        self.coordinator = coordinator
        self.metrics = PrometheusMetrics(topics_max=self.config.metrics_topics_max, rates=rates)
        coordinator.metrics = self.metrics
        self.cluster: KafkaCluster | None = None
        self.lag: LagTracker | None = None
        self.shares: ShareTracker | None = None
        self.readiness: Readiness | None = None
        self.starting = NOT_STARTED
        """Why not ready before the brokers serve (the process sets it while it waits)."""
        self._sources = Sources(self._brokers, store, coordinator, rates)
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(self)
        self.endpoint = MetricsEndpoint(self.registry, ready=self.ready, before_scrape=self.refresh)

    def attach(self, cluster: KafkaCluster) -> None:
        """Report the cluster's brokers and the lag and share-partitions of the groups it
        coordinates, and start checking that they can take writes."""
        self.cluster = cluster
        store = self.store
        self.readiness = Readiness(
            [
                Check(
                    "the coordinator",
                    self._check_coordinator,
                    COORDINATOR_CHECK_INTERVAL_S,
                    COORDINATOR_CHECK_HURRY_S,
                ),
                Check(
                    "the object store",
                    self._probe_store,
                    STORE_PROBE_INTERVAL_S,
                    STORE_PROBE_HURRY_S,
                    hurry=lambda: not store.availability.available,
                ),
            ]
        )
        self.readiness.start()
        self.lag = LagTracker(
            self.coordinator,
            cluster.groups.group_ids,
            groups_max=self.config.metrics_lag_groups_max,
            partitions_max=self.config.metrics_lag_partitions_max,
        )
        self.shares = ShareTracker(
            self.coordinator,
            cluster.groups.group_ids,
            groups_max=self.config.metrics_lag_groups_max,
            partitions_max=self.config.metrics_lag_partitions_max,
            limits=ShareLimits(
                delivery_count_limit=self.config.group_share_delivery_count_limit,
                max_record_locks=self.config.group_share_partition_max_record_locks,
            ),
        )

    def attach_services(self, services: Sequence[object]) -> None:
        """Report the lifecycle services this process runs."""
        self._sources.services = services

    async def start(self, address: str | None = None) -> None:
        await self.endpoint.start(address or self.config.metrics_address)

    async def close(self) -> None:
        if self.readiness is not None:
            await self.readiness.close()
        await self.endpoint.close()

    def _brokers(self) -> list[DisklessBroker]:
        if self.cluster is None:
            return []
        return [server.broker for server in self.cluster.servers.values()]

    # --- the scrape ---------------------------------------------------------------------------
    async def refresh(self) -> None:
        """What a scrape computes on demand: the consumer lag and the share figures."""
        if self.lag is not None:
            await self.lag.refresh()
        if self.shares is not None:
            await self.shares.refresh()

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics.families()
        yield from self._sources.families()
        if self.cluster is not None:
            throttled = CounterMetricFamily(
                PREFIX + "requests_throttled",
                "Frames whose reading waited for the process's request byte budget"
                " (queued.max.request.bytes)",
            )
            throttled.add_metric((), self.cluster.request_budget.throttled)
            yield throttled
        if self.lag is not None:
            yield from self.lag.families()
        if self.shares is not None:
            yield from self.shares.families()

    async def scrape(self) -> bytes:
        """The text a scrape of `/metrics` returns."""
        await self.refresh()
        return generate_latest(self.registry)

    # --- health -------------------------------------------------------------------------------
    async def ready(self) -> str | None:
        """None when ready, else why not (one line): from what the checks last found."""
        cluster = self.cluster
        if cluster is None or not cluster.servers or self.readiness is None:
            return self.starting
        if cluster.fenced:
            fenced = ", ".join(str(b) for b in sorted(cluster.fenced))
            return f"broker {fenced} was fenced by a newer incarnation"
        return self.readiness.reason()

    def waiting(self, reason: str) -> None:
        """What the start waits for (`/readyz`'s reason until the brokers serve)."""
        self.starting = reason

    async def checked(self) -> None:
        """Wait (at most `READY_TIMEOUT_S`) until the readiness checks find the brokers ready,
        so that a process announcing that it serves answers `/readyz` from their outcomes."""
        if self.readiness is not None:
            await self.readiness.checked(READY_TIMEOUT_S)

    async def _check_coordinator(self) -> str | None:
        cluster = self.cluster
        assert cluster is not None
        try:
            live = await self.coordinator.live_brokers()
        except Exception as error:
            return f"the coordinator does not answer: {_one_line(error)}"
        registered = {(r.broker_id, r.broker_epoch) for r in live}
        missing = [
            str(server.broker_id)
            for server in cluster.live
            if (server.broker_id, server.broker.broker_epoch) not in registered
        ]
        if missing:
            return f"broker {', '.join(missing)} holds no live registration in the coordinator"
        return None

    async def _probe_store(self) -> str | None:
        cluster = self.cluster
        assert cluster is not None
        key = probe_key(self.coordinator.commit_bounds.object_prefix, min(cluster.servers))
        try:
            await self.store.put(key, b"")
            await self.store.delete_many([key])
        except Exception as error:
            return f"the object store cannot be written: {_one_line(error)}"
        return None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no answer"
    if isinstance(error, TimeoutError):
        text = f"no answer within {READY_TIMEOUT_S} s"
    return f"{type(error).__name__}: {text}"
