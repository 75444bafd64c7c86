"""How the SQLite store keeps extents: a table of their own beside the batch rows.

Extents are a prefix of each partition's rows and there are few of them (each stands for many
batches), so every lookup reads a partition's extents through the primary key and merges them in
front of its batch rows; the batch rows' write path is untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from diskless.coordinator._rules.rows import StoredBatch
from diskless.coordinator._values import MetadataStats

COLUMNS: Final = (
    "e.partition_id, e.base_offset, e.last_offset, f.key, e.byte_offset, e.size,"
    " e.max_timestamp, e.log_append_time, e.timestamp, e.ts_running_max, -1, -1, -1, 0,"
    " e.index_byte_offset, e.index_size, f.size"
)
_FROM: Final = "extents e JOIN files f ON f.file_id = e.file_id"
_MEASURED: Final = (
    "batches",
    "batches_by_timestamp",
    "batches_by_running_max",
    "batches_time_marks",
    "extents",
)
"""The tables and indexes batch metadata takes (the two per-batch timestamp indexes only in
files from before migration 9)."""


def extents_from(conn: sqlite3.Connection, partition_id: int, offset: int) -> list[StoredBatch]:
    """The partition's extents from the one holding `offset` (or the next one)."""
    return [
        StoredBatch(*row)
        for row in conn.execute(
            f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = ? AND e.last_offset >= ?"
            " ORDER BY e.base_offset",
            (partition_id, offset),
        )
    ]


def max_timestamp_extent(conn: sqlite3.Connection, partition_id: int) -> StoredBatch | None:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = ?"
        " ORDER BY e.timestamp DESC, e.base_offset LIMIT 1",
        (partition_id,),
    ).fetchone()
    return None if row is None else StoredBatch(*row)


def first_extent_running_max_at_least(
    conn: sqlite3.Connection, partition_id: int, ts: int
) -> StoredBatch | None:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM {_FROM} WHERE e.partition_id = ? AND e.ts_running_max >= ?"
        " ORDER BY e.base_offset LIMIT 1",
        (partition_id, ts),
    ).fetchone()
    return None if row is None else StoredBatch(*row)


def extent_refs(
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


def trim_extents(conn: sqlite3.Connection, partition_id: int, offset: int) -> None:
    conn.execute(
        "DELETE FROM extents WHERE partition_id = ? AND last_offset < ?", (partition_id, offset)
    )


def swap_in(conn: sqlite3.Connection, extents: Sequence[StoredBatch]) -> None:
    """Each extent replaces the batch rows within its offsets."""
    for e in extents:
        conn.execute(
            "DELETE FROM batches WHERE partition_id = ? AND base_offset BETWEEN ? AND ?",
            (e.partition_key, e.base_offset, e.last_offset),
        )
        (file_id,) = conn.execute(
            "SELECT file_id FROM files WHERE key = ?", (e.object_key,)
        ).fetchone()
        conn.execute(
            "INSERT INTO extents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                e.partition_key,
                e.base_offset,
                e.last_offset,
                file_id,
                e.byte_offset,
                e.size,
                e.max_timestamp,
                e.log_append_time,
                e.timestamp,
                e.ts_running_max,
                e.index_byte_offset,
                e.index_size,
            ),
        )


def metadata_stats(conn: sqlite3.Connection) -> MetadataStats:
    (rows,) = conn.execute("SELECT count(*) FROM batches").fetchone()
    (extents,) = conn.execute("SELECT count(*) FROM extents").fetchone()
    (retained,) = conn.execute("SELECT coalesce(sum(size_bytes), 0) FROM partitions").fetchone()
    return MetadataStats(rows, extents, retained, _stored_bytes(conn))


def _stored_bytes(conn: sqlite3.Connection) -> int | None:
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
