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

Bytes are not copied on the way: the caches hand out views of their bytes (the local store's
are the file's mapped pages), a served batch is those views with only its changed header bytes
new (`served_parts`), and a partition's records are joined once into the bytes of its result, or
not at all when the fetch asks for views (`FetchResult.record_views`). A batch read from the
object cache is checked the first time it is served from a block, not again while that block
stays cached.

With an `ObjectCache`, stored bytes are read through its aligned blocks instead (one GET per
block however many partitions and fetches need it: the coordinator gives each object's size, so
a block is read whole, up to the object's end). Extents (consolidated runs of batches) are
expanded through their object's index and the budgets applied again (`_plan`), over the same one
answer of the coordinator; their batches are already as served and go out unchanged, after the
same checks.

ListOffsets answers that lie in records (by time, MAX_TIMESTAMP) are found by reading the batch
the coordinator names and walking its records (`_time_lookup`).

Failures stay local: a failed read or a corrupt batch turns only the partitions that needed those
bytes into KAFKA_STORAGE_ERROR (retriable); the rest of the fetch succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from logging import ERROR
from typing import Final, Protocol

from diskless._availability import log_failure
from diskless._kafka_errors import fetch_error
from diskless._results import FetchResult, FetchStats
from diskless._types import (
    ErrorCode,
    IsolationLevel,
    TopicPartition,
    check_isolation_level,
)
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsResponse,
)
from diskless.errors import CoordinatorError, StorageError
from diskless.read._batches import (
    Buffer,
    CorruptBatch,
    aborted_transactions,
    empty_result,
    served_parts,
    within_isolation,
)
from diskless.read._cache import ObjectCache
from diskless.read._extents import ExtentReader, Served
from diskless.read._plan import PartitionPlan, has_extents, plan_exact
from diskless.read._spans import Span, SpanIndex, coalesce
from diskless.read._time_lookup import TimeLookups
from diskless.storage import ObjectStore

_log = logging.getLogger(__name__)

GETS_INFLIGHT_MAX_DEFAULT: Final = 16
COALESCE_GAP_BYTES_MAX_DEFAULT: Final = 0
EXTENT_CACHE_BLOCK_BYTES: Final = 1024 * 1024
EXTENT_CACHE_BYTES_MAX: Final = 16 * 1024 * 1024
"""The reader's own cache for extents when it is given no `ObjectCache`."""


class RangeCache(Protocol):
    """Recently written objects (the WAL writer's `SegmentCache`): bytes or None on a miss.
    The bytes may be a view: what is cached never changes."""

    def get_range(self, key: str, start: int, end: int) -> Buffer | None: ...


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
        object_cache: ObjectCache | None = None,
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
        self._object_cache = object_cache
        self._extents = ExtentReader(
            object_cache
            if object_cache is not None
            else ObjectCache(
                store,
                block_bytes=EXTENT_CACHE_BLOCK_BYTES,
                bytes_max=EXTENT_CACHE_BYTES_MAX,
                gets=self._gets,
            )
        )
        self._time_lookups = TimeLookups(self._read_batch, self._extents)
        self._stats: dict[str, int] = dict.fromkeys(FetchStats.__struct_fields__, 0)

    @property
    def extents(self) -> ExtentReader:
        """Extents found through their objects' indexes."""
        return self._extents

    def stats(self) -> FetchStats:
        """This reader's counters; GETs and bytes include those of its object cache."""
        cache = self._extents.cache.stats()
        return FetchStats(
            **{
                **self._stats,
                "gets_issued": self._stats["gets_issued"] + cache.gets_issued,
                "bytes_fetched": self._stats["bytes_fetched"] + cache.bytes_fetched,
                "object_cache_block_hits": cache.block_hits,
                "time_lookup_batches_read": self._time_lookups.batches_read,
            }
        )

    async def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        views: bool = False,
    ) -> dict[TopicPartition, FetchResult]:
        """Record batches from each partition's offset, within the byte budgets; as
        `record_views` rather than joined when `views`.

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

        selected: dict[int, list[BatchInfo]] = {}
        results: dict[TopicPartition, FetchResult] = {}
        for i, (request, response) in enumerate(zip(requests, responses, strict=True)):
            if response.error != ErrorCode.NONE:
                results[request.topic_partition] = empty_result(response, response.error)
                continue
            selected[i] = within_isolation(response, isolation_level)

        if any(has_extents(batches) for batches in selected.values()):
            plans = await plan_exact(self._extents, requests, responses, selected, max_bytes)
        else:
            plans = {
                i: PartitionPlan([Served(info) for info in batches])
                for i, batches in selected.items()
            }

        spans = coalesce(
            (
                Span(b.info.object_key, b.info.byte_offset, b.info.byte_offset + b.size)
                for plan in plans.values()
                for b in plan.batches
                if b.data is None and b.info.object_key
            ),
            self._gap_bytes_max,
        )
        sizes = {
            b.info.object_key: b.info.object_size
            for plan in plans.values()
            for b in plan.batches
            if b.info.object_size is not None
        }
        data = await self._read_spans(spans, sizes)
        index = SpanIndex(spans)

        for i, plan in plans.items():
            request, response = requests[i], responses[i]
            tp = request.topic_partition
            if plan.failure is not None:
                self._stats["corrupt_batches"] += int(isinstance(plan.failure, CorruptBatch))
                _log.error("fetch: %s: %s", tp, plan.failure)
                results[tp] = empty_result(response, fetch_error(plan.failure), f"{plan.failure}")
                continue
            results[tp] = self._assemble(tp, response, plan, index, data, isolation_level, views)
        assert results.keys() == offsets.keys()
        return {tp: results[tp] for tp in offsets}  # in request order

    async def resolve_list_offsets(
        self, responses: Sequence[ListOffsetsResponse]
    ) -> list[ListOffsetsResponse]:
        """Answers that lie in records (`ListOffsetsResponse.lookup`), found by reading the
        batches the lookup names (`TimeLookups`); the others as they are. A batch that cannot be
        read answers KAFKA_STORAGE_ERROR for its partition only."""

        async def resolve(response: ListOffsetsResponse) -> ListOffsetsResponse:
            if response.lookup is None:
                return response
            try:
                return await self._time_lookups.resolve(response)
            except (CorruptBatch, StorageError) as e:
                self._stats["corrupt_batches"] += int(isinstance(e, CorruptBatch))
                log_failure(_log, e, "list offsets", level=ERROR)
                return ListOffsetsResponse(fetch_error(e))

        if all(response.lookup is None for response in responses):
            return list(responses)
        return list(await asyncio.gather(*(resolve(response) for response in responses)))

    # --- reading ------------------------------------------------------------------------------
    async def _read_batch(self, info: BatchInfo) -> memoryview:
        """One batch row's stored bytes, read as a fetch reads them (caches first)."""
        span = Span(info.object_key, info.byte_offset, info.byte_offset + info.size)
        sizes = {} if info.object_size is None else {info.object_key: info.object_size}
        chunk = (await self._read_spans([span], sizes))[span]
        if isinstance(chunk, StorageError):
            raise chunk
        return chunk

    async def _read_spans(
        self, spans: Sequence[Span], sizes: Mapping[str, int]
    ) -> dict[Span, memoryview | StorageError]:
        data: dict[Span, memoryview | StorageError] = {}
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
        if missing and self._object_cache is not None:
            data.update(await self._read_through(self._object_cache, missing, sizes))
        elif missing:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._get(span)) for span in missing]
            for span, task in zip(missing, tasks, strict=True):
                data[span] = task.result()
        self._stats["bytes_fetched"] += sum(
            len(chunk) for chunk in data.values() if isinstance(chunk, memoryview)
        )
        return data

    async def _read_through(
        self, cache: ObjectCache, spans: Sequence[Span], sizes: Mapping[str, int]
    ) -> dict[Span, memoryview | StorageError]:
        """Through the cache, whole blocks of the objects whose size is known."""

        async def read(span: Span) -> memoryview | StorageError:
            try:
                return await cache.read(*span, sizes.get(span.key))
            except StorageError as e:
                self._stats["storage_errors"] += 1
                log_failure(_log, e, "fetch: reading %s [%d, %d) failed", *span)
                return e

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(read(span)) for span in spans]
        return {span: task.result() for span, task in zip(spans, tasks, strict=True)}

    def _cached(self, span: Span) -> memoryview | None:
        if self._cache is None:
            return None
        try:
            cached = self._cache.get_range(span.key, span.start, span.end)
        except StorageError as e:  # a range outside the cached object: let storage answer
            _log.warning("fetch: cache refused %s [%d, %d): %r", *span, e)
            return None
        return None if cached is None else memoryview(cached).toreadonly()

    async def _get(self, span: Span) -> memoryview | StorageError:
        async with self._gets:
            self._stats["gets_issued"] += 1
            try:
                chunk = await self._store.get_range_view(span.key, span.start, span.end)
            except StorageError as e:
                self._stats["storage_errors"] += 1
                log_failure(_log, e, "fetch: reading %s [%d, %d) failed", *span)
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
        plan: PartitionPlan,
        index: SpanIndex,
        data: Mapping[Span, memoryview | StorageError],
        isolation_level: IsolationLevel,
        views: bool,
    ) -> FetchResult:
        parts: list[bytes | memoryview] = []  # new header bytes, and read-only views of the caches
        cache = self._object_cache
        try:
            for info, served in plan.batches:
                if served is not None:  # an extent's batch: checked when walked, already as served
                    parts.append(served)
                    self._stats["batches_read"] += 1
                    continue
                if not info.object_key:
                    self._stats["control_batches_synthesized"] += 1
                    parts += served_parts(info, None)
                    continue
                start, end = info.byte_offset, info.byte_offset + info.size
                span = index.find(info.object_key, start, end)
                chunk = data[span]
                if isinstance(chunk, StorageError):
                    return empty_result(response, fetch_error(chunk), f"{chunk}")
                stored = chunk[start - span.start : end - span.start]
                self._stats["batches_read"] += 1
                checked = cache is not None and cache.checked(info.object_key, start, stored)
                parts += served_parts(info, stored, checked=checked)
                if cache is not None and not checked:
                    cache.mark_checked(info.object_key, start, stored)
        except CorruptBatch as e:
            self._stats["corrupt_batches"] += 1
            _log.error("fetch: %s: %s", tp, e)
            return empty_result(response, fetch_error(e), f"{e}")
        record_views = tuple(parts) if views else ()
        records = b"" if views else b"".join(parts)  # the one copy, unless views are asked for
        result = FetchResult(
            ErrorCode.NONE,
            high_watermark=response.high_watermark,
            last_stable_offset=response.last_stable_offset,
            log_start_offset=response.log_start_offset,
            records=records,
            aborted_transactions=aborted_transactions(
                response, [served.info for served in plan.batches], isolation_level
            ),
            record_views=record_views,
        )
        self._stats["bytes_returned"] += result.records_size
        return result
