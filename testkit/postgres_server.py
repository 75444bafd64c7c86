"""A throwaway PostgreSQL server: real binaries, started by the tests and the benchmarks.

`initdb` into a temp dir, then `pg_ctl start` listening on 127.0.0.1 (a free port) and on a unix
socket in the same dir, with `fsync=off`. A server for other hosts listens on an address of its
own, trusts their subnet, and is started through a launcher that puts it in its host (`ip netns
exec NAME`). The binaries are Debian's (`pg_config --bindir`, `/usr/lib/postgresql/*/bin`, or
PATH). `initdb` refuses to run as root: as root, the server runs as `nobody`, and owns its temp
dir.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from testkit.ports import free_port

SUPERUSER: Final = "diskless"
DATABASES_KEPT_MAX: Final = 24
"""Databases kept before the oldest are dropped: tests run one at a time, so only the last few
can still be in use, and each costs a few megabytes."""
RUN_AS_WHEN_ROOT: Final = "nobody"
SYNC_STANDBY: Final = "diskless_standby_never_connects"
"""Named as the synchronous standby, which never connects: a database set to
`synchronous_commit = on` then has its COMMITs wait after committing locally, which lets a test
drop a connection exactly while its COMMIT is in flight. Every other database commits with
`synchronous_commit = local`, the server default here."""


def find_bindir() -> Path | None:
    """Where `initdb`, `pg_ctl` and `psql` are, or None."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        path = Path(candidate)
        if all((path / name).exists() for name in ("initdb", "pg_ctl", "postgres", "psql")):
            return path
    return None


class PostgresServer:
    """One initdb'd cluster under a temp dir (see the module doc). `listen`: the address it serves
    on; `trusted`: a subnet (CIDR) whose clients may connect over TCP as well as the local ones;
    `launcher`: a command prefix that `pg_ctl start` runs under, so the server runs where it
    puts it."""

    def __init__(
        self,
        bindir: Path,
        listen: str = "127.0.0.1",
        trusted: str | None = None,
        launcher: Sequence[str] = (),
    ) -> None:
        self.bindir = bindir
        self.listen = listen
        self._launcher = list(launcher)
        self.root = Path(tempfile.mkdtemp(prefix="diskless-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS_WHEN_ROOT)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", RUN_AS_WHEN_ROOT, "--"]
        self._databases: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._next_database = 0
        self._lock = threading.Lock()
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--no-locale",
            "-E",
            "UTF8",
            "--no-sync",
        )
        settings = {
            "listen_addresses": f"'{listen}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "300",
            "synchronous_commit": "local",
            "synchronous_standby_names": f"'{SYNC_STANDBY}'",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
        if trusted is not None:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {trusted} trust\n")
        self.start()

    def _run(
        self, tool: str, *args: str, timeout: float = 120, launcher: Sequence[str] = ()
    ) -> str:
        out = subprocess.run(
            [*launcher, *self._as_user, str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={**os.environ, "LC_ALL": "C"},
        )
        if out.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} {args} failed: {out.stdout}{out.stderr}\n{log[-3000:]}")
        return out.stdout

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start",
            launcher=self._launcher,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop at once, as a crash would (`pg_ctl stop -m immediate`)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with psql; returns its unaligned output."""
        return self._run(
            "psql",
            "-h",
            str(self.root),
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-c",
            statement,
        )

    def dsn(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{self.listen}:{self.port}/{database}"

    def database(self, directory: Path | str, name: str) -> str:
        """The database of (`directory`, `name`): created empty on first request, the same one
        after (so that a test can reopen a coordinator over the same state)."""
        key = (str(directory), name)
        with self._lock:
            database = self._databases.get(key)
            if database is not None:
                self._databases.move_to_end(key)
                return database
            self._next_database += 1
            database = f"t{self._next_database}"
            self.sql(f"CREATE DATABASE {database}")
            self._databases[key] = database
            while len(self._databases) > DATABASES_KEPT_MAX:
                _, old = self._databases.popitem(last=False)
                self.sql(f"DROP DATABASE IF EXISTS {old} WITH (FORCE)")
            return database

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
