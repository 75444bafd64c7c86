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
import bisect
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol

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
from diskless.records import (
    InvalidBatch,
    build_control_batch,
    parse_batch,
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


class Span(NamedTuple):
    """A coalesced byte range [start, end) of one object: read once per fetch."""

    key: str
    start: int
    end: int


def coalesce(ranges: Iterable[Span], gap_bytes_max: int = 0) -> list[Span]:
    """Merge ranges of the same object that overlap, touch, or lie within `gap_bytes_max`.

    Returns disjoint spans sorted by (key, start); every input range lies within exactly one.
    """
    assert gap_bytes_max >= 0
    merged: list[Span] = []
    for span in sorted(ranges):
        assert 0 <= span.start < span.end, span
        if merged and merged[-1].key == span.key and span.start <= merged[-1].end + gap_bytes_max:
            last = merged[-1]
            merged[-1] = Span(last.key, last.start, max(last.end, span.end))
        else:
            merged.append(span)
    return merged


class _SpanIndex:
    """Finds the coalesced span holding a batch's range, and the bytes read for it."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self._starts: dict[str, list[int]] = {}
        self._spans: dict[str, list[Span]] = {}
        for span in spans:  # sorted by (key, start)
            self._starts.setdefault(span.key, []).append(span.start)
            self._spans.setdefault(span.key, []).append(span)

    def find(self, key: str, start: int, end: int) -> Span:
        starts = self._starts[key]
        span = self._spans[key][bisect.bisect_right(starts, start) - 1]
        assert span.start <= start and end <= span.end, (span, start, end)
        return span


class _CorruptBatch(Exception):
    """A stored batch failed the read-back check; its partition gets KAFKA_STORAGE_ERROR."""


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
            message = f"batch coordinator unavailable: {e}"
            return {
                r.topic_partition: FetchResult(ErrorCode.KAFKA_STORAGE_ERROR, error_message=message)
                for r in requests
            }
        assert len(responses) == len(requests), (len(responses), len(requests))

        selected: dict[TopicPartition, list[BatchInfo]] = {}
        results: dict[TopicPartition, FetchResult] = {}
        for request, response in zip(requests, responses, strict=True):
            tp = request.topic_partition
            if response.error != ErrorCode.NONE:
                results[tp] = _empty(response, response.error)
                continue
            selected[tp] = _within_isolation(response, isolation_level)

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
        index = _SpanIndex(spans)

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
        index: _SpanIndex,
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
                        return _empty(response, ErrorCode.KAFKA_STORAGE_ERROR, f"{chunk}")
                    batch = bytearray(chunk[start - span.start : end - span.start])
                    _check_stored_batch(batch, info)
                    self._stats["batches_read"] += 1
                else:
                    batch = bytearray(_synthesize_marker(info))
                    self._stats["control_batches_synthesized"] += 1
                set_base_offset(batch, info.base_offset)
                if info.timestamp_type == TimestampType.LOG_APPEND_TIME:
                    set_log_append_time(batch, info.log_append_time)
                out += batch
        except _CorruptBatch as e:
            self._stats["corrupt_batches"] += 1
            _log.error("fetch: %s: %s", tp, e)
            return _empty(response, ErrorCode.KAFKA_STORAGE_ERROR, f"{e}")
        self._stats["bytes_returned"] += len(out)
        return FetchResult(
            ErrorCode.NONE,
            high_watermark=response.high_watermark,
            last_stable_offset=response.last_stable_offset,
            log_start_offset=response.log_start_offset,
            records=bytes(out),
            aborted_transactions=aborted_transactions(response, batches, isolation_level),
        )


def _within_isolation(
    response: FindBatchesResponse, isolation_level: IsolationLevel
) -> list[BatchInfo]:
    """READ_COMMITTED stops before the last stable offset; READ_UNCOMMITTED at the high watermark.

    The LSO is always the first offset of a batch (the open transaction's first batch), so the
    cut falls between batches.
    """
    if isolation_level == IsolationLevel.READ_COMMITTED:
        return [b for b in response.batches if b.base_offset < response.last_stable_offset]
    return list(response.batches)


def aborted_transactions(
    response: FindBatchesResponse,
    batches: Sequence[BatchInfo],
    isolation_level: IsolationLevel,
) -> list[tuple[int, int]]:
    """(producer id, first offset) of aborted transactions overlapping the returned batches.

    Only READ_COMMITTED fetches carry the list. The coordinator's index answers it (aborted
    transactions whose marker is at or after the fetch offset and whose first offset is below the
    end of the returned batches); this keeps those overlapping what is actually returned.
    """
    if isolation_level != IsolationLevel.READ_COMMITTED or not batches:
        return []
    first_offset, last_offset = batches[0].base_offset, batches[-1].last_offset
    # Below the LSO, except a batch straddling a log start offset that moved past an open
    # transaction's first offset (the LSO is then the log start, inside that batch).
    assert first_offset <= last_offset, (first_offset, last_offset)
    return [
        (producer_id, txn_first_offset)
        for producer_id, txn_first_offset in response.aborted_transactions
        if txn_first_offset <= last_offset
    ]


def _synthesize_marker(info: BatchInfo) -> bytes:
    """The control batch of a transaction marker that exists only as coordinator metadata."""
    assert info.control is not None, info
    assert info.base_offset == info.last_offset, info
    return build_control_batch(
        base_offset=info.base_offset,
        producer_id=info.producer_id,
        producer_epoch=info.producer_epoch,
        control_type=info.control,
        coordinator_epoch=info.coordinator_epoch,
        timestamp=info.max_timestamp if info.max_timestamp >= 0 else info.log_append_time,
    )


def _check_stored_batch(batch: bytearray, info: BatchInfo) -> None:
    """The write path's checks, repeated on the bytes read back: one whole batch, valid CRC,
    holding exactly the offsets the coordinator assigned to it."""
    header = parse_batch(batch)
    where = f"{info.object_key} [{info.byte_offset}, {info.byte_offset + info.size})"
    if isinstance(header, InvalidBatch):
        raise _CorruptBatch(f"{where}: {header.message}")
    if header.size != len(batch):
        raise _CorruptBatch(f"{where}: holds a batch of {header.size} bytes, not {len(batch)}")
    if not header.crc_valid():
        raise _CorruptBatch(f"{where}: CRC-32C mismatch")
    if header.last_offset_delta != info.last_offset - info.base_offset:
        raise _CorruptBatch(
            f"{where}: batch holds {header.last_offset_delta + 1} offsets, "
            f"the coordinator assigned {info.last_offset - info.base_offset + 1}"
        )


def _empty(
    response: FindBatchesResponse, error: ErrorCode, message: str | None = None
) -> FetchResult:
    return FetchResult(
        error,
        high_watermark=response.high_watermark,
        last_stable_offset=response.last_stable_offset,
        log_start_offset=response.log_start_offset,
        error_message=message,
    )
