"""Another process holding a SQLite database's write lock until told to let go.

    python -m testkit.lock_holder DB

Takes the write lock (`BEGIN IMMEDIATE`), prints `locked`, and commits when a line arrives on
stdin (or stdin closes): what a busy broker in another process does to everybody else's commits.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import TracebackType


class WriteLockHolder:
    """A child process that holds the write lock of `db` from `__enter__` until `release`."""

    def __init__(self, db: str | Path) -> None:
        self._db = str(db)
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> WriteLockHolder:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "testkit.lock_holder", self._db],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line.strip() == "locked", f"lock holder said {line!r}"
        return self

    def release(self) -> None:
        """Commit and end the child's transaction; waits until the child has exited."""
        process = self._process
        if process is None:
            return
        self._process = None
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        try:
            code = process.wait(timeout=30)
        finally:
            process.stdout.close()
        assert code == 0, f"lock holder exited with {code}"

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.release()
        elif self._process is not None:
            self._process.kill()
            with contextlib.suppress(AssertionError):
                self.release()


def main(db: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
