"""The consolidator: moves partitions' old batches out of mixed WAL objects into one object per
partition range, and their batch rows into one extent row (KIP-1165's merging).

Each run asks the coordinator for candidates (a partition's oldest run of batch rows, committed
before `age_ms`, cut at `object_bytes_max`), and for each one: reads the batches as a fetch
serves them (through an object cache, so candidates sharing WAL objects read each block once),
writes them into a consolidated object (`diskless.wal.encode_extent`), uploads it under a fresh
object key, then asks the coordinator to swap the rows for the extent in one transaction.

Upload first, swap second, as for WAL objects: a consolidator that dies in between, or whose
swap is refused (retention, DeleteRecords or another consolidator changed the range meanwhile),
leaves an object the coordinator never committed, which the file manager condemns and deletes as
an orphan after its grace. Several consolidators may therefore run at once; the coordinator's
swap decides, and nothing is read twice or lost whichever wins. The WAL objects whose last
batches moved become UNREFERENCED and the file manager deletes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import msgspec

from diskless._availability import log_failure
from diskless._object_keys import new_object_key
from diskless.clock import Clock, SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    ConsolidationCandidate,
    ExtentIndex,
    ExtentSwap,
)
from diskless.errors import CoordinatorError, StorageError
from diskless.lifecycle._config import ConsolidatorConfig
from diskless.lifecycle._periodic import Periodic, PeriodicService
from diskless.lifecycle._stats import ConsolidationRun, ConsolidatorStats
from diskless.read import CorruptBatch, ObjectCache, read_as_served
from diskless.storage import ObjectStore
from diskless.wal import ExtentFormatError, encode_extent

logger = logging.getLogger(__name__)


class Consolidator(PeriodicService):
    """Runs consolidation every `period_ms`; safe on several processes (the coordinator's swap
    decides). The store and coordinator stay the caller's."""

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: ConsolidatorConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._config = config if config is not None else ConsolidatorConfig()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._cache = ObjectCache(
            store,
            block_bytes=self._config.cache_block_bytes,
            bytes_max=self._config.cache_bytes_max,
        )
        self._run_lock = asyncio.Lock()
        self._stats = ConsolidatorStats()
        self._periodic = Periodic(
            "diskless-consolidator", self.run_once, self._config.period_ms / 1000, self._clock
        )

    @property
    def config(self) -> ConsolidatorConfig:
        return self._config

    def stats(self) -> ConsolidatorStats:
        return self._stats

    async def run_once(self) -> ConsolidationRun:
        """One run over at most `candidates_per_run_max` candidates. A failure of one candidate
        is logged and counted, and the run goes on; the candidates call failing propagates."""
        async with self._run_lock:
            config = self._config
            try:
                candidates = await self._coordinator.consolidation_candidates(
                    self._clock.now_ms() - config.age_ms,
                    config.object_bytes_max,
                    config.candidates_per_run_max,
                )
            except BaseException:
                self._count(failed_run=True)
                raise
            committed = refused = failures = batches = size = 0
            whole_blocks = _fits(candidates, config.cache_bytes_max)
            for candidate in candidates:
                outcome = await self._consolidate(candidate, whole_blocks)
                if outcome is None:
                    failures += 1
                elif outcome:
                    committed += 1
                    batches += len(candidate.batches)
                    size += sum(info.size for info in candidate.batches)
                else:
                    refused += 1
            run = ConsolidationRun(
                candidates=len(candidates),
                extents_committed=committed,
                swaps_refused=refused,
                failures=failures,
                batches_moved=batches,
                bytes_moved=size,
            )
            self._count(run=run)
            if committed or refused or failures:
                logger.info(
                    "consolidation: %d extents (%d batches, %d bytes), %d refused, %d failed",
                    committed,
                    batches,
                    size,
                    refused,
                    failures,
                )
            return run

    async def _consolidate(
        self, candidate: ConsolidationCandidate, whole_blocks: bool
    ) -> bool | None:
        """True when swapped, False when refused (the object is left an orphan), None when a
        step failed before an answer."""
        tp = candidate.topic_partition
        try:
            served = await read_as_served(self._cache, candidate.batches, whole_blocks)
        except (StorageError, CorruptBatch) as e:
            log_failure(logger, e, "consolidation: reading %s failed", tp)
            return None
        try:
            data, footer_at = await asyncio.to_thread(  # CPU work, off the event loop
                encode_extent, tp, served, self._config.index_interval_bytes
            )
        except ExtentFormatError as e:
            logger.error("consolidation: the batches of %s do not form an extent: %s", tp, e)
            return None
        key = new_object_key(self._config.prefix, self._clock.now_ms(), self._config.node_id)
        try:
            await self._store.put(key, data)
        except StorageError as e:
            log_failure(logger, e, "consolidation: uploading %s for %s failed", key, tp)
            return None
        self._count(uploaded=len(data))
        swap = ExtentSwap(
            candidate=candidate,
            object_key=key,
            object_size=len(data),
            byte_offset=0,
            size=footer_at,
            index=ExtentIndex(footer_at, len(data) - footer_at),
        )
        try:
            result = await self._coordinator.commit_extent(swap)
        except CoordinatorError as e:
            # Unknown outcome: committed, or an orphan the file manager will reclaim.
            log_failure(logger, e, "consolidation: swap of %s into %s failed", tp, key)
            return None
        if not result.swapped:
            logger.info(
                "consolidation: swap of %s refused (%s); %s is an orphan", tp, result.reason, key
            )
        return result.swapped

    def _count(
        self, *, run: ConsolidationRun | None = None, failed_run: bool = False, uploaded: int = -1
    ) -> None:
        old = self._stats
        if uploaded >= 0:
            self._stats = msgspec.structs.replace(
                old,
                objects_uploaded=old.objects_uploaded + 1,
                bytes_uploaded=old.bytes_uploaded + uploaded,
            )
            return
        if failed_run or run is None:
            self._stats = msgspec.structs.replace(
                old, runs=old.runs + 1, run_errors=old.run_errors + 1
            )
            return
        self._stats = msgspec.structs.replace(
            old,
            runs=old.runs + 1,
            candidates=old.candidates + run.candidates,
            extents_committed=old.extents_committed + run.extents_committed,
            swaps_refused=old.swaps_refused + run.swaps_refused,
            failures=old.failures + run.failures,
            batches_moved=old.batches_moved + run.batches_moved,
            bytes_moved=old.bytes_moved + run.bytes_moved,
        )


def _fits(candidates: Sequence[ConsolidationCandidate], cache_bytes_max: int) -> bool:
    """Whether every object the run reads fits in the cache at once. Then each is read whole,
    once, for all the ranges it holds batches of; otherwise each range reads only its own spans,
    since whole objects would be evicted before the next range needed them again."""
    sizes: dict[str, int] = {}
    for candidate in candidates:
        for info in candidate.batches:
            if info.object_key:
                if info.object_size is None:
                    return False
                sizes[info.object_key] = info.object_size
    return sum(sizes.values()) <= cache_bytes_max
