"""The consumer group protocol (KIP-848) at the group's owner (`GroupCoordinator`): its state
stored before each answer and taken over by the next owner, a step undone when it cannot be
stored, the classic and consumer protocols sharing a group id as Kafka allows, offset
commits by member epoch, and the admin APIs reading a consumer group through its description
(ListGroups, DescribeGroups, DeleteGroups, OffsetDelete)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kio.schema.errors import ErrorCode as WireError

from diskless import ManualClock, TopicPartition
from diskless._types import CommittedOffset, ErrorCode, GroupOwnership
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.consumer_group_state import (
    ConsumerGroupConfig,
    HeartbeatAnswer,
    HeartbeatRequest,
    decode_snapshot,
)
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.group_description import DEAD, GroupDescription, GroupType

TOPICS = {"t": 4}
A = frozenset(TopicPartition("t", i) for i in range(4))


class Owner:
    def __init__(self, groups: GroupCoordinator, me: GroupOwnership, view: ClusterView) -> None:
        self.groups, self.me, self.view = groups, me, view

    async def beat(self, request: HeartbeatRequest) -> HeartbeatAnswer:
        return await self.groups.consumer_heartbeat(
            self.me, "g", request, topics=TOPICS, describable=set(TOPICS)
        )

    async def join(self, member: str, instance_id: str | None = None) -> HeartbeatAnswer:
        request = HeartbeatRequest(
            member, 0, instance_id, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",)
        )
        return await self.beat(request)

    async def close(self) -> None:
        await self.groups.close()
        await self.view.close()


async def _owner(coordinator: InMemoryBatchCoordinator, broker_id: int = 0) -> Owner:
    epoch = await coordinator.register_broker(broker_id)
    view = ClusterView("test", coordinator)
    view.join(BrokerAddress(broker_id, "127.0.0.1", 9092 + broker_id, None), epoch)
    await view.renew()
    groups = GroupCoordinator(coordinator, view)
    await groups.start()
    return Owner(groups, GroupOwnership(broker_id, epoch, -1), view)


@pytest.fixture
async def coordinator() -> AsyncIterator[InMemoryBatchCoordinator]:
    found = InMemoryBatchCoordinator(clock=ManualClock())
    await found.create_topic("t", 4)
    try:
        yield found
    finally:
        await found.close()


async def test_each_change_is_stored_before_its_answer(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    owner = await _owner(coordinator)
    try:
        assert await owner.groups.locate("g") is not None
        joined = await owner.join("m1")
        assert (joined.error, joined.member_epoch, joined.assignment) == (WireError.none, 1, A)
        stored = await coordinator.group_state("g")
        assert stored is not None
        (member,) = decode_snapshot(stored).members
        assert (member.member_id, member.member_epoch, frozenset(member.assigned)) == ("m1", 1, A)
        described = owner.groups.consumer_group("g")
        assert described is not None and (described.state, described.protocol_type) == (
            "Stable",
            "consumer",
        )
        other = await _owner(coordinator, broker_id=1)
        try:
            refused = await other.join("m2")
            assert refused.error is WireError.not_coordinator, "only the owner serves it"
            assert await other.groups.consumer_describe(other.me, "g") is (
                WireError.not_coordinator
            )
        finally:
            await other.close()
    finally:
        await owner.close()


async def test_a_new_owner_continues_with_the_members_epochs_and_partitions() -> None:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    await coordinator.create_topic("t", 4)
    old = await _owner(coordinator)
    try:
        assert await old.groups.locate("g") is not None
        await old.join("m1")
        await old.join("m2")
        revoking = await old.beat(HeartbeatRequest("m1", 1, owned=A))
        assert revoking.member_epoch == 1 and revoking.assignment is not None
        kept = revoking.assignment
        # Broker 0's process stalls past its registration; broker 1 takes the group over.
        await clock.advance(old.view.ttl_ms / 1000)
        new = await _owner(coordinator, broker_id=1)
        try:
            assert await new.groups.locate("g") == new.view.get(1)
            waiting = await new.beat(HeartbeatRequest("m2", 2, owned=frozenset()))
            assert (waiting.error, waiting.assignment) == (WireError.none, None), (
                "m1 has not revoked its partitions yet: they stay its own at the new owner"
            )
            done = await new.beat(HeartbeatRequest("m1", 1, owned=kept))
            assert (done.error, done.member_epoch) == (WireError.none, 2)
            given = await new.beat(HeartbeatRequest("m2", 2, owned=frozenset()))
            assert given.assignment == A - kept
            # The stalled owner's step is refused, and it lets the group go.
            late = await old.beat(HeartbeatRequest("m1", 1, owned=kept))
            assert late.error is WireError.not_coordinator
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
        await owner.join("m1")
        coordinator.failures = 1
        with pytest.raises(CoordinatorUnavailableError):
            await owner.join("m2")
        described = owner.groups.consumer_group("g")
        assert described is not None
        assert [m.member.member_id for m in described.members] == ["m1"]
        assert described.group_epoch == 1, "m2's join is undone"
        again = await owner.join("m2")
        assert (again.error, again.member_epoch) == (WireError.none, 2)
    finally:
        await owner.close()
        await coordinator.close()


async def test_a_group_is_of_one_protocol_while_it_has_members(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    owner = await _owner(coordinator)
    try:
        assert await owner.groups.locate("g") is not None
        classic = await owner.groups.join(
            owner.me,
            group_id="g",
            member_id="",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        assert classic.error is WireError.none
        refused = await owner.join("m1")
        assert refused.error is WireError.group_id_not_found
        described = await owner.groups.consumer_describe(owner.me, "g")
        assert isinstance(described, GroupDescription)
        assert described.group_type is GroupType.CLASSIC, "answered GROUP_ID_NOT_FOUND"
        assert await owner.groups.leave(owner.me, "g", classic.member_id) is WireError.none
        taken = await owner.join("m1")  # an empty classic group may be taken over
        assert (taken.error, taken.member_epoch) == (WireError.none, 1)
        again = await owner.groups.join(
            owner.me,
            group_id="g",
            member_id="",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        assert again.error is WireError.inconsistent_group_protocol
    finally:
        await owner.close()


async def test_offsets_are_committed_by_members_at_their_current_epoch(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    owner = await _owner(coordinator)
    offsets = {TopicPartition("t", 0): CommittedOffset(5, None)}
    try:
        assert await owner.groups.locate("g") is not None
        await owner.join("m1")
        commit = owner.groups.commit_offsets
        ok = {TopicPartition("t", 0): WireError.none}
        assert await commit(owner.me, "g", 1, "m1", offsets) == ok
        assert await commit(owner.me, "g", 0, "m1", offsets) == {
            TopicPartition("t", 0): WireError.stale_member_epoch
        }
        assert await commit(owner.me, "g", 1, "m9", offsets) == {
            TopicPartition("t", 0): WireError.unknown_member_id
        }
        assert await commit(owner.me, "g", -1, "", offsets) == {
            TopicPartition("t", 0): WireError.unknown_member_id
        }, "an admin's commit waits for an empty group"
        fence = await owner.groups.txn_fence(owner.me, "g", 1, "m1")
        assert isinstance(fence, GroupOwnership)
        assert await owner.groups.txn_fence(owner.me, "g", 3, "m1") is (
            WireError.stale_member_epoch
        )
        await owner.beat(HeartbeatRequest("m1", -1))
        assert await commit(owner.me, "g", -1, "", offsets) == ok
    finally:
        await owner.close()


async def test_a_silent_member_is_removed_by_the_owner_and_its_removal_stored() -> None:
    """The owner's session check removes a member not heard from within the group's session
    timeout (its configs, here 2 s), and stores the group without it."""
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    await coordinator.create_topic("t", 4)
    epoch = await coordinator.register_broker(0)
    view = ClusterView("test", coordinator)
    view.join(BrokerAddress(0, "127.0.0.1", 9092, None), epoch)
    await view.renew()
    config = ConsumerGroupConfig(session_timeout_ms=2_000, heartbeat_interval_ms=500)
    groups = GroupCoordinator(coordinator, view, clock=clock, group_configs=lambda _: config)
    await groups.start()
    owner = Owner(groups, GroupOwnership(0, epoch, -1), view)
    try:
        assert view.ttl_ms > 3_000 and await groups.locate("g") is not None
        assert (await owner.join("m1")).heartbeat_interval_ms == 500
        await owner.join("m2")
        for _ in range(3):
            await clock.advance(1.0)
            beat = await owner.beat(HeartbeatRequest("m2", 2, owned=frozenset()))
            assert beat.error is WireError.none
        stored = await coordinator.group_state("g")
        assert stored is not None
        assert [m.member_id for m in decode_snapshot(stored).members] == ["m2"]
        assert (await owner.beat(HeartbeatRequest("m1", 1, owned=A))).error is (
            WireError.unknown_member_id
        )
        assert (await owner.beat(HeartbeatRequest("m2", 2, owned=frozenset()))).assignment == A
    finally:
        await owner.close()
        await coordinator.close()


async def test_a_consumer_group_answers_the_admin_apis_through_its_description(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    await coordinator.create_topic("u", 1)
    await coordinator.create_topic("v", 1)
    t0, u0, v0 = TopicPartition("t", 0), TopicPartition("u", 0), TopicPartition("v", 0)
    topics = {"t": 4, "u": 1, "v": 1}
    owner = await _owner(coordinator)

    async def beat(request: HeartbeatRequest) -> HeartbeatAnswer:
        return await owner.groups.consumer_heartbeat(
            owner.me, "g", request, topics=topics, describable=set(topics)
        )

    try:
        assert await owner.groups.locate("g") is not None
        by_name = HeartbeatRequest(
            "m1", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",)
        )
        assert (await beat(by_name)).error is WireError.none
        regex = HeartbeatRequest("m2", 0, rebalance_timeout_ms=5_000, subscribed_topic_regex="u")
        assert (await beat(regex)).error is WireError.none
        (listed,) = await owner.groups.listed(owner.me)
        assert (listed.group_type, listed.protocol_type) == (GroupType.CONSUMER, "consumer")
        assert listed.state in {"Assigning", "Reconciling", "Stable"}
        assert [m.member_id for m in listed.members] == ["m1", "m2"]
        assert listed.subscribed_topics == {"t", "u"}
        # DescribeGroups describes classic groups only, as Kafka's.
        described = await owner.groups.describe(owner.me, "g")
        assert isinstance(described, GroupDescription) and described.state == DEAD
        assert await owner.groups.delete(owner.me, "g") is WireError.non_empty_group
        offsets = {tp: CommittedOffset(1, None) for tp in (t0, u0, v0)}
        epoch = (await beat(HeartbeatRequest("m1", 1, owned=A))).member_epoch
        assert epoch == 2
        committed = await owner.groups.commit_offsets(owner.me, "g", epoch, "m1", offsets)
        assert set(committed.values()) == {WireError.none}
        error, answers = await owner.groups.delete_offsets(owner.me, "g", [t0, u0, v0])
        assert error is WireError.none
        assert answers == {
            t0: WireError.group_subscribed_to_topic,  # by name
            u0: WireError.group_subscribed_to_topic,  # by its resolved regular expression
            v0: WireError.none,
        }
        for member in ("m1", "m2"):
            assert (await beat(HeartbeatRequest(member, -1))).error is WireError.none
        (empty,) = await owner.groups.listed(owner.me)
        assert (empty.group_type, empty.state, empty.members) == (GroupType.CONSUMER, "Empty", ())
        assert await coordinator.group_state("g") is not None
        # Empty: deleted with its offsets and its stored state, in one step.
        assert await owner.groups.delete(owner.me, "g") is WireError.none
        assert await coordinator.group_state("g") is None
        assert await coordinator.fetch_offsets("g") == {}
        assert await owner.groups.listed(owner.me) == []
        gone = await owner.groups.consumer_describe(owner.me, "g")
        assert isinstance(gone, GroupDescription) and gone.state == DEAD
        assert await owner.groups.delete(owner.me, "g") is WireError.group_id_not_found
        # A new member starts a new group, from the first epoch.
        again = await owner.join("m3")
        assert (again.error, again.member_epoch, again.assignment) == (WireError.none, 1, A)
    finally:
        await owner.close()


async def test_a_consumer_group_at_rest_is_listed_from_its_stored_state(
    coordinator: InMemoryBatchCoordinator,
) -> None:
    """A broker that lists a group it has not served since it took it over reads its stored
    state: a consumer group is listed as one, with its members."""
    first = await _owner(coordinator)
    try:
        assert await first.groups.locate("g") is not None
        assert (await first.join("m1")).error is WireError.none
    finally:
        await first.close()
    second = await _owner(coordinator)  # the same broker, a new incarnation: nothing in memory
    try:
        await coordinator.claim_group("g", 0, second.me.broker_epoch)
        (listed,) = await second.groups.listed(second.me)
        assert (listed.group_type, listed.state) == (GroupType.CONSUMER, "Stable")
        assert [m.member_id for m in listed.members] == ["m1"]
    finally:
        await second.close()
