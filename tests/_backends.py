"""The batch coordinator backends every contract suite runs against, made in one place.

A new backend joins every two-backend fixture (coordinator, lifecycle, transaction suites) by
being added here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator, SqliteBatchCoordinator

BACKENDS: Final = ("memory", "sqlite")


def open_coordinator(
    backend: str, directory: Path, clock: Clock, name: str = "coordinator", **options: Any
) -> BatchCoordinator:
    """A fresh coordinator of `backend`; durable backends keep their state under `directory`."""
    if backend == "memory":
        return InMemoryBatchCoordinator(clock=clock, **options)
    if backend == "sqlite":
        return SqliteBatchCoordinator(directory / f"{name}.db", clock=clock, **options)
    raise ValueError(f"unknown coordinator backend {backend!r}")
