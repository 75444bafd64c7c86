"""Where fetches that found too little wait: parked per partition, woken by change or deadline.

Kafka keeps such a fetch in a purgatory keyed by partition, completed by the append that
satisfies it or by its timeout, never by a sleep loop. Here a parked fetch is one future,
registered under each of its partitions; `wake(tp)` resolves every future parked on `tp` (the
broker-local view calls it when the partition's state changed), and one timer resolves futures
whose deadline passed. A woken fetch looks again: waking is a hint, so a spurious one costs a
look and a missed one is impossible while the view is kept (`PartitionView`).

One timer task serves every parked fetch, sleeping on the broker's injected clock until the
earliest deadline, so that thousands of parked fetches cost one heap entry each, not a task.
It wakes at most once per `TICK_S`, answering every fetch whose deadline has passed by then (as
Kafka's purgatory expires by the tick of its timing wheel): a thousand idle consumers' fetches
expire in a few dozen wake-ups a second rather than one each, at the price of answering a
fetch up to one tick after its `max_wait`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Collection
from typing import Final

from diskless._types import TopicPartition
from diskless.clock import Clock

TICK_S: Final = 0.01
"""How late a fetch's deadline may be answered, so that expiries share wake-ups."""


class FetchPurgatory:
    """Parked fetches of one broker (see the module doc)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._parked: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._deadlines: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()
        self._timer: asyncio.Task[None] | None = None
        self._timer_deadline = float("inf")
        self._closed = False

    def __len__(self) -> int:
        """Parked fetches (each counted once however many partitions it waits on)."""
        return len({id(f) for futures in self._parked.values() for f in futures})

    @property
    def closed(self) -> bool:
        return self._closed

    def park(
        self, partitions: Collection[TopicPartition], deadline: float
    ) -> asyncio.Future[None] | None:
        """A future that resolves once one of `partitions` is woken, the clock reaches
        `deadline`, or the purgatory closes; None when there is nothing to wait for (closed, or
        past the deadline). The caller `unpark`s it once it resolved or was abandoned."""
        if self._closed or self._clock.monotonic() >= deadline or not partitions:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        parked = self._parked
        for tp in partitions:
            waiting = parked.get(tp)
            if waiting is None:
                parked[tp] = {future}
            else:
                waiting.add(future)
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), future))
        if deadline + TICK_S < self._timer_deadline:
            self._timer_deadline = deadline + TICK_S
            self._restart_timer()
        return future

    def unpark(self, partitions: Collection[TopicPartition], future: asyncio.Future[None]) -> None:
        """Forget a parked future (its deadline entry goes when the timer reaches it)."""
        parked = self._parked
        for tp in partitions:
            waiting = parked.get(tp)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del parked[tp]

    def wake(self, tp: TopicPartition) -> None:
        """Every fetch parked on `tp` looks again."""
        for future in self._parked.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        for tp in list(self._parked):
            self.wake(tp)

    def _restart_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().create_task(self._run_timer())

    async def _run_timer(self) -> None:
        deadlines = self._deadlines
        while deadlines:
            deadline, _, future = deadlines[0]
            if future.done():
                heapq.heappop(deadlines)
                continue
            now = self._clock.monotonic()
            if deadline > now:
                self._timer_deadline = deadline + TICK_S
                await self._clock.sleep(deadline + TICK_S - now)
                continue
            heapq.heappop(deadlines)
            future.set_result(None)
        self._timer_deadline = float("inf")
        self._timer = None

    def close(self) -> None:
        """Wakes every parked fetch (each answers with what it has) and stops the timer; no
        fetch parks after."""
        self._closed = True
        self.wake_all()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = float("inf")
