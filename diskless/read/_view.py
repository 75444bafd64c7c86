"""A broker's local view of partition offsets, kept by the coordinator's change feed.

KIP-1164 gives every broker a read-only replica of the batch coordinator. This is its part
that idle consumers need: per partition, the high watermark, last stable offset and log start
offset (and whether it exists), as read from the coordinator. With it, a fetch at the end of
what it may see is answered from memory, with no query and no thread hop, and parks
(`FetchPurgatory`) until the partition changes.

Exactness. The view holds only values the coordinator answered, and answers only "nothing new
yet" from them (`at_visible_end`); a fetch that would get records, an error, or a partition the
view does not know goes to the coordinator. So a stale view can delay an answer, never make a
wrong one: what it says was true when it was read. It is re-read:
- for the partitions the change feed names (`BatchCoordinator.watch_changes`), this process's
  commits at once and others' as the store learns them (PostgreSQL NOTIFY, SQLite's check);
- for every tracked partition, every `reconcile_ms`, so that a lost notice, a restarted
  coordinator or a cut feed leaves it stale for at most that long (plus one read).
Re-reads run one at a time, so a later read's values never lose to an earlier one's. When a
partition's values change, its version moves and the fetches parked on it wake. Between a
notice naming a partition and the re-read, the view does not answer for it: a fetch right after
this process's own commit goes to the coordinator and sees that commit.

The view tracks the partitions fetched in the last `idle_ms`, at most `partitions_max` of them
(beyond, a partition is simply not tracked: its fetches ask the coordinator, and a fetch that
finds too little waits its full time).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    PartitionChanges,
    PartitionOffsets,
    at_visible_end,
)
from diskless.errors import CoordinatorError
from diskless.read._purgatory import FetchPurgatory

_log = logging.getLogger(__name__)

RECONCILE_MS_DEFAULT: Final = 1_000
IDLE_MS_DEFAULT: Final = 300_000
PARTITIONS_MAX_DEFAULT: Final = 100_000
RETRY_S_MAX: Final = 1.0


class Reading(enum.Enum):
    READING = "reading"


READING: Final = Reading.READING
"""`PartitionView.answer`: a read of the partition is coming; a fetch that may wait parks."""

Subscribe = Callable[[Callable[[PartitionChanges], None]], Callable[[], None]]


class PartitionView:
    """The view of one broker (see the module doc); `start` on the event loop, then `close`."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        purgatory: FetchPurgatory,
        *,
        reconcile_ms: int = RECONCILE_MS_DEFAULT,
        idle_ms: int = IDLE_MS_DEFAULT,
        partitions_max: int = PARTITIONS_MAX_DEFAULT,
        subscribe: Subscribe | None = None,
    ) -> None:
        """`subscribe`: how the view hears of changes (the coordinator's `watch_changes` by
        default; a test passes a lossy one)."""
        if reconcile_ms < 1 or idle_ms < 1 or partitions_max < 0:
            raise ValueError("reconcile_ms and idle_ms must be >= 1, partitions_max >= 0")
        self._coordinator = coordinator
        self._purgatory = purgatory
        self._reconcile_s = reconcile_ms / 1000
        self._idle_s = idle_ms / 1000
        self._partitions_max = partitions_max
        self._subscribe: Subscribe = (
            subscribe if subscribe is not None else coordinator.watch_changes
        )
        self._offsets: dict[TopicPartition, PartitionOffsets | None] = {}
        """What the coordinator last answered for each tracked partition (None: absent)."""
        self._versions: dict[TopicPartition, int] = {}
        self._used: dict[TopicPartition, float] = {}
        """Tracked partitions, with when a fetch last named them (wall monotonic time)."""
        self._dirty: set[TopicPartition] = set()
        """To re-read at the next read."""
        self._everything = False
        """The next read re-reads every tracked partition."""
        self._notices = 0
        self._stale: dict[TopicPartition, int] = {}
        """Partitions a notice named (with the notice's number) that no read has re-read since:
        the view does not answer for them, so that a fetch right after this process's own
        commit sees it. (An "everything" notice, which only other processes' commits or a gap
        in the feed cause, blocks nothing: the view is re-read whole and answers meanwhile as it
        would have had the notice come a little later.)"""
        self._pending = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        self._failing = False
        self._reading = False
        self.reads = 0
        """Coordinator reads this view made (each one read of many partitions)."""

    # --- the fetch side -----------------------------------------------------------------------
    def version(self, tp: TopicPartition) -> int:
        """Moves whenever the view's values for `tp` change."""
        return self._versions.get(tp, 0)

    def answer(
        self, tp: TopicPartition, offset: int, isolation_level: IsolationLevel
    ) -> FetchResult | Reading | None:
        """The empty answer of a fetch from `offset` that finds nothing yet; `READING` when a
        read of `tp` is coming (its first, or after a notice named it), which will move its
        version; None when the view cannot tell (the coordinator answers). Tracks `tp`."""
        if self._used.get(tp) is None:
            if len(self._used) >= self._partitions_max:
                return None
            self._dirty.add(tp)
            self._pending.set()
            self._used[tp] = time.monotonic()
            return READING
        self._used[tp] = time.monotonic()
        offsets = self._offsets.get(tp, READING)
        if offsets is READING or tp in self._stale:
            return READING
        if offsets is None or not at_visible_end(offsets, offset, isolation_level):
            return None
        return FetchResult(
            ErrorCode.NONE,
            high_watermark=offsets.high_watermark,
            last_stable_offset=offsets.last_stable_offset,
            log_start_offset=offsets.log_start_offset,
        )

    @property
    def busy(self) -> bool:
        """Whether a notice waits to be re-read, or a read runs (for tests and diagnostics)."""
        return self._pending.is_set() or self._reading or bool(self._stale)

    def offsets(self) -> Mapping[TopicPartition, PartitionOffsets | None]:
        """The values held, for tests and diagnostics."""
        return self._offsets

    # --- keeping it -------------------------------------------------------------------------
    def start(self) -> None:
        if self._tasks:
            return
        self._unsubscribe = self._subscribe(self._on_change)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._reread()), loop.create_task(self._reconcile())]

    def _on_change(self, changes: PartitionChanges) -> None:
        self._notices += 1
        if changes.everything:  # another process's, or a gap in the feed: no answer waits for it
            self._everything = True
        else:
            named = (
                [tp for tp in self._used if changes.covers(tp)]
                if changes.topics
                else [tp for tp in changes.partitions if tp in self._used]
            )
            self._dirty.update(named)
            for tp in named:
                self._stale[tp] = self._notices
        if self._everything or self._dirty:
            self._pending.set()

    def reconcile(self) -> None:
        """Re-read every tracked partition soon, whatever the feed said (every `reconcile_ms`;
        a test calls it when it wants)."""
        self._forget_idle()
        self._everything = True
        self._pending.set()

    async def _reconcile(self) -> None:
        while True:
            await asyncio.sleep(self._reconcile_s)
            self.reconcile()

    def _forget_idle(self) -> None:
        cutoff = time.monotonic() - self._idle_s
        for tp in [tp for tp, used in self._used.items() if used < cutoff]:
            del self._used[tp]
            self._stale.pop(tp, None)
            self._offsets.pop(tp, None)
            self._versions.pop(tp, None)
            self._dirty.discard(tp)

    async def _reread(self) -> None:
        delay = 0.01
        while True:
            await self._pending.wait()
            self._pending.clear()
            everything = self._everything
            wanted = list(self._used) if everything else list(self._dirty)
            self._everything = False
            self._dirty.clear()
            started = self._notices
            if not wanted:
                continue
            self._reading = True
            try:
                self.reads += 1
                found = await self._coordinator.partition_offsets(wanted)
            except Exception as error:  # whatever it is, the view must not stop re-reading
                if not self._failing:  # (the coordinator's availability reports its outages)
                    level = logging.DEBUG if isinstance(error, CoordinatorError) else logging.ERROR
                    _log.log(level, "partition view cannot re-read (%r); retrying", error)
                self._failing = True
                self._dirty.update(tp for tp in wanted if tp in self._used)
                self._pending.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_S_MAX)
                continue
            finally:
                self._reading = False
            if self._failing:
                _log.debug("partition view re-reads again")
                self._failing = False
            delay = 0.01
            assert len(found) == len(wanted), (len(found), len(wanted))
            for tp, offsets in zip(wanted, found, strict=True):
                fresh = self._stale.get(tp, started + 1) <= started
                if fresh:
                    del self._stale[tp]
                self._update(tp, offsets, fresh)

    def _update(self, tp: TopicPartition, offsets: PartitionOffsets | None, fresh: bool) -> None:
        """New values for `tp`: its version moves and its parked fetches wake when they
        changed, or when they were stale (fetches parked for this read look again)."""
        if tp not in self._used:
            return  # forgotten while the read ran
        if self._offsets.get(tp, READING) == offsets and not fresh:
            return
        self._offsets[tp] = offsets
        self._versions[tp] = self._versions.get(tp, 0) + 1
        self._purgatory.wake(tp)

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
