"""A batch coordinator over fresh state, for the benchmarks that compare the backends."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)


@contextlib.asynccontextmanager
async def fresh_coordinator(
    backend: str, postgres_dsn: str | None
) -> AsyncIterator[BatchCoordinator]:
    """A coordinator of `backend` (memory, sqlite, postgres) over fresh state, closed (and its
    state dropped) after. PostgreSQL: a new database on the server of `postgres_dsn`, or on a
    throwaway server when None."""
    if backend == "memory":
        yield InMemoryBatchCoordinator()
        return
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="diskless-bench-") as directory:
            coordinator: BatchCoordinator = SqliteBatchCoordinator(Path(directory) / "c.db")
            try:
                yield coordinator
            finally:
                await coordinator.close()
        return
    from benchmarks._coordinator_postgres import fresh_database_async, server

    with server(postgres_dsn) as admin_dsn:
        async with fresh_database_async(admin_dsn) as database:
            coordinator = PostgresBatchCoordinator(database)
            try:
                yield coordinator
            finally:
                await coordinator.close()
