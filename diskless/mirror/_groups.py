"""Consumer-group offsets synced from the source (KIP-1279's group offsets, with seed 004's clamp).

Source and destination share offsets, so a committed offset needs no translation, only a clamp
into the destination partition's range:

    synced = max(destinationLogStart, min(sourceCommitted, destinationLogEnd))

Above the destination's end (the mirror lags), a consumer resuming after a failover would be out
of range, and `auto.offset.reset=latest` would skip what is produced meanwhile: silent loss. So
the offset stops at the end, and the worst case is re-reading at most the mirror's lag. Below the
destination's log start (its retention removed more), the consumer would be reset too; it
starts at the log start instead.

Only groups not active on the destination are synced, so that a group consuming there is never
moved under it (`_active`: members joined it there, and its coordinator lives). Group ids are
chosen by include and exclude patterns (Python regular expressions, matched against the whole
id).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from diskless._types import CommittedOffset, TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.mirror._source import SourceCluster


async def _active(coordinator: BatchCoordinator, group: str, live: set[tuple[int, int]]) -> bool:
    """Whether members use the group on the destination: a live broker incarnation coordinates
    it, and members joined it there (a classic rebalance, or a consumer-protocol state). A
    client that only read the group's offsets (OffsetFetch) made a broker its coordinator, not
    a member: that does not stop the sync. Conservative: a group whose members all left stays
    active while its coordinator lives."""
    owner = await coordinator.group_ownership(group)
    if owner is None or (owner.broker_id, owner.broker_epoch) not in live:
        return False
    return owner.generation > 0 or await coordinator.group_state(group) is not None


def synced_offset(source_committed: int, log_start: int, log_end: int) -> int:
    """The clamp: the source's committed offset, within [log_start, log_end]."""
    assert log_start <= log_end, (log_start, log_end)
    return max(log_start, min(source_committed, log_end))


class GroupFilter(msgspec.Struct, frozen=True):
    include: str = ".*"
    exclude: str | None = None

    def __post_init__(self) -> None:
        for pattern in (self.include, self.exclude):
            if pattern is not None:
                re.compile(pattern)  # re.error for a bad one, at construction

    def admits(self, group_id: str) -> bool:
        if re.fullmatch(self.include, group_id) is None:
            return False
        return self.exclude is None or re.fullmatch(self.exclude, group_id) is None


class GroupSync(msgspec.Struct):
    synced: dict[str, dict[TopicPartition, int]]
    """Per group, the offsets written this round (unchanged ones left out)."""
    skipped_active: list[str]


async def sync_groups(
    source: SourceCluster,
    coordinator: BatchCoordinator,
    topics: Sequence[str],
    groups: GroupFilter,
) -> GroupSync:
    """One round: every admitted source group not active on the destination gets the clamped
    offsets of its committed source offsets on `topics`."""
    result = GroupSync({}, [])
    live = {(b.broker_id, b.broker_epoch) for b in await coordinator.live_brokers()}
    for group in await source.groups():
        if not groups.admits(group):
            continue
        if await _active(coordinator, group, live):
            result.skipped_active.append(group)
            continue
        committed = await source.committed(group, topics)
        if not committed:
            continue
        tps = sorted(committed)
        ranges = await coordinator.partition_offsets(tps)
        current = await coordinator.fetch_offsets(group)
        wanted: dict[TopicPartition, CommittedOffset] = {}
        for tp, offsets in zip(tps, ranges, strict=True):
            if offsets is None:
                continue
            offset = synced_offset(committed[tp], offsets.log_start_offset, offsets.high_watermark)
            held = current.get(tp)
            if held is None or held.offset != offset:
                # No leader epoch: the source's would mean nothing here (`_batches`).
                wanted[tp] = CommittedOffset(offset, held.metadata if held else None, -1)
        if wanted:
            await coordinator.commit_offsets(group, wanted)
            result.synced[group] = {tp: o.offset for tp, o in wanted.items()}
    return result
