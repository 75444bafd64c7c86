"""Warnings that a client can trigger at will, limited so a flood of them cannot flood the log.

Every connection the server closes for a client's fault (a malformed frame, a too-slow frame) is
worth one warning with its reason, until a client makes thousands a second: then the log would
cost more than the connections. At most `burst` warnings are written per `interval_s`; the
rest are counted, and when the interval ends one warning says how many were left out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable


class RateLimitedWarnings:
    """`warning(msg, *args)` logs like `logger.warning` until the interval's burst is spent."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float,
        burst: int,
        what: str,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if interval_s <= 0 or burst < 1:
            raise ValueError("interval_s must be > 0 and burst >= 1")
        self._logger = logger
        self._interval_s = interval_s
        self._burst = burst
        self._what = what
        self._clock = clock
        self._window_start = float("-inf")
        self._logged = 0
        self._suppressed = 0
        self._summary: asyncio.TimerHandle | None = None

    @property
    def suppressed(self) -> int:
        """Warnings counted but not yet reported in this interval."""
        return self._suppressed

    def warning(self, msg: str, *args: object) -> None:
        now = self._now()
        if now - self._window_start >= self._interval_s:
            self.flush()
            self._window_start = now
            self._logged = 0
        if self._logged < self._burst:
            self._logged += 1
            self._logger.warning(msg, *args)
            return
        self._suppressed += 1
        if self._summary is None:
            delay = self._window_start + self._interval_s - now
            self._summary = asyncio.get_running_loop().call_later(delay, self.flush)

    def flush(self) -> None:
        """Report what was left out so far (also called at the end of each interval)."""
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        if self._suppressed:
            self._logger.warning(
                "%d more %s in the last %.0f s were not logged one by one",
                self._suppressed,
                self._what,
                self._interval_s,
            )
            self._suppressed = 0

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()
