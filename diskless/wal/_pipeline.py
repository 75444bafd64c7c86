"""Upload then commit: each sealed segment uploads at once (bounded), and commits in order.

Commit N waits for upload N and for commit N-1 only, so a slow later upload never blocks an
earlier commit, and a producer's pipelined requests are sequenced in the order they were appended.
When commit N may go, the segments after it that are already uploaded go with it, in one
coordinator step (`commit_files`, up to `commit_group_max` objects): under load, the commits
queue behind the coordinator, and one step for all that wait costs about what one object did.
An upload attempt longer than `upload_timeout_ms` counts as failed, so a hung PUT cannot stall
the ordered commits of later segments forever. Commits have no timeout of their own: abandoning a
commit would not stop it from being applied.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from collections.abc import Callable
from logging import ERROR
from typing import Final

from diskless._availability import log_failure
from diskless._kafka_errors import produce_error
from diskless._limits import backoff_ms
from diskless._types import ErrorCode
from diskless.clock import Clock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatchResult,
    CommitFileResult,
    CommitRefusal,
    FileCommit,
)
from diskless.errors import CoordinatorError, StorageTimeoutError
from diskless.metrics import NULL_METRICS, Metrics, ProduceStage
from diskless.storage import ObjectStore
from diskless.wal._cache import SegmentCache
from diskless.wal._config import WalConfig
from diskless.wal._request import error_result
from diskless.wal._segment import Segment

log = logging.getLogger(__name__)

LATENCY_SAMPLES_MAX: Final = 4096
"""Recent upload/commit latencies kept for `stats` (oldest dropped first)."""


def _closed_result(cancelled: asyncio.CancelledError) -> CommitBatchResult:
    return error_result(
        produce_error(cancelled),
        "the broker closed before the batch was committed; outcome unknown",
    )


class SegmentPipeline:
    """Runs one task per sealed segment: upload, wait for the previous segment, commit, answer.

    `fenced` tells whether the broker was fenced (its segments then fail without a commit);
    `on_fenced` is called when a commit learns it was; `release` returns a resolved segment's
    in-flight bytes to admission.
    """

    def __init__(
        self,
        *,
        broker_id: int,
        broker_epoch: int,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: WalConfig,
        clock: Clock,
        cache: SegmentCache,
        fenced_result: CommitBatchResult,
        fenced: Callable[[], bool],
        on_fenced: Callable[[], None],
        release: Callable[[int], None],
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._store = store
        self._coordinator = coordinator
        self._config = config
        self._clock = clock
        self._cache = cache
        self._fenced_result = fenced_result
        self._fenced = fenced
        self._on_fenced = on_fenced
        self._release = release
        self._metrics = metrics
        self._upload_slots = asyncio.Semaphore(config.uploads_inflight_max)
        self._last_done: asyncio.Future[None] | None = None
        self._unresolved: collections.deque[Segment] = collections.deque()
        """Launched segments not resolved yet, in commit order."""
        self._tasks: set[asyncio.Task[None]] = set()

        self.objects_uploaded = 0
        self.object_bytes_uploaded = 0
        self.upload_attempts_failed = 0
        self.segments_upload_failed = 0
        self.commits = 0
        self.commit_steps = 0
        self.commits_failed = 0
        self.batches_committed = 0
        self.upload_latency: collections.deque[float] = collections.deque(
            maxlen=LATENCY_SAMPLES_MAX
        )
        self.commit_latency: collections.deque[float] = collections.deque(
            maxlen=LATENCY_SAMPLES_MAX
        )

    def launch(self, segment: Segment) -> None:
        """Start the sealed `segment`'s upload; its commit follows the previous segment's."""
        segment.done = asyncio.get_running_loop().create_future()
        self._metrics.produce_stage(
            ProduceStage.SEGMENT_FILL, self._clock.monotonic() - segment.opened_at
        )
        previous = self._last_done
        self._last_done = segment.done
        self._unresolved.append(segment)
        task = asyncio.create_task(
            self._run(segment, previous), name=f"wal-segment-{segment.number}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._resolve_unstarted(segment))

    @property
    def has_room(self) -> bool:
        """Whether a segment sealed now would start uploading at once: fewer segments are under
        way (uploading or waiting to commit) than `uploads_inflight_max`."""
        return len(self._unresolved) < self._config.uploads_inflight_max

    def cancel(self) -> None:
        """Abandon every segment under way: their batches fail with an unknown outcome."""
        for task in self._tasks:
            task.cancel()

    async def drain(self) -> None:
        """Wait until every launched segment has resolved."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, segment: Segment, previous: asyncio.Future[None] | None) -> None:
        assert segment.done is not None
        group = [segment]
        try:
            upload_failure = await self._upload(segment)
            segment.uploaded = upload_failure is None
            uploaded_at = self._clock.monotonic()
            if previous is not None:
                await asyncio.wait([previous])  # never cancels `previous` if we are cancelled
            if segment.uploaded:
                waited = self._clock.monotonic() - uploaded_at
                self._metrics.produce_stage(ProduceStage.COMMIT_WAIT, waited)
            if segment.resolved:
                pass  # it went with the group of a segment before it
            elif self._fenced():
                segment.fail(self._fenced_result)
            elif upload_failure is not None:
                self.segments_upload_failed += 1
                segment.fail(
                    error_result(
                        produce_error(upload_failure),
                        f"upload of {segment.key} failed after "
                        f"{self._config.upload_attempts} attempts: {upload_failure!r}",
                    )
                )
            else:
                group = self._group_led_by(segment)
                await self._commit(group)
        except asyncio.CancelledError as cancelled:
            for member in group:
                member.fail(_closed_result(cancelled))
            raise
        except Exception as error:
            log_failure(log, error, "segment %s failed unexpectedly", segment.key, level=ERROR)
            for member in group:
                member.fail(error_result(produce_error(error), "internal error in the WAL writer"))
        finally:
            self._resolve(segment)

    def _resolve_unstarted(self, segment: Segment) -> None:
        """A task cancelled before its first step (launched and cancelled in one step of the
        loop) never runs `_run`, whose `finally` resolves the segment: resolve it here, or its
        writers, its in-flight bytes and the next segment's commit would wait forever."""
        assert segment.done is not None
        if not segment.done.done():
            segment.fail(_closed_result(asyncio.CancelledError()))
            self._resolve(segment)

    def _resolve(self, segment: Segment) -> None:
        assert segment.done is not None
        segment.resolved = True
        self._release(segment.batch_bytes)
        self._unresolved.remove(segment)
        segment.done.set_result(None)
        segment.data = b""  # the cache holds its own reference when it keeps one
        segment.batches = []
        segment.waiters = []
        segment.waiter_indexes = []

    def _group_led_by(self, segment: Segment) -> list[Segment]:
        """`segment`, whose turn it is, and the uploaded segments right after it."""
        group = [segment]
        following = itertools.islice(self._unresolved, self._unresolved.index(segment) + 1, None)
        for later in following:
            if len(group) == self._config.commit_group_max or not later.uploaded:
                break
            group.append(later)
        return group

    async def _upload(self, segment: Segment) -> Exception | None:
        """Upload with retries: None once stored, else the last attempt's failure."""
        attempts = self._config.upload_attempts
        failure: Exception | None = None
        async with self._upload_slots:
            started = self._clock.monotonic()
            for attempt in range(1, attempts + 1):
                try:
                    await self._put_within_timeout(segment)
                except Exception as error:
                    failure = error
                    self.upload_attempts_failed += 1
                    log_failure(
                        log,
                        error,
                        "upload of %s failed (attempt %d/%d)",
                        segment.key,
                        attempt,
                        attempts,
                    )
                    if attempt < attempts:
                        retry_ms = backoff_ms(self._config.upload_backoff_ms, attempt - 1)
                        await self._clock.sleep(retry_ms / 1000)
                    continue
                elapsed = self._clock.monotonic() - started
                self.upload_latency.append(elapsed)
                self._metrics.produce_stage(ProduceStage.UPLOAD, elapsed)
                self.objects_uploaded += 1
                self.object_bytes_uploaded += len(segment.data)
                self._cache.put(segment.key, segment.data)
                return None
        assert failure is not None
        log_failure(
            log, failure, "giving up on %s after %d attempts", segment.key, attempts, level=ERROR
        )
        return failure

    async def _put_within_timeout(self, segment: Segment) -> None:
        """One PUT attempt, abandoned after `upload_timeout_ms` of the writer's clock (the
        object may still appear: an orphan for the file manager, since its key is never
        committed)."""
        put = asyncio.ensure_future(self._store.put(segment.key, segment.data))
        timer = asyncio.ensure_future(self._clock.sleep(self._config.upload_timeout_ms / 1000))
        try:
            await asyncio.wait([put, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not put.done():
                put.cancel()
                await asyncio.wait([put])
        if put.cancelled():
            timeout = StorageTimeoutError(
                f"PUT of {segment.key} took over {self._config.upload_timeout_ms} ms"
            )
            self._store.availability.failed(timeout)  # the store never answered it
            raise timeout
        put.result()

    async def _commit(self, group: list[Segment]) -> None:
        """Commit `group`'s objects in one coordinator step and answer their batches."""
        started = self._clock.monotonic()
        files = [FileCommit(s.key, len(s.data), s.batches) for s in group]
        try:
            outcomes = await self._coordinator.commit_files(
                self._broker_id, self._broker_epoch, files
            )
        except CoordinatorError as error:
            keys = ", ".join(s.key for s in group)
            log_failure(log, error, "commit of %s failed; objects left for the file manager", keys)
            self.commits_failed += len(group)
            for segment in group:
                segment.fail(
                    error_result(produce_error(error), f"commit failed or outcome unknown: {error}")
                )
            return
        self.commit_steps += 1
        elapsed = self._clock.monotonic() - started
        self.commit_latency.append(elapsed)
        self._metrics.produce_stage(ProduceStage.COMMIT, elapsed)
        for segment, outcome in zip(group, outcomes, strict=True):
            self._settle(segment, outcome)

    def _settle(self, segment: Segment, outcome: CommitFileResult) -> None:
        if outcome.refused is CommitRefusal.BROKER_FENCED:
            if not self._fenced():
                log.error(
                    "broker %d epoch %d fenced while committing %s; refusing further writes",
                    self._broker_id,
                    self._broker_epoch,
                    segment.key,
                )
                self._on_fenced()
            self.commits_failed += 1
            segment.fail(self._fenced_result)
            return
        if outcome.refused is not None:
            log.warning("commit of %s refused: %s", segment.key, outcome.reason)
            self.commits_failed += 1
            segment.fail(error_result(ErrorCode.KAFKA_STORAGE_ERROR, outcome.reason))
            return
        results = outcome.batches
        assert len(results) == len(segment.batches), (len(results), len(segment.batches))
        self.commits += 1
        self.batches_committed += len(results)
        # One PUT per object (a multipart upload's extra requests show in the store's counters).
        self._metrics.wal_object_committed(len(segment.data), 1, segment.batches, results)
        segment.answer(results)
