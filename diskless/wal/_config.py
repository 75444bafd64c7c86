"""The write pipeline's limits, and the snapshot of its counters."""

from __future__ import annotations

import msgspec

from diskless._object_keys import DEFAULT_OBJECT_PREFIX


class WalConfig(msgspec.Struct, frozen=True):
    """Limits of the write pipeline. Related limits are checked against each other on creation."""

    buffer_max_bytes: int = 8 * 1024 * 1024
    """Rotate the active segment when it reaches this many bytes of batches."""
    commit_interval_ms: int = 250
    """...or this long after its first write, at the latest."""
    linger_ms: int = 2
    """...or sooner, once no batch arrived for this long (a lone request does not wait for the
    interval) or its senders can send no more (`_senders`); a value at or above
    `commit_interval_ms` turns both off."""
    rotate_interval_min_ms: int = 50
    """...but a lingering segment never rotates sooner than this after the previous rotation,
    which bounds the objects per second a trickle costs (1000 / this, per broker)..."""
    rotate_floor_bytes: int = 64 * 1024
    """...unless it holds at least this many bytes and its senders can send no more: such
    objects are bounded in number by their size (10^9 / this per GB at most), not by time."""
    uploads_inflight_max: int = 8
    commit_group_max: int = 8
    """Uploaded objects waiting for their turn to commit go to the coordinator together, up to
    this many in one step (`BatchCoordinator.commit_files`); 1 commits them one by one."""
    inflight_bytes_max: int = 64 * 1024 * 1024
    """Backpressure: `write` waits while buffered + uploading + committing bytes would exceed it."""
    upload_attempts: int = 3
    upload_backoff_ms: int = 100
    """Sleep before the second attempt; doubles for each further attempt."""
    upload_timeout_ms: int = 30_000
    """An upload attempt still running after this long counts as failed."""
    object_prefix: str = DEFAULT_OBJECT_PREFIX
    segment_cache_bytes_max: int = 32 * 1024 * 1024
    """Size of the SegmentCache a writer creates when none is given (0 disables caching)."""

    def __post_init__(self) -> None:
        if self.buffer_max_bytes < 1:
            raise ValueError(f"buffer_max_bytes must be >= 1, got {self.buffer_max_bytes}")
        if self.commit_interval_ms < 0:
            raise ValueError(f"commit_interval_ms must be >= 0, got {self.commit_interval_ms}")
        if self.linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, got {self.linger_ms}")
        if self.rotate_interval_min_ms < 0:
            raise ValueError(
                f"rotate_interval_min_ms must be >= 0, got {self.rotate_interval_min_ms}"
            )
        if self.rotate_floor_bytes < 0:
            raise ValueError(f"rotate_floor_bytes must be >= 0, got {self.rotate_floor_bytes}")
        if self.uploads_inflight_max < 1:
            raise ValueError(f"uploads_inflight_max must be >= 1, got {self.uploads_inflight_max}")
        if self.commit_group_max < 1:
            raise ValueError(f"commit_group_max must be >= 1, got {self.commit_group_max}")
        if self.inflight_bytes_max < self.buffer_max_bytes:
            raise ValueError(
                f"inflight_bytes_max ({self.inflight_bytes_max}) must be >= buffer_max_bytes "
                f"({self.buffer_max_bytes}): a full segment must fit in flight"
            )
        if self.upload_attempts < 1:
            raise ValueError(f"upload_attempts must be >= 1, got {self.upload_attempts}")
        if self.upload_timeout_ms < 1:
            raise ValueError(f"upload_timeout_ms must be >= 1, got {self.upload_timeout_ms}")
        if self.upload_backoff_ms < 0:
            raise ValueError(f"upload_backoff_ms must be >= 0, got {self.upload_backoff_ms}")
        if self.object_prefix and not self.object_prefix.endswith("/"):
            raise ValueError(f"object_prefix must be empty or end in '/': {self.object_prefix!r}")
        if self.segment_cache_bytes_max < 0:
            raise ValueError(
                f"segment_cache_bytes_max must be >= 0, got {self.segment_cache_bytes_max}"
            )


class WalStats(msgspec.Struct, frozen=True):
    """A snapshot of a writer's counters. Latencies are seconds of the writer's clock."""

    segments_rotated: int
    objects_uploaded: int
    object_bytes_uploaded: int
    upload_attempts_failed: int
    segments_upload_failed: int
    commits: int
    """Objects committed."""
    commit_steps: int
    """Coordinator steps that committed them (fewer when waiting objects went together)."""
    commits_failed: int
    batches_committed: int
    """Batches answered by the coordinator (accepted, duplicate or rejected)."""
    requests: int
    requests_timed_out: int
    inflight_bytes: int
    inflight_bytes_max_observed: int
    upload_latency_s: tuple[float, ...]
    """The most recent successful uploads (retries included), oldest first."""
    commit_latency_s: tuple[float, ...]
    fenced: bool
