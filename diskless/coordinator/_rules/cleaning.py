"""Compaction's rules: when a cleaned object may replace a leading run of a partition's rows.

The cleaner reads a compacted partition's rows from its first (extents and batch rows alike),
cleans them, and swaps a leading run of them for one extent over the same offsets, whose
object holds only the batches the cleaner kept (offsets with gaps between them, the last batch
ending at the run's last offset). Extents stay a prefix of the partition's rows, so every other
rule treats the cleaned extent as it treats a consolidated one.
"""

from __future__ import annotations

from collections.abc import Sequence

from diskless.coordinator._rules.rows import PartitionState, StoredBatch
from diskless.coordinator._values import BatchInfo, CleanedSwap, CleaningRange


def _same(row: StoredBatch, batch: BatchInfo) -> bool:
    marker = row.control >= 0
    return (
        row.base_offset == batch.base_offset
        and row.last_offset == batch.last_offset
        and ("" if marker else row.object_key) == batch.object_key
        and (0 if marker else row.byte_offset) == batch.byte_offset
        and row.size == batch.size
        and row.is_extent == (batch.extent is not None)
    )


def cleaned_refusal(
    state: PartitionState | None,
    cleaning: CleaningRange,
    replaced: Sequence[BatchInfo],
    rows: Sequence[StoredBatch],
) -> str | None:
    """Why the replaced rows may not be swapped now (None: they may). `rows` are the stored
    rows from the one holding the first replaced offset, as many as are replaced."""
    tp = cleaning.topic_partition
    if state is None:
        return f"partition {tp} no longer exists"
    if cleaning.partition_key != state.key:
        return f"partition {tp} was deleted and re-created"
    if state.log_start_offset != cleaning.log_start_offset:
        return (
            f"the log start offset of {tp} moved from {cleaning.log_start_offset} to"
            f" {state.log_start_offset} (retention or DeleteRecords)"
        )
    if len(rows) < len(replaced) or not all(map(_same, rows, replaced)):
        return (
            f"the rows of {tp} at offsets {replaced[0].base_offset}..{replaced[-1].last_offset}"
            " changed (retention, DeleteRecords, consolidation or another cleaning)"
        )
    if replaced[-1].last_offset >= state.last_stable_offset:
        return f"offset {replaced[-1].last_offset} of {tp} is not below the last stable offset"
    return None


def cleaned_extent(rows: Sequence[StoredBatch], swap: CleanedSwap) -> StoredBatch:
    """The extent that replaces `rows` (checked by `cleaned_refusal`): their offsets, the
    cleaned object's batches and their largest timestamp."""
    first, last = rows[0], rows[-1]
    timestamp = swap.max_timestamp
    return StoredBatch(
        first.partition_key,
        first.base_offset,
        last.last_offset,
        swap.object_key,
        0,
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
