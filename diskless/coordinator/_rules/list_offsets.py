"""Kafka's ListOffsets over batch metadata: the log start, the end a fetch sees, and lookups
by time, which the read path answers from the records of the rows found here (`TimeLookup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from diskless._types import ErrorCode, OffsetSpec
from diskless.coordinator._rules.fetch import fetch_end
from diskless.coordinator._rules.reads import (
    FETCH_HEAD_ROWS,
    FETCH_PAGE_ROWS_MAX,
    FetchHead,
    Plan,
    heads_lookup,
)
from diskless.coordinator._rules.rows import PartitionState, StoredBatch
from diskless.coordinator._values import ListOffsetsRequest, ListOffsetsResponse, TimeLookup

OFFSET_LAST: Final = (1 << 63) - 1
"""An offset past every stored row."""


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
        loaded: list[FetchHead | None] = yield heads_lookup(wanted, page)
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
