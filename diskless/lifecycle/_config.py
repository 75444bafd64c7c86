"""Settings of the file manager and the retention scheduler, checked against each other once.

The one safety-critical setting is `orphan_grace_ms`. An object the coordinator does not know
may be an orphan (its broker died between upload and commit) or an object whose commit is still
on its way. The manager condemns it only once its key time is older than the grace, so the grace
must exceed the longest time a broker can take from naming an object to the end of its last
commit attempt, plus the worst clock skew between that broker and the manager:

    orphan_grace_ms > commit_deadline_ms + clock_skew_max_ms

For `diskless.wal.WalWriter`, which names a segment's object when it rotates the segment:

    commit_deadline_ms >= upload_attempts * upload_attempt_timeout
                          + the backoffs between attempts (upload_backoff_ms, doubling)
                          + the wait for the previous segment's commit (commits go in order;
                            that segment was named earlier, so its own deadline bounds it)
                          + the commit call's own timeout

`upload_attempt_timeout` is the store's per-attempt deadline (e.g. RetryingObjectStore's
`timeout_per_attempt_s` times its attempts) and the commit timeout the coordinator's. A produce
request gives up at its `request_timeout_ms`, but the writer may still commit after that, so the
request timeout alone does not bound the commit. `required_orphan_grace_ms` computes the bound
from these figures. Condemnation makes the coordinator refuse a late commit
(OBJECT_KEY_CONFLICT), so even a commit that outlives the grace is rejected (never acknowledged)
while the coordinator still holds the condemned record, i.e. for at least `unreferenced_grace_ms`
after condemnation.

The coordinators also bound how late any commit may land, whatever the writer does: `commit_file`
rejects a key whose encoded creation time is more than `commit_age_max_ms` older than the
coordinator's clock (default 240 000 ms). That bound holds even for a stalled (zombie) broker, so

    orphan_grace_ms > commit_age_max_ms + clock_skew_max_ms

is sufficient on its own (the skew being the worst difference between the coordinator's clock and
this manager's). The manager checks it against its coordinator's bound when it is created. The
coordinators read their clock for that check inside the commit's transaction, so a commit that
waited (behind other work or another process's lock) is judged by when it lands, not when it was
sent.

A condemned record rejects a late commit by name until the sweep forgets it. Its `since_ms` is
stamped by the coordinator's clock but aged by this manager's, which may run `clock_skew_max_ms`
ahead, so the record lives only `unreferenced_grace_ms - clock_skew_max_ms` of the coordinator's
time (and an UNREFERENCED file stays readable that long for fetches in progress). Hence

    unreferenced_grace_ms > clock_skew_max_ms

is required: below it a manager may delete the object and forget its record at once, and a commit
the commit-age bound does not cover (a key with no creation time in it, a coordinator without the
bound) would then be acknowledged for a deleted object.
"""

from __future__ import annotations

import msgspec

from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.compaction import MAP_BYTES_MAX, MAP_BYTES_MIN
from diskless.storage import DELETE_KEYS_MAX, LIST_PAGE_LIMIT_MAX

ORPHAN_GRACE_MS_MIN = 1_000  # below this no upload + commit could ever be safe
PERIOD_MS_MIN = 1  # a virtual clock may run cycles back to back; the real default is far larger
LIST_OBJECTS_PER_CYCLE_MAX = 1_000_000  # one cycle must stay a bounded amount of work
DELETES_PER_CYCLE_MAX = 1_000_000
RETENTION_CALLS_PER_RUN_MAX = 10_000
RETENTION_BATCHES_PER_CALL_MAX = 1_000_000


def required_orphan_grace_ms(
    *,
    upload_attempts_max: int,
    upload_attempt_timeout_ms: int,
    upload_backoff_max_ms: int,
    commit_timeout_ms: int,
    rotation_interval_ms: int = 0,
    clock_skew_max_ms: int = 0,
) -> int:
    """The smallest safe `orphan_grace_ms` for a writer with these limits.

    `upload_backoff_max_ms` is the longest sleep between two attempts (a bound for each one).
    `rotation_interval_ms` counts for a writer that names an object when its segment opens
    rather than when it rotates (WalWriter names it at rotation: leave it 0).
    """
    for name, value in (
        ("upload_attempts_max", upload_attempts_max),
        ("upload_attempt_timeout_ms", upload_attempt_timeout_ms),
        ("upload_backoff_max_ms", upload_backoff_max_ms),
        ("commit_timeout_ms", commit_timeout_ms),
        ("rotation_interval_ms", rotation_interval_ms),
        ("clock_skew_max_ms", clock_skew_max_ms),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    deadline = (
        rotation_interval_ms
        + upload_attempts_max * (upload_attempt_timeout_ms + upload_backoff_max_ms)
        + commit_timeout_ms
    )
    return deadline + clock_skew_max_ms + 1


class FileManagerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What one file manager does per cycle and how long it waits before deleting anything."""

    prefix: str = DEFAULT_OBJECT_PREFIX
    """The WAL object prefix; every object under it belongs to this library."""
    period_ms: int = 30_000
    """Time between the starts of two cycles in `run_forever`."""
    orphan_grace_ms: int = 300_000
    """Age (by key time) before an object the coordinator does not know is condemned."""
    commit_deadline_ms: int = 120_000
    """The writer's bound from naming an object to the end of its last commit attempt."""
    clock_skew_max_ms: int = 30_000
    """The worst clock difference between any broker (or the coordinator) and this manager."""
    unreferenced_grace_ms: int = 60_000
    """Time a file stays UNREFERENCED (fetches in progress may still read it) or CONDEMNED
    (late commits are still rejected by name) before it is deleted and forgotten; must exceed
    `clock_skew_max_ms` (see the module docstring)."""
    list_objects_per_cycle_max: int = 10_000
    """Objects listed per cycle past the watermark."""
    list_page_objects_max: int = LIST_PAGE_LIMIT_MAX
    """Objects per listing call (and per `file_info` call)."""
    deletes_per_cycle_max: int = 10_000
    """Files asked of `files_to_delete` per cycle."""
    delete_batch_objects_max: int = DELETE_KEYS_MAX
    """Keys per `delete_many` call."""
    pending_orphans_max: int = 10_000
    """Condemned orphans awaiting deletion that the listing skips and re-checks by name; past
    this many, the listing holds at the oldest of them instead."""
    rescan_interval_ms: int | None = 3_600_000
    """How often to list the prefix again from its start, below the watermark, to catch objects
    that appeared after the watermark passed them (a zombie's late upload, a skewed clock, keys
    not named by this library). None disables it."""
    rescan_objects_per_cycle_max: int = 1_000
    """Objects listed per cycle by a rescan in progress."""
    temp_sweep_interval_ms: int | None = 3_600_000
    """How often to reclaim the temp files of killed uploads (`ObjectStore.
    remove_stale_temp_files`: a local store's; S3 leaves none), first in the first cycle. Only
    files older than `orphan_grace_ms` go: their writer gave up on them long ago. None: never."""

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {self.prefix!r}")
        if self.period_ms < PERIOD_MS_MIN:
            raise ValueError(f"period_ms must be >= {PERIOD_MS_MIN}, got {self.period_ms}")
        for name, value in (
            ("commit_deadline_ms", self.commit_deadline_ms),
            ("clock_skew_max_ms", self.clock_skew_max_ms),
            ("unreferenced_grace_ms", self.unreferenced_grace_ms),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.orphan_grace_ms < ORPHAN_GRACE_MS_MIN:
            raise ValueError(
                f"orphan_grace_ms must be >= {ORPHAN_GRACE_MS_MIN}, got {self.orphan_grace_ms}"
            )
        if self.orphan_grace_ms <= self.commit_deadline_ms + self.clock_skew_max_ms:
            raise ValueError(
                f"orphan_grace_ms ({self.orphan_grace_ms}) must exceed commit_deadline_ms "
                f"({self.commit_deadline_ms}) + clock_skew_max_ms ({self.clock_skew_max_ms}): "
                "an object whose commit may still be in flight must never be condemned"
            )
        if self.unreferenced_grace_ms <= self.clock_skew_max_ms:
            raise ValueError(
                f"unreferenced_grace_ms ({self.unreferenced_grace_ms}) must exceed "
                f"clock_skew_max_ms ({self.clock_skew_max_ms}): a manager whose clock runs ahead "
                "would otherwise delete a condemned object and forget its record (which rejects "
                "a late commit) as soon as it is condemned"
            )
        _check_between(
            "list_objects_per_cycle_max",
            self.list_objects_per_cycle_max,
            1,
            LIST_OBJECTS_PER_CYCLE_MAX,
        )
        _check_between("list_page_objects_max", self.list_page_objects_max, 1, LIST_PAGE_LIMIT_MAX)
        _check_between(
            "deletes_per_cycle_max", self.deletes_per_cycle_max, 1, DELETES_PER_CYCLE_MAX
        )
        _check_between(
            "delete_batch_objects_max", self.delete_batch_objects_max, 1, DELETE_KEYS_MAX
        )
        _check_between(
            "pending_orphans_max", self.pending_orphans_max, 0, LIST_OBJECTS_PER_CYCLE_MAX
        )
        _check_between(
            "rescan_objects_per_cycle_max",
            self.rescan_objects_per_cycle_max,
            1,
            LIST_OBJECTS_PER_CYCLE_MAX,
        )
        if self.rescan_interval_ms is not None and self.rescan_interval_ms < self.period_ms:
            raise ValueError("rescan_interval_ms must be None or >= period_ms")
        if self.temp_sweep_interval_ms is not None and self.temp_sweep_interval_ms < self.period_ms:
            raise ValueError("temp_sweep_interval_ms must be None or >= period_ms")


class RetentionSchedulerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How often retention runs and how much it may delete per run."""

    period_ms: int = 60_000
    batches_per_call_max: int = 10_000
    """`max_batches` of each `enforce_retention` call (one coordinator transaction)."""
    calls_per_run_max: int = 10
    """Calls per run while the coordinator reports `more`; the rest waits for the next run."""

    def __post_init__(self) -> None:
        if self.period_ms < PERIOD_MS_MIN:
            raise ValueError(f"period_ms must be >= {PERIOD_MS_MIN}, got {self.period_ms}")
        _check_between(
            "batches_per_call_max", self.batches_per_call_max, 1, RETENTION_BATCHES_PER_CALL_MAX
        )
        _check_between("calls_per_run_max", self.calls_per_run_max, 1, RETENTION_CALLS_PER_RUN_MAX)


def _check_between(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


CONSOLIDATED_OBJECT_BYTES_MAX = 1 << 30
CANDIDATES_PER_RUN_MAX = 100_000


class ConsolidatorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What a consolidator moves per run, and where its objects go."""

    prefix: str = DEFAULT_OBJECT_PREFIX
    """Consolidated objects are named like WAL objects under the file manager's prefix, so that
    an object whose swap never happened is reclaimed as an orphan."""
    node_id: int = 0
    """Written into object names (`-b{node_id}-`), as a broker id is."""
    period_ms: int = 60_000
    age_ms: int = 600_000
    """Only batches committed longer ago than this move: recent data is read from the WAL
    objects (and the writer's segment cache) by consumers at the tail."""
    object_bytes_max: int = 256 * 1024 * 1024
    """The batches of one consolidated object (a single larger batch still moves alone)."""
    candidates_per_run_max: int = 100
    """Partition ranges asked of the coordinator per run; they are moved one at a time, so one
    run holds at most one object in memory."""
    index_interval_bytes: int = 32 * 1024
    """Kafka's index.interval.bytes: bytes of batches between two index entries of an object."""
    cache_bytes_max: int = 64 * 1024 * 1024
    """The consolidator's own object cache: candidates of one run that share WAL objects read
    each block once."""
    cache_block_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {self.prefix!r}")
        if self.period_ms < PERIOD_MS_MIN:
            raise ValueError(f"period_ms must be >= {PERIOD_MS_MIN}, got {self.period_ms}")
        if self.age_ms < 0 or self.node_id < 0:
            raise ValueError("age_ms and node_id must be >= 0")
        _check_between("object_bytes_max", self.object_bytes_max, 1, CONSOLIDATED_OBJECT_BYTES_MAX)
        _check_between(
            "candidates_per_run_max", self.candidates_per_run_max, 1, CANDIDATES_PER_RUN_MAX
        )
        _check_between("index_interval_bytes", self.index_interval_bytes, 1, 1 << 30)
        _check_between("cache_block_bytes", self.cache_block_bytes, 1, 1 << 30)
        if self.cache_bytes_max < self.cache_block_bytes:
            raise ValueError("cache_bytes_max must hold one cache_block_bytes")


class CleanerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What a cleaner reads and keeps per pass, and where its objects go (as consolidation's)."""

    prefix: str = DEFAULT_OBJECT_PREFIX
    """Cleaned objects are named like WAL objects, so that one whose swap never happened is
    reclaimed as an orphan."""
    node_id: int = 0
    period_ms: int = 60_000
    age_ms: int = 600_000
    """The consolidation age: a record younger than this (or than its topic's
    `min.compaction.lag.ms`, whichever is longer) is not cleaned, as Kafka's active segment is
    not; it plays the part of `segment.ms`."""
    range_bytes_max: int = 256 * 1024 * 1024
    """The rows one pass reads (from the log's start) and rewrites into one object."""
    map_bytes: int = 16 * 1024 * 1024
    """The key-to-offset map of a pass (Kafka's `log.cleaner.dedupe.buffer.size`): a dirty
    range with more distinct keys than fit is cleaned over several passes."""
    index_interval_bytes: int = 32 * 1024
    cache_bytes_max: int = 64 * 1024 * 1024
    cache_block_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {self.prefix!r}")
        if self.period_ms < PERIOD_MS_MIN:
            raise ValueError(f"period_ms must be >= {PERIOD_MS_MIN}, got {self.period_ms}")
        if self.age_ms < 0 or self.node_id < 0:
            raise ValueError("age_ms and node_id must be >= 0")
        _check_between("range_bytes_max", self.range_bytes_max, 1, CONSOLIDATED_OBJECT_BYTES_MAX)
        _check_between("map_bytes", self.map_bytes, MAP_BYTES_MIN, MAP_BYTES_MAX)
        _check_between("index_interval_bytes", self.index_interval_bytes, 1, 1 << 30)
        _check_between("cache_block_bytes", self.cache_block_bytes, 1, 1 << 30)
        if self.cache_bytes_max < self.cache_block_bytes:
            raise ValueError("cache_bytes_max must hold one cache_block_bytes")
