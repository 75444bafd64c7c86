"""The SQLite store's read view: `sql_reads` over one connection, inside one transaction.

Its statements run at once: a read runs on a reader thread, driven by `run_inline`, as a step
runs on the writer thread. Key lists bind as one JSON array, read with `json_each`, so that one
statement text serves every length.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from diskless.coordinator._backends import sql_extents
from diskless.coordinator._backends.sql_reads import SqlReads
from diskless.coordinator._backends.sql_rows import (
    BATCH_COLUMNS,
    BATCH_WIDTH,
    HEAD_KIND_BATCH,
    HEAD_KIND_EXTENT,
    HEAD_KIND_PARTITION,
    HEAD_PARTITION_AT,
    PARTITION_COLUMNS,
    PARTITION_WIDTH,
    numbered,
)
from diskless.coordinator._rules.rows import StoredBatch
from diskless.coordinator._values import MetadataStats

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
_PADDING: Final = ", ".join(["NULL"] * (BATCH_WIDTH - PARTITION_WIDTH))


class SqliteReads(SqlReads):
    """`SqlReads` on SQLite; it also serves the step's chunked batch lookups."""

    _FETCH_HEADS = (
        f"{_WANTED}, h AS MATERIALIZED (SELECT w.i AS i, p.partition_id AS pid, w.off AS off,"
        " coalesce((SELECT max(base_offset) FROM batches WHERE partition_id = p.partition_id"
        " AND base_offset <= w.off), w.off) - 1 AS lo FROM w JOIN topics t ON t.name = w.name"
        " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part),"
        # A partition's first rows end at its page's last one: SQLite has no LATERAL join to
        # bound each partition's rows with a LIMIT of its own, so a range of the key does.
        " r AS MATERIALIZED (SELECT i, pid, lo, coalesce((SELECT base_offset FROM batches"
        " WHERE partition_id = h.pid AND base_offset > h.lo ORDER BY base_offset LIMIT 1"
        " OFFSET ?2), 9223372036854775807) AS hi FROM h)"
        f" SELECT w.i, {HEAD_KIND_PARTITION}, EXISTS (SELECT 1 FROM aborted_txns a"
        " WHERE a.partition_id = p.partition_id AND a.last_offset >= w.off),"
        f" {PARTITION_COLUMNS}, {_PADDING} FROM w JOIN topics t ON t.name = w.name"
        " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part"
        f" UNION ALL SELECT h.i, {HEAD_KIND_EXTENT}, NULL, {sql_extents.COLUMNS}"
        " FROM h JOIN extents e ON e.partition_id = h.pid AND e.last_offset >= h.off"
        " JOIN files f ON f.file_id = e.file_id"
        f" UNION ALL SELECT r.i, {HEAD_KIND_BATCH}, NULL, {BATCH_COLUMNS}"
        " FROM r JOIN batches b ON b.partition_id = r.pid AND b.base_offset > r.lo"
        " AND b.base_offset <= r.hi LEFT JOIN files f ON f.file_id = b.file_id"
    )
    """Partition rows carry `PARTITION_COLUMNS` where the others carry `BATCH_COLUMNS`, padded
    to their width: SQLite columns have no type to agree on."""
    _HEAD_ROW_AT = HEAD_PARTITION_AT

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._conn: sqlite3.Connection = conn

    async def _rows(self, sql: str, *args: Any) -> Sequence[Sequence[Any]]:
        return self._conn.execute(numbered(sql), args).fetchall()

    async def _row(self, sql: str, *args: Any) -> Sequence[Any] | None:
        row: Sequence[Any] | None = self._conn.execute(numbered(sql), args).fetchone()
        return row

    @staticmethod
    def _listed(mark: int, kind: str) -> str:
        return f"(SELECT value FROM json_each(?{mark}))"

    def _list(self, keys: Sequence[Any]) -> Any:
        return _json(keys)

    @staticmethod
    def _table(mark: int, *columns: tuple[str, str]) -> str:
        values = ", ".join(
            f"json_extract(value, '$[{n}]') AS {name}" for n, (name, _) in enumerate(columns)
        )
        return f"(SELECT key AS i, {values} FROM json_each(?{mark})) k"

    def _table_args(self, rows: Sequence[Sequence[Any]], width: int) -> list[Any]:
        return [_json(rows)]

    def _page_bound(self, rows: int) -> int:
        return rows - 1  # the OFFSET of the page's last row

    async def metadata_stats(self) -> MetadataStats:
        return sql_extents.sqlite_metadata_stats(self._conn)

    # --- the step's lookups -------------------------------------------------------------------
    async def batches_after(self, partition_id: int, after: int, limit: int) -> list[StoredBatch]:
        """Up to `limit` batches whose base offset is above `after`, in offset order."""
        return await self._batches_after(partition_id, after, limit)

    async def batches_holding(
        self, partition_id: int, offset: int, limit: int
    ) -> list[StoredBatch]:
        """Up to `limit` batches (extents first) from the one holding `offset` (or the next)."""
        return await sql_extents.rows_holding(self._rows, partition_id, offset, limit)
