"""Who sends into the active segment, and whether any of them can send more before it rotates.

A Kafka producer keeps at most `SENDER_INFLIGHT_MAX` requests in flight per connection (the
idempotent producer's limit, and the Java client's default for every producer). Once every
sender that wrote into the active segment has that many requests waiting for their answers,
nothing more can arrive for the segment until one of them is answered, which needs this segment
(or one before it) committed: waiting for a linger would add latency for nothing. A sender is
any hashable token its caller passes to `WalWriter.submit` (the Kafka server passes the
connection); a write without one may always be followed by more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Final

SENDER_INFLIGHT_MAX: Final = 5


class Senders:
    """Requests in flight per sender, and the senders of the active segment.

    `on_blocked` is called when a sender reaches `SENDER_INFLIGHT_MAX` requests in flight (the
    active segment may then be due at once)."""

    __slots__ = ("_contributors", "_inflight", "_on_blocked", "_open")

    def __init__(self, on_blocked: Callable[[], None]) -> None:
        self._inflight: dict[Hashable, int] = {}
        self._contributors: set[Hashable] = set()
        self._open = False
        """A write without a sender went into the active segment: more may always follow."""
        self._on_blocked = on_blocked

    def submitted(self, sender: Hashable | None, done: asyncio.Future[None]) -> None:
        """A request of `sender` is in flight until `done`; it writes into the active segment."""
        if sender is None:
            self._open = True
            return
        self._contributors.add(sender)
        count = self._inflight.get(sender, 0) + 1
        self._inflight[sender] = count
        done.add_done_callback(lambda _: self._answered(sender))
        if count >= SENDER_INFLIGHT_MAX:
            self._on_blocked()

    def _answered(self, sender: Hashable) -> None:
        count = self._inflight[sender] - 1
        if count:
            self._inflight[sender] = count
        else:
            del self._inflight[sender]

    def rotated(self) -> None:
        """The active segment rotated: the next one has no senders yet."""
        self._contributors.clear()
        self._open = False

    def all_blocked(self) -> bool:
        """Whether no sender of the active segment can send more before one is answered."""
        if self._open or not self._contributors:
            return False
        inflight = self._inflight
        return all(inflight.get(s, 0) >= SENDER_INFLIGHT_MAX for s in self._contributors)
