"""The read path: batch coordinates from the coordinator, bytes from object storage.

One fetch makes one `find_batches` call for all its partitions, then reads each object's needed
bytes once: the byte ranges of one object are merged when they overlap or touch (or lie within
`coalesce_gap_bytes_max` of each other), and the merged ranges of different objects are read
concurrently, at most `gets_inflight_max` at a time, from the WAL writer's segment cache when it
still holds them and by ranged GET otherwise. Each stored batch is then checked again as on the
write path (it must frame as exactly one batch with a valid CRC, holding the offsets the
coordinator assigned), its base offset is rewritten (outside the CRC) and, on LogAppendTime topics,
its timestamp (CRC recomputed). Transaction markers exist only as coordinator metadata; the read
path synthesizes their control batches.

Failures stay local: a failed read or a corrupt batch turns only the partitions that needed those
bytes into KAFKA_STORAGE_ERROR (retriable); the rest of the fetch succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from diskless._kafka_errors import fetch_error
from diskless._results import FetchResult, FetchStats
from diskless._types import (
    ErrorCode,
    IsolationLevel,
    TimestampType,
    TopicPartition,
    check_isolation_level,
)
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    FindBatchesRequest,
    FindBatchesResponse,
)
from diskless.errors import CoordinatorError, StorageError
from diskless.read._batches import (
    CorruptBatch,
    aborted_transactions,
    check_stored_batch,
    empty_result,
    synthesize_marker,
    within_isolation,
)
from diskless.read._spans import Span, SpanIndex, coalesce
from diskless.records import (
    set_base_offset,
    set_log_append_time,
)
from diskless.storage import ObjectStore

_log = logging.getLogger(__name__)

GETS_INFLIGHT_MAX_DEFAULT: Final = 16
COALESCE_GAP_BYTES_MAX_DEFAULT: Final = 0


class RangeCache(Protocol):
    """Recently written objects (the WAL writer's `SegmentCache`): bytes or None on a miss."""

    def get_range(self, key: str, start: int, end: int) -> bytes | None: ...


class FetchReader:
    """Serves fetches for one broker. Shares the store, coordinator and cache it is given.

    `gets_inflight_max` bounds the ranged GETs in flight across all of this reader's concurrent
    fetches, not per fetch: a burst of consumers cannot open unbounded connections to storage.
    """

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        *,
        cache: RangeCache | None = None,
        gets_inflight_max: int = GETS_INFLIGHT_MAX_DEFAULT,
        coalesce_gap_bytes_max: int = COALESCE_GAP_BYTES_MAX_DEFAULT,
    ) -> None:
        if gets_inflight_max < 1:
            raise ValueError("gets_inflight_max must be at least 1")
        if coalesce_gap_bytes_max < 0:
            raise ValueError("coalesce_gap_bytes_max must not be negative")
        self._store = store
        self._coordinator = coordinator
        self._cache = cache
        self._gets = asyncio.Semaphore(gets_inflight_max)
        self._gap_bytes_max = coalesce_gap_bytes_max
        self._stats: dict[str, int] = dict.fromkeys(FetchStats.__struct_fields__, 0)

    def stats(self) -> FetchStats:
        return FetchStats(**self._stats)

    async def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, FetchResult]:
        """Record batches from each partition's offset, within the byte budgets.

        `max_bytes` bounds the whole response and `partition_max_bytes` each partition, except
        that the first batch of the response is returned whole even when larger (Kafka's rule,
        applied by the coordinator), so that a consumer always makes progress.
        """
        if max_bytes < 0 or partition_max_bytes < 0:
            raise ValueError("fetch byte budgets must not be negative")
        isolation_level = check_isolation_level(isolation_level)
        self._stats["fetches"] += 1
        requests = [
            FindBatchesRequest(tp, offset, partition_max_bytes, isolation_level)
            for tp, offset in offsets.items()
        ]
        if not requests:
            return {}
        try:
            responses = await self._coordinator.find_batches(requests, max_bytes)
        except CoordinatorError as e:
            failed = FetchResult(
                fetch_error(e), error_message=f"batch coordinator unavailable: {e}"
            )
            return {r.topic_partition: failed for r in requests}
        assert len(responses) == len(requests), (len(responses), len(requests))

        selected: dict[TopicPartition, list[BatchInfo]] = {}
        results: dict[TopicPartition, FetchResult] = {}
        for request, response in zip(requests, responses, strict=True):
            tp = request.topic_partition
            if response.error != ErrorCode.NONE:
                results[tp] = empty_result(response, response.error)
                continue
            selected[tp] = within_isolation(response, isolation_level)

        spans = coalesce(
            (
                Span(b.object_key, b.byte_offset, b.byte_offset + b.size)
                for batches in selected.values()
                for b in batches
                if b.object_key
            ),
            self._gap_bytes_max,
        )
        data = await self._read_spans(spans)
        index = SpanIndex(spans)

        for request, response in zip(requests, responses, strict=True):
            tp = request.topic_partition
            batches = selected.get(tp)
            if batches is None:
                continue
            results[tp] = self._assemble(tp, response, batches, index, data, isolation_level)
        assert results.keys() == offsets.keys()
        return {tp: results[tp] for tp in offsets}  # in request order

    # --- reading ------------------------------------------------------------------------------
    async def _read_spans(self, spans: Sequence[Span]) -> dict[Span, bytes | StorageError]:
        data: dict[Span, bytes | StorageError] = {}
        missing: list[Span] = []
        for span in spans:
            cached = self._cached(span)
            if cached is not None:
                assert len(cached) == span.end - span.start, (span, len(cached))
                data[span] = cached
                self._stats["cache_hits"] += 1
            else:
                missing.append(span)
        self._stats["ranges_read"] += len(spans)
        if missing:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._get(span)) for span in missing]
            for span, task in zip(missing, tasks, strict=True):
                data[span] = task.result()
        self._stats["bytes_fetched"] += sum(
            len(chunk) for chunk in data.values() if isinstance(chunk, bytes)
        )
        return data

    def _cached(self, span: Span) -> bytes | None:
        if self._cache is None:
            return None
        try:
            return self._cache.get_range(span.key, span.start, span.end)
        except StorageError as e:  # a range outside the cached object: let storage answer
            _log.warning("fetch: cache refused %s [%d, %d): %r", *span, e)
            return None

    async def _get(self, span: Span) -> bytes | StorageError:
        async with self._gets:
            self._stats["gets_issued"] += 1
            try:
                chunk = await self._store.get_range(span.key, span.start, span.end)
            except StorageError as e:
                self._stats["storage_errors"] += 1
                _log.warning("fetch: reading %s [%d, %d) failed: %r", *span, e)
                return e
        if len(chunk) != span.end - span.start:
            return StorageError(
                f"{span.key} [{span.start}, {span.end}) returned {len(chunk)} bytes"
            )
        return chunk

    # --- assembling ---------------------------------------------------------------------------
    def _assemble(
        self,
        tp: TopicPartition,
        response: FindBatchesResponse,
        batches: Sequence[BatchInfo],
        index: SpanIndex,
        data: Mapping[Span, bytes | StorageError],
        isolation_level: IsolationLevel,
    ) -> FetchResult:
        out = bytearray()
        try:
            for info in batches:
                if info.object_key:
                    start, end = info.byte_offset, info.byte_offset + info.size
                    span = index.find(info.object_key, start, end)
                    chunk = data[span]
                    if isinstance(chunk, StorageError):
                        return empty_result(response, fetch_error(chunk), f"{chunk}")
                    batch = bytearray(chunk[start - span.start : end - span.start])
                    check_stored_batch(batch, info)
                    self._stats["batches_read"] += 1
                else:
                    batch = bytearray(synthesize_marker(info))
                    self._stats["control_batches_synthesized"] += 1
                set_base_offset(batch, info.base_offset)
                if info.timestamp_type == TimestampType.LOG_APPEND_TIME:
                    set_log_append_time(batch, info.log_append_time)
                out += batch
        except CorruptBatch as e:
            self._stats["corrupt_batches"] += 1
            _log.error("fetch: %s: %s", tp, e)
            return empty_result(response, fetch_error(e), f"{e}")
        self._stats["bytes_returned"] += len(out)
        return FetchResult(
            ErrorCode.NONE,
            high_watermark=response.high_watermark,
            last_stable_offset=response.last_stable_offset,
            log_start_offset=response.log_start_offset,
            records=bytes(out),
            aborted_transactions=aborted_transactions(response, batches, isolation_level),
        )
