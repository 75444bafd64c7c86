"""Every lifecycle test that takes `new_coordinator` runs against both coordinator backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator
from testkit.backends import BACKENDS, open_coordinator
from tests.lifecycle._helpers import COORDINATOR_OPTIONS, CoordinatorFactory


@pytest.fixture(params=BACKENDS)
async def new_coordinator(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[CoordinatorFactory]:
    made: list[BatchCoordinator] = []

    def make(clock: Clock) -> BatchCoordinator:
        coordinator = open_coordinator(
            request.param, tmp_path, clock, f"coordinator-{len(made)}", **COORDINATOR_OPTIONS
        )
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        await coordinator.close()
