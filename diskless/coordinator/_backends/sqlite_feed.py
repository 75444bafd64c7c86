"""SQLite's change feed for other processes: one `PRAGMA data_version` per interval.

Several processes share one SQLite file and nothing tells one of them that another committed.
`PRAGMA data_version` does, cheaply: its value changes whenever another connection (of any
process, our own writer included) has committed since the last time this connection asked, and
reading it touches only the shared-memory WAL index, not the disk. So each process asks once per
`interval`, on the event loop (no thread hop: it takes microseconds), on a connection of its own,
and on a change tells its listeners that everything may have changed: the file does not say
what. (So does the first check, and the first after a failed one: what came before is unknown.)
That is one statement per process per interval, however many fetches wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Final

from diskless.coordinator._values import EVERYTHING, PartitionChanges

_log = logging.getLogger(__name__)

CHANGE_CHECK_MS_DEFAULT: Final = 20
"""How often a process checks the file for other connections' commits: it bounds how late a
commit of another process wakes a waiting fetch here."""


class DataVersionCheck:
    """Publishes `EVERYTHING` after each interval in which the file changed (see the module
    doc). `ready` tells whether the file exists with its schema (checked before opening it)."""

    def __init__(
        self,
        path: str,
        interval_ms: int,
        ready: Callable[[], bool],
        publish: Callable[[PartitionChanges], None],
    ) -> None:
        if interval_ms < 1:
            raise ValueError(f"the change check interval must be >= 1 ms, got {interval_ms}")
        self._path = path
        self._interval_s = interval_ms / 1000
        self._ready = ready
        self._publish = publish
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            if self._ready():
                self.check()

    def check(self) -> None:
        """One check, now."""
        try:
            if self._conn is None:
                uri = f"file:{os.path.abspath(self._path)}?mode=ro"
                self._conn = sqlite3.connect(
                    uri, uri=True, isolation_level=None, check_same_thread=False, timeout=0
                )
            cursor = self._conn.execute("PRAGMA data_version")
            try:
                row = cursor.fetchone()
            finally:
                cursor.close()  # ends the statement, and its read of the WAL index, at once
        except sqlite3.Error as error:  # busy, or the file is gone: try again next time
            if not self._failing:
                _log.info("change check of %s failed: %s", self._path, error)
            self._failing = True
            self._version = None  # what changes meanwhile is unknown
            return
        version = int(row[0])
        if self._failing:
            _log.info("change check of %s works again", self._path)
            self._failing = False
        if version != self._version:  # the first check too: what came before it is unknown
            self._publish(EVERYTHING)
        self._version = version

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
