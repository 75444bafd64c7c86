"""The run's metrics, in the format a broker's `/metrics` serves: `metrics.prom` in the report.

Built from what every task reported (its brokers' `stats()` and its store's counters for the
produce phase), under the names and help of the broker endpoint (`diskless.kafka_server`), so a
run can be compared with a live cluster's scrape, or loaded into Prometheus tooling. Counters are
the run's totals, per broker (`broker`) where a broker counted them; object-store requests are
summed over the tasks and priced at the run's rates.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from benchmarks.harness.spec import CostRates
from diskless.kafka_server._server.metrics.metrics_events import PREFIX
from diskless.kafka_server._server.metrics.metrics_snapshots import (
    FETCH_COUNTERS,
    WAL_COUNTERS,
    store_families,
)
from diskless.metrics import StorageRates
from diskless.storage import StoreStats

METRICS_FILE: Final = "metrics.prom"


class _Snapshot(Collector):
    def __init__(
        self, brokers: dict[str, dict[str, Any]], store: StoreStats, rates: StorageRates
    ) -> None:
        self._brokers = brokers
        self._store = store
        self._rates = rates

    def collect(self) -> Iterator[Metric]:
        for section, counters in (("wal", WAL_COUNTERS), ("fetch", FETCH_COUNTERS)):
            for name, field, help_text in counters:
                family = CounterMetricFamily(PREFIX + name, help_text, labels=("broker",))
                for broker, stats in sorted(self._brokers.items()):
                    value = (stats.get(section) or {}).get(field)
                    if value is not None:
                        family.add_metric((broker,), value)
                yield family
        yield from store_families(self._store, self._rates)


def metrics_text(
    broker_stats: Sequence[dict[str, dict[str, Any]]],
    store_stats: Sequence[dict[str, int]],
    rates: CostRates,
) -> bytes:
    """The exposition text of the tasks' brokers (`broker id -> stats()` as builtins) and
    stores (`StoreStats` fields)."""
    brokers = {broker: stats for task in broker_stats for broker, stats in task.items()}
    totals = {field: 0 for field in StoreStats.__struct_fields__}
    for counts in store_stats:
        for field, value in counts.items():
            if field in totals:
                totals[field] += value
    storage = StorageRates(
        put_per_1000=rates.put_per_1000,
        get_per_1000=rates.get_per_1000,
        storage_gb_month=rates.storage_gb_month,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(brokers, StoreStats(**totals), storage))
    return generate_latest(registry)


def write_metrics(
    path: Path,
    broker_stats: Sequence[dict[str, dict[str, Any]]],
    store_stats: Sequence[dict[str, int]],
    rates: CostRates,
) -> Path:
    path.write_bytes(metrics_text(broker_stats, store_stats, rates))
    return path
