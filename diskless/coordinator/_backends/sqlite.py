"""The SQLite store: durable, and shared safely by several processes on one machine.

- Batch metadata lives on disk with indexes, so lookups stay O(log n) and memory stays bounded
  (a fixed page cache, no table mirrored in memory) however many batches exist.
- Each step is one `BEGIN IMMEDIATE` transaction: state is read and changed under the
  database's write lock, so concurrent processes never assign the same offset.
- WAL journal with `synchronous=FULL`: a step acknowledged to the caller survives power loss.
- Steps run on one writer thread per store, which owns the write connection, so the event loop
  never blocks on disk; the engine reads the clock inside the step, after the lock is taken.
  Reads run on their own threads and connections: WAL lets them read the last commit while a
  write (ours, or another process's) holds the lock, so a fetch never waits behind a commit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

from diskless._availability import log_failure
from diskless.coordinator._backends.sqlite_feed import CHANGE_CHECK_MS_DEFAULT, DataVersionCheck
from diskless.coordinator._backends.sqlite_reads import SqliteReads
from diskless.coordinator._backends.sqlite_schema import SchemaTooNewError, migrate
from diskless.coordinator._backends.sqlite_step import SqliteStep
from diskless.coordinator._feed import ChangeListener, ChangeListeners, recorded
from diskless.coordinator._store import (
    CoordinatorStore,
    Durability,
    Operation,
    Query,
    StoreStep,
    run_inline,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorError, CoordinatorUnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS_DEFAULT: Final = 5_000
"""How long sqlite itself waits for another process's lock before reporting SQLITE_BUSY."""
BUSY_RETRY_S_MAX: Final = 30.0
"""How long we keep retrying a busy database (with backoff) before giving up as unavailable."""
CACHE_KIB_MAX: Final = 16 * 1024
"""The page cache per connection: bounds memory however large the database grows."""
WAL_CHECKPOINT_PAGES: Final = 4000
"""The write-ahead log is copied back into the database once it holds this many pages (16 MiB
of 4 KiB pages) rather than SQLite's 1000: a commit of 100 batches writes about 200 pages, most
of them the same hot pages again (each partition's last leaf), which a checkpoint copies once
however often they were logged. About 7% more commits per second at 100 batches each."""
READER_THREADS: Final = 2
"""Threads (each with its own connection) serving read-only queries beside the writer."""


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


class SqliteStore(CoordinatorStore):
    """A `CoordinatorStore` in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        busy_timeout_ms: int = BUSY_TIMEOUT_MS_DEFAULT,
        busy_retry_s: float = BUSY_RETRY_S_MAX,
        change_check_ms: int = CHANGE_CHECK_MS_DEFAULT,
    ) -> None:
        self._path = os.fspath(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._busy_retry_s = busy_retry_s
        self.retries = 0
        """Statements run again while another process held the lock (for metrics)."""
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="diskless-sqlite"
        )
        self._conn: sqlite3.Connection | None = None
        self._readers = concurrent.futures.ThreadPoolExecutor(
            max_workers=READER_THREADS, thread_name_prefix="diskless-sqlite-read"
        )
        self._reader_local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_conns_lock = threading.Lock()
        self._schema_ready = False
        self._closed = False
        self._listeners = ChangeListeners()
        self._change_check = DataVersionCheck(
            self._path, change_check_ms, lambda: self._schema_ready, self._listeners.publish
        )

    # --- connections --------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The writer thread's connection; opening it creates or migrates the schema."""
        if self._conn is None:
            conn = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=0
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                self._retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
                conn.execute(f"PRAGMA cache_size = -{CACHE_KIB_MAX}")
                conn.execute("PRAGMA temp_store = MEMORY")
                old = self._retry_busy(lambda: migrate(conn))
                logger.debug("opened %s (schema was at version %d)", self._path, old)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._schema_ready = True
        return self._conn

    def _reader_connection(self) -> sqlite3.Connection:
        """This reader thread's connection (read-only; the writer has set up the file)."""
        conn: sqlite3.Connection | None = getattr(self._reader_local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=0
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB_MAX}")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA query_only = ON")
            with self._reader_conns_lock:
                self._reader_conns.append(conn)
            self._reader_local.conn = conn
        return conn

    def _retry_busy(self, fn: Callable[[], T]) -> T:
        """Run `fn`, retrying with jittered backoff while another process holds the lock."""
        deadline = time.monotonic() + self._busy_retry_s
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or time.monotonic() >= deadline:
                    raise
            self.retries += 1  # one thread writes at a time; a lost increment is harmless
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)

    # --- transactions (on the writer or a reader thread) -----------------------------------
    def _transact(
        self,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability,
        outcome_unknown_on_failure: bool,
    ) -> T:
        """Run `step` in one IMMEDIATE transaction: all of its changes or none of them.

        VOLATILE commits without waiting for the disk (synchronous=NORMAL): atomic and visible
        to every process at once, but a power loss may forget them; the next durable commit
        makes them durable too, since the WAL is written in order. The engine uses it only for
        transaction state whose loss is safe, which is also the state written per request: a
        lost lease or registration makes the batches that needed it fail (a commit needs both;
        the producer aborts), and a lost ENDING mark only matters to an end that died in the
        same power loss (and is retried from the start). Markers stay durable.
        """
        conn = self._connection()
        volatile = durability is Durability.VOLATILE
        if volatile:
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            self._retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                result = run_inline(step(SqliteStep(conn)))
            except BaseException:
                if conn.in_transaction:  # some errors (e.g. a full disk) already rolled back
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as error:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error as rollback_error:
                        log_failure(logger, rollback_error, "rollback after a failed COMMIT failed")
                if outcome_unknown_on_failure:
                    raise CommitOutcomeUnknownError(f"COMMIT failed: {error}") from error
                raise
            return result
        finally:
            if volatile:
                conn.execute("PRAGMA synchronous = FULL")

    def _snapshot(self, query: Query[T]) -> T:
        """Run `query` in one read transaction on this reader thread's connection (its
        lookups never suspend: `run_inline`)."""
        conn = self._reader_connection()

        def attempt() -> T:
            conn.execute("BEGIN")
            try:
                return run_inline(_awaited(query(SqliteReads(conn))))
            finally:
                conn.execute("COMMIT")

        return self._retry_busy(attempt)

    @staticmethod
    def _call(fn: Callable[[], T]) -> T:
        """Run `fn`, turning the database's failures into the coordinator's."""
        try:
            return fn()
        except CoordinatorError:
            raise
        except SchemaTooNewError as error:
            raise CoordinatorUnavailableError(str(error)) from error
        except sqlite3.Error as error:
            raise CoordinatorUnavailableError(f"sqlite: {error}") from error

    async def _on(self, executor: concurrent.futures.Executor, fn: Callable[[], T]) -> T:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        return await asyncio.get_running_loop().run_in_executor(executor, self._call, fn)

    # --- CoordinatorStore ---------------------------------------------------------------------
    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        run, runs = recorded(step)
        result = await self._on(
            self._executor, lambda: self._transact(run, durability, outcome_unknown_on_failure)
        )
        self._listeners.publish_runs(runs)
        return result

    async def read(self, query: Query[T]) -> T:
        if not self._schema_ready:  # the writer creates (or migrates) the file first, once
            await self._on(self._executor, self._connection)
        return await self._on(self._readers, lambda: self._snapshot(query))

    def release_signal(self) -> asyncio.Future[None] | None:
        return None  # commits may come from other processes: poll

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        remove = self._listeners.add(listener)
        self._change_check.start()  # other processes' commits, once per interval
        return remove

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._change_check.close()

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, close)
        finally:
            self._executor.shutdown(wait=True)
            self._readers.shutdown(wait=True)
            with self._reader_conns_lock:
                readers, self._reader_conns = self._reader_conns, []
            for conn in readers:
                conn.close()


async def _awaited(answer: Awaitable[T]) -> T:
    return await answer
