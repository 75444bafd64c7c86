"""A throwaway PostgreSQL server for tests: one per test session, a fresh database per test.

The server is Debian's PostgreSQL (`./run` installs the `postgresql` package when it is
missing): initdb into a temporary directory, then `pg_ctl start` listening on 127.0.0.1 on a
free port and on a unix socket inside that directory, with fsync off (a test's data need not
survive a power cut, only `pg_ctl stop -m immediate`, which fsync does not matter for). initdb
refuses to run as root, so as root the server runs as an unprivileged user (`postgres` when it
exists, else `nobody`) through `runuser`.

Usage (a package's conftest imports the fixtures):

    from tests._postgres import postgres_dsn, postgres_server  # noqa: F401

    async def test_x(postgres_dsn: str) -> None:
        connection = await asyncpg.connect(postgres_dsn)

When the binaries are absent the tests are skipped, except in CI (`CI` set) or under `./run`
(`DISKLESS_REQUIRE_POSTGRES=1`), where they fail: there they must have been installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests._spark_cluster import free_port

SUPERUSER: Final = "diskless"
START_ATTEMPTS: Final = 3
"""A free port can be taken between choosing it and the server binding it: try again."""
TIMEOUT_S: Final = 60
UNPRIVILEGED_USERS: Final = ("postgres", "nobody")
SERVER_SETTINGS: Final = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresUnavailable(RuntimeError):
    pass


def find_bindir() -> Path:
    """The directory of initdb, pg_ctl and postgres: pg_config's, Debian's newest, or PATH's."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            bindir = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(bindir))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += [Path(p) for p in sorted(versions, key=_version_key, reverse=True)]
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found via pg_config, "
        "/usr/lib/postgresql/*/bin or PATH; install Debian's postgresql package (./run does)"
    )


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _server_user() -> str | None:
    """None to run as ourselves; as root, an unprivileged user (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in UNPRIVILEGED_USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise PostgresUnavailable(f"running as root and none of {UNPRIVILEGED_USERS} exists")


class PostgresServer:
    """One server in its own temporary directory (data, unix socket, log)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user = _server_user()
        self.directory = Path(tempfile.mkdtemp(prefix="diskless-postgres-"))
        self.data = self.directory / "data"
        self.socket_dir = self.directory / "socket"
        self.log = self.directory / "server.log"
        self.port = 0
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            cwd=self.directory,
        )

    def _check(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr}{log}")

    def start(self) -> None:
        self._check(
            "initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
            "--no-locale", "--no-sync",
        )  # fmt: skip
        self.socket_dir.mkdir()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)
        for attempt in range(START_ATTEMPTS):
            self.port = free_port()
            options = " ".join(
                [f"-p {self.port}", f"-c unix_socket_directories={self.socket_dir}"]
                + [f"-c {name}={value}" for name, value in SERVER_SETTINGS.items()]
            )
            done = self._run(
                "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                "-t", str(TIMEOUT_S), "-o", options,
            )  # fmt: skip
            if done.returncode == 0:
                return
            if attempt == START_ATTEMPTS - 1:
                log = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"pg_ctl start failed: {done.stderr}{log}")

    def stop(self) -> None:
        """Stop at once (what a crash looks like to clients), then remove everything."""
        with contextlib.suppress(subprocess.SubprocessError):
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")
        shutil.rmtree(self.directory, ignore_errors=True)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def socket_dsn(self, database: str = "postgres") -> str:
        """The same database through the unix socket."""
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}&port={self.port}"

    async def _admin(self, statement: str) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.dsn())
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    def create_database(self) -> str:
        name = f"test_{uuid.uuid4().hex[:16]}"
        asyncio.run(self._admin(f'CREATE DATABASE "{name}"'))
        return name

    def drop_database(self, name: str) -> None:
        asyncio.run(self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _required() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("DISKLESS_REQUIRE_POSTGRES") == "1"


@contextlib.contextmanager
def running_postgres(bindir: Path | None = None) -> Iterator[PostgresServer]:
    """A started server (stopped and removed on exit)."""
    server = PostgresServer(bindir or find_bindir())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The test run's PostgreSQL server, started on first use, stopped at the end."""
    try:
        bindir = find_bindir()
    except PostgresUnavailable as exc:
        if _required():
            pytest.fail(f"PostgreSQL is required here: {exc}", pytrace=False)
        pytest.skip(str(exc))
    with running_postgres(bindir) as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database of its own for one test: its DSN."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.dsn(name)
    finally:
        postgres_server.drop_database(name)
