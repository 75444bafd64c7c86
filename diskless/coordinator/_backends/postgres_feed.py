"""PostgreSQL's change feed for other processes: LISTEN on a connection of its own.

Every step that changes partitions sends, in its own transaction, one NOTIFY on
`NOTIFY_CHANNEL` naming them (`PartitionChanges.encode`); PostgreSQL delivers it to every
listening session when, and only if, the step commits, in commit order. Each process keeps one
listening connection outside its pool and tells its listeners what each notice names.

A notice can be missed: the listening connection drops, the server restarts, or the network
between them is cut without either end noticing. So the connection is checked every
`PING_INTERVAL_S` (one `SELECT 1`, answered within `PING_TIMEOUT_S`), and each time the feed
(re)connects it tells its listeners that everything may have changed, since it heard nothing
while it was away. The connection has the store's server-side settings (`session_settings`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import asyncpg

from diskless.coordinator._feed import NOTIFY_CHANNEL
from diskless.coordinator._values import EVERYTHING, PartitionChanges

_log = logging.getLogger(__name__)

PING_INTERVAL_S: Final = 5.0
PING_TIMEOUT_S: Final = 5.0
OWN_PIDS_MAX: Final = 256
"""Server processes of our own pool remembered (the pool has at most its size at a time)."""
RETRY_S_MAX: Final = 2.0
"""The longest wait between two attempts to reconnect the feed."""
_ERRORS: Final = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


class ListenFeed:
    """The listening connection of one process (see the module doc)."""

    def __init__(
        self,
        dsn: str,
        connect_timeout_s: float,
        server_settings: Mapping[str, str],
        publish: Callable[[PartitionChanges], None],
    ) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._server_settings = {**server_settings, "application_name": "diskless-change-feed"}
        self._publish = publish
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._own_pids: collections.OrderedDict[int, None] = collections.OrderedDict()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        delay = 0.05
        while True:
            try:
                await self._listen()
                delay = 0.05
            except _ERRORS as error:
                if not self._failing:
                    _log.info("change feed lost (%r); reconnecting", error)
                self._failing = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_S_MAX)

    async def _listen(self) -> None:
        """One listening session, until it fails."""
        conn = await asyncpg.connect(
            self._dsn,
            timeout=self._connect_timeout_s,
            server_settings=self._server_settings,
        )
        try:
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _: lost.set())
            await conn.add_listener(NOTIFY_CHANNEL, self._on_notice)
            if self._failing:
                _log.info("change feed listening again")
                self._failing = False
            self._publish(EVERYTHING)  # whatever committed before we listened
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), PING_INTERVAL_S)
                if not lost.is_set():
                    await conn.fetchval("SELECT 1", timeout=PING_TIMEOUT_S)
            raise ConnectionError("the listening connection closed")
        finally:
            conn.terminate()

    def own(self, pid: int) -> None:
        """A server process of this store's pool sends notices: they were told to this
        process's listeners when the step committed, and are not told again. (Should the pid
        later serve another process, its notices are missed here: the view's reconcile covers
        that, as for any lost notice.)"""
        self._own_pids[pid] = None
        self._own_pids.move_to_end(pid)
        if len(self._own_pids) > OWN_PIDS_MAX:
            self._own_pids.popitem(last=False)

    def _on_notice(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if pid not in self._own_pids:
            self._publish(PartitionChanges.decode(payload))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
