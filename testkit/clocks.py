"""Driving a virtual clock (`ManualClock`) while background tasks run: in small steps, letting
SQLite's worker thread run in real time between them (`drive`, `step`), or from one sleeper's
deadline to the next (`drive_deadlines`, for parts that never leave the event loop)."""

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


async def settle(rounds: int = 20) -> None:
    """Let every runnable task run without moving virtual time."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def drive_deadlines(clock: ManualClock, awaitable: Awaitable[T], max_s: float = 600.0) -> T:
    """Run `awaitable`, moving virtual time from deadline to deadline until it finishes."""
    task = asyncio.ensure_future(awaitable)
    limit = clock.monotonic() + max_s
    await settle()
    while not task.done():
        deadline = clock.next_deadline()
        assert deadline is not None, "nothing sleeps, yet the task is stuck"
        assert deadline <= limit, "virtual time limit reached"
        await clock.advance(max(0.0, deadline - clock.monotonic()))
        await settle()
    return task.result()
