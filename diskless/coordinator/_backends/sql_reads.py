"""The read view of both SQL stores, written once; a dialect says what differs.

Both stores keep the same tables and select the same columns (`sql_rows`), so every query is
written here once, with PostgreSQL's numbered placeholders (`$1`). A dialect (`sqlite_reads`,
`postgres_reads`) supplies the small rest:
- how a statement runs (`_rows`, `_row`): SQLite at once on its reader thread's connection
  (it reads `$1` as `?1`), PostgreSQL awaited on the event loop;
- how a list of keys binds as one parameter (`_listed`, `_list`), and a list of rows as a table
  (`_table`, `_table_args`): a JSON array SQLite reads with `json_each`, arrays PostgreSQL reads
  with `unnest`; so one statement text serves any number of keys;
- the fetch's batched statements, which page each partition's rows as each database can best
  (PostgreSQL with a LATERAL join and a LIMIT each, SQLite, which has no LATERAL, with a range
  of the key), and the metadata's size on disk.

Whole chunks are fetched per statement, so that no cursor stays open across calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar, Final

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, GroupRecord, TopicPartition
from diskless.coordinator._backends import sql_extents
from diskless.coordinator._backends.sql_acls import SELECT_ACLS, binding_from_row
from diskless.coordinator._backends.sql_rows import (
    BATCH_COLUMNS,
    ENTRY_COLUMNS,
    FILE_COLUMNS,
    FILE_STATES,
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
    configs_from_text,
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
from diskless.coordinator._rules.acls import ACL_VERSION_COUNTER, AclBinding
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.ownership import MEMBERSHIP_VERSION_COUNTER
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    LeaseHolder,
    PartitionState,
    StoredBatch,
    TxnRegistration,
)
from diskless.coordinator._store import ReadView, TopicRow
from diskless.coordinator._values import BrokerRegistration, FileState, MetadataStats
from diskless.txn import ProducerEntry, TxnRecord

MARKS: Final = ("$1", "$2")
"""The first two placeholders, for the statements `sql_rows` builds."""

_PARTITION: Final = (
    f"SELECT {PARTITION_COLUMNS} FROM {PARTITION_FROM} WHERE t.name = $1 AND p.partition = $2"
)
_ABORTED_FROM: Final = (
    "SELECT producer_id, first_offset, last_offset, lso FROM aborted_txns"
    " WHERE partition_id = $1 AND last_offset > $2 ORDER BY last_offset LIMIT $3"
)
_PRODUCERS_OF: Final = (
    f"SELECT {ENTRY_COLUMNS} FROM producers WHERE partition_id = $1 ORDER BY producer_id"
)
_DEAD_FILES: Final = (
    f"SELECT {FILE_COLUMNS} FROM files WHERE state <> 0 AND since_ms < $1"
    " ORDER BY since_ms, key LIMIT $2"
)
_FILE_TOTALS: Final = "SELECT state, count(*), coalesce(sum(size), 0) FROM files GROUP BY state"
_GROUP_OFFSETS: Final = (
    "SELECT topic, partition, committed_offset, metadata, leader_epoch"
    " FROM group_offsets WHERE group_id = $1"
)
_GROUP_RECORDS: Final = (
    "SELECT g.group_id, o.broker_id, o.broker_epoch, o.generation,"
    " EXISTS (SELECT 1 FROM group_offsets f WHERE f.group_id = g.group_id)"
    " FROM (SELECT group_id FROM group_owners UNION SELECT group_id FROM group_offsets) g"
    " LEFT JOIN group_owners o ON o.group_id = g.group_id"
)
"""Every consumer group with an ownership or committed offsets (both indexed by group id)."""
_TXNS_DUE: Final = (
    "SELECT record FROM txn_records WHERE due_ms IS NOT NULL AND due_ms < $1"
    " ORDER BY due_ms, transactional_id LIMIT $2"
)
_TXNS_AFTER: Final = (
    "SELECT record FROM txn_records WHERE transactional_id > $1 ORDER BY transactional_id LIMIT $2"
)
_WANTED_PARTITION: Final = (
    " JOIN topics t ON t.name = k.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = k.part"
)
"""Joins the partitions a `k(i, name, part, ...)` table of keys names."""


class SqlReads(ReadView):
    """A read view over one connection inside one read-only transaction (see the module doc)."""

    _FETCH_HEADS: ClassVar[str]
    """The dialect's: `sql_rows.heads_from_rows`' rows for a `_table` of wanted (topic,
    partition, offset) rows, then the bound `_page_bound` gives."""
    _HEAD_ROW_AT: ClassVar[int]
    """Where an extent's or batch's columns start in a `_FETCH_HEADS` row."""
    # Built once per dialect from its `_table` and `_listed` (`__init_subclass__`):
    _PARTITIONS: ClassVar[str]
    _ABORTED_WITHIN: ClassVar[str]
    _TOPICS: ClassVar[str]
    _FILES: ClassVar[str]
    _TXNS: ClassVar[str]
    _SCRAM: ClassVar[str]
    _GROUPS: ClassVar[str]
    _REGISTRATIONS: ClassVar[str]
    _LEASE_HOLDERS: ClassVar[str]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        wanted = cls._table(1, ("name", "text"), ("part", "int"))
        cls._PARTITIONS = f"SELECT k.i, {PARTITION_COLUMNS} FROM {wanted}{_WANTED_PARTITION}"
        ranges = cls._table(1, ("pid", "bigint"), ("off", "bigint"), ("upper", "bigint"))
        cls._ABORTED_WITHIN = (
            f"SELECT k.i, a.producer_id, a.first_offset, a.last_offset, a.lso FROM {ranges}"
            " JOIN aborted_txns a ON a.partition_id = k.pid AND a.last_offset >= k.off"
            " WHERE a.first_offset < k.upper ORDER BY k.i, a.last_offset"
        )
        named = cls._listed(1, "text")
        cls._TOPICS = f"SELECT {TOPIC_COLUMNS} FROM topics t WHERE name IN {named}"
        cls._FILES = f"SELECT {FILE_COLUMNS} FROM files WHERE key IN {named}"
        cls._TXNS = (
            f"SELECT transactional_id, record FROM txn_records WHERE transactional_id IN {named}"
        )
        cls._SCRAM = f"SELECT {SCRAM_COLUMNS} FROM scram_credentials WHERE user_name IN {named}"
        cls._GROUPS = f"{_GROUP_RECORDS} WHERE g.group_id IN {named} ORDER BY g.group_id"
        keys = cls._table(1, ("name", "text"), ("part", "int"), ("pid", "bigint"))
        cls._REGISTRATIONS = (
            f"SELECT k.name, k.part, k.pid, {REGISTRATION_COLUMNS} FROM {keys}"
            f"{_WANTED_PARTITION} JOIN txn_registrations r"
            " ON r.partition_id = p.partition_id AND r.producer_id = k.pid"
        )
        held = cls._table(4, ("name", "text"), ("part", "int"))
        cls._LEASE_HOLDERS = (
            f"SELECT l.broker_id, l.broker_epoch, min(l.expires_ms) FROM {held}"
            f"{_WANTED_PARTITION} JOIN txn_leases l ON l.partition_id = p.partition_id"
            " WHERE l.producer_id = $1 AND l.producer_epoch = $2 AND l.expires_ms > $3"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        )

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    # --- the dialect --------------------------------------------------------------------------
    async def _rows(self, sql: str, *args: Any) -> Sequence[Sequence[Any]]:
        """Every row `sql` answers."""
        raise NotImplementedError

    async def _row(self, sql: str, *args: Any) -> Sequence[Any] | None:
        """The first row `sql` answers (None: it answers none)."""
        raise NotImplementedError

    @staticmethod
    def _listed(mark: int, kind: str) -> str:
        """A list of keys (of SQL type `kind`) bound at placeholder `mark`, for `IN`."""
        raise NotImplementedError

    def _list(self, keys: Sequence[Any]) -> Any:
        """The parameter of a `_listed` list."""
        raise NotImplementedError

    @staticmethod
    def _table(mark: int, *columns: tuple[str, str]) -> str:
        """A table `k(i, <columns>)` of rows bound from placeholder `mark` on (`_table_args`),
        `i` numbering them from 0; each column given as (name, SQL type)."""
        raise NotImplementedError

    def _table_args(self, rows: Sequence[Sequence[Any]], width: int) -> list[Any]:
        """The parameters of a `_table` of `width` columns."""
        raise NotImplementedError

    def _page_bound(self, rows: int) -> int:
        """The parameter of `_FETCH_HEADS` that bounds each partition's batch rows to `rows`."""
        raise NotImplementedError

    async def metadata_stats(self) -> MetadataStats:
        raise NotImplementedError

    # --- the fetch lookups --------------------------------------------------------------------
    async def partition(self, tp: TopicPartition) -> PartitionState | None:
        row = await self._row(_PARTITION, tp.topic, tp.partition)
        return None if row is None else partition_from_row(row)

    async def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        found: list[PartitionState | None] = [None] * len(tps)
        if tps:
            wanted = [(tp.topic, tp.partition) for tp in tps]
            for row in await self._rows(self._PARTITIONS, *self._table_args(wanted, 2)):
                found[row[0]] = partition_from_row(row[1:])
        return found

    async def fetch_heads(
        self, wanted: Sequence[tuple[TopicPartition, int]], rows: int = FETCH_HEAD_ROWS
    ) -> list[FetchHead | None]:
        if not wanted:
            return []
        keys = [(tp.topic, tp.partition, offset) for tp, offset in wanted]
        found = await self._rows(
            self._FETCH_HEADS, *self._table_args(keys, 3), self._page_bound(rows)
        )
        return heads_from_rows(found, len(wanted), self._HEAD_ROW_AT, rows)

    async def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        found: list[list[AbortedTxn]] = [[] for _ in ranges]
        if ranges:
            keys = [(state.key, offset, end) for state, offset, end in ranges]
            for i, *aborted in await self._rows(self._ABORTED_WITHIN, *self._table_args(keys, 3)):
                found[i].append(AbortedTxn(*aborted))
        return found

    async def batches_from(self, state: PartitionState, offset: int) -> AsyncIterator[StoredBatch]:
        for extent in await self._extents_from(state.key, offset):
            yield extent
        async for row in self._rows_from(state.key, offset):
            yield row

    async def _extents_from(self, partition_id: int, offset: int) -> list[StoredBatch]:
        rows = await self._rows(sql_extents.EXTENTS_FROM, partition_id, offset)
        return [StoredBatch(*row) for row in rows]

    async def _rows_from(self, partition_id: int, offset: int) -> AsyncIterator[StoredBatch]:
        chunk = 16
        rows = await self._batches_holding(partition_id, offset, chunk)
        while True:
            for row in rows:
                yield row
            if len(rows) < chunk:
                return
            after = rows[-1].base_offset
            chunk = min(chunk * 4, READ_CHUNK_ROWS_MAX)
            rows = await self._batches_after(partition_id, after, chunk)

    async def _batches_after(self, partition_id: int, after: int, limit: int) -> list[StoredBatch]:
        """Up to `limit` batches whose base offset is above `after`, in offset order."""
        rows = await self._rows(sql_extents.BATCHES_AFTER, partition_id, after, limit)
        return [batch_from_row(r) for r in rows]

    async def _batches_holding(
        self, partition_id: int, offset: int, limit: int
    ) -> list[StoredBatch]:
        """Up to `limit` batches from the one holding `offset` (or the next one)."""
        rows = await self._rows(sql_extents.BATCHES_HOLDING, partition_id, offset, limit)
        return [batch_from_row(r) for r in rows]

    async def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        found = await self._row(sql_extents.MAX_TIMESTAMP, state.key)
        extent = None if found is None else StoredBatch(*found)
        unless = None if extent is None else extent.timestamp
        top = await max_timestamp_row(self._row, MARKS, state.key, unless)
        return extent if top is None else top

    async def first_running_max_at_least(
        self, state: PartitionState, ts: int
    ) -> StoredBatch | None:
        found = await self._row(sql_extents.FIRST_RUNNING_MAX_AT_LEAST, state.key, ts)
        if found is not None:
            return StoredBatch(*found)
        return await first_batch_reaching(self._row, MARKS, state.key, ts)

    async def aborted_from(self, state: PartitionState, offset: int) -> AsyncIterator[AbortedTxn]:
        after = offset - 1
        while True:
            rows = await self._rows(_ABORTED_FROM, state.key, after, READ_CHUNK_ROWS_MAX)
            for r in rows:
                yield AbortedTxn(*r)
            if len(rows) < READ_CHUNK_ROWS_MAX:
                return
            after = rows[-1][2]

    # --- the other queries --------------------------------------------------------------------
    async def topics(self, names: Sequence[str] | None) -> list[TopicRow]:
        if names is None:
            rows = await self._rows(f"SELECT {TOPIC_COLUMNS} FROM topics t ORDER BY name")
            return [topic_from_row(r) for r in rows]
        rows = await self._rows(self._TOPICS, self._list(list(dict.fromkeys(names))))
        found = {r[0]: topic_from_row(r) for r in rows}
        return [found[n] for n in names if n in found]

    async def producers_of(self, partition_key: int) -> list[ProducerEntry]:
        return [entry_from_row(r) for r in await self._rows(_PRODUCERS_OF, partition_key)]

    async def unconsolidated_heads(self) -> list[tuple[PartitionState, StoredBatch]]:
        rows = await self._rows(f"SELECT {PARTITION_COLUMNS}, {BATCH_COLUMNS} FROM {HEADS_FROM}")
        return [(partition_from_row(row), batch_from_row(row[PARTITION_WIDTH:])) for row in rows]

    def unconsolidated_rows(self, state: PartitionState) -> AsyncIterator[StoredBatch]:
        return self._rows_from(state.key, -1)

    async def files(self, keys: Sequence[str]) -> dict[str, FileRow]:
        rows = await self._rows(self._FILES, self._list(list(dict.fromkeys(keys))))
        return dict(file_from_row(r) for r in rows)

    async def dead_files(self, older_than_ms: int, limit: int) -> list[tuple[str, FileRow]]:
        return [file_from_row(r) for r in await self._rows(_DEAD_FILES, older_than_ms, limit)]

    async def file_totals(self) -> dict[FileState, tuple[int, int]]:
        rows = await self._rows(_FILE_TOTALS)
        return {FILE_STATES[state]: (count, int(size)) for state, count, size in rows}

    async def txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]:
        rows = await self._rows(self._TXNS, self._list(list(dict.fromkeys(transactional_ids))))
        return {tid: txn_from_blob(blob) for tid, blob in rows}

    async def txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], TxnRegistration]:
        wanted = [(tp.topic, tp.partition, pid) for tp, pid in dict.fromkeys(keys)]
        if not wanted:
            return {}
        rows = await self._rows(self._REGISTRATIONS, *self._table_args(wanted, 3))
        return {
            (TopicPartition(row[0], row[1]), row[2]): registration_from_row(list(row)[3:])
            for row in rows
        }

    async def broker_registrations(self) -> list[BrokerRegistration]:
        rows = await self._rows(
            f"SELECT {REGISTRATION_ROW} FROM broker_registrations ORDER BY broker_id"
        )
        return [BrokerRegistration(*row) for row in rows]

    async def group_ownership(self, group_id: str) -> GroupOwnership | None:
        row = await self._row(
            f"SELECT {OWNER_COLUMNS} FROM group_owners WHERE group_id = $1", group_id
        )
        return None if row is None else GroupOwnership(*row)

    async def group_records(self, group_ids: Sequence[str] | None) -> dict[str, GroupRecord]:
        if group_ids is None:
            rows = await self._rows(f"{_GROUP_RECORDS} ORDER BY g.group_id")
        else:
            rows = await self._rows(self._GROUPS, self._list(sorted(set(group_ids))))
        return {
            group_id: GroupRecord(
                None if broker_id is None else GroupOwnership(broker_id, epoch, generation),
                bool(has_offsets),
            )
            for group_id, broker_id, epoch, generation, has_offsets in rows
        }

    async def group_state(self, group_id: str) -> bytes | None:
        row = await self._row("SELECT state FROM group_states WHERE group_id = $1", group_id)
        return None if row is None else bytes(row[0])

    async def share_states(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, bytes]:
        rows = await self._rows(
            "SELECT topic, partition, state FROM share_states WHERE group_id = $1"
            " ORDER BY topic, partition",
            group_id,
        )
        stored = {TopicPartition(topic, index): bytes(blob) for topic, index, blob in rows}
        if partitions is None:
            return stored
        return {tp: stored[tp] for tp in partitions if tp in stored}

    async def scram_credentials(
        self, users: Sequence[str] | None
    ) -> dict[tuple[str, ScramMechanism], ScramCredential]:
        if users is None:
            rows = await self._rows(f"SELECT {SCRAM_COLUMNS} FROM scram_credentials")
        else:
            rows = await self._rows(self._SCRAM, self._list(sorted(set(users))))
        return dict(scram_from_row(row) for row in rows)

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return {
            TopicPartition(topic, partition): CommittedOffset(offset, metadata, epoch)
            for topic, partition, offset, metadata, epoch in await self._rows(
                _GROUP_OFFSETS, group_id
            )
        }

    async def txns_due(self, now_ms: int, limit: int) -> list[TxnRecord]:
        return [txn_from_blob(blob) for (blob,) in await self._rows(_TXNS_DUE, now_ms, limit)]

    async def txns_after(self, after: str, limit: int) -> list[TxnRecord]:
        return [txn_from_blob(blob) for (blob,) in await self._rows(_TXNS_AFTER, after, limit)]

    async def lease_holders(
        self, partitions: Sequence[TopicPartition], producer_id: int, epoch: int, after_ms: int
    ) -> list[LeaseHolder]:
        wanted = [(tp.topic, tp.partition) for tp in dict.fromkeys(partitions)]
        if not wanted:
            return []
        rows = await self._rows(
            self._LEASE_HOLDERS, producer_id, epoch, after_ms, *self._table_args(wanted, 2)
        )
        return [LeaseHolder(*row) for row in rows]

    async def resource_configs(
        self, resource_type: int, names: Sequence[str] | None
    ) -> dict[str, dict[str, str]]:
        rows = await self._rows(
            "SELECT resource_name, configs FROM resource_configs WHERE resource_type = $1"
            " ORDER BY resource_name",
            resource_type,
        )
        named = None if names is None else set(names)
        return {
            name: dict(configs_from_text(text))
            for name, text in rows
            if named is None or name in named
        }

    async def counter(self, name: str) -> int:
        row = await self._row("SELECT value FROM meta WHERE name = $1", name)
        return 0 if row is None else int(row[0])

    async def acl_version(self) -> int:
        row = await self._row("SELECT value FROM meta WHERE name = $1", ACL_VERSION_COUNTER)
        return 0 if row is None else int(row[0])

    async def membership_version(self) -> int:
        row = await self._row("SELECT value FROM meta WHERE name = $1", MEMBERSHIP_VERSION_COUNTER)
        return 0 if row is None else int(row[0])

    async def acls(self) -> list[AclBinding]:
        return [binding_from_row(row) for row in await self._rows(SELECT_ACLS)]
