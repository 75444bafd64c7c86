"""The byte budget for requests read but not yet answered (Kafka's `queued.max.request.bytes`).

A connection reserves a frame's size as soon as it has read the size prefix, before it reads the
body, and waits while the budget cannot cover it: it then reads nothing more, so the kernel's
socket buffer fills and TCP flow control stops the client. The reservation is given back when
the request has been answered (or dropped), so frame bytes held by the server never exceed the
budget, whatever the number of connections.

Waiters are served strictly in arrival order: a large frame at the head is not overtaken by a
stream of small ones, so it cannot starve. A single reservation larger than the whole budget
would wait forever; `ServerConfig` rules it out (as Kafka does) by requiring the budget to be at
least the largest admissible frame.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib


class RequestBudget:
    """`reserve(n)` waits until `n` more bytes fit under `bytes_max`, in arrival order."""

    def __init__(self, bytes_max: int) -> None:
        if bytes_max < 1:
            raise ValueError("bytes_max must be >= 1")
        self.bytes_max = bytes_max
        self.reserved = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self.throttled = 0
        """Reservations that had to queue (a connection's reading paused), since the start."""

    @property
    def waiting(self) -> int:
        """Reservations queued behind the budget (for tests and diagnostics)."""
        return len(self._waiters)

    async def reserve(self, size: int) -> Reservation:
        if not 0 <= size <= self.bytes_max:
            raise ValueError(f"a reservation of {size} bytes can never fit in {self.bytes_max}")
        if not self._waiters and self.reserved + size <= self.bytes_max:
            self.reserved += size
            return Reservation(self, size)
        self.throttled += 1
        granted = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiters.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._give_back(size)  # granted and cancelled in the same step
            else:
                with contextlib.suppress(ValueError):  # `_grant` may have dropped it already
                    self._waiters.remove(entry)
                self._grant()  # the head may have been the one blocking the others
            raise
        return Reservation(self, size)

    def _give_back(self, size: int) -> None:
        self.reserved -= size
        assert self.reserved >= 0, self.reserved
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            size, granted = self._waiters[0]
            if granted.done():  # its task was cancelled and has not run yet
                self._waiters.popleft()
                continue
            if self.reserved + size > self.bytes_max:
                return
            self._waiters.popleft()
            self.reserved += size
            granted.set_result(None)


class Reservation:
    """Bytes taken from a `RequestBudget`; `release` is idempotent."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: RequestBudget, size: int) -> None:
        self._budget: RequestBudget | None = budget
        self.size = size

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._give_back(self.size)
