"""Share groups (KIP-932) at the group's owner (`GroupCoordinator.shares`): each step stored
before its answer and taken over by the next owner with every member's epoch and partitions, a
step undone when it cannot be stored, the session check removing a silent member and telling
who listens, and what any broker may ask of a member's assignment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kio.schema.errors import ErrorCode as WireError

from diskless import ManualClock, TopicPartition
from diskless._types import ErrorCode, GroupOwnership
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server._coordination.cluster_view import ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.share_group_state import (
    ShareDescription,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
    ShareSnapshot,
    decode_group_state,
)
from tests.kafka_server._helpers import group_process

TOPICS = {"t": 4}
A = frozenset(TopicPartition("t", i) for i in range(4))


class Owner:
    def __init__(self, groups: GroupCoordinator, me: GroupOwnership, view: ClusterView) -> None:
        self.groups, self.me, self.view = groups, me, view

    async def beat(self, member: str, epoch: int) -> ShareHeartbeatAnswer:
        topics = ("t",) if epoch == 0 else None
        request = ShareHeartbeatRequest(member, epoch, subscribed_topic_names=topics)
        return await self.groups.shares.heartbeat(self.me, "g", request, topics=TOPICS)

    async def close(self) -> None:
        await self.groups.close()
        await self.view.close()


async def _owner(
    coordinator: InMemoryBatchCoordinator, broker_id: int = 0, clock: ManualClock | None = None
) -> Owner:
    return Owner(*await group_process(coordinator, broker_id, clock=clock))


async def _stored(coordinator: InMemoryBatchCoordinator) -> ShareSnapshot:
    stored = await coordinator.group_state("g")
    assert stored is not None
    decoded = decode_group_state(stored)
    assert isinstance(decoded, ShareSnapshot)
    return decoded


@pytest.fixture
async def coordinator() -> AsyncIterator[InMemoryBatchCoordinator]:
    found = InMemoryBatchCoordinator(clock=ManualClock())
    await found.create_topic("t", 4)
    try:
        yield found
    finally:
        await found.close()


async def test_each_change_is_stored_before_its_answer_and_only_the_owner_serves(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    owner = await _owner(coordinator)
    other = await _owner(coordinator, broker_id=1)
    try:
        assert await owner.groups.locate("g") is not None
        joined = await owner.beat("m1", 0)
        assert (joined.error, joined.member_epoch, joined.assignment) == (WireError.none, 1, A)
        (member,) = (await _stored(coordinator)).members
        assert (member.member_id, member.member_epoch, frozenset(member.assigned)) == ("m1", 1, A)
        assert (await other.beat("m2", 0)).error is WireError.not_coordinator
        assert await other.groups.shares.describe(other.me, "g") is WireError.not_coordinator
        assert await other.groups.shares.assignment("g", "m1") == A, "any broker may ask"
        assert await other.groups.shares.assignment("g", "m2") is None
    finally:
        await other.close()
        await owner.close()


async def test_a_new_owner_continues_with_the_members_epochs_and_partitions() -> None:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    await coordinator.create_topic("t", 4)
    old = await _owner(coordinator)
    try:
        assert await old.groups.locate("g") is not None
        await old.beat("m1", 0)
        second = await old.beat("m2", 0)
        moved = await old.beat("m1", 1)
        assert moved.member_epoch == 2 and moved.assignment is not None
        assert second.assignment is not None and moved.assignment | second.assignment == A
        await clock.advance(old.view.ttl_ms / 1000)  # broker 0's process stalls past its lease
        new = await _owner(coordinator, broker_id=1)
        try:
            assert await new.groups.locate("g") == new.view.get(1)
            for member in ("m1", "m2"):
                kept = await new.beat(member, 2)
                assert (kept.error, kept.member_epoch, kept.assignment) == (WireError.none, 2, None)
            assert (await new.beat("m1", 1)).error is WireError.none, "its previous epoch"
            assert (await new.beat("m1", 3)).error is WireError.fenced_member_epoch
            late = await old.beat("m3", 0)
            assert late.error is WireError.not_coordinator, "the stalled owner lets it go"
            described = await new.groups.shares.describe(new.me, "g")
            assert isinstance(described, ShareDescription)
            assert [m.member_id for m in described.members] == ["m1", "m2"]
        finally:
            await new.close()
    finally:
        await old.close()
        await coordinator.close()


class _FailsOneState(InMemoryBatchCoordinator):
    failures = 0

    async def store_group_state(
        self, group_id: str, owner: GroupOwnership, state: bytes
    ) -> ErrorCode:
        if self.failures:
            self.failures -= 1
            raise CoordinatorUnavailableError("the store is down")
        return await super().store_group_state(group_id, owner, state)


async def test_a_step_that_could_not_be_stored_is_undone() -> None:
    coordinator = _FailsOneState()
    await coordinator.create_topic("t", 4)
    owner = await _owner(coordinator)
    try:
        assert await owner.groups.locate("g") is not None
        await owner.beat("m1", 0)
        coordinator.failures = 1
        with pytest.raises(CoordinatorUnavailableError):
            await owner.beat("m2", 0)
        described = await owner.groups.shares.describe(owner.me, "g")
        assert isinstance(described, ShareDescription)
        assert [m.member_id for m in described.members] == ["m1"]
        again = await owner.beat("m2", 0)
        assert (again.error, again.member_epoch) == (WireError.none, 2)
    finally:
        await owner.close()
        await coordinator.close()


async def test_a_silent_member_is_removed_after_its_session_and_its_departure_told(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    clock = ManualClock()
    owner = await _owner(coordinator, clock=clock)
    departed: list[tuple[str, str]] = []
    owner.groups.shares.on_departure(lambda group, member: departed.append((group, member)))
    try:
        assert await owner.groups.locate("g") is not None
        await owner.beat("m1", 0)
        await owner.beat("m2", 0)
        for _ in range(100):  # the default session timeout is 45 s; m2 keeps beating
            await clock.advance(1.0)
            await owner.beat("m2", (await _stored(coordinator)).group_epoch)
            await asyncio.sleep(0)
            if departed:
                break
        assert departed == [("g", "m1")]
        (member,) = (await _stored(coordinator)).members
        assert member.member_id == "m2"
        assert (await owner.beat("m1", 2)).error is WireError.unknown_member_id
    finally:
        await owner.close()
