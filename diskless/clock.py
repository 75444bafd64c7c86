"""Time as a parameter, so that a simulator can replace it with a virtual clock."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time for timestamps, monotonic time for deadlines, and sleeping.

    `now_ms` and `monotonic` may be called from any thread (a coordinator reads the clock on its
    worker thread, inside its transaction); `sleep` only from the event loop.
    """

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (deadlines, latency)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the caller for `seconds` of this clock's time."""
        ...


async def sleep_unless(
    clock: Clock, seconds: float, wake: asyncio.Event | asyncio.Future[None]
) -> None:
    """Sleep `seconds` of `clock`'s time, or less if `wake` is set (an Event) or done (a Future,
    which is never cancelled here) first."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waiter = asyncio.ensure_future(wake.wait()) if isinstance(wake, asyncio.Event) else wake
    try:
        await asyncio.wait([sleeper, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        if waiter is not wake:
            waiter.cancel()


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A virtual clock: time moves only when `advance` (or `run_until_idle`) is called.

    Reading it from another thread is safe: the time is one float, replaced whole and never
    moved backwards.

    Sleepers wake in deadline order; ties wake in the order they went to sleep, so a simulation
    driven by a seed replays exactly.

    It starts at the wall-clock time (whole seconds) unless told otherwise, so that virtual
    times mix with real ones (object keys named by another clock, record timestamps): only the
    moves are virtual.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        if start_ms is None:
            start_ms = int(time.time()) * 1000
        self._now = start_ms / 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return round(self._now * 1000)

    def monotonic(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(
            self._sleepers, (self._now + max(0.0, seconds), next(self._sequence), future)
        )
        await future

    def next_deadline(self) -> float | None:
        """The earliest pending wake-up time, or None when nobody sleeps."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking every sleeper whose deadline passes, in order.

        Runnable tasks get to run first, so that a task created just before the call has gone
        to sleep (and will be woken) before time moves.
        """
        target = self._now + seconds
        await _let_others_run()
        while True:
            self._drop_cancelled()
            if not self._sleepers or self._sleepers[0][0] > target:
                break
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            future.set_result(None)
            await _let_others_run()
        self._now = target
        await _let_others_run()

    async def run_until_idle(self, max_seconds: float = 3600.0) -> None:
        """Jump from deadline to deadline until nobody sleeps or `max_seconds` have passed."""
        limit = self._now + max_seconds
        await _let_others_run()
        while (deadline := self.next_deadline()) is not None and deadline <= limit:
            await self.advance(max(0.0, deadline - self._now))

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)


async def _let_others_run(rounds: int = 5) -> None:
    """Yield to the event loop a few times so that woken tasks run before time moves again."""
    for _ in range(rounds):
        await asyncio.sleep(0)
