"""A throwaway PostgreSQL server for the tests: real binaries, no mocks.

One server per test run (`testkit.postgres_server`), started on first use. Each coordinator
a test opens gets a database of its own (`database_dsn`). The server is stopped with
`pg_ctl stop -m immediate` when the run ends. Without PostgreSQL binaries the PostgreSQL
variants are skipped, except under CI (`CI` set) and under `./run tests`
(`DISKLESS_REQUIRE_POSTGRES` set), where that is an error.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.postgres_server import PostgresServer, find_bindir

__all__ = [
    "PostgresServer",
    "bindir_or_skip",
    "database_dsn",
    "postgres_dsn",
    "postgres_server",
    "server",
]


_server: PostgresServer | None = None
_server_lock = threading.Lock()


def bindir_or_skip() -> Path:
    """Where PostgreSQL's binaries are; skips the calling test when there are none (fails under
    CI)."""
    bindir = find_bindir()
    if bindir is None:
        reason = "PostgreSQL binaries not found (install Debian's postgresql package)"
        if os.environ.get("CI") or os.environ.get("DISKLESS_REQUIRE_POSTGRES"):
            raise RuntimeError(reason)
        pytest.skip(reason)
    return bindir


def server() -> PostgresServer:
    """The run's server, started on first use; skips the calling test when there is no
    PostgreSQL installed (fails under CI)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = PostgresServer(bindir_or_skip())
            atexit.register(_server.close)
        return _server


def database_dsn(directory: Path | str, name: str = "coordinator") -> str:
    """A DSN of the database of (`directory`, `name`) on the run's server."""
    s = server()
    return s.dsn(s.database(directory, name))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The run's server (stopped at the end of the run)."""
    yield server()


@pytest.fixture
def postgres_dsn(tmp_path: Path) -> str:
    """A fresh, empty database of the run's server, for this test."""
    return database_dsn(tmp_path, "test")
