"""Consolidation's rules: which rows a partition offers, and when a swap may replace them.

An extent replaces a run of a partition's consecutive batch rows (data and markers) by one row
pointing into a consolidated object. Extents are always a prefix of a partition's rows: a run
starts right after the last extent, so every later rule (fetch, ListOffsets, retention) can
treat an extent as one batch, the way Kafka treats a segment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.rows import PartitionState, StoredBatch
from diskless.coordinator._values import BatchInfo, ConsolidationCandidate, ExtentSwap


def commit_time(row: StoredBatch, files: Mapping[str, FileRow]) -> int | None:
    """When a row was committed: a marker's (and a LOG_APPEND_TIME batch's) append time, else
    its object's commit time (a LIVE file's `since_ms`); None if unknown."""
    if row.control >= 0:
        return row.max_timestamp
    if row.log_append_time >= 0:
        return row.log_append_time
    file = files.get(row.object_key)
    return None if file is None else file.since_ms


def leading_bytes(rows: Iterable[StoredBatch], bytes_max: int) -> list[StoredBatch]:
    """The leading rows within `bytes_max` (at least one)."""
    taken: list[StoredBatch] = []
    size = 0
    for row in rows:
        if taken and size + row.size > bytes_max:
            break
        taken.append(row)
        size += row.size
    return taken


def candidate_run(
    state: PartitionState,
    rows: Iterable[StoredBatch],
    files: Mapping[str, FileRow],
    committed_before_ms: int,
) -> list[StoredBatch]:
    """The leading rows of `rows` (rows after the partition's extents, oldest first) that
    consolidation may take now: committed before the bound and below the LSO."""
    run: list[StoredBatch] = []
    end = state.last_stable_offset
    for row in rows:
        if row.is_extent or row.last_offset >= end:
            break
        committed = commit_time(row, files)
        if committed is None or committed >= committed_before_ms:
            break
        run.append(row)
    return run


def _same(row: StoredBatch, batch: BatchInfo) -> bool:
    control = -1 if batch.control is None else int(batch.control)
    return (
        not row.is_extent
        and row.base_offset == batch.base_offset
        and row.last_offset == batch.last_offset
        and row.object_key == batch.object_key
        and row.byte_offset == batch.byte_offset
        and row.size == batch.size
        and row.control == control
        and row.producer_id == batch.producer_id
        and row.producer_epoch == batch.producer_epoch
    )


def swap_refusal(
    state: PartitionState | None, candidate: ConsolidationCandidate, rows: Sequence[StoredBatch]
) -> str | None:
    """Why the candidate's rows may not be swapped now (None: they may). `rows` are the stored
    rows from the one holding the candidate's base offset - 1, at least one more than the
    candidate holds."""
    tp = candidate.topic_partition
    if state is None:
        return f"partition {tp} no longer exists"
    if candidate.partition_key is not None and candidate.partition_key != state.key:
        return f"partition {tp} was deleted and re-created"
    batches = candidate.batches
    base = batches[0].base_offset
    if rows and rows[0].last_offset < base:
        if not rows[0].is_extent:
            return f"the rows before offset {base} of {tp} are not consolidated"
        rows = rows[1:]
    if len(rows) < len(batches) or not all(map(_same, rows, batches)):
        return (
            f"the rows of {tp} at offsets {base}..{batches[-1].last_offset} changed"
            " (retention, DeleteRecords, topic deletion or another consolidation)"
        )
    if batches[-1].last_offset >= state.last_stable_offset:
        return f"offset {batches[-1].last_offset} of {tp} is not below the last stable offset"
    return None


def extent_row(rows: Sequence[StoredBatch], swap: ExtentSwap) -> StoredBatch:
    """The extent that replaces `rows` (the candidate's, checked by `swap_refusal`)."""
    first, last = rows[0], rows[-1]
    timestamp = max(row.timestamp for row in rows)
    return StoredBatch(
        first.partition_key,
        first.base_offset,
        last.last_offset,
        swap.object_key,
        swap.byte_offset,
        swap.size,
        timestamp,
        max(row.log_append_time for row in rows),
        timestamp,
        last.ts_running_max,
        -1,
        -1,
        index_byte_offset=swap.index.byte_offset,
        index_size=swap.index.size,
        object_size=swap.object_size,
    )
