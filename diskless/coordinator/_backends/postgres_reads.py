"""The PostgreSQL store's read view: `sql_reads` over one asyncpg connection inside one READ
ONLY REPEATABLE READ transaction.

Its statements are awaited on the event loop that owns the connection: a read is loaded there,
then decided (`_store.decide`), with no thread between. MVCC lets the view read the last commit
while writers hold their row locks, so a fetch never waits behind a commit. Key lists go to the
server as arrays (`unnest`): one statement whatever their length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import asyncpg

from diskless.coordinator._backends import sql_extents
from diskless.coordinator._backends.postgres_rows import columns
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
)
from diskless.coordinator._values import MetadataStats


def _nulls(count: int) -> str:
    return ", ".join(["NULL"] * count)


_WANTED: Final = (
    "unnest($1::text[], $2::int[], $3::bigint[]) WITH ORDINALITY w(name, part, off, i)"
    " JOIN topics t ON t.name = w.name"
    " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = w.part"
)
"""The partitions wanted, as arrays of topics, partitions and offsets (`i` counts from 1)."""


class PostgresReads(SqlReads):
    """`SqlReads` on PostgreSQL."""

    _FETCH_HEADS = (
        f"WITH h AS MATERIALIZED (SELECT w.i - 1 AS i, p.partition_id AS pid, w.off AS off"
        f" FROM {_WANTED})"
        f" SELECT w.i - 1, {HEAD_KIND_PARTITION}, EXISTS (SELECT 1 FROM aborted_txns a"
        " WHERE a.partition_id = p.partition_id AND a.last_offset >= w.off),"
        f" {PARTITION_COLUMNS}, {_nulls(BATCH_WIDTH)} FROM {_WANTED}"
        f" UNION ALL SELECT h.i, {HEAD_KIND_EXTENT}, NULL, {_nulls(PARTITION_WIDTH)},"
        f" {sql_extents.COLUMNS}"
        " FROM h JOIN extents e ON e.partition_id = h.pid AND e.last_offset >= h.off"
        " JOIN files f ON f.file_id = e.file_id"
        f" UNION ALL SELECT h.i, {HEAD_KIND_BATCH}, NULL, {_nulls(PARTITION_WIDTH)},"
        f" {BATCH_COLUMNS} FROM h CROSS JOIN LATERAL (SELECT * FROM batches b"
        " WHERE b.partition_id = h.pid AND b.base_offset > coalesce((SELECT max(base_offset)"
        " FROM batches WHERE partition_id = h.pid AND base_offset <= h.off), h.off) - 1"
        " ORDER BY b.base_offset LIMIT $4) b LEFT JOIN files f ON f.file_id = b.file_id"
    )
    """Partition rows, then extents' and batches' rows, side by side: the columns of a UNION
    agree on their types. Each partition's batch rows are a walk of the primary key from the
    one holding the offset, cut at the page before anything joins them."""
    _HEAD_ROW_AT = HEAD_PARTITION_AT + PARTITION_WIDTH

    def __init__(self, conn: asyncpg.Connection) -> None:
        super().__init__(conn)

    async def _rows(self, sql: str, *args: Any) -> Sequence[Sequence[Any]]:
        rows: Sequence[Sequence[Any]] = await self._conn.fetch(sql, *args)
        return rows

    async def _row(self, sql: str, *args: Any) -> Sequence[Any] | None:
        row: Sequence[Any] | None = await self._conn.fetchrow(sql, *args)
        return row

    @staticmethod
    def _listed(mark: int, kind: str) -> str:
        return f"(SELECT unnest(${mark}::{kind}[]))"

    def _list(self, keys: Sequence[Any]) -> Any:
        return list(keys)

    @staticmethod
    def _table(mark: int, *columns: tuple[str, str]) -> str:
        arrays = ", ".join(f"${mark + n}::{kind}[]" for n, (_, kind) in enumerate(columns))
        names = ", ".join(name for name, _ in columns)
        return (
            f"(SELECT u.i - 1 AS i, {names} FROM unnest({arrays}) WITH ORDINALITY u({names}, i)) k"
        )

    def _table_args(self, rows: Sequence[Sequence[Any]], width: int) -> list[Any]:
        return columns(rows, width)

    def _page_bound(self, rows: int) -> int:
        return rows  # the LIMIT of each partition's page

    async def metadata_stats(self) -> MetadataStats:
        return await sql_extents.postgres_metadata_stats(self._conn)
