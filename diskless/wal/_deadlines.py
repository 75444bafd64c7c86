"""When things are due: the active segment's rotation (`RotationRule`), and every request's
deadline (`DeadlineWatcher`, one sleeper on the injected clock for all requests, not one timer
each)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Final

from diskless.clock import Clock
from diskless.wal._config import WalConfig
from diskless.wal._request import PendingWrite

COMPACT_MIN: Final = 1024
"""The heap is rebuilt without settled requests once it is this big and half stale."""


class RotationRule:
    """When the active segment rotates, unless it fills up first (`buffer_max_bytes`).

    Latency follows the load, and cost stays bounded. A segment rotates once no batch arrived
    for `linger_ms` (nothing more is coming: a lone request, or producers that all wait for
    their answers, is not kept for the whole interval), but never sooner than
    `rotate_interval_min_ms` after the previous rotation, so a trickle costs at most
    1000 / `rotate_interval_min_ms` objects per second; and at the latest `commit_interval_ms`
    after its first batch, so a steady stream still makes objects of an interval's bytes.

    Rotating early is only worth it while the upload pipeline has room: a segment sealed behind
    a full pipeline would wait there anyway, so under load a segment fills for the interval (or
    up to its size) as before, and objects stay large exactly when they are many. And when every
    sender of the segment is at its in-flight limit (`_senders`), nothing more can come: the
    linger is not waited for, only the floor; and not even the floor once the segment holds
    `rotate_floor_bytes`: such an object's count per GB its size bounds, so producers waiting on
    it get their answers one upload and commit later, not one floor later. (A segment that
    merely lingers keeps its floor, big or small: its senders could still send more.)
    """

    __slots__ = ("early", "floor_bytes", "floor_s", "interval_s", "linger_s")

    def __init__(self, config: WalConfig) -> None:
        self.interval_s = config.commit_interval_ms / 1000
        self.linger_s = config.linger_ms / 1000
        self.floor_s = config.rotate_interval_min_ms / 1000
        self.floor_bytes = config.rotate_floor_bytes
        self.early = self.linger_s < self.interval_s
        """A linger at or above the interval turns early rotation off, whatever the senders."""

    def due(
        self,
        opened_at: float,
        last_write_at: float,
        last_rotated_at: float,
        *,
        pipeline_has_room: bool = True,
        senders_blocked: bool = False,
        segment_bytes: int = 0,
    ) -> float:
        """The time a segment opened at `opened_at`, last written at `last_write_at` and holding
        `segment_bytes`, rotates when the previous rotation was at `last_rotated_at` (-inf if
        none)."""
        by_interval = opened_at + self.interval_s
        if not (self.early and pipeline_has_room):
            return by_interval
        floor = last_rotated_at + self.floor_s
        if not senders_blocked:
            settled = max(last_write_at + self.linger_s, floor)
        elif segment_bytes < self.floor_bytes:
            settled = floor
        else:
            settled = opened_at  # now
        return min(by_interval, settled)

    def by_interval(self, opened_at: float, due: float) -> bool:
        """Whether `due` is the interval's bound rather than the linger's (for the logs)."""
        return due >= opened_at + self.interval_s


class DeadlineWatcher:
    """Calls `on_due(request, now)` once `now` reaches a deadline given to `watch`.

    `open_waits` tells how many requests are still waited for, so the heap is compacted only when
    most of it is stale.
    """

    def __init__(
        self,
        clock: Clock,
        on_due: Callable[[PendingWrite, float], None],
        open_waits: Callable[[], int],
    ) -> None:
        self._clock = clock
        self._on_due = on_due
        self._open_waits = open_waits
        self._heap: list[tuple[float, int, PendingWrite]] = []
        self._numbers = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._sleeper: asyncio.Future[None] | None = None
        self._target = 0.0

    def start(self, name: str) -> None:
        self._task = asyncio.create_task(self._run(), name=name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._sleeper is not None:
            self._sleeper.cancel()
        self._heap.clear()

    def watch(self, request: PendingWrite, at: float) -> None:
        heap = self._heap
        if len(heap) >= COMPACT_MIN and len(heap) > 2 * self._open_waits():
            heap[:] = [item for item in heap if not item[2].settled]
            heapq.heapify(heap)
        heapq.heappush(heap, (at, next(self._numbers), request))
        sleeper = self._sleeper
        if sleeper is None:
            self._wakeup.set()
        elif at < self._target:
            sleeper.cancel()

    async def _run(self) -> None:
        heap = self._heap
        while True:
            now = self._clock.monotonic()
            while heap and (heap[0][2].settled or heap[0][0] <= now):
                _, _, request = heapq.heappop(heap)
                self._on_due(request, now)
            if not heap:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._target = heap[0][0]
            sleeper = asyncio.ensure_future(self._clock.sleep(self._target - now))
            self._sleeper = sleeper
            try:
                await asyncio.wait([sleeper])
            finally:
                sleeper.cancel()
                self._sleeper = None
