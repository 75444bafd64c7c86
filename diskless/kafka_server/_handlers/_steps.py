"""Long loops of a handler, cut into steps so one huge request does not hold the event loop.

All brokers of a `KafkaCluster` share one event loop: a handler building the 100,000 entries of a
response in one go would stall every other client for about a second. A loop that may run long
calls `await steps.pause()` once per entry; it yields to the loop when its step has run for
`STEP_S`. Only where nothing depends on the loop not running in between (response building, not
the synchronous hand-off that fixes a produce request's write order).
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

STEP_S: Final = 0.01
"""Longest run between yields: a small request waiting behind it is barely delayed."""


class Steps:
    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def pause(self) -> None:
        """Yield to the event loop if this step has run for `STEP_S`; otherwise return at once."""
        if time.perf_counter() - self._since >= STEP_S:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
