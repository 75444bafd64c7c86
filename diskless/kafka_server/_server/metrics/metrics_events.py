"""The library's metric events, kept for Prometheus: plain counters and histograms, turned into
metric families only when a scrape asks.

Recording an event is a dict lookup and an addition (no lock: events and scrapes run on the one
event loop), so metrics on cost a produce request a few microseconds at most; the
`prometheus_client` objects are built at scrape time. Label values that grow with the workload
are bounded: the first `topics_max` topics seen keep their name, later ones are counted under
`topic="__other__"` (`OTHER`), so a cluster with a million topics still has a bounded scrape.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from diskless import ErrorCode
from diskless.metrics import (
    STORAGE_RATES,
    BatchOutcome,
    CommittedBatch,
    Metrics,
    ProduceStage,
    StepOutcome,
    StorageRates,
)

PREFIX: Final = "diskless_"
OTHER: Final = "__other__"
"""The label value of what exceeds a cardinality bound (topics past `topics_max`, ...)."""
LATENCY_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Histogram:
    """Counts per bucket, a sum and a count: what Prometheus's histogram exposes."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out


class TopicTotals:
    """One topic's counters (or `OTHER`'s)."""

    __slots__ = (
        "batches_in",
        "batches_out",
        "bytes_in",
        "bytes_out",
        "object_bytes",
        "put_requests",
        "records_in",
        "records_out",
    )

    def __init__(self) -> None:
        self.bytes_in = 0
        self.records_in = 0
        self.batches_in = 0
        self.bytes_out = 0
        self.records_out = 0
        self.batches_out = 0
        self.put_requests = 0.0
        """This topic's share of the WAL objects' PUT requests (by its batch bytes)."""
        self.object_bytes = 0.0
        """This topic's share of the WAL objects' bytes."""


class BoundedLabels:
    """The first `limit` values keep their name; later ones map to `OTHER`."""

    __slots__ = ("_limit", "_names")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"a label limit must be >= 0, got {limit}")
        self._limit = limit
        self._names: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        name = self._names.get(value)
        if name is None:
            name = value if len(self._names) < self._limit else OTHER
            if name is not OTHER:
                self._names[value] = name
        return name


class PrometheusMetrics(Metrics):
    """The events of `diskless.metrics`, kept until a scrape (`families`). One per process,
    shared by its brokers, their coordinator and their server (`KafkaCluster(metrics=...)`)."""

    __slots__ = (
        "_auth_failures",
        "_connections_closed",
        "_connections_opened",
        "_mirror_lag",
        "_rejected",
        "_request_errors",
        "_requests",
        "_stages",
        "_step_latency",
        "_steps",
        "_topic_label",
        "_topics",
        "rates",
    )

    def __init__(self, *, topics_max: int = 1000, rates: StorageRates = STORAGE_RATES) -> None:
        self.rates = rates
        self._topic_label = BoundedLabels(topics_max)
        self._topics: dict[str, TopicTotals] = {}
        self._stages = {stage: Histogram() for stage in ProduceStage}
        self._step_latency: dict[str, Histogram] = collections.defaultdict(Histogram)
        self._steps: collections.Counter[tuple[str, str]] = collections.Counter()
        self._requests: dict[str, Histogram] = collections.defaultdict(Histogram)
        self._request_errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self._connections_opened: collections.Counter[str] = collections.Counter()
        self._connections_closed: collections.Counter[str] = collections.Counter()
        self._rejected: collections.Counter[tuple[str, str]] = collections.Counter()
        self._auth_failures: collections.Counter[tuple[str, str]] = collections.Counter()
        self._mirror_lag: dict[tuple[str, str, str], int] = {}

    def _topic(self, topic: str) -> TopicTotals:
        label = self._topic_label(topic)
        totals = self._topics.get(label)
        if totals is None:
            totals = self._topics[label] = TopicTotals()
        return totals

    # --- events -------------------------------------------------------------------------------
    def produce_stage(self, stage: ProduceStage, seconds: float) -> None:
        self._stages[stage].observe(seconds)

    def wal_object_committed(
        self,
        object_bytes: int,
        put_requests: int,
        batches: Sequence[CommittedBatch],
        outcomes: Sequence[BatchOutcome],
    ) -> None:
        batch_bytes = 0
        per_topic: dict[str, int] = {}
        for batch, outcome in zip(batches, outcomes, strict=True):
            topic = batch.topic_partition.topic
            size = batch.size
            batch_bytes += size
            per_topic[topic] = per_topic.get(topic, 0) + size
            if outcome.error is ErrorCode.NONE:
                totals = self._topic(topic)
                totals.bytes_in += size
                totals.records_in += batch.record_count
                totals.batches_in += 1
        if batch_bytes == 0:
            return
        for topic, size in per_topic.items():
            share = size / batch_bytes
            totals = self._topic(topic)
            totals.put_requests += put_requests * share
            totals.object_bytes += object_bytes * share

    def fetched(self, topic: str, nbytes: int, records: int, batches: int) -> None:
        totals = self._topic(topic)
        totals.bytes_out += nbytes
        totals.records_out += records
        totals.batches_out += batches

    def coordinator_step(self, operation: str, seconds: float, outcome: StepOutcome) -> None:
        self._step_latency[operation].observe(seconds)
        self._steps[operation, outcome.value] += 1

    def request_answered(self, api: str, seconds: float, errors: Iterable[int]) -> None:
        self._requests[api].observe(seconds)
        for code in errors:
            self._request_errors[api, _error_name(code)] += 1

    def connection_opened(self, listener: str) -> None:
        self._connections_opened[listener] += 1

    def connection_closed(self, listener: str) -> None:
        self._connections_closed[listener] += 1

    def connection_rejected(self, listener: str, reason: str) -> None:
        self._rejected[listener, reason] += 1

    def authentication_failed(self, listener: str, mechanism: str) -> None:
        self._auth_failures[listener, mechanism] += 1

    def mirror_lag(self, mirror: str, topic: str, partition: int, records: int) -> None:
        self._mirror_lag[mirror, self._topic_label(topic), str(partition)] = records

    # --- the scrape ---------------------------------------------------------------------------
    def families(self) -> Iterator[Metric]:
        yield from self._topic_families()
        yield _histograms(
            "produce_stage_duration_seconds",
            "Time a produced batch group spent in each stage of the write path (admission only"
            " for requests that waited for the in-flight byte budget)",
            "stage",
            {stage.value: h for stage, h in self._stages.items()},
        )
        yield _histograms(
            "coordinator_step_duration_seconds",
            "Latency of each batch-coordinator write step, by operation",
            "operation",
            self._step_latency,
        )
        yield _counter(
            "coordinator_steps_total",
            "Batch-coordinator write steps by operation and outcome (unknown: a commit whose"
            " result was lost)",
            ("operation", "outcome"),
            self._steps,
        )
        yield _counter(
            "requests_total",
            "Kafka requests answered, by API",
            ("api",),
            {(api,): h.count for api, h in self._requests.items()},
        )
        yield _histograms(
            "request_duration_seconds",
            "Time from a Kafka request's decoding to its response, by API",
            "api",
            self._requests,
        )
        yield _counter(
            "request_errors_total",
            "Error codes other than NONE in Kafka responses (one per failed partition, topic or"
            " request), by API and error",
            ("api", "error"),
            self._request_errors,
        )
        yield from self._connection_families()
        lag = GaugeMetricFamily(
            PREFIX + "mirror_lag_records",
            "Offsets a mirror's source holds beyond what it mirrored of the partition, after its"
            " latest fetch (source high watermark minus destination high watermark)",
            labels=("mirror", "topic", "partition"),
        )
        for key, records in dict(self._mirror_lag).items():  # a copy: scrapes may run elsewhere
            lag.add_metric(key, records)
        yield lag

    def _topic_families(self) -> Iterator[Metric]:
        fields = (
            (
                "topic_bytes_in_total",
                "bytes_in",
                "Bytes of record batches produced to the topic"
                " and committed, as the clients sent them (Kafka's BytesInPerSec)",
            ),
            ("topic_records_in_total", "records_in", "Records produced to the topic and committed"),
            (
                "topic_batches_in_total",
                "batches_in",
                "Record batches produced to the topic and committed",
            ),
            (
                "topic_bytes_out_total",
                "bytes_out",
                "Bytes of record batches fetched from the topic (Kafka's BytesOutPerSec)",
            ),
            ("topic_records_out_total", "records_out", "Records fetched from the topic"),
            ("topic_batches_out_total", "batches_out", "Record batches fetched from the topic"),
            (
                "topic_object_put_requests_total",
                "put_requests",
                "The topic's share of WAL"
                " object PUT requests (each object's split by the topic's batch bytes in it)",
            ),
            (
                "topic_object_bytes_written_total",
                "object_bytes",
                "The topic's share of WAL object bytes written (split as the PUTs are)",
            ),
        )
        for name, attribute, help_text in fields:
            yield _counter(
                name,
                help_text,
                ("topic",),
                {(topic,): getattr(t, attribute) for topic, t in self._topics.items()},
            )
        yield _counter(
            "topic_object_storage_cost_dollars_total",
            "Estimated object-storage request cost of the topic's WAL writes: its share of the"
            " PUT requests at the configured PUT price",
            ("topic",),
            {
                (topic,): t.put_requests * self.rates.put_per_1000 / 1000
                for topic, t in self._topics.items()
            },
        )

    def _connection_families(self) -> Iterator[Metric]:
        yield _counter(
            "connections_opened_total",
            "Client connections accepted",
            ("listener",),
            {(k,): n for k, n in self._connections_opened.items()},
        )
        yield _counter(
            "connections_closed_total",
            "Client connections ended (open connections: opened minus closed)",
            ("listener",),
            {(k,): n for k, n in self._connections_closed.items()},
        )
        yield _counter(
            "connections_rejected_total",
            "Connections refused or closed for the client's fault, by reason",
            ("listener", "reason"),
            self._rejected,
        )
        yield _counter(
            "authentication_failures_total",
            "Failed client authentications, by listener and mechanism",
            ("listener", "mechanism"),
            self._auth_failures,
        )


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _counter(
    name: str,
    help_text: str,
    labels: Sequence[str],
    values: Mapping[Any, float],
) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, help_text, labels=labels)
    for key, value in values.items():
        family.add_metric(key, value)
    return family


def _histograms(
    name: str, help_text: str, label: str, histograms: Mapping[str, Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(PREFIX + name, help_text, labels=(label,))
    for value, histogram in histograms.items():
        family.add_metric((value,), histogram.cumulative(), histogram.sum)
    return family
