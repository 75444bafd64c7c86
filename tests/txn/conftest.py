"""Both batch coordinators as transaction participants, on one virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator
from testkit.backends import BACKENDS, open_coordinator

T = TypeVar("T")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=BACKENDS)
async def coordinator(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> AsyncIterator[BatchCoordinator]:
    backend = open_coordinator(request.param, tmp_path, clock)
    try:
        yield backend
    finally:
        await backend.close()


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
