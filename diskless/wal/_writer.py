"""The shared-segment write pipeline: buffer, rotate, upload concurrently, commit in order.

    write() ──▶ active segment ──rotate──▶ upload (≤ uploads_inflight_max at once, retried)
                (all partitions,                │
                 all requests)                  ▼
                                  commit N after upload N and commit N-1 ──▶ results to waiters

Every concurrent `write` appends into one active segment. The segment rotates when it reaches
`buffer_max_bytes` or `commit_interval_ms` after its first write. Each closed segment gets one task
that uploads it and then commits it; commit N waits for upload N and for commit N-1 only, so a
slow later upload never blocks an earlier commit, and a producer's pipelined requests are sequenced
in the order they were appended.

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
"""

from __future__ import annotations

import asyncio
import collections
import copy
import heapq
import itertools
import logging
import math
from collections.abc import Sequence
from typing import Final, cast

import msgspec

from diskless._limits import backoff_ms
from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless._types import ErrorCode
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator, CommitBatch, CommitBatchResult
from diskless.errors import (
    BrokerClosedError,
    BrokerFencedError,
    CoordinatorError,
    StorageTimeoutError,
)
from diskless.records import TRANSACTIONAL_BIT
from diskless.storage import ObjectStore
from diskless.wal._cache import SegmentCache
from diskless.wal._format import IndexRow, WalEntry, encode_footer

log = logging.getLogger(__name__)

LATENCY_SAMPLES_MAX: Final = 4096
"""Recent upload/commit latencies kept for `stats` (oldest dropped first)."""
DEADLINES_COMPACT_MIN: Final = 1024
"""The deadline heap is rebuilt without finished requests once it is this big and half stale."""


class WalConfig(msgspec.Struct, frozen=True):
    """Limits of the write pipeline. Related limits are checked against each other on creation."""

    buffer_max_bytes: int = 8 * 1024 * 1024
    """Rotate the active segment when it reaches this many bytes of batches."""
    commit_interval_ms: int = 250
    """...or this long after its first write."""
    uploads_inflight_max: int = 8
    inflight_bytes_max: int = 64 * 1024 * 1024
    """Backpressure: `write` waits while buffered + uploading + committing bytes would exceed it."""
    upload_attempts: int = 3
    upload_backoff_ms: int = 100
    """Sleep before the second attempt; doubles for each further attempt."""
    upload_timeout_ms: int = 30_000
    """An upload attempt still running after this long counts as failed."""
    object_prefix: str = DEFAULT_OBJECT_PREFIX
    segment_cache_bytes_max: int = 32 * 1024 * 1024
    """Size of the SegmentCache a writer creates when none is given (0 disables caching)."""

    def __post_init__(self) -> None:
        if self.buffer_max_bytes < 1:
            raise ValueError(f"buffer_max_bytes must be >= 1, got {self.buffer_max_bytes}")
        if self.commit_interval_ms < 0:
            raise ValueError(f"commit_interval_ms must be >= 0, got {self.commit_interval_ms}")
        if self.uploads_inflight_max < 1:
            raise ValueError(f"uploads_inflight_max must be >= 1, got {self.uploads_inflight_max}")
        if self.inflight_bytes_max < self.buffer_max_bytes:
            raise ValueError(
                f"inflight_bytes_max ({self.inflight_bytes_max}) must be >= buffer_max_bytes "
                f"({self.buffer_max_bytes}): a full segment must fit in flight"
            )
        if self.upload_attempts < 1:
            raise ValueError(f"upload_attempts must be >= 1, got {self.upload_attempts}")
        if self.upload_timeout_ms < 1:
            raise ValueError(f"upload_timeout_ms must be >= 1, got {self.upload_timeout_ms}")
        if self.upload_backoff_ms < 0:
            raise ValueError(f"upload_backoff_ms must be >= 0, got {self.upload_backoff_ms}")
        if self.object_prefix and not self.object_prefix.endswith("/"):
            raise ValueError(f"object_prefix must be empty or end in '/': {self.object_prefix!r}")
        if self.segment_cache_bytes_max < 0:
            raise ValueError(
                f"segment_cache_bytes_max must be >= 0, got {self.segment_cache_bytes_max}"
            )


class WalStats(msgspec.Struct, frozen=True):
    """A snapshot of a writer's counters. Latencies are seconds of the writer's clock."""

    segments_rotated: int
    objects_uploaded: int
    object_bytes_uploaded: int
    upload_attempts_failed: int
    segments_upload_failed: int
    commits: int
    commits_failed: int
    batches_committed: int
    """Batches answered by the coordinator (accepted, duplicate or rejected)."""
    requests: int
    requests_timed_out: int
    inflight_bytes: int
    inflight_bytes_max_observed: int
    upload_latency_s: tuple[float, ...]
    """The most recent successful uploads (retries included), oldest first."""
    commit_latency_s: tuple[float, ...]
    fenced: bool


class PendingWrite:
    """One `submit`: its results fill in as its entries' segments resolve."""

    __slots__ = (
        "admit_by",
        "deadline",
        "entries",
        "future",
        "pending",
        "placed",
        "placed_count",
        "placing",
        "results",
        "waiter",
    )

    def __init__(
        self, entries: list[WalEntry], admit_by: float, future: asyncio.Future[None]
    ) -> None:
        self.entries = entries
        self.admit_by = admit_by
        """Monotonic seconds after which entries still queued for admission are refused."""
        self.placing = False
        """A task is appending its remaining entries (it had to queue for admission)."""
        self.waiter: asyncio.Future[CommitBatchResult | None] | None = None
        self.results: list[CommitBatchResult | None] = [None] * len(entries)
        self.pending = len(entries)
        self.deadline = math.inf
        """Monotonic seconds at which `wait` gives up; set by `wait`."""
        self.future = future
        """Done once every entry is answered, or when the waiter gave up."""
        self.placed_count = 0
        """Entries appended (or refused) so far, in order."""
        self.placed: list[tuple[_Segment, int]] = []
        """Where its entries went, to copy them out of a segment still open when it returns."""


def _settled(request: PendingWrite) -> bool:
    """Neither waited for nor appending: its deadlines no longer matter."""
    return request.future.done() and not request.placing


def _owned(entry: WalEntry) -> WalEntry:
    """`entry` with its batch copied out of the caller's buffer (which the caller may reuse)."""
    header = copy.copy(entry.header)
    header.buffer = memoryview(bytes(entry.header.bytes_view()))
    header.position = 0
    return entry._replace(header=header)


class _Segment:
    """The batches of one future WAL object, and who waits for each of them."""

    __slots__ = (
        "batch_bytes",
        "batches",
        "data",
        "done",
        "key",
        "number",
        "opened_at",
        "parts",
        "resolved",
        "slots",
    )

    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        self.parts: list[memoryview | bytes] = []
        """The batches, by reference to the callers' buffers until rotation joins them."""
        self.data = b""
        """The whole object (batches + footer), built once at rotation: the only copy."""
        self.batches: list[CommitBatch] = []
        self.slots: list[tuple[PendingWrite, int]] = []
        self.batch_bytes = 0
        self.number = -1
        self.key = ""
        self.done: asyncio.Future[None] | None = None
        self.resolved = False


def _error(code: ErrorCode, message: str) -> CommitBatchResult:
    return CommitBatchResult(error=code, error_message=message)


_CLOSING: Final = _error(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the broker is shutting down")
_TIMED_OUT: Final = _error(ErrorCode.REQUEST_TIMED_OUT, "the produce request timed out")


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
    ) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._store = store
        self._coordinator = coordinator
        self._config = config if config is not None else WalConfig()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._cache = (
            cache if cache is not None else SegmentCache(self._config.segment_cache_bytes_max)
        )
        self._fenced_result = _error(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {broker_id} epoch {broker_epoch} was fenced by a newer incarnation",
        )

        self._started = False
        self._closing = False
        self._closed = asyncio.Event()
        self._fenced = False

        self._active: _Segment | None = None
        self._segment_numbers = itertools.count()
        self._last_done: asyncio.Future[None] | None = None
        self._pipeline_tasks: set[asyncio.Task[None]] = set()
        self._upload_slots = asyncio.Semaphore(self._config.uploads_inflight_max)
        self._timer_task: asyncio.Task[None] | None = None
        self._timer_wakeup = asyncio.Event()

        self._inflight_bytes = 0
        self._inflight_bytes_max_observed = 0
        self._admission: collections.deque[
            tuple[int, asyncio.Future[CommitBatchResult | None], PendingWrite]
        ] = collections.deque()
        self._placing: set[asyncio.Task[None]] = set()
        """Tasks appending the entries of requests that had to queue for admission."""
        self._admitting: PendingWrite | None = None
        """The request whose queued batch was admitted and that still places the rest of its
        batches: nobody else is admitted meanwhile, so one producer's pipelined requests reach
        the segments in the order they arrived, partition by partition."""

        self._deadlines: list[tuple[float, int, PendingWrite]] = []
        self._deadline_numbers = itertools.count()
        self._deadline_task: asyncio.Task[None] | None = None
        self._deadline_wakeup = asyncio.Event()
        self._deadline_sleeper: asyncio.Future[None] | None = None
        self._deadline_target = 0.0
        self._writes_open = 0

        self._segments_rotated = 0
        self._objects_uploaded = 0
        self._object_bytes_uploaded = 0
        self._upload_attempts_failed = 0
        self._segments_upload_failed = 0
        self._commits = 0
        self._commits_failed = 0
        self._batches_committed = 0
        self._requests = 0
        self._requests_timed_out = 0
        self._upload_latency: collections.deque[float] = collections.deque(
            maxlen=LATENCY_SAMPLES_MAX
        )
        self._commit_latency: collections.deque[float] = collections.deque(
            maxlen=LATENCY_SAMPLES_MAX
        )

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
        self._deadline_task = asyncio.create_task(
            self._deadline_loop(), name=f"wal-deadlines-b{self._broker_id}"
        )

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
            self._fail_admission_waiters(_CLOSING)
            while self._placing:  # they refuse their remaining entries, then end
                await asyncio.gather(*self._placing, return_exceptions=True)
            if self._active is not None:
                if flush:
                    self._rotate("close")
                else:
                    self._fail_active(_CLOSING)
            if not flush:
                for task in self._pipeline_tasks:
                    task.cancel()
            while self._pipeline_tasks:
                await asyncio.gather(*self._pipeline_tasks, return_exceptions=True)
            assert self._active is None
            assert self._inflight_bytes == 0, self._inflight_bytes
        finally:
            background = [t for t in (self._timer_task, self._deadline_task) if t is not None]
            for loop_task in background:
                loop_task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if self._deadline_sleeper is not None:
                self._deadline_sleeper.cancel()
            self._deadlines.clear()
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

    def submit(self, entries: Sequence[WalEntry], *, admit_s: float) -> PendingWrite:
        """Hand `entries` to the WAL now, in call order, without waiting for their commit.

        Entries that fit are appended before this returns; under backpressure the rest are
        appended by a task of the writer as room frees up, ahead of any later `submit`. Those
        not admitted within `admit_s` are refused with REQUEST_TIMED_OUT (load shedding: a
        pipeline that cannot drain must not queue without bound), as are all of them once the
        writer is fenced or closed. The entries' buffers are borrowed until `wait` returns, or
        until every entry is answered when nobody waits.
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
        if not entries:
            request.future.set_result(None)
        elif self._fenced:
            for index in range(len(entries)):
                self._resolve(request, index, self._fenced_result)
        elif self._place_admitted(request):
            request.placing = True
            self._watch_deadline(request, request.admit_by)
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
                    self._watch_deadline(request, request.deadline)
                    await request.future
            finally:
                self._writes_open -= 1
                if not request.future.done():  # our caller cancelled us
                    request.future.cancel()
                self._detach(request)
        results = request.results
        assert request.pending == 0 and None not in results
        return cast("list[CommitBatchResult]", results)

    def _place_admitted(self, request: PendingWrite) -> bool:
        """Append the request's entries while they are admitted at once; True if some remain."""
        entries = request.entries
        buffer_max = self._config.buffer_max_bytes
        while request.placed_count < len(entries):
            index = request.placed_count
            entry = entries[index]
            size = entry.header.size
            if not self._admit_now(size, request):
                return True
            self._append(entry, size, request, index, buffer_max)
            request.placed_count += 1
        self._end_turn(request)
        return False

    async def _place_rest(self, request: PendingWrite) -> None:
        """Queue for room, first come first served, and append the request's remaining entries."""
        entries = request.entries
        try:
            while True:
                index = request.placed_count
                size = entries[index].header.size
                refusal = await self._admit_wait(size, request)
                if refusal is None and (self._closing or self._fenced):
                    # Admitted, but the world changed while we waited.
                    self._release(size)
                    refusal = self._fenced_result if self._fenced else _CLOSING
                if refusal is not None:
                    for rest in range(index, len(entries)):
                        self._resolve(request, rest, refusal)
                    request.placed_count = len(entries)
                    return
                self._append(entries[index], size, request, index, self._config.buffer_max_bytes)
                request.placed_count += 1
                if not self._place_admitted(request):
                    return
        finally:
            request.placing = False
            self._end_turn(request)

    def _detach(self, request: PendingWrite) -> None:
        """Copy the request's batches out of the caller's buffers: those in the open segment,
        and those not yet appended.

        Only a request that returns early (timeout, cancellation) can leave batches in the active
        segment; they are its last appended entries, so the common case costs one comparison.
        """
        placed = request.placed
        active = self._active
        while placed and placed[-1][0] is active:
            segment, at = placed.pop()
            segment.parts[at] = bytes(segment.parts[at])
        request.placed = []
        entries = request.entries
        for index in range(request.placed_count, len(entries)):
            entries[index] = _owned(entries[index])

    def _append(
        self, entry: WalEntry, size: int, request: PendingWrite, index: int, buffer_max: int
    ) -> None:
        """Add one admitted batch to the active segment, by reference; rotation copies it once."""
        segment = self._active
        if segment is not None and segment.batch_bytes + size > buffer_max:
            self._rotate("size")
            segment = None
        if segment is None:
            segment = self._active = _Segment(self._clock.monotonic())
            self._timer_wakeup.set()
        header = entry.header
        position = header.position
        view = header.buffer[position : position + size]  # header.bytes_view(), inlined
        request.placed.append((segment, len(segment.parts)))
        segment.batches.append(
            CommitBatch(
                topic_partition=entry.topic_partition,
                byte_offset=segment.batch_bytes,
                size=size,
                record_count=header.records_count,
                base_timestamp=header.base_timestamp,
                max_timestamp=header.max_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                is_transactional=bool(header.attributes & TRANSACTIONAL_BIT),
                lease_id=entry.lease_id,
            )
        )
        segment.parts.append(view)
        segment.batch_bytes += size
        segment.slots.append((request, index))
        if segment.batch_bytes >= buffer_max:
            self._rotate("size")
        elif self._admission:  # a writer admitted ahead of others may now block them
            self._rotate_if_blocking_admission()

    def _resolve(self, request: PendingWrite, index: int, result: CommitBatchResult) -> None:
        if request.future.done():
            return  # timed out or abandoned: the result arrives too late for anyone
        assert request.results[index] is None, index
        request.results[index] = result
        request.pending -= 1
        if request.pending == 0:
            request.future.set_result(None)

    # --- backpressure -------------------------------------------------------------------------
    def _admit_now(self, size: int, request: PendingWrite) -> bool:
        """Admit at once if nobody is ahead: no queued writer, no other request mid-admission."""
        if self._admitting is not request and (self._admission or self._admitting is not None):
            return False
        if not self._fits(size):
            return False
        self._take(size)
        return True

    def _end_turn(self, request: PendingWrite) -> None:
        """The request has placed (or given up) all its batches: let the next writer in."""
        if self._admitting is request:
            self._admitting = None
            self._grant()

    def _fits(self, size: int) -> bool:
        return (
            self._inflight_bytes + size <= self._config.inflight_bytes_max
            or self._inflight_bytes == 0
        )

    def _take(self, size: int) -> None:
        self._inflight_bytes += size
        if self._inflight_bytes > self._inflight_bytes_max_observed:
            self._inflight_bytes_max_observed = self._inflight_bytes

    async def _admit_wait(self, size: int, request: PendingWrite) -> CommitBatchResult | None:
        """Queue for `size` in-flight bytes; None once admitted, else why the entry is refused."""
        waiter: asyncio.Future[CommitBatchResult | None] = (
            asyncio.get_running_loop().create_future()
        )
        if self._admitting is request:
            self._admission.appendleft((size, waiter, request))  # it keeps its turn
        else:
            self._admission.append((size, waiter, request))
        request.waiter = waiter
        self._rotate_if_blocking_admission()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result() is None:
                self._release(size)  # admitted in the same instant we were cancelled
            raise
        finally:
            request.waiter = None

    def _release(self, size: int) -> None:
        """Return in-flight bytes and admit queued writers, first come first served."""
        self._inflight_bytes -= size
        assert self._inflight_bytes >= 0, self._inflight_bytes
        self._grant()

    def _grant(self) -> None:
        """Admit the first queued writer if it fits and no other request holds the turn."""
        queue = self._admission
        while queue:
            want, waiter, owner = queue[0]
            if waiter.done():
                queue.popleft()
                continue
            if self._admitting is not None and self._admitting is not owner:
                break
            if not self._fits(want):
                break
            queue.popleft()
            self._take(want)
            self._admitting = owner
            waiter.set_result(None)
            break  # the owner places its batch before anyone else is considered
        if queue:
            self._rotate_if_blocking_admission()

    def _rotate_if_blocking_admission(self) -> None:
        """Rotate now if the first queued writer cannot fit until the active segment is gone.

        Queued writers block everyone behind them, so the active segment cannot grow meanwhile;
        waiting for the interval timer would only add latency (and, with small limits, let
        requests time out in a queue that drains one interval at a time).
        """
        active = self._active
        if active is None:
            return
        for want, waiter, _ in self._admission:
            if waiter.done():
                continue
            if active.batch_bytes + want > self._config.inflight_bytes_max:
                self._rotate("backpressure")
            return

    def _fail_admission_waiters(self, result: CommitBatchResult) -> None:
        while self._admission:
            _, waiter, _ = self._admission.popleft()
            if not waiter.done():
                waiter.set_result(result)

    # --- rotation -----------------------------------------------------------------------------
    def _rotate(self, reason: str) -> None:
        """Close the active segment and start its upload-then-commit task."""
        segment = self._active
        assert segment is not None and segment.batches
        self._active = None
        segment.number = next(self._segment_numbers)
        segment.key = new_object_key(
            self._config.object_prefix, self._clock.now_ms(), self._broker_id
        )
        rows: list[IndexRow] = [
            (
                batch.topic_partition.topic,
                batch.topic_partition.partition,
                batch.byte_offset,
                batch.size,
                batch.record_count,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
            )
            for batch in segment.batches
        ]
        segment.parts.append(encode_footer(rows))
        segment.data = b"".join(segment.parts)
        segment.parts = []
        assert len(segment.data) > segment.batch_bytes
        segment.done = asyncio.get_running_loop().create_future()
        previous = self._last_done
        self._last_done = segment.done
        self._segments_rotated += 1
        log.debug(
            "segment %d rotated (%s): %d batches, %d bytes -> %s",
            segment.number,
            reason,
            len(segment.batches),
            len(segment.data),
            segment.key,
        )
        task = asyncio.create_task(
            self._pipeline(segment, previous), name=f"wal-segment-{segment.number}"
        )
        self._pipeline_tasks.add(task)
        task.add_done_callback(self._pipeline_tasks.discard)

    async def _timer_loop(self) -> None:
        """Rotate each segment `commit_interval_ms` after its first write, unless size did first.

        Segments open in time order, so sleeping until the current one's deadline never
        oversleeps a later one's.
        """
        interval = self._config.commit_interval_ms / 1000
        while True:
            segment = self._active
            if segment is None:
                self._timer_wakeup.clear()
                await self._timer_wakeup.wait()
                continue
            delay = segment.opened_at + interval - self._clock.monotonic()
            if delay > 0:
                await self._clock.sleep(delay)
                continue
            if self._active is segment and not self._closing:
                self._rotate("interval")

    def _fail_active(self, result: CommitBatchResult) -> None:
        segment = self._active
        if segment is None:
            return
        self._active = None
        for request, index in segment.slots:
            self._resolve(request, index, result)
        self._release(segment.batch_bytes)

    # --- upload and commit --------------------------------------------------------------------
    async def _pipeline(self, segment: _Segment, previous: asyncio.Future[None] | None) -> None:
        """Upload the segment, then commit it right after the previous segment resolved."""
        assert segment.done is not None
        try:
            uploaded = await self._upload(segment)
            if previous is not None:
                await asyncio.wait([previous])  # never cancels `previous` if we are cancelled
            if self._fenced:
                self._fail_segment(segment, self._fenced_result)
            elif not uploaded:
                self._segments_upload_failed += 1
                self._fail_segment(
                    segment,
                    _error(
                        ErrorCode.KAFKA_STORAGE_ERROR,
                        f"upload of {segment.key} failed after "
                        f"{self._config.upload_attempts} attempts",
                    ),
                )
            else:
                await self._commit(segment)
        except asyncio.CancelledError:
            self._fail_segment(
                segment,
                _error(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    "the broker closed before the batch was committed; outcome unknown",
                ),
            )
            raise
        except Exception:
            log.exception("segment %s failed unexpectedly", segment.key)
            self._fail_segment(
                segment, _error(ErrorCode.KAFKA_STORAGE_ERROR, "internal error in the WAL writer")
            )
        finally:
            segment.resolved = True
            self._release(segment.batch_bytes)
            segment.done.set_result(None)
            segment.data = b""  # the cache holds its own reference when it keeps one
            segment.batches = []
            segment.slots = []

    async def _upload(self, segment: _Segment) -> bool:
        attempts = self._config.upload_attempts
        async with self._upload_slots:
            started = self._clock.monotonic()
            for attempt in range(1, attempts + 1):
                try:
                    await self._put_within_timeout(segment)
                except Exception as error:
                    self._upload_attempts_failed += 1
                    log.warning(
                        "upload of %s failed (attempt %d/%d): %r",
                        segment.key,
                        attempt,
                        attempts,
                        error,
                    )
                    if attempt < attempts:
                        retry_ms = backoff_ms(self._config.upload_backoff_ms, attempt - 1)
                        await self._clock.sleep(retry_ms / 1000)
                    continue
                self._upload_latency.append(self._clock.monotonic() - started)
                self._objects_uploaded += 1
                self._object_bytes_uploaded += len(segment.data)
                self._cache.put(segment.key, segment.data)
                return True
        log.error("giving up on %s after %d attempts", segment.key, attempts)
        return False

    async def _put_within_timeout(self, segment: _Segment) -> None:
        """One PUT attempt, abandoned after `upload_timeout_ms` of the writer's clock.

        Commits go in rotation order, so a PUT that never returns would stall every later
        segment; the timeout turns it into a failed attempt (the object may still appear: an
        orphan for the file manager, since its key is never committed).
        """
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
            raise StorageTimeoutError(
                f"PUT of {segment.key} took over {self._config.upload_timeout_ms} ms"
            )
        put.result()

    async def _commit(self, segment: _Segment) -> None:
        batches = segment.batches
        started = self._clock.monotonic()
        try:
            results = await self._coordinator.commit_file(
                segment.key, self._broker_id, self._broker_epoch, len(segment.data), batches
            )
        except BrokerFencedError:
            log.error(
                "broker %d epoch %d fenced while committing %s; refusing further writes",
                self._broker_id,
                self._broker_epoch,
                segment.key,
            )
            self._commits_failed += 1
            self._fence()
            self._fail_segment(segment, self._fenced_result)
            return
        except CoordinatorError as error:
            log.warning(
                "commit of %s failed (%r); object left for the file manager", segment.key, error
            )
            self._commits_failed += 1
            self._fail_segment(
                segment,
                _error(ErrorCode.KAFKA_STORAGE_ERROR, f"commit failed or outcome unknown: {error}"),
            )
            return
        assert len(results) == len(batches), (len(results), len(batches))
        self._commit_latency.append(self._clock.monotonic() - started)
        self._commits += 1
        self._batches_committed += len(batches)
        for (request, index), result in zip(segment.slots, results, strict=True):
            self._resolve(request, index, result)

    def _fail_segment(self, segment: _Segment, result: CommitBatchResult) -> None:
        if segment.resolved:
            return
        segment.resolved = True
        for request, index in segment.slots:
            self._resolve(request, index, result)

    def _fence(self) -> None:
        if self._fenced:
            return
        self._fenced = True
        self._fail_admission_waiters(self._fenced_result)
        self._fail_active(self._fenced_result)

    # --- deadlines ----------------------------------------------------------------------------
    def _watch_deadline(self, request: PendingWrite, at: float) -> None:
        """Call `_due` for `request` at `at` (its wait's deadline or its admission deadline)."""
        heap = self._deadlines
        if len(heap) >= DEADLINES_COMPACT_MIN and len(heap) > 2 * self._writes_open:
            heap[:] = [item for item in heap if not _settled(item[2])]
            heapq.heapify(heap)
        heapq.heappush(heap, (at, next(self._deadline_numbers), request))
        sleeper = self._deadline_sleeper
        if sleeper is None:
            self._deadline_wakeup.set()
        elif at < self._deadline_target:
            sleeper.cancel()

    async def _deadline_loop(self) -> None:
        """Expire requests at their deadlines: one sleeper for all requests, not one each."""
        heap = self._deadlines
        while True:
            now = self._clock.monotonic()
            while heap and (_settled(heap[0][2]) or heap[0][0] <= now):
                _, _, request = heapq.heappop(heap)
                self._due(request, now)
            if not heap:
                self._deadline_wakeup.clear()
                await self._deadline_wakeup.wait()
                continue
            self._deadline_target = heap[0][0]
            sleeper = asyncio.ensure_future(self._clock.sleep(self._deadline_target - now))
            self._deadline_sleeper = sleeper
            try:
                await asyncio.wait([sleeper])
            finally:
                sleeper.cancel()
                self._deadline_sleeper = None

    def _due(self, request: PendingWrite, now: float) -> None:
        waiter = request.waiter
        if request.admit_by <= now and waiter is not None and not waiter.done():
            waiter.set_result(_TIMED_OUT)  # its remaining entries are refused
            self._grant()  # its queue place is free: the next writer may fit
        if request.deadline <= now and not request.future.done():
            self._expire(request)

    def _expire(self, request: PendingWrite) -> None:
        """Answer what is not yet answered with REQUEST_TIMED_OUT; the entries carry on."""
        self._requests_timed_out += 1
        results = request.results
        for index, result in enumerate(results):
            if result is None:
                results[index] = _TIMED_OUT
        request.pending = 0
        request.future.set_result(None)

    # --- observability ------------------------------------------------------------------------
    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    @property
    def stats(self) -> WalStats:
        return WalStats(
            segments_rotated=self._segments_rotated,
            objects_uploaded=self._objects_uploaded,
            object_bytes_uploaded=self._object_bytes_uploaded,
            upload_attempts_failed=self._upload_attempts_failed,
            segments_upload_failed=self._segments_upload_failed,
            commits=self._commits,
            commits_failed=self._commits_failed,
            batches_committed=self._batches_committed,
            requests=self._requests,
            requests_timed_out=self._requests_timed_out,
            inflight_bytes=self._inflight_bytes,
            inflight_bytes_max_observed=self._inflight_bytes_max_observed,
            upload_latency_s=tuple(self._upload_latency),
            commit_latency_s=tuple(self._commit_latency),
            fenced=self._fenced,
        )
