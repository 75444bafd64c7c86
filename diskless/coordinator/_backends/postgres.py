"""The PostgreSQL store: shared by broker processes on many machines.

- Each step is one READ COMMITTED transaction on a pooled asyncpg connection, with row locks
  taken in a fixed order by its loads (`postgres_step`): commits to overlapping partitions queue
  behind each other, never deadlock in the common paths, and a step always decides on rows
  nobody else can change until it commits. Steps wide enough to overlap almost surely queue
  first, in arrival order, at one advisory lock (the gate, also in `postgres_step`). A step
  that loses an insert race on a unique key (23505), or is chosen as a deadlock victim
  (40P01), or meets a serialization failure (40001), is rolled back and run again from the
  start; the engine reads the clock inside the step.
- The engine names each step (`Operation`). Most run through the generic loads and applies;
  a commit (`postgres_commit`) applies what it decided in one server-side function.
- Durable steps commit with the server's `synchronous_commit`; VOLATILE ones with
  `synchronous_commit = off` (atomic and visible at once; a server crash may forget the last
  few, which the engine allows for that state).
- Every wait is bounded (connect, pool acquire, each statement), and every failure of the
  database, the network or asyncpg's protocol state becomes `CoordinatorUnavailableError`,
  which is retriable.
- A connection goes back to the pool only in a sound state: after a statement the server
  refused (rolled back), or after success. After anything else (the connection lost, a timeout,
  a cancellation, asyncpg's own protocol error) it may still be busy, so it is closed. A pooled
  connection the server dropped while it was idle (a terminated backend, a crash) may still
  look open: asyncpg has read the server's FATAL but not yet its end of stream, and refuses
  the next statement ("another operation is in progress"). The step's BEGIN finds that out
  before anything was sent: such a connection is closed and the step takes another.
- A COMMIT whose answer is lost (the connection dropped, the server restarted, a timeout) is
  resolved, not guessed: the step fetched its transaction id before committing, and the store
  asks the server, on another connection, for that transaction's status (`txid_status`) until
  it is known or the resolution budget runs out. Committed: the step's result is returned as if
  nothing had happened. Aborted: `CoordinatorUnavailableError` (nothing was applied). Still
  unknown: `CommitOutcomeUnknownError`.
- A session cannot hold its locks for long after its client died or froze (a host cut off
  without a reset sends nothing, so TCP notices nothing): every connection, the pool's and the
  change feed's, asks the server to end a session idle in a transaction for longer than
  `idle_in_transaction_ms` (a step never waits between its statements for more than its own
  work), and to probe an idle client with TCP keepalives and drop one that leaves what it was
  sent unacknowledged (`session_settings`). A step whose session was ended so fails retriably,
  having applied nothing.
- Reads run on the event loop, each in a READ ONLY REPEATABLE READ transaction (`postgres_reads`):
  one snapshot, never behind a writer's locks; a read rule's lookups are awaited there, then it
  decides (`_store.decide`), with no thread between. A cancelled read closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, TypeVar

import asyncpg

from diskless.coordinator._backends.postgres_commit import PostgresCommitStep
from diskless.coordinator._backends.postgres_connect import opening_error
from diskless.coordinator._backends.postgres_feed import ListenFeed
from diskless.coordinator._backends.postgres_reads import PostgresReads
from diskless.coordinator._backends.postgres_schema import SchemaTooNewError, migrate
from diskless.coordinator._backends.postgres_step import PostgresStep
from diskless.coordinator._feed import (
    NOTIFY_CHANNEL,
    ChangeListener,
    ChangeListeners,
    RecordingStep,
    recorded,
)
from diskless.coordinator._store import CoordinatorStore, Durability, Operation, Query, StoreStep
from diskless.errors import CommitOutcomeUnknownError, CoordinatorError, CoordinatorUnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")

POOL_SIZE_MAX_DEFAULT: Final = 10
CONNECT_TIMEOUT_MS_DEFAULT: Final = 5_000
"""How long opening a connection, or waiting for a free one in the pool, may take."""
COMMAND_TIMEOUT_MS_DEFAULT: Final = 10_000
"""How long one statement may take, waiting for row locks included."""
TCP_KEEPALIVES_IDLE_S: Final = 10
TCP_KEEPALIVES_INTERVAL_S: Final = 5
TCP_KEEPALIVES_COUNT: Final = 3
"""The server probes a silent client after 10 s, every 5 s, and drops it after 3 unanswered
probes: a session outside any transaction whose client vanished (it holds no lock, but a
connection slot and, for the change feed, its place in the notification queue) ends in 25 s."""
TCP_USER_TIMEOUT_MS: Final = (
    TCP_KEEPALIVES_IDLE_S + TCP_KEEPALIVES_INTERVAL_S * TCP_KEEPALIVES_COUNT
) * 1000
"""The same bound for a client that vanished while the server was sending (a result, a notice):
data left unacknowledged that long drops the connection, where keepalives do not apply."""
RESOLVE_TIMEOUT_MS_DEFAULT: Final = 10_000
"""How long the store keeps asking for the outcome of a commit whose answer was lost."""
STEP_ATTEMPTS_MAX: Final = 20
"""Runs of a step that keeps losing races (unique key, deadlock) before giving up."""

NATIVE_STEPS: Final[dict[Operation, type[PostgresStep]]] = {
    Operation.COMMIT_FILES: PostgresCommitStep,
}
"""The steps this store runs its own way (a `StoreStep` of their own); others are generic."""
RETRY_SQLSTATES: Final = frozenset({"40001", "40P01", "23505"})
"""Serialization failure, deadlock victim, a concurrent insert of the same key: run again."""
INFRASTRUCTURE_ERRORS: Final = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
DEAD_CONNECTION_ERRORS: Final = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    ConnectionError,
)
"""Errors of a first statement that mean the connection was unusable before it was sent."""
DEAD_CONNECTION_SQLSTATE_CLASSES: Final = ("08", "57", "25P03")
"""Connection exception; operator intervention (backend terminated, server shutting down); the
session ended for idling in its transaction (`idle_in_transaction_ms`)."""
READ_BEGIN: Final = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def idle_in_transaction_ms(command_timeout_ms: int) -> int:
    """How long the server lets one of the store's sessions stay idle inside a transaction
    before it ends the session, releasing its locks: half the command timeout (5 s with the
    default). Between two statements a step only runs its own code, so a session idle that long
    belongs to a client that died or froze (a broker cut off from PostgreSQL) with its locks.

    Another broker's statement queued behind those locks waits at most this long, so it is
    still served within its own command timeout, with half of it to spare: it lands inside
    the WAL commit budget's share for the commit call (`TXN_LEASE_MARGIN_MS`, 10 s) instead of
    failing and retrying. And a broker cut off holds its peers up for less than the broker
    session timeout (`broker_session_timeout_ms`, 9 s by default) after which the cluster
    counts it gone anyway."""
    return command_timeout_ms // 2


def session_settings(command_timeout_ms: int) -> dict[str, str]:
    """The server-side settings of every connection of the store (see the module doc); all are
    a user's to set, no superuser needed. Keepalives are ignored over a Unix socket."""
    return {
        "idle_in_transaction_session_timeout": str(idle_in_transaction_ms(command_timeout_ms)),
        "tcp_keepalives_idle": str(TCP_KEEPALIVES_IDLE_S),
        "tcp_keepalives_interval": str(TCP_KEEPALIVES_INTERVAL_S),
        "tcp_keepalives_count": str(TCP_KEEPALIVES_COUNT),
        "tcp_user_timeout": str(TCP_USER_TIMEOUT_MS),
    }


class _CommitLost(Exception):
    """COMMIT was sent and its answer lost (carried out of the pooled connection's block)."""

    def __init__(self, xid: int, result: Any, error: BaseException) -> None:
        super().__init__(repr(error))
        self.xid = xid
        self.result = result
        self.error = error


async def _reset(conn: asyncpg.Connection) -> None:
    """Pool reset: steps leave nothing behind but, after a failure, an open transaction."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def _connection_dead(error: BaseException) -> bool:
    """Whether `error` says the connection itself is gone (not what the statement asked)."""
    if isinstance(error, DEAD_CONNECTION_ERRORS):
        return True
    return isinstance(error, asyncpg.PostgresError) and str(error.sqlstate).startswith(
        DEAD_CONNECTION_SQLSTATE_CLASSES
    )


def _sound_after(error: BaseException) -> bool:
    """Whether a connection may go back to the pool after `error` left its step: only after a
    statement the server refused, whose transaction it then rolled back. Anything else (the
    connection lost, a timeout or cancellation with a statement maybe still in flight, an
    error of asyncpg's protocol state) may leave it busy."""
    return isinstance(error, asyncpg.PostgresError) and not _connection_dead(error)


def _discard(conn: asyncpg.Connection) -> None:
    """Close a pooled connection at once, so that the pool opens a new one in its place (a
    no-op when the pool already took it back, as it does when the connection is lost)."""
    with contextlib.suppress(asyncpg.InterfaceError):
        conn.terminate()


class PostgresStore(CoordinatorStore):
    """A `CoordinatorStore` in one PostgreSQL database (see the module doc)."""

    def __init__(
        self,
        dsn: str,
        pool_size_max: int = POOL_SIZE_MAX_DEFAULT,
        connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
        command_timeout_ms: int = COMMAND_TIMEOUT_MS_DEFAULT,
        resolve_timeout_ms: int = RESOLVE_TIMEOUT_MS_DEFAULT,
    ) -> None:
        if pool_size_max < 1:
            raise ValueError(f"pool_size_max must be at least 1, got {pool_size_max}")
        self._dsn = dsn
        self._pool_size_max = pool_size_max
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._command_timeout_s = command_timeout_ms / 1000
        self._session_settings = session_settings(command_timeout_ms)
        self._resolve_timeout_s = resolve_timeout_ms / 1000
        self._pool: asyncpg.Pool | None = None
        self._pool_lock: asyncio.Lock | None = None
        self._closed = False
        self.retries = 0
        """Steps run again after a serialization failure or deadlock (for metrics)."""
        self._listeners = ChangeListeners()
        self._feed = ListenFeed(
            dsn, self._connect_timeout_s, self._session_settings, self._listeners.publish
        )

    # --- the pool -----------------------------------------------------------------------------
    async def _ready(self) -> asyncpg.Pool:
        """The pool, created (and the schema migrated) on first use; a failure is retried by
        the next call."""
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        if self._pool is not None:
            return self._pool
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=self._pool_size_max,
                    timeout=self._connect_timeout_s,
                    command_timeout=self._command_timeout_s,
                    reset=_reset,
                    server_settings={
                        **self._session_settings,
                        "application_name": "diskless-coordinator",
                    },
                )
                try:
                    async with pool.acquire(timeout=self._connect_timeout_s) as conn:
                        old = await migrate(conn)
                    logger.debug("connected (schema was at version %d)", old)
                except INFRASTRUCTURE_ERRORS as error:
                    pool.terminate()
                    raise opening_error(error, self._connect_timeout_s) from error
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
        return self._pool

    @contextlib.asynccontextmanager
    async def _connection(self, begin: str | None) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection for one step or read, with `begin` (a transaction's start) run
        on it; given back to the pool only when it is sound (see the module doc). A connection
        whose `begin` finds it dead is closed and another taken, at most once per connection
        the pool can hold: a server that is down fails the next connect."""
        pool = await self._ready()
        for taken in range(1, self._pool_size_max + 2):
            conn = await pool.acquire(timeout=self._connect_timeout_s)
            if begin is None:
                break
            try:
                await conn.execute(begin)
                break
            except BaseException as error:
                _discard(conn)
                await self._give_back(pool, conn)
                if not _connection_dead(error) or taken > self._pool_size_max:
                    raise
                logger.debug("pooled connection found dead (%r); taking another", error)
        try:
            yield conn
        except BaseException as error:
            if not _sound_after(error):
                _discard(conn)
            raise
        finally:
            await self._give_back(pool, conn)

    async def _give_back(self, pool: asyncpg.Pool, conn: asyncpg.Connection) -> None:
        """Return a connection to the pool; a failure of its reset there closes it (the pool
        does) and is not the step's: the step's own outcome stands."""
        try:
            await pool.release(conn, timeout=self._command_timeout_s)
        except INFRASTRUCTURE_ERRORS as error:
            logger.debug("pooled connection closed at its release: %r", error)

    # --- writes -------------------------------------------------------------------------------
    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        delay = 0.001
        run, runs = recorded(step)
        for attempt in range(1, STEP_ATTEMPTS_MAX + 1):
            try:
                try:
                    result = await self._attempt(
                        operation, run, runs, durability, outcome_unknown_on_failure
                    )
                except _CommitLost as lost:
                    result = await self._resolve(lost)  # returns only when it committed
                self._listeners.publish_runs(runs)
                return result
            except CoordinatorError:
                raise
            except SchemaTooNewError as error:
                raise CoordinatorUnavailableError(str(error)) from error
            except asyncpg.PostgresError as error:
                if error.sqlstate not in RETRY_SQLSTATES or attempt == STEP_ATTEMPTS_MAX:
                    raise CoordinatorUnavailableError(f"postgres: {error!r}") from error
                logger.debug("step lost a race (%s), running it again", error.sqlstate)
                self.retries += 1
            except INFRASTRUCTURE_ERRORS as error:
                raise CoordinatorUnavailableError(f"postgres: {error!r}") from error
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.05)
        raise AssertionError("unreachable")

    async def _attempt(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        runs: list[RecordingStep],
        durability: Durability,
        outcome_unknown_on_failure: bool,
    ) -> T:
        """One run of `step` in one transaction on one pooled connection; what it changed is
        announced to other processes by a NOTIFY in the same transaction (`postgres_feed`)."""
        volatile = durability is Durability.VOLATILE
        begin = "BEGIN; SET LOCAL synchronous_commit = off" if volatile else "BEGIN"
        async with self._connection(begin) as conn:
            xid: int | None = None
            db = NATIVE_STEPS.get(operation, PostgresStep)(conn)
            try:
                result = await step(db)
                changes = runs[-1].changes()
                if changes:
                    self._feed.own(conn.get_server_pid())  # told here already: no echo
                    await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, changes.encode())
                if outcome_unknown_on_failure:
                    xid = db.xid
                    if xid is None:
                        xid = await conn.fetchval("SELECT txid_current()")
            except BaseException as error:
                if _sound_after(error):  # else the connection closes (`_connection`)
                    await _rollback(conn)
                raise
            try:
                await conn.execute("COMMIT")
            except Exception as error:
                if xid is None:
                    raise
                raise _CommitLost(xid, result, error) from error
            return result

    async def _resolve(self, lost: _CommitLost) -> Any:
        """Ask the server what became of a transaction whose COMMIT answer was lost."""
        # Per commit, and the coordinator's availability logs the outage: DEBUG.
        logger.debug("COMMIT answer lost (%r); resolving transaction %d", lost.error, lost.xid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._resolve_timeout_s
        delay = 0.01
        status: str | None = None
        while True:
            try:
                async with self._connection(None) as conn:
                    status = await conn.fetchval("SELECT txid_status($1)", lost.xid)
            except asyncpg.InvalidParameterValueError as error:
                # "transaction ID is in the future": the server restarted without the
                # transaction's WAL, so it never committed (a commit record would have carried
                # the server's next transaction ID past it).
                logger.info("transaction %d is unknown to the server: %s", lost.xid, error)
                status = "aborted"
            except INFRASTRUCTURE_ERRORS as error:
                logger.debug("resolving transaction %d: %r", lost.xid, error)
                status = None
            if status == "committed":
                logger.info("transaction %d had committed", lost.xid)
                return lost.result
            if status == "aborted":
                raise CoordinatorUnavailableError(
                    f"commit failed ({lost.error!r}); nothing was applied"
                ) from lost.error
            if loop.time() + delay > deadline:
                raise CommitOutcomeUnknownError(
                    f"COMMIT answer lost ({lost.error!r}) and its outcome still unknown"
                ) from lost.error
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # --- reads --------------------------------------------------------------------------------
    async def read(self, query: Query[T]) -> T:
        try:
            async with self._connection(READ_BEGIN) as conn:
                try:
                    result = await query(PostgresReads(conn))
                except BaseException as error:
                    # A cancellation may leave a statement in flight: the connection then
                    # closes (`_connection`) rather than roll back, since a failure to roll back
                    # would replace the cancellation, which callers retrying on
                    # CoordinatorError would then never see.
                    if _sound_after(error):
                        await _rollback(conn)
                    raise
                await conn.execute("COMMIT")
                return result
        except CoordinatorError:
            raise
        except SchemaTooNewError as error:
            raise CoordinatorUnavailableError(str(error)) from error
        except INFRASTRUCTURE_ERRORS as error:
            raise CoordinatorUnavailableError(f"postgres: {error!r}") from error

    def release_signal(self) -> asyncio.Future[None] | None:
        return None  # leases are released by other processes too: poll

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        remove = self._listeners.add(listener)
        self._feed.start()  # other processes' commits, by LISTEN
        return remove

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._feed.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self._command_timeout_s)
            except (TimeoutError, *INFRASTRUCTURE_ERRORS):
                pool.terminate()


async def _rollback(conn: asyncpg.Connection) -> None:
    """Roll back after a failed step; a broken connection has rolled back already."""
    if conn.is_closed() or not conn.is_in_transaction():
        return
    try:
        await conn.execute("ROLLBACK")
    except INFRASTRUCTURE_ERRORS as error:
        logger.debug("rollback failed: %r", error)
