"""Every backend behind the suite's `coordinator` fixture (`testkit.fixtures`), driven by one
virtual clock, with producer state that expires after an hour."""

from __future__ import annotations

from typing import Any

import pytest

EXPIRATION_MS = 60 * 60 * 1000
"""Producer-state expiry used by the suite: one hour, so tests can jump past it."""


@pytest.fixture
def coordinator_options() -> dict[str, Any]:
    return {"producer_id_expiration_ms": EXPIRATION_MS}
