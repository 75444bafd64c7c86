"""The in-memory store's state per partition: its log of batch rows and what is keyed by it."""

from __future__ import annotations

import bisect
import collections
import operator
from collections.abc import Iterator

from sortedcontainers import SortedDict

from diskless.coordinator._rules.rows import (
    AbortedTxn,
    PartitionState,
    StoredBatch,
    TxnRegistration,
)
from diskless.coordinator._rules.txn import first_ongoing
from diskless.txn import ProducerEntry

_COMPACT_MIN = 1024
"""Deleted list heads are compacted once they are this long and half of the list."""

_base_offset = operator.attrgetter("base_offset")
_running_max = operator.attrgetter("ts_running_max")


def _is_row(batch: StoredBatch) -> bool:
    return not batch.is_extent


class Log:
    """One partition's batches. Offsets (and running max timestamps) only grow, so the
    append-only list is sorted by both and bisection finds either in O(log n).

    Deleting from the front only moves `head`; the dead prefix is dropped once it is large, which
    keeps deletion amortized O(1) and lookups O(log n) by bisection.
    """

    def __init__(self) -> None:
        self.rows: list[StoredBatch] = []
        self.head = 0
        # Batches by non-increasing timestamp, earliest first among equals: the front is the
        # MAX_TIMESTAMP answer (a sliding-window maximum over a log trimmed at the front).
        self.max_queue: collections.deque[StoredBatch] = collections.deque()

    def __len__(self) -> int:
        return len(self.rows) - self.head

    def append(self, batch: StoredBatch) -> None:
        rows = self.rows
        assert not rows or batch.base_offset > rows[-1].last_offset
        rows.append(batch)
        queue = self.max_queue  # `_enqueue`, inlined: once per committed batch
        timestamp = batch.timestamp
        while queue and queue[-1].timestamp < timestamp:
            queue.pop()
        queue.append(batch)

    def _enqueue(self, batch: StoredBatch) -> None:
        queue = self.max_queue
        while queue and queue[-1].timestamp < batch.timestamp:
            queue.pop()
        queue.append(batch)

    def below(self, offset: int) -> Iterator[StoredBatch]:
        """The stored batches lying entirely below `offset`, oldest first."""
        for i in range(self.head, len(self.rows)):
            if self.rows[i].last_offset >= offset:
                return
            yield self.rows[i]

    def trim(self, offset: int) -> None:
        """Delete the batches lying entirely below `offset`."""
        rows = self.rows
        while self.head < len(rows) and rows[self.head].last_offset < offset:
            if self.max_queue and self.max_queue[0] is rows[self.head]:
                self.max_queue.popleft()
            self.head += 1
        if self.head >= _COMPACT_MIN and self.head * 2 >= len(rows):
            del rows[: self.head]
            self.head = 0

    def consolidated(self) -> int:
        """Where the extents (a prefix) end: the index of the first batch row."""
        return bisect.bisect_left(self.rows, True, lo=self.head, key=_is_row)

    def swap(self, extent: StoredBatch) -> None:
        """Replace the rows within the extent's offsets (right after the extents) by it; an
        extent whose rows are gone goes first."""
        rows = self.rows
        if self.head == len(rows) or rows[self.head].base_offset > extent.last_offset:
            rows.insert(self.head, extent)  # a cleaned extent: its rows were trimmed just now
            self._requeue()
            return
        start = self.consolidated()
        end = bisect.bisect_right(self.rows, extent.last_offset, lo=start, key=_base_offset)
        assert rows[start].base_offset == extent.base_offset, (rows[start], extent)
        assert rows[end - 1].last_offset == extent.last_offset, (rows[end - 1], extent)
        rows[start:end] = [extent]
        self._requeue()

    def _requeue(self) -> None:
        rows = self.rows
        self.max_queue.clear()
        for i in range(self.head, len(rows)):
            self._enqueue(rows[i])

    def from_offset(self, offset: int) -> Iterator[StoredBatch]:
        index = bisect.bisect_right(self.rows, offset, lo=self.head, key=_base_offset) - 1
        index = max(self.head, index)
        for i in range(index, len(self.rows)):
            yield self.rows[i]

    def first_running_max_at_least(self, ts: int) -> StoredBatch | None:
        index = bisect.bisect_left(self.rows, ts, lo=self.head, key=_running_max)
        return self.rows[index] if index < len(self.rows) else None

    def max_timestamp(self) -> StoredBatch | None:
        return self.max_queue[0] if self.max_queue else None


class Partition:
    """A partition's state and everything keyed by it."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.log = Log()
        self.producers: dict[int, ProducerEntry] = {}
        self.registrations: dict[int, TxnRegistration] = {}
        self.ongoing: SortedDict = SortedDict()
        """The ongoing-transaction index: first offset -> producer id."""
        self.aborted: list[AbortedTxn] = []

    def refresh_lso(self) -> None:
        self.state.txn_first_offset = first_ongoing(self.ongoing.items())
