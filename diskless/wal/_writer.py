"""The shared-segment write pipeline: buffer, rotate, upload concurrently, commit in order.

    write() ──▶ active segment ──rotate──▶ upload (≤ uploads_inflight_max at once, retried)
                (all partitions,                │
                 all requests)                  ▼
                                  commit N after upload N and commit N-1 ──▶ results to waiters

Every concurrent `write` appends into one active segment. The segment rotates when it reaches
`buffer_max_bytes`, or by the clock (`_deadlines.RotationRule`): once no batch arrived for
`linger_ms`, but never sooner than `rotate_interval_min_ms` after the previous rotation (unless
its senders can send no more and it holds `rotate_floor_bytes`), and at the latest
`commit_interval_ms` after its first write. Each closed segment gets one task that uploads it
and then commits it; commit N waits for upload N and for commit N-1 only, so a slow later upload
never blocks an earlier commit, and a producer's pipelined requests are sequenced in the order
they were appended.

Error codes written into results (all retriable for Kafka clients):
- KAFKA_STORAGE_ERROR: the upload failed after `upload_attempts`, or the commit failed or its
  outcome is unknown (the object is left for the file manager to reclaim), or the writer was closed
  without flush while the batch was uploading or committing.
- NOT_LEADER_OR_FOLLOWER: this broker was fenced (a newer broker epoch exists) and refuses all
  writes from then on, or the writer shut down before the batch was appended/uploaded; clients
  refresh metadata and move to another broker.
- REQUEST_TIMED_OUT: the request's deadline passed first. The deadline bounds the wait only: the
  batch is still appended and committed (or failed) by the pipeline, as in Kafka; an idempotent
  retry is then acknowledged as a duplicate with the original offset.

Backpressure: in-flight bytes (buffered + uploading + committing batch bytes) never exceed
`inflight_bytes_max`; a request's next batch waits, first come first served, until it fits. A
single batch larger than the limit is admitted only when nothing else is in flight. When the
first queued writer could not fit even once everything else drained, the active segment rotates
at once rather than at its timer.

Copies: a batch is referenced (a memoryview of the caller's buffer) until its segment rotates,
then joined with the others and the footer into one `bytes` object: one copy per batch, and the
same object is uploaded and kept in the SegmentCache. A `write` that returns before rotation
(timeout, cancellation) first copies its batches out, those still waiting for admission included,
so callers may reuse their buffers as soon as `write` returns.

Timeouts are enforced by one watcher task on the injected clock (not one timer per request); an
upload attempt longer than `upload_timeout_ms` counts as failed, so a hung PUT cannot stall the
ordered commits of later segments forever. Commits have no timeout of their own: abandoning a
commit would not stop it from being applied.

The stages, each in its own module: admission (`_admission`), the segment and its footer
(`_segment`), upload and ordered commit (`_pipeline`), and the deadline watcher (`_deadlines`).
This class joins them: it places admitted batches, rotates segments and answers requests.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Hashable, Sequence
from typing import cast

from diskless._object_keys import new_object_key
from diskless._types import ErrorCode
from diskless.clock import Clock, SystemClock, sleep_unless
from diskless.coordinator import BatchCoordinator, CommitBatchResult
from diskless.errors import BrokerClosedError
from diskless.metrics import NULL_METRICS, Metrics, ProduceStage
from diskless.storage import ObjectStore
from diskless.wal._admission import Admission
from diskless.wal._cache import SegmentCache
from diskless.wal._config import WalConfig, WalStats
from diskless.wal._deadlines import DeadlineWatcher, RotationRule
from diskless.wal._format import WalEntry
from diskless.wal._pipeline import SegmentPipeline
from diskless.wal._request import CLOSING, TIMED_OUT, PendingWrite, error_result
from diskless.wal._segment import Segment
from diskless.wal._senders import Senders

log = logging.getLogger(__name__)


class WalWriter:
    """Appends validated batches of any partition to shared WAL segments and commits them.

    Call `start()` before `write()` and `close()` at the end (or use `async with`). The store,
    coordinator, clock and cache are parameters so that a simulation can replace each of them.
    """

    def __init__(
        self,
        *,
        broker_id: int,
        broker_epoch: int,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: WalConfig | None = None,
        clock: Clock | None = None,
        cache: SegmentCache | None = None,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        """`metrics`: where the time of each produce stage and each committed object's topics
        are reported (`diskless.metrics`)."""
        self._broker_id = broker_id
        self._metrics = metrics
        self._broker_epoch = broker_epoch
        self._config = config if config is not None else WalConfig()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._cache = (
            cache if cache is not None else SegmentCache(self._config.segment_cache_bytes_max)
        )
        self._fenced_result = error_result(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {broker_id} epoch {broker_epoch} was fenced by a newer incarnation",
        )

        self._started = False
        self._closing = False
        self._closed = asyncio.Event()
        self._fenced = False

        self._active: Segment | None = None
        self._segment_numbers = itertools.count()
        self._timer_task: asyncio.Task[None] | None = None
        self._timer_wakeup = asyncio.Event()
        self._rotation = RotationRule(self._config)
        self._senders = Senders(on_blocked=self._timer_wakeup.set)
        self._last_rotated_at = float("-inf")
        self._placing: set[asyncio.Task[None]] = set()
        """Tasks appending the entries of requests that had to queue for admission."""
        self._writes_open = 0

        self._admission = Admission(
            self._config.inflight_bytes_max, self._rotate_if_blocking_admission
        )
        self._pipeline = SegmentPipeline(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            store=store,
            coordinator=coordinator,
            config=self._config,
            clock=self._clock,
            cache=self._cache,
            fenced_result=self._fenced_result,
            fenced=lambda: self._fenced,
            on_fenced=self._fence,
            release=self._released,
            metrics=metrics,
        )
        self._deadlines = DeadlineWatcher(self._clock, self._due, lambda: self._writes_open)

        self._segments_rotated = 0
        self._requests = 0
        self._requests_timed_out = 0

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def config(self) -> WalConfig:
        return self._config

    @property
    def cache(self) -> SegmentCache:
        return self._cache

    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    @property
    def fenced(self) -> bool:
        return self._fenced

    async def start(self) -> None:
        """Start the rotation timer and the deadline watcher. Idempotent."""
        if self._closing:
            raise BrokerClosedError("the WAL writer is closed")
        if self._started:
            return
        self._started = True
        self._timer_task = asyncio.create_task(
            self._timer_loop(), name=f"wal-timer-b{self._broker_id}"
        )
        self._deadlines.start(f"wal-deadlines-b{self._broker_id}")

    async def __aenter__(self) -> WalWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(flush=exc_info[0] is None)

    async def close(self, *, flush: bool = True) -> None:
        """Stop taking writes; with `flush`, upload and commit everything buffered first.

        Without `flush`, buffered batches fail with NOT_LEADER_OR_FOLLOWER and uploads or commits
        under way are cancelled, their batches failing with KAFKA_STORAGE_ERROR (a cancelled
        commit's outcome is unknown). Writes waiting for admission fail with
        NOT_LEADER_OR_FOLLOWER either way. Idempotent; later `write` calls raise
        BrokerClosedError.
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            self._admission.refuse_all(CLOSING)
            while self._placing:  # they refuse their remaining entries, then end
                await asyncio.gather(*self._placing, return_exceptions=True)
            if self._active is not None:
                if flush:
                    self._rotate("close")
                else:
                    self._fail_active(CLOSING)
            if not flush:
                self._pipeline.cancel()
            await self._pipeline.drain()
            assert self._active is None
            assert self._admission.inflight_bytes == 0, self._admission.inflight_bytes
        finally:
            if self._timer_task is not None:
                self._timer_task.cancel()
                await asyncio.gather(self._timer_task, return_exceptions=True)
            await self._deadlines.close()
            self._closed.set()
        log.info("WAL writer of broker %d closed (flush=%s)", self._broker_id, flush)

    # --- the write path -----------------------------------------------------------------------
    async def write(
        self, entries: Sequence[WalEntry], *, timeout_s: float
    ) -> list[CommitBatchResult]:
        """Append `entries` to the WAL and wait for their commit; `results[i]` answers `entries[i]`.

        `submit` then `wait`: the timeout bounds the wait only, so entries still waiting for
        admission when it passes are appended all the same (as Kafka appends before it waits
        for acknowledgements). Never raises for storage or coordinator failures (see the module
        docstring for the error codes); raises BrokerClosedError once `close` has begun. Entries
        of one request may land in different segments; each is answered by the coordinator's
        result for its batch.
        """
        return await self.wait(self.submit(entries, admit_s=timeout_s), timeout_s=timeout_s)

    def submit(
        self, entries: Sequence[WalEntry], *, admit_s: float, sender: Hashable | None = None
    ) -> PendingWrite:
        """Hand `entries` to the WAL now, in call order, without waiting for their commit.

        Entries that fit are appended before this returns; under backpressure the rest are
        appended by a task of the writer as room frees up, ahead of any later `submit`. Those
        not admitted within `admit_s` are refused with REQUEST_TIMED_OUT (load shedding: a
        pipeline that cannot drain must not queue without bound), as are all of them once the
        writer is fenced or closed. The entries' buffers are borrowed until `wait` returns, or
        until every entry is answered when nobody waits. `sender` names who sent them (a
        connection): once every sender of the active segment has its most requests in flight,
        the segment need not linger (`_senders`).
        """
        if self._closing:
            raise BrokerClosedError("the WAL writer is closed")
        if not self._started:
            raise RuntimeError("WalWriter.start() must be awaited before write()")
        request = PendingWrite(
            list(entries),
            self._clock.monotonic() + admit_s,
            asyncio.get_running_loop().create_future(),
        )
        self._requests += 1
        self._senders.submitted(sender, request.future)
        if not entries:
            request.future.set_result(None)
        elif self._fenced:
            request.refuse_rest(self._fenced_result)
        elif self._place_admitted(request):
            request.placing = True
            self._deadlines.watch(request, request.admit_by)
            task = asyncio.create_task(self._place_rest(request), name="wal-admission")
            self._placing.add(task)
            task.add_done_callback(self._placing.discard)
        return request

    async def wait(self, request: PendingWrite, *, timeout_s: float) -> list[CommitBatchResult]:
        """The results of a `submit`, or REQUEST_TIMED_OUT for those not in after `timeout_s`.

        Returning early (timeout, cancellation) leaves the entries to the pipeline, which still
        commits or fails them; their batches are copied first, so the caller may reuse its
        buffers at once.
        """
        if not request.future.done():
            request.deadline = self._clock.monotonic() + timeout_s
            self._writes_open += 1
            try:
                if timeout_s <= 0:
                    self._expire(request)
                else:
                    self._deadlines.watch(request, request.deadline)
                    await request.future
            finally:
                self._writes_open -= 1
                if not request.future.done():  # our caller cancelled us
                    request.future.cancel()
                request.detach(self._active)
        results = request.results
        assert request.pending == 0 and None not in results
        return cast("list[CommitBatchResult]", results)

    def _place_admitted(self, request: PendingWrite) -> bool:
        """Append the request's entries while they are admitted at once; True if some remain."""
        entries = request.entries
        buffer_max = self._config.buffer_max_bytes
        size = 0
        for index in range(request.placed_count, len(entries)):
            size += entries[index].header.size
        if self._admission.admit_all_now(size, request):  # the common case: one check for all
            for index in range(request.placed_count, len(entries)):
                entry = entries[index]
                self._append(entry, entry.header.size, request, index, buffer_max)
                request.placed_count += 1
        while request.placed_count < len(entries):
            index = request.placed_count
            entry = entries[index]
            size = entry.header.size
            if not self._admission.admit_now(size, request):
                return True
            self._append(entry, size, request, index, buffer_max)
            request.placed_count += 1
        self._admission.end_turn(request)
        return False

    async def _place_rest(self, request: PendingWrite) -> None:
        """Queue for room, first come first served, and append the request's remaining entries."""
        entries = request.entries
        try:
            while True:
                index = request.placed_count
                size = entries[index].header.size
                queued_at = self._clock.monotonic()
                refusal = await self._admission.wait(size, request)
                self._metrics.produce_stage(
                    ProduceStage.ADMISSION, self._clock.monotonic() - queued_at
                )
                if refusal is None and (self._closing or self._fenced):
                    # Admitted, but the world changed while we waited.
                    self._admission.release(size)
                    refusal = self._fenced_result if self._fenced else CLOSING
                if refusal is not None:
                    request.refuse_rest(refusal)
                    return
                self._append(entries[index], size, request, index, self._config.buffer_max_bytes)
                request.placed_count += 1
                if not self._place_admitted(request):
                    return
        finally:
            request.placing = False
            self._admission.end_turn(request)

    def _append(
        self, entry: WalEntry, size: int, request: PendingWrite, index: int, buffer_max: int
    ) -> None:
        """Add one admitted batch to the active segment, by reference; rotation copies it once."""
        segment = self._active
        if segment is not None and segment.batch_bytes + size > buffer_max:
            self._rotate("size")
            segment = None
        now = self._clock.monotonic()
        if segment is None:
            segment = self._active = Segment(now)
            self._timer_wakeup.set()
        else:
            segment.last_write_at = now
        at = segment.add(entry, size, request, index)
        if request.last_placed is not segment:
            request.last_placed, request.first_part = segment, at
        if segment.batch_bytes >= buffer_max:
            self._rotate("size")
        elif self._admission.queued:  # a writer admitted ahead of others may now block them
            self._rotate_if_blocking_admission()

    # --- backpressure and fencing ---------------------------------------------------------------
    def _rotate_if_blocking_admission(self) -> None:
        """Rotate now if the first queued writer cannot fit until the active segment is gone.

        Queued writers block everyone behind them, so the active segment cannot grow meanwhile;
        waiting for the interval timer would only add latency (and, with small limits, let
        requests time out in a queue that drains one interval at a time).
        """
        active = self._active
        if active is None:
            return
        want = self._admission.first_waiting()
        if want is not None and active.batch_bytes + want > self._config.inflight_bytes_max:
            self._rotate("backpressure")

    def _released(self, batch_bytes: int) -> None:
        """A segment resolved: its bytes go back to admission, and the pipeline has room again,
        which may make the active segment due (`RotationRule`)."""
        self._admission.release(batch_bytes)
        self._timer_wakeup.set()

    def _fence(self) -> None:
        if self._fenced:
            return
        self._fenced = True
        self._admission.refuse_all(self._fenced_result)
        self._fail_active(self._fenced_result)

    # --- deadlines ----------------------------------------------------------------------------
    def _due(self, request: PendingWrite, now: float) -> None:
        waiter = request.waiter
        if request.admit_by <= now and waiter is not None and not waiter.done():
            waiter.set_result(TIMED_OUT)  # its remaining entries are refused
            self._admission.grant()  # its queue place is free: the next writer may fit
        if request.deadline <= now and not request.future.done():
            self._expire(request)

    def _expire(self, request: PendingWrite) -> None:
        self._requests_timed_out += 1
        request.expire()

    # --- rotation -----------------------------------------------------------------------------
    def _rotate(self, reason: str) -> None:
        """Close the active segment and start its upload-then-commit task."""
        segment = self._active
        assert segment is not None and segment.batches
        self._active = None
        self._senders.rotated()
        self._last_rotated_at = self._clock.monotonic()
        segment.number = next(self._segment_numbers)
        segment.key = new_object_key(
            self._config.object_prefix, self._clock.now_ms(), self._broker_id
        )
        segment.seal()
        self._segments_rotated += 1
        log.debug(
            "segment %d rotated (%s): %d batches, %d bytes -> %s",
            segment.number,
            reason,
            len(segment.batches),
            len(segment.data),
            segment.key,
        )
        self._pipeline.launch(segment)

    async def _timer_loop(self) -> None:
        """Rotate the active segment when `RotationRule` says it is due, unless size did first.

        The loop sleeps until the due time, or until woken (a segment opened, or one resolved and
        made room in the pipeline, or a sender reached its in-flight limit), and looks again.
        Otherwise a due time only moves later while a segment fills (its last write moves), and
        the next segment opens after the rotation its floor counts from, so nothing else can make
        it earlier than the time slept for.
        """
        rule = self._rotation
        wakeup = self._timer_wakeup
        while True:
            wakeup.clear()
            segment = self._active
            if segment is None:
                await wakeup.wait()
                continue
            due = rule.due(
                segment.opened_at,
                segment.last_write_at,
                self._last_rotated_at,
                pipeline_has_room=self._pipeline.has_room,
                senders_blocked=self._senders.all_blocked(),
                segment_bytes=segment.batch_bytes,
            )
            delay = due - self._clock.monotonic()
            if delay > 0:
                await sleep_unless(self._clock, delay, wakeup)
                continue
            if self._active is segment and not self._closing:
                self._rotate("interval" if rule.by_interval(segment.opened_at, due) else "linger")

    def _fail_active(self, result: CommitBatchResult) -> None:
        segment = self._active
        if segment is None:
            return
        self._active = None
        segment.fail(result)
        self._admission.release(segment.batch_bytes)

    # --- observability ------------------------------------------------------------------------
    @property
    def inflight_bytes(self) -> int:
        return self._admission.inflight_bytes

    def stats(self) -> WalStats:
        pipeline = self._pipeline
        return WalStats(
            segments_rotated=self._segments_rotated,
            objects_uploaded=pipeline.objects_uploaded,
            object_bytes_uploaded=pipeline.object_bytes_uploaded,
            upload_attempts_failed=pipeline.upload_attempts_failed,
            segments_upload_failed=pipeline.segments_upload_failed,
            commits=pipeline.commits,
            commit_steps=pipeline.commit_steps,
            commits_failed=pipeline.commits_failed,
            batches_committed=pipeline.batches_committed,
            requests=self._requests,
            requests_timed_out=self._requests_timed_out,
            inflight_bytes=self._admission.inflight_bytes,
            inflight_bytes_max_observed=self._admission.inflight_bytes_max_observed,
            upload_latency_s=tuple(pipeline.upload_latency),
            commit_latency_s=tuple(pipeline.commit_latency),
            fenced=self._fenced,
        )
