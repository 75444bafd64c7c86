"""Share groups (KIP-932) at their owner: membership steps, each stored before it is answered,
the session check, and what the rest of the broker may ask of a share group's members.

`share_group_state.ShareGroupState` decides; this carries its steps out, beside the consumer
protocol's (`consumer_steps`), for the groups `group_coordinator.GroupCoordinator` finds this
process owns (its `_owned` and `_lose` are handed in: one owner per group, whichever kind).
A group's steps take turns under its lock (`owned_group.OwnedGroup.lock`); a step's new state
is stored (`store_group_state`, fenced by the owner's epoch) before its answer is sent, so that
the owner that takes the group over continues from it, every member with its epoch and
partitions; a step that could not be stored is undone. A group is of one kind at a time: a
share heartbeat to a group with classic members or consumer-protocol members gets
GROUP_ID_NOT_FOUND ("not a share group"), as Kafka answers a group of another type.

**What a share fetch may ask** (`assignment`, `on_departure`). Kafka's ShareFetch does not ask
the group coordinator whether its member is one (`KafkaApis.handleShareFetchRequest` keys the
share session by group and member id, and the records' acquisition locks are what keep members
apart); a broker here may still ask: `assignment` answers, on any broker, the partitions the
member is assigned now, or None when it is not a member, from the owner's memory when the
group is owned here and else from the group's stored state (every step is stored before it is
answered, so the stored state is the truth, cluster-wide). `on_departure` registers a callback
called, in the owner's process, with (group id, member id) once a member that left or was
removed (its session timed out) is stored without it, so that its share session can release
the records it holds.

**Offsets** (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) are
served at the group's owner, as Kafka's group coordinator serves them, and kept in the batch
coordinator with the share-partitions' states (`share_offsets`, `alter_share_offsets`,
`delete_share_offsets`). A group of another kind is GROUP_ID_NOT_FOUND; altering and deleting
take their turn with the group's heartbeats and are refused while it has members
(NON_EMPTY_GROUP), as Kafka's `ShareGroup.validateOffsetsAlterable`. Altering the offsets of a
group that does not exist yet sets its share-partitions' start offsets before any member joins.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode as WireError

from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator, ShareOffset
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.group_description import GroupDescription
from diskless.kafka_server._coordination.owned_group import OwnedGroup
from diskless.kafka_server._coordination.share_group_state import (
    DEFAULT_SHARE_CONFIG,
    ShareDescription,
    ShareGroupConfig,
    ShareGroupState,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
    ShareSnapshot,
    ShareStep,
    decode_group_state,
    encode_share_snapshot,
)
from diskless.kafka_server._protocol.fields import wire

_log = logging.getLogger(__name__)

ShareConfigOf = Callable[[str], ShareGroupConfig]
"""A share group's settings by group id: the broker's `group.share.*` properties, overridden by
the group's own `share.*` configs where they are set."""
Owned = Callable[[GroupOwnership, str], Awaitable[OwnedGroup | WireError]]
Lose = Callable[[OwnedGroup, str], None]
_Answer = TypeVar("_Answer")
Departure = Callable[[str, str], None]
"""(group id, member id) of a share member that left or was removed."""


def default_share_configs(group_id: str) -> ShareGroupConfig:
    return DEFAULT_SHARE_CONFIG


class ShareGroups:
    """Carries out the share group steps of the groups this process coordinates."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        clock: Clock,
        configs: ShareConfigOf,
        owned: Owned,
        lose: Lose,
    ) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._configs = configs
        self._owned = owned
        self._lose = lose
        self._local: dict[str, OwnedGroup] = {}
        """The share groups this process has served, by id (each checked still its own)."""
        self._departures: list[Departure] = []

    def on_departure(self, callback: Departure) -> None:
        """Call `callback(group_id, member_id)` for every member that leaves or is removed, once
        the group is stored without it (in the owner's process)."""
        self._departures.append(callback)

    async def heartbeat(
        self,
        me: GroupOwnership,
        group_id: str,
        request: ShareHeartbeatRequest,
        *,
        topics: Mapping[str, int],
    ) -> ShareHeartbeatAnswer:
        """ShareGroupHeartbeat at the group's owner (NOT_COORDINATOR elsewhere). `topics`: every
        topic's partition count."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return ShareHeartbeatAnswer(group)
        async with group.lock:
            if group.gone:
                return ShareHeartbeatAnswer(WireError.not_coordinator)
            if _other_kind(group):
                message = f"Group {group_id} is not a share group."
                return ShareHeartbeatAnswer(WireError.group_id_not_found, message=message)
            if not group.share.exists() and group.consumer.group_epoch > 0:
                group.consumer = type(group.consumer)(group_id)  # an empty consumer group's id
            self._local[group_id] = group
            step = group.share.heartbeat(
                request,
                topics=topics,
                config=self._configs(group_id),
                now=self._clock.monotonic(),
            )
            assert step.answer is not None
            error = await self._store(group, step)
        if error is WireError.not_coordinator:
            self._lose(group, "storing its state answered NOT_COORDINATOR")
        return step.answer if error is WireError.none else ShareHeartbeatAnswer(error)

    async def describe(
        self, me: GroupOwnership, group_id: str
    ) -> ShareDescription | GroupDescription | WireError:
        """ShareGroupDescribe: the share group, else the group as the admin APIs see it (Dead,
        or of another kind: its answer is GROUP_ID_NOT_FOUND)."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        if group.share.exists() and not group.state.members and group.consumer.is_empty():
            return group.share.describe()
        records = await self._coordinator.group_records([group_id])
        return group.describe(records.get(group_id))

    async def expire(self, group: OwnedGroup) -> None:
        """The session check: members not heard from within their session are removed, and the
        group stored without them. Skipped while a step of the group is under way."""
        if group.share.is_empty() or group.lock.locked():
            return
        async with group.lock:
            if group.gone:
                return
            step = group.share.expire(self._clock.monotonic(), self._configs(group.group_id))
            try:
                error = await self._store(group, step)
            except DisklessError as e:
                _log.debug("share group %s: storing its expiry failed: %r", group.group_id, e)
                return
        if error is WireError.not_coordinator:
            self._lose(group, "storing its state answered NOT_COORDINATOR")

    async def _store(self, group: OwnedGroup, step: ShareStep) -> WireError:
        """Store the group's new share state (called with its lock held), then tell who
        listens of the members that left; undo the step when it cannot be stored."""
        if step.store is None:
            return WireError.none
        try:
            error = await self._coordinator.store_group_state(
                group.group_id, group.owner, encode_share_snapshot(step.store)
            )
        except DisklessError:
            group.undo(self._clock.monotonic())
            raise
        if error is ErrorCode.NOT_COORDINATOR:
            return WireError.not_coordinator
        if error is not ErrorCode.NONE:
            group.undo(self._clock.monotonic())
            return wire(error)
        group.stored = step.store
        for member_id in step.departed:
            for callback in self._departures:
                callback(group.group_id, member_id)
        return WireError.none

    async def assignment(self, group_id: str, member_id: str) -> frozenset[TopicPartition] | None:
        """The partitions `member_id` of share group `group_id` is assigned now; None when it is
        not a member (or the group is not a share group). Any broker may ask: from memory
        where this process owns the group, else one read of its stored state. Raises
        `DisklessError` when the batch coordinator fails."""
        group = self._local.get(group_id)
        if group is not None and not group.gone:
            return group.share.assignment(member_id)
        self._local.pop(group_id, None)
        stored = await self._coordinator.group_state(group_id)
        decoded = None if stored is None else decode_group_state(stored)
        if not isinstance(decoded, ShareSnapshot):
            return None
        return ShareGroupState(group_id, decoded).assignment(member_id)

    # --- offsets ------------------------------------------------------------------------------
    async def offsets(
        self, me: GroupOwnership, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, ShareOffset] | WireError:
        """DescribeShareGroupOffsets: the start offset and state epoch of each named partition
        that has a state (every one of the group's when None)."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        if _other_kind(group):
            return WireError.group_id_not_found
        return await self._coordinator.share_offsets(group_id, partitions)

    async def alter_offsets(
        self, me: GroupOwnership, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode] | WireError:
        """AlterShareGroupOffsets of an empty share group: each share-partition starts over."""
        return await self._while_empty(
            me, group_id, lambda: self._coordinator.alter_share_offsets(group_id, offsets)
        )

    async def delete_offsets(
        self, me: GroupOwnership, group_id: str, topics: Sequence[str]
    ) -> dict[str, ErrorCode] | WireError:
        """DeleteShareGroupOffsets of an empty share group: each named topic's share-partitions
        forget their state (UNKNOWN_TOPIC_OR_PARTITION for a topic without one)."""

        async def delete() -> dict[str, ErrorCode]:
            held = await self._coordinator.share_offsets(group_id)
            wanted = [tp for tp in held if tp.topic in topics]
            codes = await self._coordinator.delete_share_offsets(group_id, wanted) if wanted else {}
            answers = dict.fromkeys(topics, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            for tp, code in codes.items():
                if (
                    answers[tp.topic] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    or code is not ErrorCode.NONE
                ):
                    answers[tp.topic] = code
            return answers

        return await self._while_empty(me, group_id, delete)

    async def _while_empty(
        self, me: GroupOwnership, group_id: str, change: Callable[[], Awaitable[_Answer]]
    ) -> _Answer | WireError:
        """`change`, once the group is found to be a share group (or none) without members, in
        its turn with the group's steps."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        async with group.lock:
            if group.gone:
                return WireError.not_coordinator
            if _other_kind(group):
                return WireError.group_id_not_found
            if not group.share.is_empty():
                return WireError.non_empty_group
            return await change()


def _other_kind(group: OwnedGroup) -> bool:
    """Whether the group is of another kind than a share group (Kafka: GROUP_ID_NOT_FOUND)."""
    return bool(group.state.members) or not group.consumer.is_empty()
