"""How a read rule is written: a plan of the lookups it needs, over the indexes a backend keeps.

A backend supplies a `ReadSource` that only fetches candidate rows through its indexes; the
decisions (what a fetch returns, which offset answers ListOffsets) are made by the read rules
(`fetch`, `list_offsets`), once.

A read is a plan, as a write is a step: a generator that yields the lookups it needs (each a
call of a `ReadSource` method, batched over every partition it can) and decides on what they
answer. It never waits itself: a store over a network loads each lookup on its event loop
(`_store.decide`), one in memory answers at once (`decided`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Final, NamedTuple, Protocol, TypeAlias, TypeVar

from diskless._types import TopicPartition
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch

T = TypeVar("T")

Lookup: TypeAlias = Callable[[Any], Any]
"""One lookup of a plan: a call of a `ReadSource` method (or its awaitable twin on a store's
read view, `_store.ReadView`)."""
Plan: TypeAlias = Generator[Lookup, Any, T]
"""A read rule: it yields lookups, is sent each one's answer, and returns its decision."""

FETCH_HEAD_ROWS: Final = 16
"""Batch rows a fetch's lookup loads per partition from its offset, after the extents there: a
consumer that keeps up finds all it gets among them; a deeper backlog pages on."""
FETCH_PAGE_ROWS_MAX: Final = 256
"""Batch rows a page of a deeper backlog loads at most per partition (the first page what the
budgets leave room for, later ones fourfold)."""


class FetchHead(NamedTuple):
    """What a fetch's one lookup loads of a partition it asks for, from the fetch offset."""

    state: PartitionState
    rows: list[StoredBatch]
    """The first stored rows from the offset: `ReadSource.batches_from`'s first ones."""
    complete: bool
    """Whether `rows` are every row from the offset (else the rest is paged on)."""
    aborted: bool
    """Whether some aborted transaction's marker is at or after the offset."""


class ReadSource(Protocol):
    """Index lookups a backend provides; every one is O(log n) plus the rows it yields. A
    store's read view (`_store.ReadView`) has each of them, awaitable; a plan's lookups call
    them.

    A fetch asks for many partitions at once, and a store over a network pays a round trip per
    statement: the batched lookups (`partitions`, `fetch_heads`, `aborted_within`) answer all of
    them in one statement. Their defaults here ask partition by partition, which suits a source
    in memory."""

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state, None when it does not exist."""
        ...

    def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        """Each partition's state (None: it does not exist), in one lookup."""
        return [self.partition(tp) for tp in tps]

    def fetch_heads(
        self, wanted: Sequence[tuple[TopicPartition, int]], rows: int = FETCH_HEAD_ROWS
    ) -> list[FetchHead | None]:
        """For each (partition, offset), the partition's state and its first rows from the
        offset (None: no such partition), in one lookup: at least `rows` rows unless that is
        all there are (the SQL stores load every extent there and that many batch rows)."""
        heads: list[FetchHead | None] = []
        for tp, offset in wanted:
            state = self.partition(tp)
            if state is None:
                heads.append(None)
                continue
            loaded = list(itertools.islice(self.batches_from(state, offset), rows))
            aborted = next(self.aborted_from(state, offset), None) is not None
            heads.append(FetchHead(state, loaded, len(loaded) < rows, aborted))
        return heads

    def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        """For each (partition, offset, end), the aborted transactions whose marker is at or
        after `offset` and whose first offset is below `end`, by marker; in one lookup."""
        return [
            [a for a in self.aborted_from(state, offset) if a.first_offset < end]
            for state, offset, end in ranges
        ]

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        """Stored batches in offset order, from the one holding `offset` (or the next one)."""
        ...

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        """The first stored batch (by offset) among those with the largest `timestamp`."""
        ...

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        """The first stored batch whose `ts_running_max` is >= `ts`."""
        ...

    def aborted_from(self, state: PartitionState, offset: int) -> Iterator[AbortedTxn]:
        """Aborted transactions whose marker (last offset) is at or after `offset`, in order."""
        ...


def heads_lookup(wanted: list[tuple[TopicPartition, int]], rows: int) -> Lookup:
    """The lookup of `ReadSource.fetch_heads`, `rows` rows a partition."""
    return lambda source: source.fetch_heads(wanted, rows)


def decided(plan: Plan[T], source: ReadSource) -> T:
    """A plan's answer over a source that answers at once (in memory)."""
    try:
        lookup = next(plan)
        while True:
            lookup = plan.send(lookup(source))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
