"""Both coordinator backends behind one fixture, driven by one virtual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator, SqliteBatchCoordinator

EXPIRATION_MS = 60 * 60 * 1000
"""Producer-state expiry used by the suite: one hour, so tests can jump past it."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite"])
async def coordinator(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> AsyncIterator[BatchCoordinator]:
    backend: BatchCoordinator
    if request.param == "memory":
        backend = InMemoryBatchCoordinator(clock=clock, producer_id_expiration_ms=EXPIRATION_MS)
    else:
        backend = SqliteBatchCoordinator(
            tmp_path / "coordinator.db", clock=clock, producer_id_expiration_ms=EXPIRATION_MS
        )
    try:
        yield backend
    finally:
        await backend.close()
