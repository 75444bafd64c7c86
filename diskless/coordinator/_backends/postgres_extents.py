"""How the PostgreSQL store keeps extents: a table of their own beside the batch rows.

As in the SQLite store (`sqlite_extents`): extents are a prefix of each partition's rows and few,
so lookups read a partition's extents through the primary key and merge them in front of its
batch rows; the batch rows' write path is untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import asyncpg

from diskless.coordinator._backends.postgres_rows import batches_holding, columns
from diskless.coordinator._rules.rows import StoredBatch
from diskless.coordinator._values import MetadataStats

COLUMNS: Final = (
    "e.partition_id, e.base_offset, e.last_offset, f.key, e.byte_offset, e.size,"
    " e.max_timestamp, e.log_append_time, e.timestamp, e.ts_running_max, -1, -1, -1, 0,"
    " e.index_byte_offset, e.index_size, f.size"
)
_FROM: Final = "extents e JOIN files f ON f.file_id = e.file_id"


async def extents_from(
    conn: asyncpg.Connection, partition_id: int, offset: int
) -> list[StoredBatch]:
    """The partition's extents from the one holding `offset` (or the next one)."""
    rows = await conn.fetch(
        f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = $1 AND e.last_offset >= $2"
        " ORDER BY e.base_offset",
        partition_id,
        offset,
    )
    return [StoredBatch(*row) for row in rows]


async def rows_holding(
    conn: asyncpg.Connection, partition_id: int, offset: int, limit: int
) -> list[StoredBatch]:
    """Up to `limit` rows, extents first, from the one holding `offset` (or the next one)."""
    found = (await extents_from(conn, partition_id, offset))[:limit]
    return found + await batches_holding(conn, partition_id, offset, limit - len(found))


async def max_timestamp_extent(conn: asyncpg.Connection, partition_id: int) -> StoredBatch | None:
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = $1"
        " ORDER BY e.timestamp DESC, e.base_offset LIMIT 1",
        partition_id,
    )
    return None if row is None else StoredBatch(*row)


async def first_extent_running_max_at_least(
    conn: asyncpg.Connection, partition_id: int, ts: int
) -> StoredBatch | None:
    row = await conn.fetchrow(
        f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = $1 AND e.ts_running_max >= $2"
        " ORDER BY e.base_offset LIMIT 1",
        partition_id,
        ts,
    )
    return None if row is None else StoredBatch(*row)


async def extent_refs(
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


async def trim_extents(conn: asyncpg.Connection, trims: Sequence[tuple[int, int]]) -> None:
    await conn.execute(
        "DELETE FROM extents e USING unnest($1::bigint[], $2::bigint[]) k(id, off)"
        " WHERE e.partition_id = k.id AND e.last_offset < k.off",
        *columns(trims, 2),
    )


async def swap_in(conn: asyncpg.Connection, extents: Sequence[StoredBatch]) -> None:
    """Each extent replaces the batch rows within its offsets."""
    for e in extents:
        await conn.execute(
            "DELETE FROM batches WHERE partition_id = $1 AND base_offset BETWEEN $2 AND $3",
            e.partition_key,
            e.base_offset,
            e.last_offset,
        )
        await conn.execute(
            "INSERT INTO extents SELECT $1::bigint, $2::bigint, $3::bigint, f.file_id,"
            " $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::bigint, $10::bigint,"
            " $11::bigint, $12::bigint FROM files f WHERE f.key = $4",
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


async def metadata_stats(conn: asyncpg.Connection) -> MetadataStats:
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM batches), (SELECT count(*) FROM extents),"
        " (SELECT coalesce(sum(size_bytes), 0) FROM partitions),"
        " pg_total_relation_size('batches') + pg_total_relation_size('extents')"
    )
    assert row is not None
    return MetadataStats(row[0], row[1], int(row[2]), int(row[3]))
