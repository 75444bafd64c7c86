"""The SQLite batch coordinator: durable, and shared safely by several processes on one machine.

- Batch metadata lives on disk with indexes, so lookups stay O(log n) and memory stays bounded
  (a fixed page cache, no table mirrored in memory) however many batches exist.
- Each commit is one `BEGIN IMMEDIATE` transaction: the high watermark is read and advanced under
  the database's write lock, so concurrent processes never assign the same offset.
- WAL journal with `synchronous=FULL`: a commit acknowledged to the caller survives power loss.
- Writes run on one worker thread per coordinator, which owns the write connection, so the
  event loop never blocks on disk. Reads run on their own threads and connections: WAL lets them
  read the last commit while a write (ours, or another process's) holds the lock, so a fetch
  never waits behind a commit that is waiting for the lock.
- Every write reads the clock inside its transaction, after the write lock is taken: its time
  checks (commit age, lease and producer expiry, retention) hold at the moment it applies.
- The rules are those of `_planner`, `_reads` and `diskless.txn`; this module only stores.
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
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import msgspec

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, LEASE_TTL_MS_MAX, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX, check_commit_age
from diskless._types import ErrorCode, TimestampType, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import _reads
from diskless.coordinator._api import (
    BatchCoordinator,
    CommitBatch,
    CommitBatchResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FileInfo,
    FileState,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    LeaseRequest,
    LeaseResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProducerSnapshot,
    RetentionResult,
    TopicConfig,
    TopicDescription,
)
from diskless.coordinator._checks import check_broker_epoch, check_new_topic, check_object_key
from diskless.coordinator._planner import ProducerKey, plan_commit, producer_keys, txn_keys
from diskless.coordinator._rows import (
    AbortedTxn,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._snapshots import producer_snapshot
from diskless.coordinator._sqlite_schema import SchemaTooNewError, migrate
from diskless.coordinator._txn import (
    check_lease_grant,
    check_registration,
    plan_marker,
    run_write_txn_markers,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorError, CoordinatorUnavailableError
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT, ProducerEntry, RetainedBatch, is_expired

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS_DEFAULT = 5_000
"""How long sqlite itself waits for another process's lock before reporting SQLITE_BUSY."""
BUSY_RETRY_S_MAX = 30.0
"""How long we keep retrying a busy database (with backoff) before giving up as unavailable."""
CACHE_KIB_MAX = 16 * 1024
"""The page cache per connection: bounds memory however large the database grows."""
READ_CHUNK_ROWS_MAX = 256
"""Rows fetched per query when a reader walks batches lazily."""
KEYS_PER_QUERY_MAX = 4096
"""Keys looked up per statement when loading state for a commit (2 parameters each)."""
READER_THREADS = 2
"""Threads (each with its own connection) serving read-only operations beside the writer."""

_FILE_STATE_CODES = {FileState.LIVE: 0, FileState.UNREFERENCED: 1, FileState.CONDEMNED: 2}
_FILE_STATES = {code: state for state, code in _FILE_STATE_CODES.items()}
_LIVE, _UNREFERENCED, _CONDEMNED = 0, 1, 2

_BATCH_COLUMNS = (
    "b.partition_id, b.base_offset, b.last_offset, coalesce(f.key, ''), b.byte_offset, b.size,"
    " b.max_timestamp, b.log_append_time, b.timestamp, b.ts_running_max, b.producer_id,"
    " b.producer_epoch, b.control, b.coordinator_epoch"
)
# Markers have no file (file_id 0, which no file has): hence the outer join.
_BATCH_FROM = "batches b LEFT JOIN files f ON f.file_id = b.file_id"
_MARKER_FILE_ID = 0
_TXN_TABLES = ("txn_registrations", "txn_leases", "ongoing_txns", "aborted_txns")
_PARTITION_COLUMNS = (
    "p.partition_id, t.name, p.partition, t.timestamp_type, t.retention_ms, t.retention_bytes,"
    " t.max_message_bytes, p.high_watermark, p.log_start_offset, p.size_bytes, p.ts_running_max,"
    " (SELECT min(o.first_offset) FROM ongoing_txns o WHERE o.partition_id = p.partition_id),"
    " t.timestamp_before_max_ms, t.timestamp_after_max_ms"
)
_INSERT_BATCH = "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_UPSERT_PRODUCER = "INSERT OR REPLACE INTO producers VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_RETAINED_ENCODER = msgspec.msgpack.Encoder()
_RETAINED_DECODER = msgspec.msgpack.Decoder(tuple[RetainedBatch, ...])


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


def _partition_from_row(
    row: Sequence[Any], configs: dict[tuple[Any, ...], TopicConfig] | None = None
) -> PartitionState:
    """A partition from a `_PARTITION_COLUMNS` row; `configs` shares configs between rows."""
    config_key = (row[3], row[4], row[5], row[6], row[12], row[13])
    config = None if configs is None else configs.get(config_key)
    if config is None:
        config = TopicConfig(TimestampType(row[3]), row[4], row[5], row[6], row[12], row[13])
        if configs is not None:
            configs[config_key] = config
    return PartitionState(
        row[0], TopicPartition(row[1], row[2]), config, row[7], row[8], row[9], row[10], row[11]
    )


def _batch_from_row(row: Sequence[Any]) -> StoredBatch:
    return StoredBatch(*row)


def _entry_from_row(row: Sequence[Any]) -> ProducerEntry:
    return ProducerEntry(
        producer_id=row[0],
        producer_epoch=row[1],
        batches=_RETAINED_DECODER.decode(row[6]),
        last_timestamp=row[2],
        last_update_ms=row[3],
        coordinator_epoch=row[4],
        current_txn_first_offset=row[5],
    )


_ENTRY_COLUMNS = (
    "producer_id, producer_epoch, last_timestamp, last_update_ms, coordinator_epoch,"
    " txn_first_offset, batches"
)


def _keyed_lookups(
    select: str, keys: Sequence[tuple[Any, Any]], filler: tuple[Any, Any]
) -> Iterator[tuple[str, list[Any]]]:
    """Statements that look `keys` up through a `k(a, b)` VALUES table, one index probe each.

    Key lists are padded with `filler` (which matches nothing) to a power of two, so that a few
    statement texts serve every commit and stay in the statement cache.
    """
    for i in range(0, len(keys), KEYS_PER_QUERY_MAX):
        chunk = list(keys[i : i + KEYS_PER_QUERY_MAX])
        size = 1 << (len(chunk) - 1).bit_length() if chunk else 0
        chunk.extend([filler] * (size - len(chunk)))
        values = ", ".join(["(?, ?)"] * size)
        yield f"WITH k(a, b) AS (VALUES {values}) {select}", [x for key in chunk for x in key]


class _Reads:
    """The `_reads.ReadSource` over one connection, inside one read or write transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        row = self._conn.execute(
            f"SELECT {_PARTITION_COLUMNS} FROM topics t JOIN partitions p"
            " ON p.topic_id = t.topic_id WHERE t.name = ? AND p.partition = ?",
            (tp.topic, tp.partition),
        ).fetchone()
        return None if row is None else _partition_from_row(row)

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        # Whole chunks are fetched per query so that no statement stays open across calls.
        row = self._conn.execute(
            "SELECT base_offset FROM batches WHERE partition_id = ? AND base_offset <= ?"
            " ORDER BY base_offset DESC LIMIT 1",
            (state.key, offset),
        ).fetchone()
        after = (row[0] if row is not None else offset) - 1
        chunk = 16
        while True:
            rows = self._conn.execute(
                f"SELECT {_BATCH_COLUMNS} FROM {_BATCH_FROM} WHERE b.partition_id = ?"
                " AND b.base_offset > ? ORDER BY b.base_offset LIMIT ?",
                (state.key, after, chunk),
            ).fetchall()
            for r in rows:
                yield _batch_from_row(r)
            if len(rows) < chunk:
                return
            after = rows[-1][1]
            chunk = min(chunk * 4, READ_CHUNK_ROWS_MAX)

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        row = self._conn.execute(
            f"SELECT {_BATCH_COLUMNS} FROM {_BATCH_FROM} WHERE b.partition_id = ?"
            " ORDER BY b.timestamp DESC, b.base_offset LIMIT 1",
            (state.key,),
        ).fetchone()
        return None if row is None else _batch_from_row(row)

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        row = self._conn.execute(
            f"SELECT {_BATCH_COLUMNS} FROM {_BATCH_FROM} WHERE b.partition_id = ?"
            " AND b.ts_running_max >= ? ORDER BY b.ts_running_max, b.base_offset LIMIT 1",
            (state.key, ts),
        ).fetchone()
        return None if row is None else _batch_from_row(row)

    def aborted_from(self, state: PartitionState, offset: int) -> Iterator[AbortedTxn]:
        after = offset - 1
        while True:
            rows = self._conn.execute(
                "SELECT producer_id, first_offset, last_offset, lso FROM aborted_txns"
                " WHERE partition_id = ? AND last_offset > ? ORDER BY last_offset LIMIT ?",
                (state.key, after, READ_CHUNK_ROWS_MAX),
            ).fetchall()
            for r in rows:
                yield AbortedTxn(*r)
            if len(rows) < READ_CHUNK_ROWS_MAX:
                return
            after = rows[-1][2]


class SqliteBatchCoordinator(BatchCoordinator):
    """A batch coordinator stored in one SQLite file, which several processes may share."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS_DEFAULT,
        busy_retry_s: float = BUSY_RETRY_S_MAX,
        *,
        commit_age_max_ms: int | None = COMMIT_AGE_MAX_MS_DEFAULT,
        object_prefix: str = DEFAULT_OBJECT_PREFIX,
    ) -> None:
        """`commit_age_max_ms` bounds how late a commit may land: `commit_file` rejects a key
        (named `{object_prefix}{created_ms}-b…`, as `diskless.wal` names them) created more than
        that long ago by this coordinator's clock (ObjectKeyConflictError), so the file manager
        may condemn an unknown object once `orphan_grace_ms > commit_age_max_ms + clock skew`.
        The WAL writer's budget from naming an object to its commit (upload attempts, timeouts,
        backoffs, the commit) must fit inside it. None disables the bound."""
        self._path = os.fspath(path)
        self._commit_age_max_ms = commit_age_max_ms
        self._object_prefix = object_prefix
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._expiration_ms = producer_id_expiration_ms
        self._busy_timeout_ms = busy_timeout_ms
        self._busy_retry_s = busy_retry_s
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

    # --- plumbing (worker thread) -------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=0
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                self._retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
                conn.execute("PRAGMA synchronous = FULL")
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
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one read transaction: a consistent snapshot across its queries.

        On a reader thread; a write holding the lock does not block it (WAL).
        """
        conn = self._reader_connection()

        def attempt() -> T:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        return self._retry_busy(attempt)

    def _write(self, fn: Callable[[sqlite3.Connection], T], unknown_outcome: bool = False) -> T:
        """Run `fn` in one IMMEDIATE transaction: all of its changes or none of them.

        With `unknown_outcome`, a failure of COMMIT itself raises CommitOutcomeUnknownError: the
        caller cannot tell whether the changes were applied.
        """
        conn = self._connection()
        self._retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            result = fn(conn)
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
                except sqlite3.Error:
                    logger.exception("rollback after a failed COMMIT failed")
            if unknown_outcome:
                raise CommitOutcomeUnknownError(f"COMMIT failed: {error}") from error
            raise
        return result

    def _write_volatile(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`_write` without waiting for the disk (synchronous=NORMAL): atomic and visible to
        every process at once, but a power loss may forget it (the next durable commit makes it
        durable too, since the WAL is written in order).

        Only for transaction state whose loss is safe, which is also the state written per
        request or per transaction rather than per segment: a lost lease or registration makes
        the batches that needed it fail (a commit needs both to exist; the producer aborts), a
        lost ENDING mark only matters to an end that died in the same power loss (and is retried
        from the start), and nothing durable can depend on a lost write, because a later durable
        commit flushes every earlier write of the WAL with it. Markers stay durable. This saves a
        disk flush per produce request with transactional batches.
        """
        conn = self._connection()
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            return self._write(fn)
        finally:
            conn.execute("PRAGMA synchronous = FULL")

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except CoordinatorError:
            raise
        except SchemaTooNewError as error:
            raise CoordinatorUnavailableError(str(error)) from error
        except sqlite3.Error as error:
            raise CoordinatorUnavailableError(f"sqlite: {error}") from error

    async def _run(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn)

    async def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read-only `fn` in one read transaction on a reader thread."""
        if not self._schema_ready:  # the writer creates (or migrates) the file first, once
            await self._run(self._connection)
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._call, lambda: self._read(fn))

    # --- topics -------------------------------------------------------------------------------
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> bool:
        check_new_topic(name, partitions)
        cfg = config if config is not None else TopicConfig()

        def create(conn: sqlite3.Connection) -> bool:
            if conn.execute("SELECT 1 FROM topics WHERE name = ?", (name,)).fetchone():
                return False
            cursor = conn.execute(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms) VALUES (?, 0, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    int(cfg.timestamp_type),
                    cfg.retention_ms,
                    cfg.retention_bytes,
                    cfg.max_message_bytes,
                    cfg.message_timestamp_before_max_ms,
                    cfg.message_timestamp_after_max_ms,
                ),
            )
            assert cursor.lastrowid is not None
            self._add_partitions(conn, cursor.lastrowid, 0, partitions)
            return True

        return await self._run(lambda: self._write(create))

    @staticmethod
    def _add_partitions(conn: sqlite3.Connection, topic_id: int, current: int, total: int) -> None:
        conn.executemany(
            "INSERT INTO partitions (topic_id, partition) VALUES (?, ?)",
            [(topic_id, index) for index in range(current, total)],
        )
        conn.execute("UPDATE topics SET partition_count = ? WHERE topic_id = ?", (total, topic_id))

    async def create_partitions(self, name: str, total_partitions: int) -> None:
        def grow(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT topic_id, partition_count FROM topics WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise ValueError(f"unknown topic {name!r}")
            if total_partitions < row[1]:
                raise ValueError(
                    f"topic {name!r} has {row[1]} partitions; cannot shrink to {total_partitions}"
                )
            if total_partitions > row[1]:
                self._add_partitions(conn, row[0], row[1], total_partitions)

        await self._run(lambda: self._write(grow))

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        def describe(conn: sqlite3.Connection) -> list[TopicDescription]:
            columns = (
                "name, partition_count, timestamp_type, retention_ms, retention_bytes,"
                " max_message_bytes, timestamp_before_max_ms, timestamp_after_max_ms"
            )
            if names is None:
                rows = conn.execute(f"SELECT {columns} FROM topics ORDER BY name").fetchall()
            else:
                found = {}
                for n in names:
                    r = conn.execute(
                        f"SELECT {columns} FROM topics WHERE name = ?", (n,)
                    ).fetchone()
                    if r is not None:
                        found[n] = r
                rows = [found[n] for n in names if n in found]
            return [
                TopicDescription(
                    r[0], r[1], TopicConfig(TimestampType(r[2]), r[3], r[4], r[5], r[6], r[7])
                )
                for r in rows
            ]

        return await self._run_read(describe)

    async def delete_topics(self, names: Sequence[str]) -> None:

        def delete(conn: sqlite3.Connection) -> None:
            now = self._clock.now_ms()
            for name in names:
                row = conn.execute("SELECT topic_id FROM topics WHERE name = ?", (name,)).fetchone()
                if row is None:
                    continue
                partition_ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT partition_id FROM partitions WHERE topic_id = ?", (row[0],)
                    )
                ]
                for pid in partition_ids:
                    released = conn.execute(
                        "SELECT file_id, count(*) FROM batches WHERE partition_id = ?"
                        " GROUP BY file_id",
                        (pid,),
                    ).fetchall()
                    conn.execute("DELETE FROM batches WHERE partition_id = ?", (pid,))
                    conn.execute("DELETE FROM producers WHERE partition_id = ?", (pid,))
                    for table in _TXN_TABLES:
                        conn.execute(f"DELETE FROM {table} WHERE partition_id = ?", (pid,))
                    self._release_files(conn, released, now)
                conn.execute("DELETE FROM partitions WHERE topic_id = ?", (row[0],))
                conn.execute("DELETE FROM topics WHERE topic_id = ?", (row[0],))

        await self._run(lambda: self._write(delete))

    # --- brokers ------------------------------------------------------------------------------
    async def register_broker(self, broker_id: int) -> int:
        def register(conn: sqlite3.Connection) -> int:
            (epoch,) = conn.execute(
                "INSERT INTO brokers VALUES (?, 1) ON CONFLICT (broker_id)"
                " DO UPDATE SET epoch = epoch + 1 RETURNING epoch",
                (broker_id,),
            ).fetchone()
            return int(epoch)

        return await self._run(lambda: self._write(register))

    # --- the write path -----------------------------------------------------------------------
    async def commit_file(
        self,
        object_key: str,
        broker_id: int,
        broker_epoch: int,
        file_size: int,
        batches: Sequence[CommitBatch],
    ) -> list[CommitBatchResult]:
        batches = list(batches)

        def commit(conn: sqlite3.Connection) -> list[CommitBatchResult]:
            now = self._clock.now_ms()
            row = conn.execute(
                "SELECT epoch FROM brokers WHERE broker_id = ?", (broker_id,)
            ).fetchone()
            check_broker_epoch(broker_id, broker_epoch, None if row is None else row[0])
            row = conn.execute("SELECT state FROM files WHERE key = ?", (object_key,)).fetchone()
            check_object_key(object_key, None if row is None else _FILE_STATES[row[0]])
            check_commit_age(object_key, self._object_prefix, now, self._commit_age_max_ms)
            partitions = self._load_partitions(conn, {b.topic_partition for b in batches})
            producers = self._load_producers(conn, producer_keys(batches, partitions))
            registration_keys, lease_ids = txn_keys(batches, partitions)
            registrations = (
                self._load_registrations(conn, registration_keys) if registration_keys else {}
            )
            leases = self._load_leases(conn, lease_ids) if lease_ids else {}
            plan = plan_commit(
                object_key,
                batches,
                partitions,
                producers,
                now,
                self._expiration_ms,
                registrations,
                leases,
            )
            live = len(plan.new_batches)
            file_id = conn.execute(
                "INSERT INTO files (key, state, size, since_ms, live_batches)"
                " VALUES (?, ?, ?, ?, ?)",
                (object_key, _LIVE if live else _UNREFERENCED, file_size, now, live),
            ).lastrowid
            conn.executemany(
                _INSERT_BATCH,
                [
                    (
                        b.partition_key,
                        b.base_offset,
                        b.last_offset,
                        file_id,
                        b.byte_offset,
                        b.size,
                        b.max_timestamp,
                        b.log_append_time,
                        b.timestamp,
                        b.ts_running_max,
                        b.producer_id,
                        b.producer_epoch,
                        b.control,
                        b.coordinator_epoch,
                    )
                    for b in plan.new_batches
                ],
            )
            if plan.opened_txns:
                conn.executemany("INSERT INTO ongoing_txns VALUES (?, ?, ?)", plan.opened_txns)
            if plan.released_leases:
                conn.executemany(
                    "DELETE FROM txn_leases WHERE lease_id = ?",
                    [(lease_id,) for lease_id in plan.released_leases],
                )
            if plan.producers:
                conn.executemany(
                    _UPSERT_PRODUCER,
                    [
                        (
                            partition_id,
                            e.producer_id,
                            e.producer_epoch,
                            e.last_timestamp,
                            e.last_update_ms,
                            e.coordinator_epoch,
                            e.current_txn_first_offset,
                            _RETAINED_ENCODER.encode(e.batches),
                        )
                        for (partition_id, _), e in plan.producers.items()
                    ],
                )
            conn.executemany(
                "UPDATE partitions SET high_watermark = ?, size_bytes = ?, ts_running_max = ?"
                " WHERE partition_id = ?",
                [
                    (s.high_watermark, s.size_bytes, s.ts_running_max, s.key)
                    for s in plan.partitions.values()
                ],
            )
            return plan.results

        return await self._run(lambda: self._write(commit, unknown_outcome=True))

    @staticmethod
    def _load_partitions(
        conn: sqlite3.Connection, tps: set[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The existing partitions among `tps`, in a few queries whatever their number."""
        found: dict[TopicPartition, PartitionState] = {}
        configs: dict[tuple[Any, ...], TopicConfig] = {}
        for sql, params in _keyed_lookups(
            f"SELECT {_PARTITION_COLUMNS} FROM k JOIN topics t ON t.name = k.a"
            " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = k.b",
            sorted(tps),
            ("", -1),
        ):
            for row in conn.execute(sql, params):
                state = _partition_from_row(row, configs)
                found[state.topic_partition] = state
        return found

    @staticmethod
    def _load_producers(
        conn: sqlite3.Connection, keys: set[ProducerKey]
    ) -> dict[ProducerKey, ProducerEntry]:
        """The stored entries of the producers a commit names, in a few queries."""
        found: dict[ProducerKey, ProducerEntry] = {}
        for sql, params in _keyed_lookups(
            f"SELECT p.partition_id, {_ENTRY_COLUMNS} FROM k JOIN producers p"
            " ON p.partition_id = k.a AND p.producer_id = k.b",
            sorted(keys),
            (-1, -1),
        ):
            for row in conn.execute(sql, params):
                found[(row[0], row[1])] = _entry_from_row(row[1:])
        return found

    @staticmethod
    def _load_registrations(
        conn: sqlite3.Connection, keys: set[ProducerKey]
    ) -> dict[ProducerKey, TxnRegistration]:
        found: dict[ProducerKey, TxnRegistration] = {}
        for sql, params in _keyed_lookups(
            "SELECT r.partition_id, r.producer_id, r.producer_epoch, r.ending FROM k JOIN"
            " txn_registrations r ON r.partition_id = k.a AND r.producer_id = k.b",
            sorted(keys),
            (-1, -1),
        ):
            for row in conn.execute(sql, params):
                found[(row[0], row[1])] = TxnRegistration(row[2], bool(row[3]))
        return found

    @staticmethod
    def _load_leases(conn: sqlite3.Connection, lease_ids: set[int]) -> dict[int, TxnLease]:
        found: dict[int, TxnLease] = {}
        ids = sorted(lease_ids)
        for i in range(0, len(ids), KEYS_PER_QUERY_MAX):
            chunk = ids[i : i + KEYS_PER_QUERY_MAX]
            marks = ", ".join(["?"] * len(chunk))
            for row in conn.execute(
                "SELECT lease_id, partition_id, producer_id, producer_epoch, expires_ms"
                f" FROM txn_leases WHERE lease_id IN ({marks})",
                chunk,
            ):
                found[row[0]] = TxnLease(*row)
        return found

    def _live_entry(
        self, conn: sqlite3.Connection, partition_id: int, producer_id: int, now_ms: int
    ) -> ProducerEntry | None:
        row = conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM producers WHERE partition_id = ? AND producer_id = ?",
            (partition_id, producer_id),
        ).fetchone()
        if row is None:
            return None
        entry = _entry_from_row(row)
        return None if is_expired(entry, now_ms, self._expiration_ms) else entry

    @staticmethod
    def _registration(
        conn: sqlite3.Connection, partition_id: int, producer_id: int
    ) -> TxnRegistration | None:
        row = conn.execute(
            "SELECT producer_epoch, ending FROM txn_registrations"
            " WHERE partition_id = ? AND producer_id = ?",
            (partition_id, producer_id),
        ).fetchone()
        return None if row is None else TxnRegistration(row[0], bool(row[1]))

    # --- transactions -------------------------------------------------------------------------
    async def allocate_producer_ids(self, count: int) -> int:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")

        def allocate(conn: sqlite3.Connection) -> int:
            (end,) = conn.execute(
                "INSERT INTO meta VALUES ('next_producer_id', ?1) ON CONFLICT (name)"
                " DO UPDATE SET value = value + ?1 RETURNING value",
                (count,),
            ).fetchone()
            return int(end) - count

        return await self._run(lambda: self._write(allocate))

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:

        def add(conn: sqlite3.Connection) -> list[ErrorCode]:
            now = self._clock.now_ms()
            known = self._load_partitions(conn, set(partitions))
            results = []
            for tp in partitions:
                state = known.get(tp)
                if state is None:
                    results.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                error, new = check_registration(
                    self._live_entry(conn, state.key, producer_id, now),
                    self._registration(conn, state.key, producer_id),
                    producer_epoch,
                )
                if new is not None:
                    conn.execute(
                        "INSERT OR REPLACE INTO txn_registrations VALUES (?, ?, ?, 0)",
                        (state.key, producer_id, new.producer_epoch),
                    )
                    conn.execute(
                        "DELETE FROM txn_leases WHERE partition_id = ? AND producer_id = ?"
                        " AND producer_epoch < ?",
                        (state.key, producer_id, new.producer_epoch),
                    )
                results.append(error)
            return results

        return await self._run(lambda: self._write_volatile(add))

    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        if not 0 < ttl_ms <= LEASE_TTL_MS_MAX:
            raise ValueError(f"ttl_ms must be in (0, {LEASE_TTL_MS_MAX}], got {ttl_ms}")
        requests = list(requests)

        def acquire(conn: sqlite3.Connection) -> list[LeaseResult]:
            now = self._clock.now_ms()
            expires = now + ttl_ms
            row = conn.execute(
                "SELECT epoch FROM brokers WHERE broker_id = ?", (broker_id,)
            ).fetchone()
            check_broker_epoch(broker_id, broker_epoch, None if row is None else row[0])
            known = self._load_partitions(conn, {r[0] for r in requests})
            results = []
            for tp, producer_id, producer_epoch in requests:
                state = known.get(tp)
                if state is None:
                    results.append(LeaseResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                error = check_lease_grant(
                    self._live_entry(conn, state.key, producer_id, now),
                    self._registration(conn, state.key, producer_id),
                    producer_epoch,
                )
                if error is not ErrorCode.NONE:
                    results.append(LeaseResult(error))
                    continue
                lease_id = conn.execute(
                    "INSERT INTO txn_leases (partition_id, producer_id, producer_epoch, expires_ms)"
                    " VALUES (?, ?, ?, ?)",
                    (state.key, producer_id, producer_epoch, expires),
                ).lastrowid
                assert lease_id is not None
                results.append(LeaseResult(ErrorCode.NONE, lease_id, expires))
            return results

        return await self._run(lambda: self._write_volatile(acquire))

    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        ids = [(lease_id,) for lease_id in lease_ids]
        if not ids:
            return

        def release(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM txn_leases WHERE lease_id = ?", ids)

        await self._run(lambda: self._write_volatile(release))

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        return await run_write_txn_markers(
            self,
            self._clock,
            producer_id,
            producer_epoch,
            marker_epoch,
            commit,
            coordinator_epoch,
            partitions,
        )

    async def _txn_begin_end(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        def begin(conn: sqlite3.Connection) -> list[ErrorCode]:
            known = self._load_partitions(conn, set(partitions))
            conn.executemany(
                "UPDATE txn_registrations SET ending = 1"
                " WHERE partition_id = ? AND producer_id = ? AND producer_epoch = ?",
                [(state.key, producer_id, producer_epoch) for state in known.values()],
            )
            return [
                ErrorCode.NONE if tp in known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for tp in partitions
            ]

        return await self._run(lambda: self._write_volatile(begin))

    async def _txn_lease_deadline(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> int | None:

        def deadline(conn: sqlite3.Connection) -> int | None:
            now = self._clock.now_ms()
            known = self._load_partitions(conn, set(partitions))
            earliest: int | None = None
            for sql, params in _keyed_lookups(
                "SELECT min(l.expires_ms) FROM k JOIN txn_leases l"
                " ON l.partition_id = k.a AND l.producer_id = k.b"
                " WHERE l.producer_epoch = ? AND l.expires_ms > ?",
                sorted((state.key, producer_id) for state in known.values()),
                (-1, -1),
            ):
                (found,) = conn.execute(sql, [*params, producer_epoch, now]).fetchone()
                if found is not None and (earliest is None or found < earliest):
                    earliest = int(found)
            return earliest

        return await self._run_read(deadline)

    def _txn_release_signal(self) -> asyncio.Future[None] | None:
        return None  # commits may come from other processes: poll

    async def _txn_write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:

        def write(conn: sqlite3.Connection) -> list[ErrorCode]:
            now = self._clock.now_ms()
            known = self._load_partitions(conn, set(partitions))
            outcome: dict[TopicPartition, ErrorCode] = {}
            for tp in dict.fromkeys(partitions):
                state = known.get(tp)
                if state is None:
                    outcome[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                key = state.key
                row = conn.execute(
                    "SELECT first_offset FROM ongoing_txns WHERE partition_id = ?"
                    " AND producer_id <> ? ORDER BY first_offset LIMIT 1",
                    (key, producer_id),
                ).fetchone()
                registration = self._registration(conn, key, producer_id)
                plan = plan_marker(
                    state,
                    self._live_entry(conn, key, producer_id, now),
                    registration,
                    producer_id,
                    producer_epoch,
                    marker_epoch,
                    commit,
                    coordinator_epoch,
                    now,
                    None if row is None else row[0],
                )
                outcome[tp] = plan.error
                if plan.marker is None:
                    continue
                assert plan.state is not None and plan.entry is not None
                m = plan.marker
                conn.execute(
                    _INSERT_BATCH,
                    (
                        m.partition_key,
                        m.base_offset,
                        m.last_offset,
                        _MARKER_FILE_ID,
                        m.byte_offset,
                        m.size,
                        m.max_timestamp,
                        m.log_append_time,
                        m.timestamp,
                        m.ts_running_max,
                        m.producer_id,
                        m.producer_epoch,
                        m.control,
                        m.coordinator_epoch,
                    ),
                )
                conn.execute(
                    "UPDATE partitions SET high_watermark = ?, size_bytes = ?, ts_running_max = ?"
                    " WHERE partition_id = ?",
                    (
                        plan.state.high_watermark,
                        plan.state.size_bytes,
                        plan.state.ts_running_max,
                        key,
                    ),
                )
                e = plan.entry
                conn.execute(
                    _UPSERT_PRODUCER,
                    (
                        key,
                        e.producer_id,
                        e.producer_epoch,
                        e.last_timestamp,
                        e.last_update_ms,
                        e.coordinator_epoch,
                        e.current_txn_first_offset,
                        _RETAINED_ENCODER.encode(e.batches),
                    ),
                )
                if plan.closed_txn_first_offset is not None:
                    conn.execute(
                        "DELETE FROM ongoing_txns WHERE partition_id = ? AND first_offset = ?",
                        (key, plan.closed_txn_first_offset),
                    )
                if plan.aborted is not None:
                    a = plan.aborted
                    conn.execute(
                        "INSERT INTO aborted_txns VALUES (?, ?, ?, ?, ?)",
                        (key, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset),
                    )
                conn.execute(
                    "DELETE FROM txn_registrations WHERE partition_id = ? AND producer_id = ?"
                    " AND producer_epoch <= ?",
                    (key, producer_id, producer_epoch),
                )
                conn.execute(
                    "DELETE FROM txn_leases WHERE partition_id = ? AND producer_id = ?"
                    " AND producer_epoch <= ?",
                    (key, producer_id, producer_epoch),
                )
            return [outcome[tp] for tp in partitions]

        return await self._run(lambda: self._write(write))

    # --- the read path ------------------------------------------------------------------------
    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        return await self._run_read(
            lambda conn: _reads.find_batches(_Reads(conn), requests, fetch_max_bytes)
        )

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._run_read(lambda conn: _reads.list_offsets(_Reads(conn), requests))

    # --- deletion -----------------------------------------------------------------------------
    @staticmethod
    def _release_files(
        conn: sqlite3.Connection, released: Sequence[tuple[int, int]], now_ms: int
    ) -> None:
        """Drop `count` batch references from each file; a file left with none is unreferenced."""
        conn.executemany(
            "UPDATE files SET live_batches = live_batches - ?1,"
            " state = CASE WHEN live_batches = ?1 THEN 1 ELSE state END,"
            " since_ms = CASE WHEN live_batches = ?1 THEN ?2 ELSE since_ms END"
            " WHERE file_id = ?3",
            [(count, now_ms, file_id) for file_id, count in released],
        )

    def _trim(
        self, conn: sqlite3.Connection, state: PartitionState, new_start: int, now: int
    ) -> int:
        """Delete the batches entirely below `new_start` and move the log start; returns bytes."""
        assert state.log_start_offset <= new_start <= state.high_watermark
        rows = conn.execute(
            "SELECT file_id, size FROM batches WHERE partition_id = ? AND base_offset < ?"
            " AND last_offset < ?",
            (state.key, new_start, new_start),
        ).fetchall()
        freed: int = sum(r[1] for r in rows)
        if rows:
            conn.execute(
                "DELETE FROM batches"
                " WHERE partition_id = ? AND base_offset < ? AND last_offset < ?",
                (state.key, new_start, new_start),
            )
            self._release_files(conn, list(Counter(r[0] for r in rows).items()), now)
        conn.execute(
            "UPDATE partitions SET log_start_offset = ?, size_bytes = size_bytes - ?"
            " WHERE partition_id = ?",
            (new_start, freed, state.key),
        )
        conn.execute(
            "DELETE FROM aborted_txns WHERE partition_id = ? AND last_offset < ?",
            (state.key, new_start),
        )
        return freed

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:

        def delete(conn: sqlite3.Connection) -> list[DeleteRecordsResponse]:
            now = self._clock.now_ms()
            reads = _Reads(conn)
            responses = []
            for request in requests:
                state = reads.partition(request.topic_partition)
                decision = _reads.decide_delete_records(state, request.offset)
                if state is not None and decision.new_log_start_offset is not None:
                    self._trim(conn, state, decision.new_log_start_offset, now)
                responses.append(decision.response)
            return responses

        return await self._run(lambda: self._write(delete))

    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:

        def enforce(conn: sqlite3.Connection) -> RetentionResult:
            now = self._clock.now_ms()
            reads = _Reads(conn)
            states = [
                _partition_from_row(row)
                for row in conn.execute(
                    f"SELECT {_PARTITION_COLUMNS} FROM topics t JOIN partitions p"
                    " ON p.topic_id = t.topic_id"
                    " WHERE (t.retention_ms >= 0 OR t.retention_bytes >= 0)"
                    " AND p.high_watermark > p.log_start_offset"
                    " ORDER BY t.name, p.partition"
                ).fetchall()
            ]
            budget = max_batches
            deleted_batches = deleted_bytes = 0
            more = False
            for state in states:
                victims, partition_more = _reads.retention_victims(
                    state, reads.batches_from(state, state.log_start_offset), now, budget
                )
                more = more or partition_more
                if victims:
                    new_start = max(state.log_start_offset, victims[-1].last_offset + 1)
                    freed = self._trim(conn, state, new_start, now)
                    assert freed == sum(v.size for v in victims)
                    deleted_batches += len(victims)
                    deleted_bytes += freed
                    budget -= len(victims)
            conn.execute(
                "DELETE FROM producers WHERE txn_first_offset IS NULL AND last_update_ms <= ?",
                (now - self._expiration_ms,),
            )
            return RetentionResult(deleted_batches, deleted_bytes, more)

        return await self._run(lambda: self._write(enforce))

    # --- object lifecycle ---------------------------------------------------------------------
    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:

        def condemn(conn: sqlite3.Connection) -> list[str]:
            now = self._clock.now_ms()
            conn.executemany(
                "INSERT OR IGNORE INTO files (key, state, size, since_ms, live_batches)"
                " VALUES (?, 2, 0, ?, 0)",
                [(k, now) for k in keys],
            )
            return [
                k
                for k in keys
                if conn.execute("SELECT 1 FROM files WHERE key = ? AND state = 2", (k,)).fetchone()
            ]

        return await self._run(lambda: self._write(condemn))

    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        def select(conn: sqlite3.Connection) -> list[FileInfo]:
            rows = conn.execute(
                "SELECT key, state, size, since_ms FROM files WHERE state <> 0 AND since_ms < ?"
                " ORDER BY since_ms, key LIMIT ?",
                (older_than_ms, max(0, limit)),
            ).fetchall()
            return [FileInfo(r[0], _FILE_STATES[r[1]], r[2], r[3]) for r in rows]

        return await self._run_read(select)

    async def forget_files(self, keys: Sequence[str]) -> None:
        def forget(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM files WHERE key = ? AND state <> 0", [(k,) for k in keys])

        await self._run(lambda: self._write(forget))

    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        def info(conn: sqlite3.Connection) -> list[FileInfo | None]:
            out: list[FileInfo | None] = []
            for k in keys:
                r = conn.execute(
                    "SELECT key, state, size, since_ms FROM files WHERE key = ?", (k,)
                ).fetchone()
                out.append(None if r is None else FileInfo(r[0], _FILE_STATES[r[1]], r[2], r[3]))
            return out

        return await self._run_read(info)

    async def file_stats(self) -> FileStats:
        def stats(conn: sqlite3.Connection) -> FileStats:
            counts = {code: (0, 0) for code in _FILE_STATES}
            for state, count, size in conn.execute(
                "SELECT state, count(*), coalesce(sum(size), 0) FROM files GROUP BY state"
            ):
                counts[state] = (count, size)
            return FileStats(
                live_objects=counts[_LIVE][0],
                live_bytes=counts[_LIVE][1],
                unreferenced_objects=counts[_UNREFERENCED][0],
                unreferenced_bytes=counts[_UNREFERENCED][1],
                condemned_objects=counts[_CONDEMNED][0],
                condemned_bytes=counts[_CONDEMNED][1],
            )

        return await self._run_read(stats)

    # --- inspection ---------------------------------------------------------------------------
    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:

        def describe(conn: sqlite3.Connection) -> list[ProducerSnapshot]:
            now = self._clock.now_ms()
            state = _Reads(conn).partition(topic_partition)
            if state is None:
                return []
            entries = [
                _entry_from_row(r)
                for r in conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM producers WHERE partition_id = ?"
                    " ORDER BY producer_id",
                    (state.key,),
                )
            ]
            return [
                producer_snapshot(e) for e in entries if not is_expired(e, now, self._expiration_ms)
            ]

        return await self._run_read(describe)

    @property
    def commit_bounds(self) -> CommitBounds:
        return CommitBounds(self._object_prefix, self._commit_age_max_ms)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

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
