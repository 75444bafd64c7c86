"""The SQLite store's read view: index lookups over one connection, inside one transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Final

import msgspec

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, TopicPartition
from diskless.coordinator._backends import sql_acls, sqlite_extents
from diskless.coordinator._backends.sql_rows import (
    BATCH_COLUMNS,
    BATCH_FROM,
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
    PARTITION_COLUMNS,
    PARTITION_FROM,
    PARTITION_WIDTH,
    READ_CHUNK_ROWS_MAX,
    REGISTRATION_COLUMNS,
    REGISTRATION_ROW,
    SCRAM_COLUMNS,
    TOPIC_COLUMNS,
    batch_from_row,
    entry_from_row,
    file_from_row,
    first_batch_reaching,
    heads_from_rows,
    in_lists,
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

_MARKS: Final = ("?1", "?2")
_encode = msgspec.json.Encoder().encode


def _json(value: object) -> str:
    """JSON text (bytes would bind as a BLOB, which newer SQLite reads as its binary JSONB)."""
    return _encode(value).decode()


_WANTED: Final = (
    "WITH w(i, name, part, off) AS MATERIALIZED (SELECT key, json_extract(value, '$[0]'),"
    " json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?1))"
)
"""The partitions wanted (a JSON array of [topic, partition, offset]): one parameter however
many, so that one statement text serves every fetch."""
_PARTITIONS: Final = (
    f"{_WANTED} SELECT w.i, {PARTITION_COLUMNS} FROM w JOIN topics t ON t.name = w.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part"
)
_PADDING: Final = ", ".join(["NULL"] * (BATCH_WIDTH - PARTITION_WIDTH))
_FETCH_HEADS: Final = (
    f"{_WANTED}, h AS MATERIALIZED (SELECT w.i AS i, p.partition_id AS pid, w.off AS off,"
    " coalesce((SELECT max(base_offset) FROM batches WHERE partition_id = p.partition_id"
    " AND base_offset <= w.off), w.off) - 1 AS lo FROM w JOIN topics t ON t.name = w.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part),"
    # A partition's first rows end at its page's last one: SQLite has no LATERAL join to
    # bound each partition's rows with a LIMIT of its own, so a range of the key does.
    " r AS MATERIALIZED (SELECT i, pid, lo, coalesce((SELECT base_offset FROM batches"
    " WHERE partition_id = h.pid AND base_offset > h.lo ORDER BY base_offset LIMIT 1 OFFSET ?2),"
    " 9223372036854775807) AS hi FROM h)"
    f" SELECT w.i, {HEAD_KIND_PARTITION}, EXISTS (SELECT 1 FROM aborted_txns a"
    " WHERE a.partition_id = p.partition_id AND a.last_offset >= w.off),"
    f" {PARTITION_COLUMNS}, {_PADDING} FROM w JOIN topics t ON t.name = w.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part"
    f" UNION ALL SELECT h.i, {HEAD_KIND_EXTENT}, NULL, {sqlite_extents.COLUMNS}"
    " FROM h JOIN extents e ON e.partition_id = h.pid AND e.last_offset >= h.off"
    " JOIN files f ON f.file_id = e.file_id"
    f" UNION ALL SELECT r.i, {HEAD_KIND_BATCH}, NULL, {BATCH_COLUMNS}"
    " FROM r JOIN batches b ON b.partition_id = r.pid AND b.base_offset > r.lo"
    " AND b.base_offset <= r.hi LEFT JOIN files f ON f.file_id = b.file_id"
)
"""Partition rows carry `PARTITION_COLUMNS` where the others carry `BATCH_COLUMNS`, padded to
their width: SQLite columns have no type to agree on."""
_ABORTED_WITHIN: Final = (
    "WITH w(i, pid, off, upper) AS MATERIALIZED (SELECT key, json_extract(value, '$[0]'),"
    " json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?1))"
    " SELECT w.i, a.producer_id, a.first_offset, a.last_offset, a.lso FROM w"
    " JOIN aborted_txns a ON a.partition_id = w.pid AND a.last_offset >= w.off"
    " WHERE a.first_offset < w.upper ORDER BY w.i, a.last_offset"
)


class SqliteReads(ReadView):
    """Whole chunks are fetched per query, so that no statement stays open across calls."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        row = self._conn.execute(
            f"SELECT {PARTITION_COLUMNS} FROM {PARTITION_FROM}"
            " WHERE t.name = ? AND p.partition = ?",
            (tp.topic, tp.partition),
        ).fetchone()
        return None if row is None else partition_from_row(row)

    def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        found: list[PartitionState | None] = [None] * len(tps)
        if tps:
            wanted = _json([(tp.topic, tp.partition, 0) for tp in tps])
            for row in self._conn.execute(_PARTITIONS, (wanted,)):
                found[row[0]] = partition_from_row(row[1:])
        return found

    def fetch_heads(self, wanted: Sequence[tuple[TopicPartition, int]]) -> list[FetchHead | None]:
        if not wanted:
            return []
        keys = _json([(tp.topic, tp.partition, offset) for tp, offset in wanted])
        rows = self._conn.execute(_FETCH_HEADS, (keys, FETCH_HEAD_ROWS - 1))
        return heads_from_rows(rows, len(wanted), HEAD_PARTITION_AT)

    def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        found: list[list[AbortedTxn]] = [[] for _ in ranges]
        if ranges:
            keys = _json([(state.key, offset, end) for state, offset, end in ranges])
            for i, *aborted in self._conn.execute(_ABORTED_WITHIN, (keys,)):
                found[i].append(AbortedTxn(*aborted))
        return found

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        yield from sqlite_extents.extents_from(self._conn, state.key, offset)
        yield from self._rows_from(state.key, offset)

    def _rows_from(self, partition_id: int, offset: int) -> Iterator[StoredBatch]:
        after = self._before_holder(partition_id, offset)
        chunk = 16
        while True:
            rows = self.batches_after(partition_id, after, chunk)
            yield from rows
            if len(rows) < chunk:
                return
            after = rows[-1].base_offset
            chunk = min(chunk * 4, READ_CHUNK_ROWS_MAX)

    def _before_holder(self, partition_id: int, offset: int) -> int:
        """An offset just below the batch holding `offset` (or below `offset` if none does)."""
        row = self._conn.execute(
            "SELECT base_offset FROM batches WHERE partition_id = ? AND base_offset <= ?"
            " ORDER BY base_offset DESC LIMIT 1",
            (partition_id, offset),
        ).fetchone()
        return (row[0] if row is not None else offset) - 1

    def batches_after(self, partition_id: int, after: int, limit: int) -> list[StoredBatch]:
        """Up to `limit` batches whose base offset is above `after`, in offset order."""
        return [
            batch_from_row(r)
            for r in self._conn.execute(
                f"SELECT {BATCH_COLUMNS} FROM {BATCH_FROM} WHERE b.partition_id = ?"
                " AND b.base_offset > ? ORDER BY b.base_offset LIMIT ?",
                (partition_id, after, limit),
            )
        ]

    def batches_holding(self, partition_id: int, offset: int, limit: int) -> list[StoredBatch]:
        """Up to `limit` batches (extents first) from the one holding `offset` (or the next)."""
        found = sqlite_extents.extents_from(self._conn, partition_id, offset)[:limit]
        after = self._before_holder(partition_id, offset)
        return found + self.batches_after(partition_id, after, limit - len(found))

    def _fetchone(self, sql: str, *args: Any) -> Any:
        return self._conn.execute(sql, args).fetchone()

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        extent = sqlite_extents.max_timestamp_extent(self._conn, state.key)
        top = max_timestamp_row(
            self._fetchone, _MARKS, state.key, None if extent is None else extent.timestamp
        )
        return extent if top is None else top

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        extent = sqlite_extents.first_extent_running_max_at_least(self._conn, state.key, ts)
        if extent is not None:
            return extent
        return first_batch_reaching(self._fetchone, _MARKS, state.key, ts)

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

    def topics(self, names: Sequence[str] | None) -> list[TopicRow]:
        if names is None:
            return [
                topic_from_row(r)
                for r in self._conn.execute(f"SELECT {TOPIC_COLUMNS} FROM topics t ORDER BY name")
            ]
        found = {}
        for marks, chunk in in_lists(list(dict.fromkeys(names))):
            for r in self._conn.execute(
                f"SELECT {TOPIC_COLUMNS} FROM topics t WHERE name IN ({marks})", chunk
            ):
                found[r[0]] = topic_from_row(r)
        return [found[n] for n in names if n in found]

    def producers_of(self, partition_key: int) -> list[ProducerEntry]:
        return [
            entry_from_row(r)
            for r in self._conn.execute(
                f"SELECT {ENTRY_COLUMNS} FROM producers WHERE partition_id = ?"
                " ORDER BY producer_id",
                (partition_key,),
            )
        ]

    def unconsolidated_heads(self) -> list[tuple[PartitionState, StoredBatch]]:
        return [
            (partition_from_row(row), batch_from_row(row[PARTITION_WIDTH:]))
            for row in self._conn.execute(
                f"SELECT {PARTITION_COLUMNS}, {BATCH_COLUMNS} FROM {HEADS_FROM}"
            )
        ]

    def unconsolidated_rows(self, state: PartitionState) -> Iterator[StoredBatch]:
        return self._rows_from(state.key, -1)

    def metadata_stats(self) -> MetadataStats:
        return sqlite_extents.metadata_stats(self._conn)

    def files(self, keys: Sequence[str]) -> dict[str, FileRow]:
        found = {}
        for marks, chunk in in_lists(list(dict.fromkeys(keys))):
            for r in self._conn.execute(
                f"SELECT {FILE_COLUMNS} FROM files WHERE key IN ({marks})", chunk
            ):
                key, row = file_from_row(r)
                found[key] = row
        return found

    def dead_files(self, older_than_ms: int, limit: int) -> list[tuple[str, FileRow]]:
        return [
            file_from_row(r)
            for r in self._conn.execute(
                f"SELECT {FILE_COLUMNS} FROM files WHERE state <> 0 AND since_ms < ?"
                " ORDER BY since_ms, key LIMIT ?",
                (older_than_ms, limit),
            )
        ]

    def file_totals(self) -> dict[FileState, tuple[int, int]]:
        return {
            FILE_STATES[state]: (count, size)
            for state, count, size in self._conn.execute(
                "SELECT state, count(*), coalesce(sum(size), 0) FROM files GROUP BY state"
            )
        }

    def txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]:
        found = {}
        for marks, chunk in in_lists(list(dict.fromkeys(transactional_ids))):
            for tid, blob in self._conn.execute(
                f"SELECT transactional_id, record FROM txn_records"
                f" WHERE transactional_id IN ({marks})",
                chunk,
            ):
                found[tid] = txn_from_blob(blob)
        return found

    def txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], TxnRegistration]:
        found = {}
        for tp, pid in dict.fromkeys(keys):
            row = self._conn.execute(
                f"SELECT {REGISTRATION_COLUMNS} FROM {PARTITION_FROM} JOIN txn_registrations r"
                " ON r.partition_id = p.partition_id"
                " WHERE t.name = ? AND p.partition = ? AND r.producer_id = ?",
                (tp.topic, tp.partition, pid),
            ).fetchone()
            if row is not None:
                found[(tp, pid)] = registration_from_row(row)
        return found

    def broker_registrations(self) -> list[BrokerRegistration]:
        return [
            BrokerRegistration(*row)
            for row in self._conn.execute(
                f"SELECT {REGISTRATION_ROW} FROM broker_registrations ORDER BY broker_id"
            )
        ]

    def group_ownership(self, group_id: str) -> GroupOwnership | None:
        row = self._conn.execute(
            f"SELECT {OWNER_COLUMNS} FROM group_owners WHERE group_id = ?", (group_id,)
        ).fetchone()
        return None if row is None else GroupOwnership(*row)

    def scram_credentials(
        self, users: Sequence[str] | None
    ) -> dict[tuple[str, ScramMechanism], ScramCredential]:
        if users is None:
            rows = self._conn.execute(f"SELECT {SCRAM_COLUMNS} FROM scram_credentials")
            return dict(scram_from_row(row) for row in rows)
        found = {}
        for marks, chunk in in_lists(sorted(set(users))):
            for row in self._conn.execute(
                f"SELECT {SCRAM_COLUMNS} FROM scram_credentials WHERE user_name IN ({marks})",
                chunk,
            ):
                key, credential = scram_from_row(row)
                found[key] = credential
        return found

    def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return {
            TopicPartition(topic, partition): CommittedOffset(offset, metadata, epoch)
            for topic, partition, offset, metadata, epoch in self._conn.execute(
                "SELECT topic, partition, committed_offset, metadata, leader_epoch"
                " FROM group_offsets WHERE group_id = ?",
                (group_id,),
            )
        }

    def txns_due(self, now_ms: int, limit: int) -> list[TxnRecord]:
        return [
            txn_from_blob(blob)
            for (blob,) in self._conn.execute(
                "SELECT record FROM txn_records WHERE due_ms IS NOT NULL AND due_ms < ?"
                " ORDER BY due_ms, transactional_id LIMIT ?",
                (now_ms, limit),
            )
        ]

    def lease_holders(
        self, partitions: Sequence[TopicPartition], producer_id: int, epoch: int, after_ms: int
    ) -> list[LeaseHolder]:
        earliest: dict[tuple[int, int], int] = {}
        for tp in dict.fromkeys(partitions):
            for broker_id, broker_epoch, expires in self._conn.execute(
                f"SELECT l.broker_id, l.broker_epoch, min(l.expires_ms) FROM {PARTITION_FROM}"
                " JOIN txn_leases l ON l.partition_id = p.partition_id"
                " WHERE t.name = ? AND p.partition = ? AND l.producer_id = ?"
                " AND l.producer_epoch = ? AND l.expires_ms > ? GROUP BY 1, 2",
                (tp.topic, tp.partition, producer_id, epoch, after_ms),
            ):
                holder = (broker_id, broker_epoch)
                earliest[holder] = min(expires, earliest.get(holder, expires))
        return [LeaseHolder(b, e, expires) for (b, e), expires in sorted(earliest.items())]

    def acl_version(self) -> int:
        return sql_acls.sqlite_version(self._conn)

    def acls(self) -> list[AclBinding]:
        return sql_acls.sqlite_acls(self._conn)
