"""Driving a virtual clock (`ManualClock`) while background tasks run: in small steps, letting
SQLite's worker thread run in real time between them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from diskless.clock import ManualClock

T = TypeVar("T")


async def drive(clock: ManualClock, awaitable: Awaitable[T], step_s: float = 0.01) -> T:
    """Await `awaitable` while moving virtual time in small steps (and letting SQLite's worker
    thread run in real time between steps)."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(1_000_000):
        if task.done():
            return task.result()
        await clock.advance(step_s)
        await asyncio.sleep(0.0005)
    task.cancel()
    raise AssertionError("never finished")


async def step(clock: ManualClock, steps: int = 20, step_s: float = 0.01) -> None:
    """Let background tasks run for a few virtual steps."""
    for _ in range(steps):
        await clock.advance(step_s)
        await asyncio.sleep(0.0005)
