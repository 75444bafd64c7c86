"""What the library tells a metrics system, and nothing of any particular one.

Counters the library already keeps (`DisklessBroker.stats()`, `ObjectStore.stats()`, the
lifecycle services' `stats()`) are read when a scrape asks for them, at no cost to requests. The
events below are the measures that cannot be read from a snapshot: latencies, and what each
committed WAL object held per topic. Every part that reports them takes a `Metrics` (the broker,
its WAL writer, the coordinator's `metrics` attribute), and this base class, the default, drops
them: a library embedded without a metrics system pays one empty call per event. A process that
exports metrics passes a subclass of its own (the Kafka server's Prometheus one,
`diskless.kafka_server.PrometheusMetrics`); nothing here is global, so two embedded brokers may
report to two registries.

Events arrive on the event loop that runs the part reporting them; an implementation needs no
lock against scrapes that run on the same loop.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

import msgspec

from diskless._types import ErrorCode, TopicPartition


class ProduceStage(enum.Enum):
    """Where a produced batch's time goes, in the order it passes the stages."""

    ADMISSION = "admission"
    """Waiting for the in-flight byte budget (backpressure); only requests that queued."""
    SEGMENT_FILL = "segment_fill"
    """From a segment's first batch to its rotation (size or `commit_interval_ms`)."""
    UPLOAD = "upload"
    """The segment's PUT, retries and their backoff included."""
    COMMIT_WAIT = "commit_wait"
    """From the upload's end until every earlier segment has been committed (commit order)."""
    COMMIT = "commit"
    """The coordinator step that committed the segment (with the uploaded ones after it)."""


class StepOutcome(enum.Enum):
    """How a coordinator step ended."""

    OK = "ok"
    ERROR = "error"
    """Failed: nothing was applied."""
    UNKNOWN = "unknown"
    """A commit whose result was lost: it may or may not have been applied."""


class CommittedBatch(Protocol):
    """What a committed batch tells the metrics (a `CommitBatch` has it)."""

    @property
    def topic_partition(self) -> TopicPartition: ...

    @property
    def size(self) -> int: ...

    @property
    def record_count(self) -> int: ...


class BatchOutcome(Protocol):
    """The coordinator's answer to one batch (a `CommitBatchResult` has it)."""

    @property
    def error(self) -> ErrorCode: ...


class StorageRates(msgspec.Struct, frozen=True, kw_only=True):
    """Object-storage list prices, in dollars, for cost estimates (defaults: AWS S3 Standard,
    us-east-1). The benchmark harness's cost model uses the same defaults."""

    put_per_1000: float = 0.005
    get_per_1000: float = 0.0004
    storage_gb_month: float = 0.023
    """$/GB-month (S3 Standard, first 50 TB)."""

    def __post_init__(self) -> None:
        if min(self.put_per_1000, self.get_per_1000, self.storage_gb_month) < 0:
            raise ValueError("storage rates must be >= 0")


STORAGE_RATES: Final = StorageRates()


class Metrics:
    """The events the library and the Kafka server report; this base ignores them all."""

    __slots__ = ()

    # --- the write path -----------------------------------------------------------------------
    def produce_stage(self, stage: ProduceStage, seconds: float) -> None:
        """A batch group spent `seconds` in `stage` (one report per segment, or per request
        that queued for admission)."""

    def wal_object_committed(
        self,
        object_bytes: int,
        put_requests: int,
        batches: Sequence[CommittedBatch],
        outcomes: Sequence[BatchOutcome],
    ) -> None:
        """A WAL object of `object_bytes` (stored in `put_requests` billed requests) was
        committed; `outcomes[i]` answers `batches[i]`. Batches answered NONE are the bytes in
        (a duplicate included, as Kafka counts it); the object's requests and bytes are shared
        among its topics by their batch bytes."""

    # --- the read path ------------------------------------------------------------------------
    def fetched(self, topic: str, nbytes: int, records: int, batches: int) -> None:
        """A fetch returned `batches` record batches of `topic` (`records` records, `nbytes`)."""

    # --- the coordinator ----------------------------------------------------------------------
    def coordinator_step(self, operation: str, seconds: float, outcome: StepOutcome) -> None:
        """A coordinator write step (`Operation`'s value) ended after `seconds`."""

    # --- the mirror (KIP-1279) ----------------------------------------------------------------
    def mirror_lag(self, mirror: str, topic: str, partition: int, records: int) -> None:
        """After a fetch of the mirror `mirror`: the offsets the source holds beyond what is
        mirrored of the partition (its high watermark minus the destination's)."""

    # --- the Kafka server ---------------------------------------------------------------------
    def request_answered(self, api: str, seconds: float, errors: Iterable[int]) -> None:
        """A request of `api` was answered after `seconds`; `errors`: the error codes other
        than NONE its response carries (one per partition, topic or request that failed)."""

    def connection_opened(self, listener: str) -> None:
        """A client connection was accepted."""

    def connection_closed(self, listener: str) -> None:
        """An accepted connection ended."""

    def connection_rejected(self, listener: str, reason: str) -> None:
        """A connection was refused or closed for the client's fault (`reason`: a short word)."""

    def authentication_failed(self, listener: str, mechanism: str) -> None:
        """A client failed to authenticate (`mechanism`: SASL's, or "SSL")."""


NULL_METRICS: Final = Metrics()
"""The default: every event dropped."""


class FetchedPartition(Protocol):
    """One partition of a fetch's answer (a `FetchResult` is one)."""

    @property
    def records(self) -> bytes: ...

    @property
    def record_views(self) -> tuple[bytes | memoryview, ...]: ...


def report_fetch(metrics: Metrics, results: Mapping[TopicPartition, FetchedPartition]) -> None:
    """Report what a fetch returned, per partition (nothing to count without a metrics system)."""
    if metrics is NULL_METRICS:
        return
    for tp, result in results.items():
        # Views are joined to be counted: only with a metrics system, which the wire's joined
        # fetches feed.
        data = result.records or b"".join(result.record_views)
        if data:
            batches, records = record_counts(data)
            metrics.fetched(tp.topic, len(data), records, batches)


def record_counts(batches: bytes | memoryview) -> tuple[int, int]:
    """(batches, records) of concatenated record batches v2, from their headers (a cut last
    batch, which a fetch may return, is not counted)."""
    view = memoryview(batches)
    count = records = 0
    position = 0
    end = len(view)
    while end - position >= _RECORDS_COUNT_END:
        length = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        size = _LOG_OVERHEAD + length
        if length < 0 or position + size > end:
            break
        records += int.from_bytes(
            view[position + _RECORDS_COUNT_AT : position + _RECORDS_COUNT_END], "big", signed=True
        )
        count += 1
        position += size
    return count, records


_LOG_OVERHEAD: Final = 12
"""A batch's base offset and length fields, which its length does not count."""
_RECORDS_COUNT_AT: Final = 57
_RECORDS_COUNT_END: Final = 61
