"""How both SQL stores keep extents: a table of their own beside the batch rows.

Extents are a prefix of each partition's rows and there are few of them (each stands for many
batches), so every lookup reads a partition's extents through the primary key and merges them in
front of its batch rows; the batch rows' write path is untouched.

The statements are written once, with PostgreSQL's placeholders, and run through the callables
a store passes (SQLite's read `$1` as `?1`: `sql_rows.numbered`). What the dialects do apart is
small: PostgreSQL looks several partitions up in one statement (arrays), SQLite one at a time;
each measures the metadata's size on disk its own way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import asyncpg

from diskless.coordinator._backends.postgres_rows import columns
from diskless.coordinator._backends.sql_rows import BATCH_COLUMNS, BATCH_FROM, numbered
from diskless.coordinator._rules.rows import StoredBatch
from diskless.coordinator._values import MetadataStats

Fetch = Callable[..., Awaitable[Sequence[Sequence[Any]]]]
"""Runs a statement with its arguments: every row it answers."""
Execute = Callable[..., Awaitable[Any]]
"""Runs a statement with its arguments, for its effect."""

COLUMNS: Final = (
    "e.partition_id, e.base_offset, e.last_offset, f.key, e.byte_offset, e.size,"
    " e.max_timestamp, e.log_append_time, e.timestamp, e.ts_running_max, -1, -1, -1, 0,"
    " e.index_byte_offset, e.index_size, f.size"
)
"""An extent as a `StoredBatch` row (`sql_rows.BATCH_COLUMNS`' order)."""
FROM: Final = "extents e JOIN files f ON f.file_id = e.file_id"
EXTENTS_FROM: Final = (
    f"SELECT {COLUMNS} FROM {FROM} WHERE e.partition_id = $1 AND e.last_offset >= $2"
    " ORDER BY e.base_offset"
)
"""The partition's extents from the one holding an offset (or the next one)."""
MAX_TIMESTAMP: Final = (
    f"SELECT {COLUMNS} FROM {FROM} WHERE e.partition_id = $1"
    " ORDER BY e.timestamp DESC, e.base_offset LIMIT 1"
)
"""The partition's first extent with the largest timestamp."""
FIRST_RUNNING_MAX_AT_LEAST: Final = (
    f"SELECT {COLUMNS} FROM {FROM} WHERE e.partition_id = $1 AND e.ts_running_max >= $2"
    " ORDER BY e.base_offset LIMIT 1"
)
BATCHES_AFTER: Final = (
    f"SELECT {BATCH_COLUMNS} FROM {BATCH_FROM} WHERE b.partition_id = $1"
    " AND b.base_offset > $2 ORDER BY b.base_offset LIMIT $3"
)
"""Up to a number of batch rows whose base offset is above an offset, in offset order."""
BATCHES_HOLDING: Final = (
    f"SELECT {BATCH_COLUMNS} FROM {BATCH_FROM} WHERE b.partition_id = $1"
    " AND b.base_offset > coalesce((SELECT max(base_offset) FROM batches"
    " WHERE partition_id = $1 AND base_offset <= $2), $2) - 1"
    " ORDER BY b.base_offset LIMIT $3"
)
"""Up to a number of batch rows from the one holding an offset (or the next one)."""
_SWAP_OUT: Final = "DELETE FROM batches WHERE partition_id = $1 AND base_offset BETWEEN $2 AND $3"
_SWAP_IN: Final = (
    "INSERT INTO extents SELECT CAST($1 AS bigint), CAST($2 AS bigint), CAST($3 AS bigint),"
    " f.file_id, CAST($5 AS bigint), CAST($6 AS bigint), CAST($7 AS bigint),"
    " CAST($8 AS bigint), CAST($9 AS bigint), CAST($10 AS bigint), CAST($11 AS bigint),"
    " CAST($12 AS bigint) FROM files f WHERE f.key = $4"
)
_MEASURED: Final = (
    "batches",
    "batches_by_timestamp",
    "batches_by_running_max",
    "batches_time_marks",
    "extents",
)
"""The tables and indexes batch metadata takes in SQLite (the two per-batch timestamp indexes
only in files from before migration 9)."""


async def rows_holding(
    fetch: Fetch, partition_id: int, offset: int, limit: int
) -> list[StoredBatch]:
    """Up to `limit` rows, extents first, from the one holding `offset` (or the next one)."""
    found = [StoredBatch(*row) for row in await fetch(EXTENTS_FROM, partition_id, offset)]
    found = found[:limit]
    rows = await fetch(BATCHES_HOLDING, partition_id, offset, limit - len(found))
    return found + [StoredBatch(*row) for row in rows]


async def swap_in(execute: Execute, extents: Sequence[StoredBatch]) -> None:
    """Each extent replaces the batch rows within its offsets."""
    for e in extents:
        await execute(_SWAP_OUT, e.partition_key, e.base_offset, e.last_offset)
        await execute(
            _SWAP_IN,
            e.partition_key,
            e.base_offset,
            e.last_offset,
            e.object_key,
            e.byte_offset,
            e.size,
            e.max_timestamp,
            e.log_append_time,
            e.timestamp,
            e.ts_running_max,
            e.index_byte_offset,
            e.index_size,
        )


# --- SQLite: a partition per statement ---------------------------------------------------------
def sqlite_refs(
    conn: sqlite3.Connection, partition_id: int, offset: int
) -> tuple[dict[str, int], int]:
    """What the extents lying entirely below `offset` hold: batches per key, and bytes."""
    files: dict[str, int] = {}
    size = 0
    for key, count, total in conn.execute(
        "SELECT f.key, count(*), sum(e.size) FROM extents e JOIN files f ON f.file_id = e.file_id"
        " WHERE e.partition_id = ? AND e.last_offset < ? GROUP BY e.file_id",
        (partition_id, offset),
    ):
        files[key] = count
        size += total
    return files, size


def sqlite_trim(conn: sqlite3.Connection, partition_id: int, offset: int) -> None:
    conn.execute(
        "DELETE FROM extents WHERE partition_id = ? AND last_offset < ?", (partition_id, offset)
    )


def sqlite_execute(conn: sqlite3.Connection) -> Execute:
    """`Execute` on a SQLite connection (it never suspends)."""

    async def execute(sql: str, *args: Any) -> None:
        conn.execute(numbered(sql), args)

    return execute


def sqlite_metadata_stats(conn: sqlite3.Connection) -> MetadataStats:
    (rows,) = conn.execute("SELECT count(*) FROM batches").fetchone()
    (extents,) = conn.execute("SELECT count(*) FROM extents").fetchone()
    (retained,) = conn.execute("SELECT coalesce(sum(size_bytes), 0) FROM partitions").fetchone()
    return MetadataStats(rows, extents, retained, _sqlite_stored_bytes(conn))


def _sqlite_stored_bytes(conn: sqlite3.Connection) -> int | None:
    """The bytes the batch metadata takes on its pages (dbstat), None where SQLite was built
    without it. Bytes in use, not whole pages: every table and index keeps a page even when
    nearly empty, which would hide a few extent rows entirely."""
    marks = ", ".join("?" * len(_MEASURED))
    try:
        (size,) = conn.execute(
            f"SELECT coalesce(sum(pgsize - unused), 0) FROM dbstat WHERE name IN ({marks})",
            _MEASURED,
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    return int(size)


# --- PostgreSQL: every partition in one statement ---------------------------------------------
async def postgres_refs(
    conn: asyncpg.Connection, refs: Sequence[tuple[int, int]]
) -> dict[int, tuple[dict[str, int], int]]:
    """Per partition, what its extents lying entirely below the offset hold: batches per key,
    and bytes."""
    found: dict[int, tuple[dict[str, int], int]] = {}
    for partition_id, key, count, total in await conn.fetch(
        "SELECT e.partition_id, f.key, count(*), sum(e.size)"
        " FROM unnest($1::bigint[], $2::bigint[]) k(id, off) JOIN extents e"
        " ON e.partition_id = k.id AND e.last_offset < k.off"
        " JOIN files f ON f.file_id = e.file_id GROUP BY e.partition_id, f.key",
        *columns(refs, 2),
    ):
        files, size = found.get(partition_id, ({}, 0))
        files[key] = count
        found[partition_id] = (files, size + total)
    return found


async def postgres_trim(conn: asyncpg.Connection, trims: Sequence[tuple[int, int]]) -> None:
    await conn.execute(
        "DELETE FROM extents e USING unnest($1::bigint[], $2::bigint[]) k(id, off)"
        " WHERE e.partition_id = k.id AND e.last_offset < k.off",
        *columns(trims, 2),
    )


async def postgres_metadata_stats(conn: asyncpg.Connection) -> MetadataStats:
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM batches), (SELECT count(*) FROM extents),"
        " (SELECT coalesce(sum(size_bytes), 0) FROM partitions),"
        " pg_total_relation_size('batches') + pg_total_relation_size('extents')"
    )
    assert row is not None
    return MetadataStats(row[0], row[1], int(row[2]), int(row[3]))
