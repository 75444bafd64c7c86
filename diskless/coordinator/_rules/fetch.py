"""Kafka's Fetch over batch metadata: the budgets, and the plan that finds each requested
partition's batches within them.

The coordinator applies the budgets to batch rows, an extent standing for the batches it holds
(`ExtentBudget`); the read path applies them again, exactly, once it has expanded the extents
into their batches (`FetchBudget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol, TypeVar

import msgspec

from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.coordinator._rules.reads import (
    FETCH_HEAD_ROWS,
    FETCH_PAGE_ROWS_MAX,
    FetchHead,
    Plan,
    ReadSource,
    decided,
    heads_lookup,
)
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch
from diskless.coordinator._values import (
    BatchInfo,
    FindBatchesRequest,
    FindBatchesResponse,
    PartitionOffsets,
)


class Sized(Protocol):
    @property
    def size(self) -> int: ...


T_Sized = TypeVar("T_Sized", bound=Sized)


class Row(Sized, Protocol):
    """What `ExtentBudget` walks: a stored row, or (for models of the contract) anything that
    tells its size and whether it is an extent."""

    @property
    def is_extent(self) -> bool: ...


T_Row = TypeVar("T_Row", bound=Row)


class FetchBudget:
    """Kafka's fetch budgets over one response, applied partition by partition in request order.

    Whole batches within each partition's `max_bytes` and within what is left of the response's
    `fetch_max_bytes`. A batch larger than what is left is taken alone only when nothing has been
    taken yet in the whole response, so that a consumer always makes progress and never gets more
    than one oversized batch. The coordinator applies it to batch rows; the read path applies it
    again once it has expanded extents into their batches.
    """

    def __init__(self, fetch_max_bytes: int) -> None:
        self._remaining = fetch_max_bytes
        self._returned_any = False

    def take(self, batches: Iterable[T_Sized], partition_max_bytes: int) -> list[T_Sized]:
        """The leading batches of one partition's (offset-ordered, isolation-bounded) batches
        that the budgets allow."""
        budget = max(0, min(partition_max_bytes, self._remaining))
        taken: list[T_Sized] = []
        used = 0
        for batch in batches:
            if used + batch.size <= budget or not (taken or self._returned_any):
                taken.append(batch)
                used += batch.size
                if used <= budget:
                    continue
            break
        self._remaining = max(0, self._remaining - used)
        self._returned_any = self._returned_any or bool(taken)
        return taken


class ExtentBudget:
    """`FetchBudget` over rows some of which are extents, whose batches the coordinator does not
    see: it returns, per partition, every row the exact walk over the expanded batches takes
    from (a superset, so that the read path cuts it back without asking again), and exactly
    `FetchBudget`'s answer when there is no extent.

    It keeps two bounds on what the exact walk has left of the response budget. The high one
    decides what to take: the extent holding the fetch offset counts 0 bytes (the exact walk
    may take any tail of it), a later extent its full size (reaching past it takes all of it).
    After a partition, the high bound loses only the bytes the exact walk surely took (the
    leading rows before any extent that fit the low bound), and the low bound everything
    returned; so no later partition gets less budget here than the exact walk gives it.

    Where it stops, the exact walk stops too: a row that does not fit here (and is left out)
    fits the exact walk's smaller budget even less, and a row taken past the budget here is
    past it there.
    """

    def __init__(self, fetch_max_bytes: int) -> None:
        self._high = fetch_max_bytes
        self._low = fetch_max_bytes
        self._returned_any = False

    def take(self, rows: Iterable[T_Row], partition_max_bytes: int) -> list[T_Row]:
        budget = max(0, min(partition_max_bytes, self._high))
        sure_budget = max(0, min(partition_max_bytes, self._low))
        taken: list[T_Row] = []
        used = 0  # a lower bound of the exact walk's bytes up to here, should it get here
        sure = 0
        sure_open = True
        returned = 0
        for row in rows:
            if row.is_extent:
                sure_open = False
                if taken:
                    used += row.size
                taken.append(row)
                returned += row.size
                if used <= budget:
                    continue
                break
            alone = not (taken or self._returned_any)
            if used + row.size <= budget or alone:
                if sure_open and (sure + row.size <= sure_budget or alone):
                    sure += row.size
                else:
                    sure_open = False
                taken.append(row)
                used += row.size
                returned += row.size
                if used <= budget:
                    continue
            break
        self._high = max(0, self._high - sure)
        self._low = max(0, self._low - returned)
        self._returned_any = self._returned_any or bool(taken)
        return taken


class Ends(Protocol):
    """What `fetch_end` reads: a `PartitionState` or a `PartitionOffsets`."""

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


def fetch_end(ends: Ends, isolation_level: IsolationLevel) -> int:
    """Where a fetch's visible records end: the last stable offset for READ_COMMITTED, else the
    high watermark."""
    committed = isolation_level == IsolationLevel.READ_COMMITTED
    return ends.last_stable_offset if committed else ends.high_watermark


def at_visible_end(offsets: PartitionOffsets, offset: int, isolation_level: IsolationLevel) -> bool:
    """Whether a fetch from `offset` finds nothing yet, and no error: `offset` is in range and
    at or past the end of what `isolation_level` sees (`find_batches` answers it so)."""
    in_range = offsets.log_start_offset <= offset <= offsets.high_watermark
    return in_range and offset >= fetch_end(offsets, isolation_level)


def partition_offsets_plan(
    partitions: Sequence[TopicPartition],
) -> Plan[list[PartitionOffsets | None]]:
    """Each partition's offsets (None: it does not exist)."""
    states: list[PartitionState | None] = yield lambda source: source.partitions(partitions)
    return [
        None
        if state is None
        else PartitionOffsets(
            state.key, state.high_watermark, state.last_stable_offset, state.log_start_offset
        )
        for state in states
    ]


def find_batches_plan(
    requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
) -> Plan[list[FindBatchesResponse]]:
    """Batches from each requested offset within the fetch's budgets (`FetchBudget`; over
    extents the superset of `ExtentBudget`, which the read path cuts back exactly).

    READ_COMMITTED stops at the last stable offset (the LSO is always the first offset of a
    batch: the open transaction's first one) and lists the aborted transactions overlapping what
    it returns.

    One lookup loads every partition's state and first rows (`ReadSource.fetch_heads`), and one
    more the aborted transactions, when some answer needs them. Where the budgets reach past a
    partition's loaded rows, the partitions that ran short load their next rows together, in one
    more lookup, and the walk is decided again. That page holds what their budgets have left at
    the mean size of the rows loaded so far (`_page_for`), so that one more lookup usually
    suffices and loads few rows past the budgets; a partition still short after it pages on
    fourfold.
    """
    wanted = [(r.topic_partition, r.offset) for r in requests]
    loaded: list[FetchHead | None] = yield lambda source: source.fetch_heads(wanted)
    heads = list(loaded)
    page = 0
    while True:
        walk = _walk(requests, heads, fetch_max_bytes)
        if not walk.short:
            break
        sized = max(_page_for(requests[i], heads[i]) for i in walk.short)
        page = min(max(sized, page * 4), FETCH_PAGE_ROWS_MAX)
        further = [(requests[i].topic_partition, _after(heads[i])) for i in walk.short]
        more: list[FetchHead | None] = yield heads_lookup(further, page)
        for i, extra in zip(walk.short, more, strict=True):
            heads[i] = _extended(heads[i], extra)
    responses = walk.responses
    if walk.overlapping:
        ranges = [(state, offset, upper) for _, state, offset, upper in walk.overlapping]
        found: list[list[AbortedTxn]] = yield lambda source: source.aborted_within(ranges)
        for (index, *_), aborted in zip(walk.overlapping, found, strict=True):
            listed = [(a.producer_id, a.first_offset) for a in aborted]
            responses[index] = msgspec.structs.replace(
                responses[index], aborted_transactions=listed
            )
    assert len(responses) == len(requests)
    return responses


class _Walk(NamedTuple):
    """The budgets' walk over the rows loaded so far."""

    responses: list[FindBatchesResponse]
    short: list[int]
    """The requests whose walk ran past the rows loaded (it is decided again once they load
    more; until then later partitions are walked as if those ended there)."""
    overlapping: list[tuple[int, PartitionState, int, int]]
    """(response index, partition, offset, end) of the answers that list aborted transactions."""


def _walk(
    requests: Sequence[FindBatchesRequest],
    heads: Sequence[FetchHead | None],
    fetch_max_bytes: int,
) -> _Walk:
    responses: list[FindBatchesResponse] = []
    short: list[int] = []
    overlapping: list[tuple[int, PartitionState, int, int]] = []
    budget = ExtentBudget(fetch_max_bytes)
    for index, (request, head) in enumerate(zip(requests, heads, strict=True)):
        if head is None:
            responses.append(FindBatchesResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []))
            continue
        state = head.state
        offset = request.offset
        if offset < state.log_start_offset or offset > state.high_watermark:
            responses.append(_fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE, [], state))
            continue
        end = fetch_end(state, request.isolation_level)
        rows: list[StoredBatch] = []
        if offset < end:
            loaded = _Loaded(head.rows, end, offset)
            rows = budget.take(loaded, request.max_bytes)
            if loaded.ran_out and not head.complete:
                short.append(index)
        timestamp_type = state.config.timestamp_type
        taken = [row.to_info(timestamp_type) for row in rows]
        # The first batch holds `offset`, or follows it when a mirrored log has no batch there
        # (offsets the source's compaction or log start left out: `_rules.mirror`).
        assert not taken or offset <= taken[0].last_offset, offset
        committed = request.isolation_level == IsolationLevel.READ_COMMITTED
        if committed and taken and head.aborted:
            upper = taken[-1].last_offset + 1
            overlapping.append((len(responses), state, offset, upper))
        responses.append(_fetch_response(ErrorCode.NONE, taken, state))
    return _Walk(responses, short, overlapping)


class _Loaded:
    """A partition's loaded rows below `end`, noting whether a walk asked for more than them."""

    def __init__(self, rows: list[StoredBatch], end: int, start: int = 0) -> None:
        self._rows = iter(rows)
        self._end = end
        self._start = start
        self.ran_out = False

    def __iter__(self) -> Iterator[StoredBatch]:
        for row in self._rows:
            if row.base_offset >= self._end:
                return
            if row.last_offset < self._start:
                continue  # before a mirrored log's gap that holds the fetch offset
            yield row
        self.ran_out = True


def _page_for(request: FindBatchesRequest, head: FetchHead | None) -> int:
    """Rows that a short partition's budget has left room for, at the mean size of its rows
    loaded so far, and one more (the row that no longer fits ends the walk); at least
    `FETCH_HEAD_ROWS`."""
    assert head is not None and head.rows
    loaded = sum(row.size for row in head.rows)
    left = max(0, request.max_bytes - loaded)
    mean = max(1, loaded // len(head.rows))
    return max(FETCH_HEAD_ROWS, -(-left // mean) + 1)


def _after(head: FetchHead | None) -> int:
    """Where a short partition's next rows start."""
    assert head is not None and head.rows
    return head.rows[-1].last_offset + 1


def _extended(head: FetchHead | None, more: FetchHead | None) -> FetchHead:
    """`head` with the rows loaded after its last one."""
    assert head is not None and more is not None
    last = head.rows[-1].base_offset
    later = [row for row in more.rows if row.base_offset > last]
    return head._replace(rows=head.rows + later, complete=more.complete)


def _fetch_response(
    error: ErrorCode,
    batches: list[BatchInfo],
    state: PartitionState,
    aborted: list[tuple[int, int]] | None = None,
) -> FindBatchesResponse:
    return FindBatchesResponse(
        error,
        batches,
        log_start_offset=state.log_start_offset,
        high_watermark=state.high_watermark,
        last_stable_offset=state.last_stable_offset,
        aborted_transactions=aborted if aborted is not None else [],
    )


def find_batches(
    source: ReadSource, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
) -> list[FindBatchesResponse]:
    """`find_batches_plan` over a source in memory."""
    return decided(find_batches_plan(requests, fetch_max_bytes), source)
