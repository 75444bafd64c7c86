"""Backpressure: the in-flight byte budget, granted first come first served.

In-flight bytes (buffered + uploading + committing batch bytes) never exceed the limit; a
request's next batch waits in a queue until it fits. A single batch larger than the limit is
admitted only when nothing else is in flight. A request whose queued batch was admitted keeps the
turn until it has placed (or given up) the rest of its batches, so one producer's pipelined
requests reach the segments in the order they arrived, partition by partition.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from diskless.coordinator import CommitBatchResult
from diskless.wal._request import PendingWrite


class Admission:
    """The in-flight byte budget of one writer. `on_queue_blocked` runs whenever writers queue:
    the writer rotates its active segment there if the first of them cannot fit until then."""

    def __init__(self, bytes_max: int, on_queue_blocked: Callable[[], None]) -> None:
        self._bytes_max = bytes_max
        self._on_queue_blocked = on_queue_blocked
        self.inflight_bytes = 0
        self.inflight_bytes_max_observed = 0
        self._queue: collections.deque[
            tuple[int, asyncio.Future[CommitBatchResult | None], PendingWrite]
        ] = collections.deque()
        self._turn: PendingWrite | None = None
        """The request whose queued batch was admitted and that still places the rest."""

    @property
    def queued(self) -> bool:
        return bool(self._queue)

    def first_waiting(self) -> int | None:
        """The size the first writer still in the queue waits for, if any."""
        for want, waiter, _ in self._queue:
            if not waiter.done():
                return want
        return None

    def admit_now(self, size: int, request: PendingWrite) -> bool:
        """Admit at once if nobody is ahead: no queued writer, no other request holding the turn."""
        if self._turn is not request and (self._queue or self._turn is not None):
            return False
        if not self._fits(size):
            return False
        self._take(size)
        return True

    def admit_all_now(self, size: int, request: PendingWrite) -> bool:
        """Admit `size` bytes, all of a request's batches still to place, in one step when nobody
        is ahead and they fit within the limit together: what admitting them one by one would
        grant, for one check. False leaves them to `admit_now`, one at a time (which also lets a
        single batch past the limit in alone)."""
        if self._turn is not request and (self._queue or self._turn is not None):
            return False
        if self.inflight_bytes + size > self._bytes_max:
            return False
        self._take(size)
        return True

    async def wait(self, size: int, request: PendingWrite) -> CommitBatchResult | None:
        """Queue for `size` bytes; None once admitted, else why the entry is refused."""
        waiter: asyncio.Future[CommitBatchResult | None] = (
            asyncio.get_running_loop().create_future()
        )
        if self._turn is request:
            self._queue.appendleft((size, waiter, request))  # it keeps its turn
        else:
            self._queue.append((size, waiter, request))
        request.waiter = waiter
        self._on_queue_blocked()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result() is None:
                self.release(size)  # admitted in the same instant we were cancelled
            raise
        finally:
            request.waiter = None

    def end_turn(self, request: PendingWrite) -> None:
        """The request has placed (or given up) all its batches: let the next writer in."""
        if self._turn is request:
            self._turn = None
            self.grant()

    def release(self, size: int) -> None:
        """Return in-flight bytes and admit queued writers."""
        self.inflight_bytes -= size
        assert self.inflight_bytes >= 0, self.inflight_bytes
        self.grant()

    def grant(self) -> None:
        """Admit the first queued writer if it fits and no other request holds the turn."""
        queue = self._queue
        while queue:
            want, waiter, owner = queue[0]
            if waiter.done():
                queue.popleft()
                continue
            if self._turn is not None and self._turn is not owner:
                break
            if not self._fits(want):
                break
            queue.popleft()
            self._take(want)
            self._turn = owner
            waiter.set_result(None)
            break  # the owner places its batch before anyone else is considered
        if queue:
            self._on_queue_blocked()

    def refuse_all(self, result: CommitBatchResult) -> None:
        """Answer every queued writer with `result` (the writer is closing or fenced)."""
        while self._queue:
            _, waiter, _ = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(result)

    def _fits(self, size: int) -> bool:
        return self.inflight_bytes + size <= self._bytes_max or self.inflight_bytes == 0

    def _take(self, size: int) -> None:
        self.inflight_bytes += size
        if self.inflight_bytes > self.inflight_bytes_max_observed:
            self.inflight_bytes_max_observed = self.inflight_bytes
