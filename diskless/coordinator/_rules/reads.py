"""Read-side rules shared by every backend: fetch budgets, ListOffsets, DeleteRecords, retention.

A backend supplies a `ReadSource` that only fetches candidate rows through its indexes; the
decisions (what to return, which offset answers, what to delete) are made here, once.

A read is a plan, as a write is a step: a generator that yields the lookups it needs (each a
call of a `ReadSource` method, batched over every partition it can) and decides on what they
answer. It never waits itself: a store over a network loads each lookup on its event loop
(`_store.decide`), one in memory answers at once (`decided`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple, Protocol, TypeAlias, TypeVar

import msgspec

from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch
from diskless.coordinator._values import (
    BatchInfo,
    DeleteRecordsResponse,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    PartitionOffsets,
    TimeLookup,
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
"""Batch rows a page of a deeper backlog loads at most per partition (pages grow fourfold from
`FETCH_HEAD_ROWS`)."""
OFFSET_LAST: Final = (1 << 63) - 1
"""An offset past every stored row."""


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
    more lookup, and the walk is decided again.
    """
    wanted = [(r.topic_partition, r.offset) for r in requests]
    loaded: list[FetchHead | None] = yield lambda source: source.fetch_heads(wanted)
    heads = list(loaded)
    page = FETCH_HEAD_ROWS
    while True:
        walk = _walk(requests, heads, fetch_max_bytes)
        if not walk.short:
            break
        page = min(page * 4, FETCH_PAGE_ROWS_MAX)
        further = [(requests[i].topic_partition, _after(heads[i])) for i in walk.short]
        more: list[FetchHead | None] = yield _heads(further, page)
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
            loaded = _Loaded(head.rows, end)
            rows = budget.take(loaded, request.max_bytes)
            if loaded.ran_out and not head.complete:
                short.append(index)
        timestamp_type = state.config.timestamp_type
        taken = [row.to_info(timestamp_type) for row in rows]
        assert not taken or taken[0].base_offset <= offset <= taken[0].last_offset, offset
        committed = request.isolation_level == IsolationLevel.READ_COMMITTED
        if committed and taken and head.aborted:
            upper = taken[-1].last_offset + 1
            overlapping.append((len(responses), state, offset, upper))
        responses.append(_fetch_response(ErrorCode.NONE, taken, state))
    return _Walk(responses, short, overlapping)


class _Loaded:
    """A partition's loaded rows below `end`, noting whether a walk asked for more than them."""

    def __init__(self, rows: list[StoredBatch], end: int) -> None:
        self._rows = iter(rows)
        self._end = end
        self.ran_out = False

    def __iter__(self) -> Iterator[StoredBatch]:
        for row in self._rows:
            if row.base_offset >= self._end:
                return
            yield row
        self.ran_out = True


def _heads(wanted: list[tuple[TopicPartition, int]], rows: int) -> Lookup:
    return lambda source: source.fetch_heads(wanted, rows)


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


def list_offsets_plan(requests: Sequence[ListOffsetsRequest]) -> Plan[list[ListOffsetsResponse]]:
    """Kafka ListOffsets over batch metadata.

    A lookup by time, and MAX_TIMESTAMP, are answered by records: the coordinator finds the rows
    that hold the answer and the read path reads their records (`TimeLookup`).
    """
    responses = []
    for request in requests:
        responses.append((yield from _list_offset(request)))
    assert len(responses) == len(requests)
    return responses


def _list_offset(request: ListOffsetsRequest) -> Plan[ListOffsetsResponse]:
    tp = request.topic_partition
    state: PartitionState | None = yield lambda source: source.partition(tp)
    if state is None:
        return ListOffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ts = request.timestamp
    end = fetch_end(state, request.isolation_level)
    if ts == OffsetSpec.EARLIEST:
        return ListOffsetsResponse(ErrorCode.NONE, state.log_start_offset)
    if ts == OffsetSpec.LATEST:
        return ListOffsetsResponse(ErrorCode.NONE, end)
    if ts == OffsetSpec.MAX_TIMESTAMP:
        return (yield from _max_timestamp(state, end))
    if ts < 0:
        return ListOffsetsResponse(ErrorCode.INVALID_REQUEST)
    first = yield from _first_reaching(state, ts)
    if first is None or first.base_offset >= end:
        return ListOffsetsResponse(ErrorCode.NONE)  # whatever it holds is past the end: none
    rows = [first]
    if first.base_offset < state.log_start_offset:
        # The log start cuts `first`: the records it kept may all be earlier than `ts`, and the
        # answer is then in the next row that reaches `ts`.
        then = yield from _first_row(state, first.last_offset + 1, end, ts)
        if then is not None:
            rows.append(then)
    return ListOffsetsResponse(ErrorCode.NONE, lookup=_lookup(state, ts, end, rows))


def _first_reaching(state: PartitionState, ts: int) -> Plan[StoredBatch | None]:
    """The first stored row whose timestamp is at least `ts`."""
    top: StoredBatch | None = yield lambda source: source.max_timestamp_batch(state)
    if top is None or top.timestamp < ts:
        return None
    # Every stored batch before `first` has a running max, hence a timestamp, below `ts`. Only
    # when `first` is the oldest stored batch can its running max come from a deleted batch; then
    # scan forward (bounded by the answer's position, which `top` guarantees exists).
    first: StoredBatch | None = yield lambda source: source.first_running_max_at_least(state, ts)
    assert first is not None
    if first.timestamp >= ts:
        return first
    found = yield from _first_row(state, first.base_offset, OFFSET_LAST, ts)
    if found is None:
        raise AssertionError(f"no batch at or after timestamp {ts} although {top} exists")
    return found


def _first_row(state: PartitionState, offset: int, end: int, ts: int) -> Plan[StoredBatch | None]:
    """The first row from the one holding `offset` and below `end` whose timestamp is at least
    `ts`, loaded a page at a time (pages growing as in `find_batches_plan`)."""
    page = FETCH_HEAD_ROWS
    wanted = [(state.topic_partition, offset)]
    while True:
        loaded: list[FetchHead | None] = yield _heads(wanted, page)
        head = loaded[0]
        if head is None:  # deleted meanwhile: the snapshot holds it, so never here
            return None
        for row in head.rows:
            if row.base_offset >= end:
                return None
            if row.timestamp >= ts:
                return row
        if head.complete or not head.rows:
            return None
        wanted = [(state.topic_partition, head.rows[-1].last_offset + 1)]
        page = min(page * 4, FETCH_PAGE_ROWS_MAX)


def _max_timestamp(state: PartitionState, end: int) -> Plan[ListOffsetsResponse]:
    """Kafka answers the first record holding the largest timestamp, found in the first batch
    holding it. Should the log start have cut that record off, the batch's first kept offset
    answers, with the largest timestamp."""
    top: StoredBatch | None = yield lambda source: source.max_timestamp_batch(state)
    if top is None or top.base_offset >= end:
        return ListOffsetsResponse(ErrorCode.NONE)
    floor = max(top.base_offset, state.log_start_offset)
    offset, timestamp = (floor, top.timestamp) if floor < end else (-1, -1)
    lookup = _lookup(state, top.timestamp, end, [top])
    return ListOffsetsResponse(ErrorCode.NONE, offset, timestamp, lookup)


def _lookup(state: PartitionState, ts: int, end: int, rows: list[StoredBatch]) -> TimeLookup:
    batches = [row.to_info(state.config.timestamp_type) for row in rows]
    return TimeLookup(ts, state.log_start_offset, end, batches)


def decided(plan: Plan[T], source: ReadSource) -> T:
    """A plan's answer over a source that answers at once (in memory)."""
    try:
        lookup = next(plan)
        while True:
            lookup = plan.send(lookup(source))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def find_batches(
    source: ReadSource, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
) -> list[FindBatchesResponse]:
    """`find_batches_plan` over a source in memory."""
    return decided(find_batches_plan(requests, fetch_max_bytes), source)


class DeleteRecordsDecision(NamedTuple):
    """The response, and the new log start offset when the start moves (None otherwise)."""

    response: DeleteRecordsResponse
    new_log_start_offset: int | None


def decide_delete_records(state: PartitionState | None, offset: int) -> DeleteRecordsDecision:
    """Kafka DeleteRecords: -1 means the high watermark; the new start need not be batch-aligned."""
    if state is None:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        )
    target = state.high_watermark if offset == -1 else offset
    if target < 0 or target > state.high_watermark:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.OFFSET_OUT_OF_RANGE, state.log_start_offset), None
        )
    if target <= state.log_start_offset:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.NONE, state.log_start_offset), None
        )
    return DeleteRecordsDecision(DeleteRecordsResponse(ErrorCode.NONE, target), target)


class RetentionScan:
    """Which of a partition's oldest batches retention deletes now (at most `budget`).

    Time: a batch whose timestamp is more than `retention_ms` old. Size (Kafka's rule): the oldest
    batch goes while the partition keeps at least `retention_bytes` without it. An extent is a
    row like a batch, which makes these Kafka's segment rules for it (its timestamp is its
    largest, its size the whole). Deletion stops at
    the first batch neither rule removes, so the log stays a contiguous suffix. Batches are fed
    oldest first, in as many pieces as the caller loads them.
    """

    def __init__(self, state: PartitionState, now_ms: int, budget: int) -> None:
        self.victims: list[StoredBatch] = []
        self.more = False
        """The budget ran out before the rules did: another pass has work left."""
        config = state.config
        self.done = config.retention_ms < 0 and config.retention_bytes < 0
        """No later batch can be a victim: stop feeding."""
        self._config = config
        self._size = state.size_bytes
        self._cutoff = now_ms - config.retention_ms
        self._budget = budget

    def feed(self, batches: Iterable[StoredBatch]) -> None:
        config = self._config
        for batch in batches:
            if self.done:
                return
            by_time = config.retention_ms >= 0 and batch.timestamp < self._cutoff
            by_size = config.retention_bytes >= 0 and self._size - batch.size >= (
                config.retention_bytes
            )
            if not (by_time or by_size):
                self.done = True
            elif len(self.victims) >= self._budget:
                self.done = self.more = True
            else:
                self.victims.append(batch)
                self._size -= batch.size
