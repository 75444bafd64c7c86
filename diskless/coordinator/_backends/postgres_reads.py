"""The PostgreSQL store's read view: synchronous, for the read rules, over one asyncpg
connection inside one READ ONLY REPEATABLE READ transaction.

The rules (`_rules.reads`) iterate a view synchronously, so a query runs on a worker thread and
each lookup hands its statement to the event loop that owns the connection, waiting for the
answer there (bounded by the command timeout). The loop never blocks; MVCC lets the view read
the last commit while writers hold their row locks, so a fetch never waits behind a commit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Final, TypeVar

import asyncpg

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, TopicPartition
from diskless.coordinator._backends import postgres_extents, sql_acls
from diskless.coordinator._backends.postgres_rows import (
    BATCH_COLUMNS,
    PARTITION_COLUMNS,
    PARTITION_FROM,
    batch_from_row,
    batches_after,
    batches_holding,
)
from diskless.coordinator._backends.sql_rows import (
    BATCH_WIDTH,
    ENTRY_COLUMNS,
    FILE_COLUMNS,
    FILE_STATES,
    HEAD_KIND_BATCH,
    HEAD_KIND_EXTENT,
    HEAD_KIND_PARTITION,
    HEAD_PARTITION_AT,
    HEADS_FROM,
    OWNER_COLUMNS,
    PARTITION_WIDTH,
    READ_CHUNK_ROWS_MAX,
    REGISTRATION_COLUMNS,
    REGISTRATION_ROW,
    SCRAM_COLUMNS,
    TOPIC_COLUMNS,
    entry_from_row,
    file_from_row,
    first_batch_reaching,
    heads_from_rows,
    max_timestamp_row,
    partition_from_row,
    registration_from_row,
    scram_from_row,
    topic_from_row,
    txn_from_blob,
)
from diskless.coordinator._rules.acls import AclBinding
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    LeaseHolder,
    PartitionState,
    StoredBatch,
    TxnRegistration,
)
from diskless.coordinator._store import ReadView, TopicRow
from diskless.coordinator._values import (
    BrokerRegistration,
    FileState,
    MetadataStats,
)
from diskless.txn import ProducerEntry, TxnRecord

T = TypeVar("T")

_MARKS: Final = ("$1", "$2")


def _nulls(count: int) -> str:
    return ", ".join(["NULL"] * count)


_WANTED: Final = (
    "unnest($1::text[], $2::int[], $3::bigint[]) WITH ORDINALITY w(name, part, off, i)"
    " JOIN topics t ON t.name = w.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part"
)
"""The partitions wanted, as arrays of topics, partitions and offsets (`i` counts from 1)."""
_PARTITIONS: Final = f"SELECT w.i - 1, {PARTITION_COLUMNS} FROM {_WANTED}"
_FETCH_HEADS: Final = (
    f"WITH h AS MATERIALIZED (SELECT w.i - 1 AS i, p.partition_id AS pid, w.off AS off"
    f" FROM {_WANTED})"
    f" SELECT w.i - 1, {HEAD_KIND_PARTITION}, EXISTS (SELECT 1 FROM aborted_txns a"
    " WHERE a.partition_id = p.partition_id AND a.last_offset >= w.off),"
    f" {PARTITION_COLUMNS}, {_nulls(BATCH_WIDTH)} FROM {_WANTED}"
    f" UNION ALL SELECT h.i, {HEAD_KIND_EXTENT}, NULL, {_nulls(PARTITION_WIDTH)},"
    f" {postgres_extents.COLUMNS}"
    " FROM h JOIN extents e ON e.partition_id = h.pid AND e.last_offset >= h.off"
    " JOIN files f ON f.file_id = e.file_id"
    f" UNION ALL SELECT h.i, {HEAD_KIND_BATCH}, NULL, {_nulls(PARTITION_WIDTH)},"
    f" {BATCH_COLUMNS} FROM h CROSS JOIN LATERAL (SELECT * FROM batches b"
    " WHERE b.partition_id = h.pid AND b.base_offset > coalesce((SELECT max(base_offset)"
    " FROM batches WHERE partition_id = h.pid AND base_offset <= h.off), h.off) - 1"
    " ORDER BY b.base_offset LIMIT $4) b LEFT JOIN files f ON f.file_id = b.file_id"
)
"""Partition rows, then extents' and batches' rows, side by side: the columns of a UNION
agree on their types. Each partition's batch rows are a walk of the primary key from the one
holding the offset, cut at the page before anything joins them."""
_HEAD_ROW_AT: Final = HEAD_PARTITION_AT + PARTITION_WIDTH
_ABORTED_WITHIN: Final = (
    "SELECT w.i - 1, a.producer_id, a.first_offset, a.last_offset, a.lso"
    " FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) WITH ORDINALITY w(pid, off, upper, i)"
    " JOIN aborted_txns a ON a.partition_id = w.pid AND a.last_offset >= w.off"
    " WHERE a.first_offset < w.upper ORDER BY w.i, a.last_offset"
)


class ReadAbandoned(Exception):
    """Raised on the worker thread at the next statement of a read whose caller was cancelled."""


class PostgresReads(ReadView):
    """Whole chunks are fetched per statement, so that no cursor stays open across calls."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        loop: asyncio.AbstractEventLoop,
        timeout_s: float,
        abandoned: threading.Event,
    ) -> None:
        """Once `abandoned` is set (the caller was cancelled), the query stops before its next
        statement. The statement under way, if any, still finishes: the connection is never
        used by two."""
        self._conn = conn
        self._loop = loop
        self._timeout_s = timeout_s
        self._abandoned = abandoned

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._abandoned.is_set():
            coro.close()
            raise ReadAbandoned("the read was cancelled")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self._timeout_s)

    def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return self._run(self._conn.fetch(sql, *args))

    def _fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return self._run(self._conn.fetchrow(sql, *args))

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        row = self._fetchrow(
            f"SELECT {PARTITION_COLUMNS} FROM {PARTITION_FROM}"
            " WHERE t.name = $1 AND p.partition = $2",
            tp.topic,
            tp.partition,
        )
        return None if row is None else partition_from_row(row)

    def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        found: list[PartitionState | None] = [None] * len(tps)
        if tps:
            rows = self._fetch(
                _PARTITIONS, [tp.topic for tp in tps], [tp.partition for tp in tps], [0] * len(tps)
            )
            for row in rows:
                found[row[0]] = partition_from_row(row[1:])
        return found

    def fetch_heads(self, wanted: Sequence[tuple[TopicPartition, int]]) -> list[FetchHead | None]:
        if not wanted:
            return []
        rows = self._fetch(
            _FETCH_HEADS,
            [tp.topic for tp, _ in wanted],
            [tp.partition for tp, _ in wanted],
            [offset for _, offset in wanted],
            FETCH_HEAD_ROWS,
        )
        return heads_from_rows(rows, len(wanted), _HEAD_ROW_AT)

    def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        found: list[list[AbortedTxn]] = [[] for _ in ranges]
        if ranges:
            rows = self._fetch(
                _ABORTED_WITHIN,
                [state.key for state, _, _ in ranges],
                [offset for _, offset, _ in ranges],
                [end for _, _, end in ranges],
            )
            for i, *aborted in rows:
                found[i].append(AbortedTxn(*aborted))
        return found

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        yield from self._run(postgres_extents.extents_from(self._conn, state.key, offset))
        yield from self._rows_from(state.key, offset)

    def _rows_from(self, partition_id: int, offset: int) -> Iterator[StoredBatch]:
        chunk = 16
        rows = self._run(batches_holding(self._conn, partition_id, offset, chunk))
        while True:
            yield from rows
            if len(rows) < chunk:
                return
            after = rows[-1].base_offset
            chunk = min(chunk * 4, READ_CHUNK_ROWS_MAX)
            rows = self._run(batches_after(self._conn, partition_id, after, chunk))

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        extent = self._run(postgres_extents.max_timestamp_extent(self._conn, state.key))
        top = max_timestamp_row(
            self._fetchrow, _MARKS, state.key, None if extent is None else extent.timestamp
        )
        return extent if top is None else top

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        extent = self._run(
            postgres_extents.first_extent_running_max_at_least(self._conn, state.key, ts)
        )
        if extent is not None:
            return extent
        return first_batch_reaching(self._fetchrow, _MARKS, state.key, ts)

    def aborted_from(self, state: PartitionState, offset: int) -> Iterator[AbortedTxn]:
        after = offset - 1
        while True:
            rows = self._fetch(
                "SELECT producer_id, first_offset, last_offset, lso FROM aborted_txns"
                " WHERE partition_id = $1 AND last_offset > $2 ORDER BY last_offset LIMIT $3",
                state.key,
                after,
                READ_CHUNK_ROWS_MAX,
            )
            for r in rows:
                yield AbortedTxn(*r)
            if len(rows) < READ_CHUNK_ROWS_MAX:
                return
            after = rows[-1][2]

    def topics(self, names: Sequence[str] | None) -> list[TopicRow]:
        if names is None:
            return [
                topic_from_row(r)
                for r in self._fetch(f"SELECT {TOPIC_COLUMNS} FROM topics t ORDER BY name")
            ]
        found = {
            r[0]: topic_from_row(r)
            for r in self._fetch(
                f"SELECT {TOPIC_COLUMNS} FROM topics t WHERE name = ANY($1::text[])",
                list(dict.fromkeys(names)),
            )
        }
        return [found[n] for n in names if n in found]

    def producers_of(self, partition_key: int) -> list[ProducerEntry]:
        return [
            entry_from_row(r)
            for r in self._fetch(
                f"SELECT {ENTRY_COLUMNS} FROM producers WHERE partition_id = $1"
                " ORDER BY producer_id",
                partition_key,
            )
        ]

    def unconsolidated_heads(self) -> list[tuple[PartitionState, StoredBatch]]:
        return [
            (partition_from_row(row), batch_from_row(row[PARTITION_WIDTH:]))
            for row in self._fetch(f"SELECT {PARTITION_COLUMNS}, {BATCH_COLUMNS} FROM {HEADS_FROM}")
        ]

    def unconsolidated_rows(self, state: PartitionState) -> Iterator[StoredBatch]:
        return self._rows_from(state.key, -1)

    def metadata_stats(self) -> MetadataStats:
        return self._run(postgres_extents.metadata_stats(self._conn))

    def files(self, keys: Sequence[str]) -> dict[str, FileRow]:
        return dict(
            file_from_row(r)
            for r in self._fetch(
                f"SELECT {FILE_COLUMNS} FROM files WHERE key = ANY($1::text[])",
                list(dict.fromkeys(keys)),
            )
        )

    def dead_files(self, older_than_ms: int, limit: int) -> list[tuple[str, FileRow]]:
        return [
            file_from_row(r)
            for r in self._fetch(
                f"SELECT {FILE_COLUMNS} FROM files WHERE state <> 0 AND since_ms < $1"
                " ORDER BY since_ms, key LIMIT $2",
                older_than_ms,
                limit,
            )
        ]

    def file_totals(self) -> dict[FileState, tuple[int, int]]:
        return {
            FILE_STATES[state]: (count, int(size))
            for state, count, size in self._fetch(
                "SELECT state, count(*), coalesce(sum(size), 0) FROM files GROUP BY state"
            )
        }

    def txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]:
        return {
            tid: txn_from_blob(blob)
            for tid, blob in self._fetch(
                "SELECT transactional_id, record FROM txn_records"
                " WHERE transactional_id = ANY($1::text[])",
                list(dict.fromkeys(transactional_ids)),
            )
        }

    def txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], TxnRegistration]:
        wanted = list(dict.fromkeys(keys))
        return {
            (TopicPartition(row[0], row[1]), row[2]): registration_from_row(list(row)[3:])
            for row in self._fetch(
                f"SELECT k.name, k.part, k.pid, {REGISTRATION_COLUMNS}"
                " FROM unnest($1::text[], $2::int[], $3::bigint[]) k(name, part, pid)"
                " JOIN topics t ON t.name = k.name"
                " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = k.part"
                " JOIN txn_registrations r"
                " ON r.partition_id = p.partition_id AND r.producer_id = k.pid",
                [tp.topic for tp, _ in wanted],
                [tp.partition for tp, _ in wanted],
                [pid for _, pid in wanted],
            )
        }

    def broker_registrations(self) -> list[BrokerRegistration]:
        return [
            BrokerRegistration(*row)
            for row in self._fetch(
                f"SELECT {REGISTRATION_ROW} FROM broker_registrations ORDER BY broker_id"
            )
        ]

    def group_ownership(self, group_id: str) -> GroupOwnership | None:
        row = self._fetchrow(
            f"SELECT {OWNER_COLUMNS} FROM group_owners WHERE group_id = $1", group_id
        )
        return None if row is None else GroupOwnership(*row)

    def scram_credentials(
        self, users: Sequence[str] | None
    ) -> dict[tuple[str, ScramMechanism], ScramCredential]:
        if users is None:
            rows = self._fetch(f"SELECT {SCRAM_COLUMNS} FROM scram_credentials")
        else:
            rows = self._fetch(
                f"SELECT {SCRAM_COLUMNS} FROM scram_credentials WHERE user_name = ANY($1::text[])",
                sorted(set(users)),
            )
        return dict(scram_from_row(row) for row in rows)

    def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return {
            TopicPartition(topic, partition): CommittedOffset(offset, metadata, epoch)
            for topic, partition, offset, metadata, epoch in self._fetch(
                "SELECT topic, partition, committed_offset, metadata, leader_epoch"
                " FROM group_offsets WHERE group_id = $1",
                group_id,
            )
        }

    def txns_due(self, now_ms: int, limit: int) -> list[TxnRecord]:
        return [
            txn_from_blob(blob)
            for (blob,) in self._fetch(
                "SELECT record FROM txn_records WHERE due_ms IS NOT NULL AND due_ms < $1"
                " ORDER BY due_ms, transactional_id LIMIT $2",
                now_ms,
                limit,
            )
        ]

    def lease_holders(
        self, partitions: Sequence[TopicPartition], producer_id: int, epoch: int, after_ms: int
    ) -> list[LeaseHolder]:
        wanted = list(dict.fromkeys(partitions))
        return [
            LeaseHolder(*row)
            for row in self._fetch(
                "SELECT l.broker_id, l.broker_epoch, min(l.expires_ms)"
                " FROM unnest($1::text[], $2::int[]) k(name, part)"
                " JOIN topics t ON t.name = k.name"
                " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = k.part"
                " JOIN txn_leases l ON l.partition_id = p.partition_id"
                " WHERE l.producer_id = $3 AND l.producer_epoch = $4 AND l.expires_ms > $5"
                " GROUP BY 1, 2 ORDER BY 1, 2",
                [tp.topic for tp in wanted],
                [tp.partition for tp in wanted],
                producer_id,
                epoch,
                after_ms,
            )
        ]

    def acl_version(self) -> int:
        return self._run(sql_acls.postgres_version(self._conn))

    def acls(self) -> list[AclBinding]:
        return self._run(sql_acls.postgres_acls(self._conn))
