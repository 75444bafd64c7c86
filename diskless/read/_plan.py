"""The exact answer of a fetch whose coordinator answer holds extents.

The coordinator cannot see inside an extent, so its answer is approximate (see
`FindBatchesResponse`): it may hold more than the budgets allow, and when it counted an extent at
full size it may hold less than they allow. This expands every extent into its batches from the
fetch offset, applies `FetchBudget` again over all partitions in request order, and asks the
coordinator for the rest of a partition when its answer stopped short of what the budgets allow.
The result is what the fetch returned before consolidation, batch for batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from diskless._types import ErrorCode, IsolationLevel
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    FetchBudget,
    FindBatchesRequest,
    FindBatchesResponse,
)
from diskless.errors import StorageError
from diskless.read._batches import CorruptBatch, within_isolation
from diskless.read._extents import ExtentReader, Served

TOP_UPS_PER_PARTITION_MAX = 64
"""A bound on the follow-up calls for one partition (each one returns at least one batch)."""


class PartitionPlan:
    """What one partition returns: its batches, and any aborted transactions a follow-up call
    reported beyond the first answer's; or the failure that stopped it."""

    def __init__(self) -> None:
        self.batches: list[Served] = []
        self.extra_aborted: list[tuple[int, int]] = []
        self.failure: CorruptBatch | StorageError | None = None


def has_extents(batches: Sequence[BatchInfo]) -> bool:
    return any(batch.extent is not None for batch in batches)


async def plan_exact(
    coordinator: BatchCoordinator,
    extents: ExtentReader,
    requests: Sequence[FindBatchesRequest],
    responses: Sequence[FindBatchesResponse],
    selected: dict[int, list[BatchInfo]],
    fetch_max_bytes: int,
) -> dict[int, PartitionPlan]:
    """The batches each partition (by request index, in `selected`) returns."""
    await _warm(extents, requests, selected)
    budget = FetchBudget(fetch_max_bytes)
    remaining, returned_any = fetch_max_bytes, False
    plans: dict[int, PartitionPlan] = {}
    for i, request in enumerate(requests):
        if i not in selected:
            continue
        room = max(0, min(request.max_bytes, remaining))
        plan = PartitionPlan()
        plans[i] = plan
        try:
            candidates = await _candidates(
                coordinator, extents, request, responses[i], selected[i], room, returned_any, plan
            )
        except (CorruptBatch, StorageError) as e:
            plan.failure = e
            continue
        plan.batches = budget.take(candidates, request.max_bytes)
        taken = sum(batch.size for batch in plan.batches)
        remaining = max(0, remaining - taken)
        returned_any = returned_any or bool(plan.batches)
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
    coordinator: BatchCoordinator,
    extents: ExtentReader,
    request: FindBatchesRequest,
    response: FindBatchesResponse,
    batches: list[BatchInfo],
    room: int,
    returned_any: bool,
    plan: PartitionPlan,
) -> list[Served]:
    """The partition's batches from the fetch offset, enough of them for `FetchBudget.take` to
    decide exactly: until they exceed `room`, or up to the end the first answer allows."""
    end = (
        response.last_stable_offset
        if request.isolation_level == IsolationLevel.READ_COMMITTED
        else response.high_watermark
    )
    candidates: list[Served] = []
    used = 0
    next_offset = request.offset
    known = set(response.aborted_transactions)
    for _ in range(TOP_UPS_PER_PARTITION_MAX):
        for info in batches:
            if info.base_offset >= end or used > room:
                break
            if info.extent is None:
                found = [Served(info)]
            else:
                found = await extents.expand(info, next_offset, room - used)
            for served in found:
                if served.info.base_offset >= end or used > room:
                    break
                candidates.append(served)
                used += served.size
                next_offset = served.info.last_offset + 1
        if used > room or next_offset >= end or (used >= room and (candidates or returned_any)):
            break
        more = await coordinator.find_batches(
            [
                FindBatchesRequest(
                    request.topic_partition,
                    next_offset,
                    max(1, room - used),
                    request.isolation_level,
                )
            ],
            max(1, room - used),
        )
        if len(more) != 1 or more[0].error != ErrorCode.NONE:
            break
        batches = within_isolation(more[0], request.isolation_level)
        if not batches:
            break
        for aborted in more[0].aborted_transactions:
            if aborted not in known:
                known.add(aborted)
                plan.extra_aborted.append(aborted)
    return candidates
