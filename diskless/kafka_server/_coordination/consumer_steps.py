"""The consumer group protocol (KIP-848) at a group's owner: its steps take turns, and each is
stored before it is answered.

`consumer_group_state.ConsumerGroupState` decides; this carries its steps out for
`group_coordinator.GroupCoordinator`, which finds the group's owner and keeps the groups. A
group's steps (heartbeats, the session check, and DeleteGroups) take turns under one lock per
group (`owned_group.OwnedGroup.lock`). A step's new state is stored (`store_group_state`,
fenced by the owner's epoch) before its answer is sent, so that the owner that takes the group
over continues from it; a step that could not be stored is undone (the state stored last is
taken back). A step of a group this process no longer coordinates (`OwnedGroup.gone`), or
whose state the batch coordinator refused to store, answers NOT_COORDINATOR: the coordinator
then lets the group go. A group is of one protocol at a time: a heartbeat to a classic group
with members, or to a share group, gets GROUP_ID_NOT_FOUND (Kafka's answer without online
migration, `group.consumer.migration.policy=disabled`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

from kio.schema.errors import ErrorCode as WireError

from diskless._types import ErrorCode
from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.consumer_group_state import (
    ConsumerGroupConfig,
    HeartbeatAnswer,
    HeartbeatRequest,
    Snapshot,
    encode_snapshot,
)
from diskless.kafka_server._coordination.owned_group import OwnedGroup
from diskless.kafka_server._protocol.fields import wire

ConsumerConfigOf = Callable[[str], ConsumerGroupConfig]
"""A group's consumer-protocol settings by group id: Kafka's defaults, overridden by the group's
own configs where they are set (IncrementalAlterConfigs on the GROUP resource)."""


class ConsumerSteps:
    """Carries out the consumer-protocol steps of the groups this process coordinates."""

    def __init__(
        self, coordinator: BatchCoordinator, clock: Clock, configs: ConsumerConfigOf
    ) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._configs = configs

    async def heartbeat(
        self,
        group: OwnedGroup,
        request: HeartbeatRequest,
        *,
        topics: Mapping[str, int],
        describable: Set[str],
    ) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat, answered once what it changed is stored."""
        async with group.lock:
            if group.gone:
                return HeartbeatAnswer(WireError.not_coordinator)
            if group.state.members or group.share.exists():
                message = f"Group {group.group_id} is not a consumer group."
                return HeartbeatAnswer(WireError.group_id_not_found, message=message)
            step = group.consumer.heartbeat(
                request,
                topics=topics,
                describable=describable,
                config=self._configs(group.group_id),
                now=self._clock.monotonic(),
            )
            assert step.answer is not None
            error = await self._store(group, step.store)
            return step.answer if error is WireError.none else HeartbeatAnswer(error)

    async def expire(self, group: OwnedGroup) -> WireError:
        """The session check: members not heard from within their session, or that did not
        revoke within their rebalance timeout, are removed, and the group stored without them.
        Skipped (NONE) while a step of the group is under way: the next check does it."""
        if group.consumer.is_empty() or group.lock.locked():
            return WireError.none
        async with group.lock:
            if group.gone:
                return WireError.none
            config = self._configs(group.group_id)
            step = group.consumer.expire(self._clock.monotonic(), config)
            return await self._store(group, step.store)

    async def _store(self, group: OwnedGroup, snapshot: Snapshot | None) -> WireError:
        """Store the group's new consumer-protocol state (called with its lock held); undo the
        step when it cannot be stored."""
        if snapshot is None:
            return WireError.none
        try:
            error = await self._coordinator.store_group_state(
                group.group_id, group.owner, encode_snapshot(snapshot)
            )
        except DisklessError:
            group.undo(self._clock.monotonic())
            raise
        if error is ErrorCode.NOT_COORDINATOR:
            return WireError.not_coordinator
        if error is not ErrorCode.NONE:
            group.undo(self._clock.monotonic())
            return wire(error)
        group.stored = snapshot
        return WireError.none
