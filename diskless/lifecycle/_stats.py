"""What the file manager and the retention scheduler report: snapshots, and per-run results."""

from __future__ import annotations

import msgspec


class FileManagerStats(msgspec.Struct, frozen=True, kw_only=True):
    """A file manager's view of object storage after its last cycle.

    The `live_*`, `condemned_*` and `unreferenced_*` figures are the coordinator's books (shared by
    every manager); the cumulative counters are this manager's own work since it was created.
    """

    live_objects: int = 0
    live_bytes: int = 0
    condemned_objects: int = 0
    """Condemned (never committed) objects waiting for deletion."""
    condemned_bytes: int = 0
    unreferenced_objects: int = 0
    """Committed objects no live batch references, waiting for their grace to end."""
    unreferenced_bytes: int = 0
    # cumulative counters
    cycles: int = 0
    cycle_errors: int = 0
    listing_calls: int = 0
    objects_listed: int = 0
    file_info_calls: int = 0
    orphans_condemned: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    delete_failures: int = 0
    """Keys whose deletion failed (or was not confirmed); they are retried next cycle."""
    # reconciliation progress
    watermark_ms: int = 0
    """Objects named before this time were all reconciled (committed, or condemned and deleted)."""
    reconciliation_lag_ms: int = 0
    """now - watermark at the end of the last cycle; at least `orphan_grace_ms` by design, and
    0 while nothing was reconciled yet (no watermark)."""


class CycleReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one `FileManager.run_cycle` did."""

    listing_calls: int
    objects_listed: int
    orphans_condemned: int
    deleted_objects: int
    deleted_bytes: int
    delete_failures: int
    errors: int
    watermark_ms: int
    complete: bool
    """The listing reached the end of the prefix within the cycle's budget."""


class RetentionRun(msgspec.Struct, frozen=True, kw_only=True):
    """What one `RetentionScheduler.run_once` did; `more` means work was left for the next run."""

    calls: int
    batches_deleted: int
    bytes_deleted: int
    more: bool


class RetentionStats(msgspec.Struct, frozen=True, kw_only=True):
    """Cumulative work of a retention scheduler."""

    runs: int = 0
    run_errors: int = 0
    calls: int = 0
    batches_deleted: int = 0
    bytes_deleted: int = 0
    runs_with_work_left: int = 0


class ConsolidationRun(msgspec.Struct, frozen=True, kw_only=True):
    """What one `Consolidator.run_once` did."""

    candidates: int
    extents_committed: int
    swaps_refused: int
    """Objects uploaded whose swap the coordinator refused: orphans for the file manager."""
    failures: int
    """Candidates given up on this run (a read, an upload or the swap call failed)."""
    batches_moved: int
    bytes_moved: int


class ConsolidatorStats(msgspec.Struct, frozen=True, kw_only=True):
    """Cumulative work of a consolidator."""

    runs: int = 0
    run_errors: int = 0
    candidates: int = 0
    extents_committed: int = 0
    swaps_refused: int = 0
    failures: int = 0
    batches_moved: int = 0
    bytes_moved: int = 0
    objects_uploaded: int = 0
    bytes_uploaded: int = 0


class CleaningRun(msgspec.Struct, frozen=True, kw_only=True):
    """What one `Cleaner.run_once` did."""

    partitions: int
    """Partitions of compacted topics looked at."""
    cleaned: int
    """Passes whose swap committed."""
    swaps_refused: int
    """Objects uploaded whose swap the coordinator refused: orphans for the file manager."""
    failures: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int


class CleanerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Cumulative work of a cleaner, and Kafka's LogCleaner gauges of its last run."""

    runs: int = 0
    run_errors: int = 0
    cleaned: int = 0
    swaps_refused: int = 0
    failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    # the last run's, as Kafka's LogCleaner reports them
    max_dirty_percent: float = 0.0
    """The largest dirty part (bytes past where cleaning reached, of the cleanable bytes) of a
    partition looked at (`max-dirty-percent`)."""
    recopy_percent: float = 0.0
    """Bytes written of the bytes read by its passes (`cleaner-recopy-percent`)."""
    max_clean_time_s: float = 0.0
    """Its longest pass (`max-clean-time-secs`)."""
    max_buffer_utilization_percent: float = 0.0
    """The fullest its map got (`max-buffer-utilization-percent`)."""
