"""Readiness as the outcome of checks run in the background: `/readyz` answers from what they
last found, at once, never waiting on a check in flight.

A check that asked its dependency inside the HTTP request would answer no sooner than the
dependency: a coordinator whose server is stopped (SIGSTOP) holds the read for its whole command
timeout, and a probe with a shorter timeout then sees no answer and no reason. Here each check
(`Check`) runs in a task of its own, one call at a time, every `interval_s`; the answer is the
last outcome of each, and a call still in flight after `bound_s` is itself the reason ("has not
answered for 7.3 s"), so the endpoint's answer takes no longer than computing a string.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

_log = logging.getLogger(__name__)

BOUND_S: Final = 2.0
"""How long a check's call may be in flight before its silence is the answer."""
SETTLE_POLL_S: Final = 0.05


@dataclass
class Check:
    """One dependency's check: `call` returns None when fine, else why not (one line, naming
    `name`), and runs every `interval_s`; every `hurry_interval_s` while its last outcome was a
    failure or `hurry()` says so, so that a recovery is seen soon."""

    name: str
    call: Callable[[], Awaitable[str | None]]
    interval_s: float
    hurry_interval_s: float = 1.0
    hurry: Callable[[], bool] = lambda: False
    reason: str | None = None
    started: float | None = None
    """When the call in flight began; None between calls."""
    finished: float = 0.0
    checked: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first call has ended."""


class Readiness:
    """Runs its checks from `start` to `close`; `reason()` is the first failing one's."""

    def __init__(
        self,
        checks: list[Check],
        *,
        bound_s: float = BOUND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.checks = checks
        self._bound_s = bound_s
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for check in self.checks:
            self._tasks.append(asyncio.create_task(self._run(check), name=f"ready-{check.name}"))

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def reason(self) -> str | None:
        """None when every check's last outcome was fine and none is overdue, else why not."""
        now = self._clock()
        for check in self.checks:
            if check.started is not None and now - check.started > self._bound_s:
                return f"{check.name} has not answered for {now - check.started:.1f} s"
            if not check.checked.is_set():
                return f"{check.name} has not been checked yet"
            if check.reason is not None:
                return check.reason
        return None

    async def checked(self, timeout_s: float) -> None:
        """Wait until every check has an outcome and none fails, or `timeout_s` has passed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                for check in self.checks:
                    await check.checked.wait()
                while self.reason() is not None:
                    await asyncio.sleep(SETTLE_POLL_S)

    async def _run(self, check: Check) -> None:
        while True:
            check.started = self._clock()
            try:
                check.reason = await check.call()
            except Exception as error:  # a check's own bug: say it, keep checking
                _log.warning("readiness check of %s failed: %r", check.name, error)
                check.reason = f"the check failed: {type(error).__name__}"
            check.started, check.finished = None, self._clock()
            check.checked.set()
            due = check.finished + check.interval_s
            while (now := self._clock()) < due:
                hurry = check.reason is not None or check.hurry()
                if hurry and now >= check.finished + check.hurry_interval_s:
                    break
                await asyncio.sleep(min(check.hurry_interval_s, due - now))
