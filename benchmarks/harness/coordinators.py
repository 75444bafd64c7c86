"""Which batch coordinator a run uses, named by a URL (`--coordinator`).

- `sqlite` (the default): a SQLite file in the run's data directory, shared by every task;
- `sqlite:///ABSOLUTE/PATH.sqlite`: SQLite files beside that path, one per run (the run's name
  is added to the file name), for a data directory the tasks cannot see but this path they can;
- `memory`: an in-memory coordinator, private to its one task;
- `postgresql://USER@HOST:PORT/DB`: a PostgreSQL coordinator shared by tasks on any host; each
  run gets a database of its own on that server (`DB_<run name>`, created through DB, which the
  user must be allowed to CREATE DATABASE from).

Every run needs an empty coordinator (offsets are verified from zero), so a URL names where runs
put their coordinators and `for_run` resolves the one of a run; the driver `prepare`s it before
the run and `remove`s it afterwards. A resolved URL is what tasks get: it is a plain string, so
it pickles to executors, and it holds absolute paths only (an executor's working directory is not
the driver's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)

MEMORY: Final = "memory:"
SQLITE_DEFAULT: Final = "sqlite:"
DEFAULT_FILE: Final = "coordinator.sqlite"
POSTGRESQL_SCHEMES: Final = ("postgresql", "postgres")
POSTGRESQL_DEFAULT_DATABASE: Final = "postgres"
POSTGRESQL_NAME_MAX: Final = 63
"""PostgreSQL's identifier limit (NAMEDATALEN - 1)."""
POSTGRESQL_CONNECT_TIMEOUT_S: Final = 30.0


def parse(url: str) -> str:
    """The canonical form of a `--coordinator` URL; ValueError naming what is wrong."""
    text = url.strip()
    if text in ("memory", MEMORY):
        return MEMORY
    if text in ("sqlite", SQLITE_DEFAULT, "sqlite://"):
        return SQLITE_DEFAULT
    scheme = urlsplit(text).scheme
    if scheme == "sqlite":
        path = _sqlite_path(text)
        if not path.is_absolute():
            raise ValueError(f"{url!r}: the SQLite path must be absolute (sqlite:///dir/file)")
        return f"sqlite://{path}"
    if scheme in POSTGRESQL_SCHEMES:
        parts = urlsplit(text)
        if not parts.hostname:
            raise ValueError(f"{url!r}: name the server, postgresql://USER@HOST:PORT/DB")
        database = parts.path.strip("/") or POSTGRESQL_DEFAULT_DATABASE
        return urlunsplit(parts._replace(scheme="postgresql", path=f"/{database}"))
    raise ValueError(f"{url!r}: use sqlite, sqlite:///PATH, memory or postgresql://USER@HOST/DB")


def for_run(url: str, data_dir: Path) -> str:
    """The empty coordinator of the run whose data directory is `data_dir` (a resolved URL)."""
    if url == MEMORY:
        return MEMORY
    if url == SQLITE_DEFAULT:
        return f"sqlite://{data_dir.resolve() / DEFAULT_FILE}"
    if is_postgresql(url):
        parts = urlsplit(url)
        slug = re.sub(r"[^a-z0-9_]", "_", f"{_database(parts)}_{data_dir.name}".lower())
        return urlunsplit(parts._replace(path=f"/{slug[-POSTGRESQL_NAME_MAX:]}"))
    path = _sqlite_path(url)
    suffix = path.suffix or ".sqlite"
    return f"sqlite://{path.with_name(f'{path.stem}-{data_dir.name}{suffix}')}"


def prepare(url: str, resolved: str) -> None:
    """Create the run's empty coordinator where that takes a step of its own (a PostgreSQL
    database, created through the database `url` names)."""
    if is_postgresql(resolved):
        asyncio.run(_postgresql(url, f'CREATE DATABASE "{_database(urlsplit(resolved))}"'))


def remove(url: str, resolved: str) -> None:
    """Remove the run's coordinator: its SQLite file, or its PostgreSQL database."""
    if is_postgresql(resolved):
        database = _database(urlsplit(resolved))
        asyncio.run(_postgresql(url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        return
    path = sqlite_file(resolved)
    if path is None:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


def is_shared(resolved: str) -> bool:
    """Whether tasks other than the one that created it can see the coordinator."""
    return resolved != MEMORY


def open_coordinator_type(resolved: str) -> tuple[type[BatchCoordinator], tuple[str, ...]]:
    """The coordinator class of a resolved URL and its constructor arguments."""
    if resolved == MEMORY:
        return InMemoryBatchCoordinator, ()
    if urlsplit(resolved).scheme == "sqlite" and resolved != SQLITE_DEFAULT:
        return SqliteBatchCoordinator, (str(_sqlite_path(resolved)),)
    if is_postgresql(resolved):
        return PostgresBatchCoordinator, (resolved,)
    raise ValueError(f"not a resolved coordinator URL: {resolved!r}")


def sqlite_file(resolved: str) -> Path | None:
    """The SQLite file of a resolved URL (None for other coordinators)."""
    if urlsplit(resolved).scheme != "sqlite" or resolved == SQLITE_DEFAULT:
        return None
    return _sqlite_path(resolved)


def describe(resolved: str, tasks: int) -> str:
    """The report's line: which coordinator, and who shares it."""
    if resolved == MEMORY:
        return "in-memory (one task)"
    if is_postgresql(resolved):
        parts = urlsplit(resolved)
        server = f"{parts.hostname}:{parts.port or 5432}"
        return f"PostgreSQL database {_database(parts)} on {server} shared by {tasks} Spark task(s)"
    return f"SQLite file {_sqlite_path(resolved)} shared by {tasks} Spark task(s)"


def _sqlite_path(url: str) -> Path:
    """sqlite:///abs/file -> /abs/file (the SQLAlchemy spelling: three slashes, then the path)."""
    return Path(url.removeprefix("sqlite://"))


def is_postgresql(url: str) -> bool:
    """Whether `url` (canonical or resolved) names a PostgreSQL coordinator."""
    return urlsplit(url).scheme in POSTGRESQL_SCHEMES


def _database(parts: SplitResult) -> str:
    return parts.path.strip("/")


async def _postgresql(url: str, statement: str) -> None:
    """Run one statement on the database `url` names (CREATE/DROP DATABASE cannot run in a
    transaction, so no pool or coordinator: a plain connection)."""
    import asyncpg

    connection = await asyncpg.connect(url, timeout=POSTGRESQL_CONNECT_TIMEOUT_S)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()
