"""What several coordinator test modules share: the suite's producer-state expiry, the store
interface's methods, and consolidation as a consolidator does it."""

from __future__ import annotations

from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    ConsolidationCandidate,
    ExtentIndex,
    ExtentSwap,
)
from testkit.commits import new_key

EXPIRATION_MS = 60 * 60 * 1000
"""Producer-state expiry used by the suite: one hour, so tests can jump past it."""
STORE_METHODS = {"write", "read", "release_signal", "watch_changes", "close"}
"""What a `CoordinatorStore` offers, and nothing more."""
INDEX_BYTES = 64
ALL = 1 << 40


def swap_of(candidate: ConsolidationCandidate, key: str | None = None) -> ExtentSwap:
    """The swap a consolidator would commit: the batches back to back from byte 16, the index
    after them."""
    size = sum(b.size for b in candidate.batches)
    index = ExtentIndex(16 + size, INDEX_BYTES)
    return ExtentSwap(candidate, key or new_key(), 16 + size + INDEX_BYTES, 16, size, index)


async def candidates(
    coordinator: BatchCoordinator, clock: ManualClock, bytes_max: int = ALL, limit: int = 100
) -> list[ConsolidationCandidate]:
    return await coordinator.consolidation_candidates(clock.now_ms() + 1, bytes_max, limit)


async def consolidate(
    coordinator: BatchCoordinator, clock: ManualClock, bytes_max: int = ALL
) -> list[ExtentSwap]:
    """Swap every candidate now; the swaps."""
    swaps = [swap_of(candidate) for candidate in await candidates(coordinator, clock, bytes_max)]
    for swap in swaps:
        assert (await coordinator.commit_extent(swap)).swapped
    return swaps
