"""The deadline watcher: one sleeper on the injected clock for every request, not one timer each."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Final

from diskless.clock import Clock
from diskless.wal._request import PendingWrite

COMPACT_MIN: Final = 1024
"""The heap is rebuilt without settled requests once it is this big and half stale."""


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
