"""Every backend behind the suite's `coordinator` fixture (`testkit.fixtures`), driven by one
virtual clock, with producer state that expires after an hour."""

from __future__ import annotations

from typing import Any

import pytest

from tests.coordinator._helpers import EXPIRATION_MS


@pytest.fixture
def coordinator_options() -> dict[str, Any]:
    return {"producer_id_expiration_ms": EXPIRATION_MS}
