"""The exact answer of a fetch whose coordinator answer holds extents, from that answer alone.

The coordinator sees an extent as one row, so over extents its answer is a superset (see
`FindBatchesResponse`): it holds every batch the fetch budgets take, and possibly more. This
expands each extent into its batches from the fetch offset, through the object's index (read
once, then cached), and applies `FetchBudget` again over all partitions in request order. The
result is what the fetch returned before consolidation, batch for batch, with no further call to
the coordinator: where the answer ends before the budgets are spent, the next batch would not
have fitted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from diskless._types import IsolationLevel
from diskless.coordinator import BatchInfo, FetchBudget, FindBatchesRequest, FindBatchesResponse
from diskless.errors import StorageError
from diskless.read._batches import CorruptBatch
from diskless.read._extents import ExtentReader, Served


class PartitionPlan:
    """What one partition returns: its batches, or the failure that stopped it."""

    def __init__(self, batches: list[Served] | None = None) -> None:
        self.batches: list[Served] = batches if batches is not None else []
        self.failure: CorruptBatch | StorageError | None = None


def has_extents(batches: Sequence[BatchInfo]) -> bool:
    return any(batch.extent is not None for batch in batches)


async def plan_exact(
    extents: ExtentReader,
    requests: Sequence[FindBatchesRequest],
    responses: Sequence[FindBatchesResponse],
    selected: dict[int, list[BatchInfo]],
    fetch_max_bytes: int,
) -> dict[int, PartitionPlan]:
    """The batches each partition (by request index, in `selected`) returns.

    A partition that fails (an unreadable or corrupt extent) is charged nothing; the partitions
    after it return what the answer holds for them, which is what they would have returned had
    it not failed, or less."""
    await _warm(extents, requests, selected)
    budget = FetchBudget(fetch_max_bytes)
    remaining = fetch_max_bytes
    plans: dict[int, PartitionPlan] = {}
    for i, request in enumerate(requests):
        if i not in selected:
            continue
        room = max(0, min(request.max_bytes, remaining))
        plan = PartitionPlan()
        plans[i] = plan
        try:
            candidates = await _candidates(extents, request, responses[i], selected[i], room)
        except (CorruptBatch, StorageError) as e:
            plan.failure = e
            continue
        plan.batches = budget.take(candidates, request.max_bytes)
        remaining = max(0, remaining - sum(batch.size for batch in plan.batches))
    return plans


async def _warm(
    extents: ExtentReader,
    requests: Sequence[FindBatchesRequest],
    selected: dict[int, list[BatchInfo]],
) -> None:
    """Read the footers and first blocks of every extent at once, not partition by partition."""
    wanted = [
        (info, requests[i].offset)
        for i, batches in selected.items()
        for info in batches
        if info.extent is not None
    ]
    if wanted:
        await asyncio.gather(
            *(extents.expand(info, offset, 0) for info, offset in wanted), return_exceptions=True
        )


async def _candidates(
    extents: ExtentReader,
    request: FindBatchesRequest,
    response: FindBatchesResponse,
    batches: list[BatchInfo],
    room: int,
) -> list[Served]:
    """The partition's batches from the fetch offset, enough of them for `FetchBudget.take` to
    decide exactly: until they exceed `room`, or to the end of the answer (which holds every
    batch the budgets take)."""
    end = (
        response.last_stable_offset
        if request.isolation_level == IsolationLevel.READ_COMMITTED
        else response.high_watermark
    )
    candidates: list[Served] = []
    used = 0
    for info in batches:
        if info.base_offset >= end or used > room:
            break
        if info.extent is None:
            found = [Served(info)]
        else:
            found = await extents.expand(info, request.offset, room - used)
        for served in found:
            if served.info.base_offset >= end or used > room:
                break
            candidates.append(served)
            used += served.size
    return candidates
