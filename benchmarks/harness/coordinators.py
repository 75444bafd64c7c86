"""Which batch coordinator a run uses, named by a URL (`--coordinator`).

- `sqlite` (the default): a SQLite file in the run's data directory, shared by every task;
- `sqlite:///ABSOLUTE/PATH.sqlite`: SQLite files beside that path, one per run (the run's name
  is added to the file name), for a data directory the tasks cannot see but this path they can;
- `memory`: an in-memory coordinator, private to its one task;
- `postgresql://...`: a PostgreSQL coordinator shared by tasks on any host (not available yet).

Every run needs an empty coordinator (offsets are verified from zero), so a URL names where runs
put their coordinators and `for_run` resolves the one of a run. A resolved URL is what tasks get:
it is a plain string, so it pickles to executors, and it holds absolute paths only (an
executor's working directory is not the driver's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator, SqliteBatchCoordinator

MEMORY: Final = "memory:"
SQLITE_DEFAULT: Final = "sqlite:"
DEFAULT_FILE: Final = "coordinator.sqlite"
POSTGRESQL_SCHEMES: Final = ("postgresql", "postgres")


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
        raise ValueError(
            f"{url!r}: the PostgreSQL batch coordinator is not available yet; "
            "use sqlite (default) or memory"
        )
    raise ValueError(f"{url!r}: use sqlite, sqlite:///PATH, memory (postgresql:// is coming)")


def for_run(url: str, data_dir: Path) -> str:
    """The empty coordinator of the run whose data directory is `data_dir` (a resolved URL)."""
    if url == MEMORY:
        return MEMORY
    if url == SQLITE_DEFAULT:
        return f"sqlite://{data_dir.resolve() / DEFAULT_FILE}"
    path = _sqlite_path(url)
    suffix = path.suffix or ".sqlite"
    return f"sqlite://{path.with_name(f'{path.stem}-{data_dir.name}{suffix}')}"


def is_shared(resolved: str) -> bool:
    """Whether tasks other than the one that created it can see the coordinator."""
    return resolved != MEMORY


def open_coordinator_type(resolved: str) -> tuple[type[BatchCoordinator], tuple[str, ...]]:
    """The coordinator class of a resolved URL and its constructor arguments."""
    if resolved == MEMORY:
        return InMemoryBatchCoordinator, ()
    if urlsplit(resolved).scheme == "sqlite" and resolved != SQLITE_DEFAULT:
        return SqliteBatchCoordinator, (str(_sqlite_path(resolved)),)
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
    return f"SQLite file {_sqlite_path(resolved)} shared by {tasks} Spark task(s)"


def _sqlite_path(url: str) -> Path:
    """sqlite:///abs/file -> /abs/file (the SQLAlchemy spelling: three slashes, then the path)."""
    return Path(url.removeprefix("sqlite://"))
