"""The public surface of the coordinator and of the producer rules is exactly what is exported."""

from __future__ import annotations

import diskless.coordinator
import diskless.txn


def _public(module: object) -> set[str]:
    return {name for name in vars(module) if not name.startswith("_")} - {"annotations"}


def test_coordinator_exports() -> None:
    assert set(diskless.coordinator.__all__) == _public(diskless.coordinator)
    assert {
        "InMemoryBatchCoordinator",
        "SqliteBatchCoordinator",
        "PostgresBatchCoordinator",
    } <= set(diskless.coordinator.__all__)


def test_txn_exports() -> None:
    assert set(diskless.txn.__all__) == _public(diskless.txn)
    assert diskless.txn.PRODUCER_BATCHES_RETAINED_MAX == 5
