"""Both coordinator backends behind one fixture, driven by one virtual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator
from testkit.backends import BACKENDS, open_coordinator

EXPIRATION_MS = 60 * 60 * 1000
"""Producer-state expiry used by the suite: one hour, so tests can jump past it."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=BACKENDS)
async def coordinator(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> AsyncIterator[BatchCoordinator]:
    backend = open_coordinator(
        request.param, tmp_path, clock, producer_id_expiration_ms=EXPIRATION_MS
    )
    try:
        yield backend
    finally:
        await backend.close()
