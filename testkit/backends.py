"""The batch coordinator backends every contract suite runs against, made in one place.

A new backend joins every two-backend fixture (coordinator, lifecycle, transaction suites) by
being added here. The PostgreSQL server starts on first use (`testkit.postgres`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from diskless.clock import Clock
from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from testkit.postgres import database_dsn

BACKENDS: Final = ("memory", "sqlite", "postgres")


def open_coordinator(
    backend: str, directory: Path, clock: Clock, name: str = "coordinator", **options: Any
) -> BatchCoordinator:
    """A fresh coordinator of `backend`; durable backends keep their state under `directory`
    (PostgreSQL: in the database of `directory` and `name` on the test run's server)."""
    if backend == "memory":
        return InMemoryBatchCoordinator(clock=clock, **options)
    if backend == "sqlite":
        return SqliteBatchCoordinator(directory / f"{name}.db", clock=clock, **options)
    if backend == "postgres":
        return PostgresBatchCoordinator(database_dsn(directory, name), clock=clock, **options)
    raise ValueError(f"unknown coordinator backend {backend!r}")
