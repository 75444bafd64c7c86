"""The cleaner: Kafka's log cleaner for compacted topics, in the lifecycle process beside
consolidation (`diskless.compaction` holds its core as pure code).

Each run looks at every partition of the topics whose `cleanup.policy` holds compact and, for
one that is due, makes one pass:
- it asks the coordinator for the partition's rows from the first (`cleaning_range`), its
  aborted index over them and its producers' last entries;
- the cleanable range ends at the lowest of the last stable offset, the first record younger
  than `min.compaction.lag.ms` (or the consolidation age: the part of Kafka's active segment),
  and the high watermark, on a row boundary;
- it is due when its dirty part (past what the last pass cleaned) holds at least
  `min.cleanable.dirty.ratio` of its bytes, or its first dirty record is older than
  `max.compaction.lag.ms`;
- it reads the rows' batches as served, maps the dirty part's keys into the bounded map (a
  full map ends the pass early, at a row boundary; the next pass goes on from there), cleans,
  writes the kept batches into one object with an offset and time index (the consolidated
  object's format, with gaps), uploads it, and asks the coordinator to swap the rows for it
  (`commit_cleaned`), replacing their aborted-index entries by those the cleaner kept.
Upload first, swap second, as consolidation does: a cleaner that dies in between, or whose swap
is refused because retention, DeleteRecords, deletion or consolidation touched the range, leaves
an object the coordinator never committed, which the file manager reclaims as an orphan.

Where cleaning reached (Kafka's cleaner checkpoint) is read from the coordinator's rows, so that
it survives a restart: a cleaned object's name ends in `CLEANED_KEY_TAG` (`cleaned_key`), and
a partition whose first row is an extent in such an object was cleaned up to that row's end;
anything else is dirty from the log start. Every pass swaps in one extent from the log start,
so the first row is the last pass's (or retention, DeleteRecords or consolidation replaced it,
and the log from its start is dirty again: more work, never a wrong result, since cleaning a
clean range again keeps it).
A pass reads its rows twice (the map, then the filter), a window of `cache_block_bytes` at a
time through the cleaner's object cache (at most `cache_bytes_max`), and streams what it keeps
into the object it uploads: its memory is the map, the cache, one window and that object (at
most the bytes it read, as nothing is added; `range_bytes_max` bounds it).
`stats()` counts the work done and holds Kafka's LogCleaner gauges of the last run (the
dirtiest partition, the recopy ratio, the longest pass, the fullest map), which the server
exports as metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import struct
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple, TypeVar

import msgspec

from diskless._availability import log_failure
from diskless._object_keys import new_object_key
from diskless._types import TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.compaction import (
    CleanStats,
    LastRecord,
    OffsetMap,
    UncleanableBatch,
    build_offset_map,
    clean,
)
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    CleanedSwap,
    CleaningRange,
    ExtentIndex,
    TopicConfig,
)
from diskless.errors import CoordinatorError, StorageError
from diskless.lifecycle._config import CleanerConfig
from diskless.lifecycle._periodic import Periodic, PeriodicService
from diskless.lifecycle._stats import CleanerStats, CleaningRun
from diskless.read import CorruptBatch, ObjectCache, read_as_served
from diskless.records import InvalidBatch, parse_batch
from diskless.storage import ObjectStore
from diskless.wal import ExtentFormatError, encode_extent

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_LOG_OVERHEAD = 12
_BATCH_LENGTH_MIN = 49
"""A v2 batch's length field covers at least its header after the length (61 - 12 bytes)."""
_T = TypeVar("_T")
Buffer = bytes | bytearray | memoryview
CLEANED_KEY_TAG: Final = "c1ea"
"""How a cleaned object's name ends: its random part is this longer than a WAL object's or a
consolidated object's (`new_object_key`'s 16 hex digits), so that no other name ends so."""
_RANDOM_HEX: Final = 16


def cleaned_key(prefix: str, created_ms: int, node_id: int) -> str:
    """A fresh name for a cleaned object, named like a WAL object (so that one whose swap never
    happened is an orphan for the file manager) and told apart by `is_cleaned_key`."""
    suffix = secrets.token_hex(_RANDOM_HEX // 2) + CLEANED_KEY_TAG
    return new_object_key(prefix, created_ms, node_id, suffix)


def is_cleaned_key(key: str) -> bool:
    """Whether `key` names an object the cleaner wrote (`cleaned_key`)."""
    suffix = key.rpartition("-")[2].removesuffix(".wal")
    return len(suffix) == _RANDOM_HEX + len(CLEANED_KEY_TAG) and suffix.endswith(CLEANED_KEY_TAG)


def cleaned_to(rows: Sequence[BatchInfo]) -> int:
    """Where cleaning reached in a partition whose rows from the log start are `rows`: the end
    of the first row when it is a cleaned extent, else 0 (dirty from the start)."""
    if rows and rows[0].extent is not None and is_cleaned_key(rows[0].object_key):
        return rows[0].last_offset + 1
    return 0


class CleanerSettings(NamedTuple):
    """A compacted topic's cleaner configs, at Kafka's defaults when not set."""

    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = (1 << 63) - 1
    delete_retention_ms: int = 86_400_000


def cleaner_settings(config: TopicConfig) -> CleanerSettings:
    """The cleaner's settings of a topic (checked when they were set)."""
    default = CleanerSettings()
    ratio = config.kept_config("min.cleanable.dirty.ratio")
    lags = [
        config.kept_config(name)
        for name in ("min.compaction.lag.ms", "max.compaction.lag.ms", "delete.retention.ms")
    ]
    return CleanerSettings(
        default.min_cleanable_dirty_ratio if ratio is None else float(ratio),
        default.min_compaction_lag_ms if lags[0] is None else int(lags[0]),
        default.max_compaction_lag_ms if lags[1] is None else int(lags[1]),
        default.delete_retention_ms if lags[2] is None else int(lags[2]),
    )


class _Outcome(NamedTuple):
    swapped: bool | None
    """True when swapped, False when refused, None when a step failed."""
    stats: CleanStats


class Cleaner(PeriodicService):
    """Cleans compacted topics every `period_ms`; safe on several processes (the coordinator's
    swap decides). The store and coordinator stay the caller's."""

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: CleanerConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._config = config if config is not None else CleanerConfig()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._cache = ObjectCache(
            store,
            block_bytes=self._config.cache_block_bytes,
            bytes_max=self._config.cache_bytes_max,
        )
        self._map: OffsetMap | None = None
        self._stats = CleanerStats()
        self._dirtiest = 0.0
        self._fullest = 0.0
        """The largest dirty ratio and map utilization of the run under way."""
        self._run_lock = asyncio.Lock()
        self._periodic = Periodic(
            "diskless-cleaner", self.run_once, self._config.period_ms / 1000, self._clock
        )

    @property
    def config(self) -> CleanerConfig:
        return self._config

    def stats(self) -> CleanerStats:
        return self._stats

    async def run_once(self) -> CleaningRun:
        """One pass over every due partition of the compacted topics. A failure of one
        partition is logged and counted, and the run goes on; listing the topics failing
        propagates."""
        async with self._run_lock:
            try:
                described = await self._coordinator.describe_topics()
            except BaseException:
                old = self._stats
                self._stats = msgspec.structs.replace(
                    old, runs=old.runs + 1, run_errors=old.run_errors + 1
                )
                raise
            topics = [t for t in described if t.config.compacted]
            looked = cleaned = refused = failures = 0
            totals = CleanStats()
            self._dirtiest = self._fullest = 0.0
            longest = 0.0
            for topic in topics:
                for partition in range(topic.partitions):
                    looked += 1
                    started = self._clock.monotonic()
                    outcome = await self._pass(TopicPartition(topic.name, partition))
                    if outcome is None:
                        continue
                    longest = max(longest, self._clock.monotonic() - started)
                    if outcome.swapped is None:
                        failures += 1
                    elif outcome.swapped:
                        cleaned += 1
                    else:
                        refused += 1
                    totals.bytes_read += outcome.stats.bytes_read
                    totals.bytes_written += outcome.stats.bytes_written
                    totals.records_read += outcome.stats.records_read
                    totals.records_kept += outcome.stats.records_kept
            if cleaned or refused or failures:
                logger.info(
                    "cleaning: %d partitions cleaned (%d bytes to %d), %d refused, %d failed",
                    cleaned,
                    totals.bytes_read,
                    totals.bytes_written,
                    refused,
                    failures,
                )
            run = CleaningRun(
                partitions=looked,
                cleaned=cleaned,
                swaps_refused=refused,
                failures=failures,
                bytes_read=totals.bytes_read,
                bytes_written=totals.bytes_written,
                records_read=totals.records_read,
                records_kept=totals.records_kept,
            )
            self._count(run, longest)
            return run

    def _count(self, run: CleaningRun, longest_s: float) -> None:
        old = self._stats
        self._stats = CleanerStats(
            runs=old.runs + 1,
            run_errors=old.run_errors,
            cleaned=old.cleaned + run.cleaned,
            swaps_refused=old.swaps_refused + run.swaps_refused,
            failures=old.failures + run.failures,
            bytes_read=old.bytes_read + run.bytes_read,
            bytes_written=old.bytes_written + run.bytes_written,
            records_read=old.records_read + run.records_read,
            records_kept=old.records_kept + run.records_kept,
            max_dirty_percent=100 * self._dirtiest,
            recopy_percent=100 * run.bytes_written / run.bytes_read if run.bytes_read else 0.0,
            max_clean_time_s=longest_s,
            max_buffer_utilization_percent=100 * self._fullest,
        )

    async def _pass(self, tp: TopicPartition) -> _Outcome | None:
        """One pass over a partition; None when it is not due."""
        config = self._config
        try:
            cleaning = await self._coordinator.cleaning_range(tp, config.range_bytes_max)
        except CoordinatorError as e:
            log_failure(logger, e, "cleaning: reading the rows of %s failed", tp)
            return _Outcome(None, CleanStats())
        if cleaning is None or not cleaning.batches:
            return None
        settings = cleaner_settings(cleaning.config)
        now = self._clock.now_ms()
        rows = _cleanable(cleaning, now - max(settings.min_compaction_lag_ms, config.age_ms))
        first_dirty = max(cleaned_to(cleaning.batches), rows[0].base_offset if rows else 0)
        dirty = [info for info in rows if info.last_offset >= first_dirty]
        if not dirty:
            return None
        ratio = sum(info.size for info in dirty) / max(1, sum(info.size for info in rows))
        self._dirtiest = max(self._dirtiest, ratio)
        overdue = dirty[0].max_timestamp <= now - settings.max_compaction_lag_ms
        if ratio < settings.min_cleanable_dirty_ratio and not overdue:
            return None
        reader = _Reader(self._cache, asyncio.get_running_loop(), config.cache_block_bytes)
        try:
            cleaned = await asyncio.to_thread(
                self._clean, cleaning, rows, reader, first_dirty, now, settings
            )
        except (StorageError, CorruptBatch) as e:
            log_failure(logger, e, "cleaning: reading %s failed", tp)
            return _Outcome(None, CleanStats())
        except (UncleanableBatch, ExtentFormatError) as e:
            logger.error("cleaning: %s cannot be cleaned: %s", tp, e)
            return _Outcome(None, CleanStats())
        if cleaned is None:
            return None
        count, data, footer_at, max_timestamp, stats = cleaned
        key = cleaned_key(config.prefix, self._clock.now_ms(), config.node_id)
        try:
            await self._store.put(key, data)
        except StorageError as e:
            log_failure(logger, e, "cleaning: uploading %s for %s failed", key, tp)
            return _Outcome(None, stats)
        kept = {(e.producer_id, e.last_offset) for e in stats.aborted_kept}
        swap = CleanedSwap(
            cleaning=cleaning,
            rows=count,
            object_key=key,
            object_size=len(data),
            size=footer_at,
            index=ExtentIndex(footer_at, len(data) - footer_at),
            max_timestamp=max_timestamp,
            aborted_kept=[e for e in cleaning.aborted if (e.producer_id, e.last_offset) in kept],
        )
        try:
            result = await self._coordinator.commit_cleaned(swap)
        except CoordinatorError as e:
            log_failure(logger, e, "cleaning: swap of %s into %s failed", tp, key)
            return _Outcome(None, stats)
        if not result.swapped:
            logger.info(
                "cleaning: swap of %s refused (%s); %s is an orphan", tp, result.reason, key
            )
            return _Outcome(False, stats)
        return _Outcome(True, stats)

    def _clean(
        self,
        cleaning: CleaningRange,
        rows: Sequence[BatchInfo],
        reader: _Reader,
        first_dirty: int,
        now: int,
        settings: CleanerSettings,
    ) -> tuple[int, bytes, int, int, CleanStats] | None:
        """The map and the filter, in a worker thread, each reading the rows as it goes: (rows
        replaced, the object, where its footer starts, its largest timestamp, what was read and
        kept); None when the map could not reach past the first dirty row."""
        if self._map is None:
            self._map = OffsetMap(self._config.map_bytes)
        end = rows[-1].last_offset + 1
        outcome = build_offset_map(
            reader.batches(rows),
            start=first_dirty,
            end=end,
            offset_map=self._map,
            aborted=cleaning.aborted,
        )
        self._fullest = max(self._fullest, self._map.utilization())
        count = sum(1 for info in rows if info.last_offset < outcome.mapped_end)
        if count == 0 or rows[count - 1].last_offset < first_dirty:
            logger.warning(
                "cleaning: the map of %s fills at offset %d, before the first dirty row ends:"
                " a larger map_bytes is needed",
                cleaning.topic_partition,
                outcome.mapped_end,
            )
            return None
        upper = rows[count - 1].last_offset + 1
        last_records = {
            pid: LastRecord(last, epoch) for pid, (last, epoch) in cleaning.last_records.items()
        }
        stats = CleanStats()
        kept = clean(
            reader.batches(rows[:count]),
            offset_map=self._map,
            now_ms=now,
            delete_retention_ms=settings.delete_retention_ms,
            aborted=cleaning.aborted,
            last_records=last_records,
            upper_bound=upper,
            stats=stats,
        )
        written = _Written()
        try:
            data, footer_at = encode_extent(
                cleaning.topic_partition,
                written.track(kept),
                self._config.index_interval_bytes,
                gaps=True,
            )
        except ExtentFormatError:
            if not written.batches:
                return None
            raise
        return count, data, footer_at, written.max_timestamp, stats


class _Written:
    """The batches a clean yields, counted on their way into the object."""

    def __init__(self) -> None:
        self.batches = 0
        self.max_timestamp = -1

    def track(self, batches: Iterable[bytes]) -> Iterator[bytes]:
        for batch in batches:
            header = parse_batch(batch)
            if isinstance(header, InvalidBatch):
                raise UncleanableBatch(header.message)
            self.batches += 1
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            yield batch


class _Window(NamedTuple):
    """One read of a pass: a run of batch rows (`rows`), or bytes [start, end) of an extent."""

    rows: Sequence[BatchInfo]
    extent: BatchInfo | None = None
    start: int = 0
    end: int = 0


class _Reader:
    """A pass's rows, read a window at a time from a worker thread through the event loop:
    the batches of at most `window_bytes` of rows (or of one extent) at once, never the range;
    the next window is read while the batches of this one are cleaned.
    """

    def __init__(
        self, cache: ObjectCache, loop: asyncio.AbstractEventLoop, window_bytes: int
    ) -> None:
        self._cache = cache
        self._loop = loop
        self._window = window_bytes

    def _windows(self, rows: Sequence[BatchInfo]) -> Iterator[_Window]:
        plain: list[BatchInfo] = []
        size = 0
        for info in rows:
            if info.extent is None:
                plain.append(info)
                size += info.size
                if size >= self._window:
                    yield _Window(plain)
                    plain, size = [], 0
                continue
            if plain:
                yield _Window(plain)
                plain, size = [], 0
            end = info.byte_offset + info.size
            for start in range(info.byte_offset, end, self._window):
                yield _Window((), info, start, min(end, start + self._window))
        if plain:
            yield _Window(plain)

    def _start(self, window: _Window) -> concurrent.futures.Future[Any]:
        read: Coroutine[Any, Any, Any]
        if window.extent is None:
            read = read_as_served(self._cache, window.rows)
        else:
            assert window.extent.extent is not None
            index = window.extent.extent
            object_size = index.byte_offset + index.size
            key = window.extent.object_key
            read = self._cache.read(key, window.start, window.end, object_size)
        return asyncio.run_coroutine_threadsafe(read, self._loop)

    def batches(self, rows: Sequence[BatchInfo]) -> Iterator[Buffer]:
        """The rows' batches as served, in offset order: an extent's bytes split into its
        batches, the other rows through the read path's copy."""
        ahead: tuple[_Window, concurrent.futures.Future[Any]] | None = None
        carried = b""
        try:
            for window in [*self._windows(rows), None]:
                started = None if window is None else (window, self._start(window))
                if ahead is not None:
                    current, read = ahead
                    info = current.extent
                    if info is None:
                        yield from read.result()
                    else:
                        data = carried + bytes(read.result())
                        batches, used = _split(data, info.object_key, current.start - len(carried))
                        yield from batches
                        carried = data[used:]
                        if current.end == info.byte_offset + info.size and carried:
                            raise CorruptBatch(
                                f"{info.object_key}: a batch crosses the extent's end"
                            )
                ahead = started
        finally:
            if ahead is not None:
                ahead[1].cancel()


def _cleanable(cleaning: CleaningRange, younger_from: int) -> list[BatchInfo]:
    """The leading rows below the LSO (and the high watermark) none of whose records is
    younger than `younger_from`."""
    rows = []
    for info in cleaning.batches:
        if info.last_offset >= min(cleaning.last_stable_offset, cleaning.high_watermark):
            break
        if info.max_timestamp > younger_from:
            break
        rows.append(info)
    return rows


def _split(data: bytes, where: str, at: int) -> tuple[list[Buffer], int]:
    """The whole batches at the start of `data` (read from byte `at` of object `where`), and
    the bytes they take."""
    view = memoryview(data)
    batches: list[Buffer] = []
    position = 0
    while position + _LOG_OVERHEAD <= len(view):
        size = _LOG_OVERHEAD + _LENGTH.unpack_from(view, position + 8)[0]
        if size < _LOG_OVERHEAD + _BATCH_LENGTH_MIN:
            raise CorruptBatch(f"{where} at {at + position}: a batch of {size} bytes")
        if position + size > len(view):
            break
        batches.append(view[position : position + size])
        position += size
    return batches, position
