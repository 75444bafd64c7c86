"""Unit: what the admin APIs read of a group (`group_description`), and how the classic
protocol's state machine describes itself.

- A consumer's subscription is read from its `ConsumerProtocolSubscription` of any version
  (later ones as the latest known); anything else is unreadable (None), never an exception.
- DeleteGroups refuses a group that does not exist or has members; OffsetDelete refuses one
  that does not exist, and a classic group with members that is not a consumer group.
- A broker not certainly live answers ListGroups with a retriable error, not an empty list.
- A classic group shows its protocol and its members' metadata and assignments only once
  stable; its subscriptions come from its members' metadata for its protocol.
- A consumer-protocol group (KIP-848) is described as Kafka's `ConsumerGroup`: type and protocol
  type `consumer`, its state by Kafka's name, its members, the topics they subscribe to by name
  or by regular expression; it exists once it has had a group epoch; DescribeGroups shows only
  classic groups (any other is Dead to it).
"""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode as WireError

from diskless._types import GroupOwnership, GroupRecord
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.consumer_group_state import (
    DEFAULT_CONFIG,
    HeartbeatRequest,
    encode_snapshot,
)
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.group_description import (
    DEAD,
    DescribedMember,
    GroupDescription,
    GroupType,
    at_rest,
    consumer_subscription,
    dead,
    delete_group_refusal,
    describe_groups_answer,
    exists,
    offset_delete_refusal,
    subscribed,
)
from diskless.kafka_server._coordination.group_state import GroupState
from diskless.kafka_server._coordination.owned_group import OwnedGroup, at_rest_description


def _subscription(version: int, topics: tuple[str, ...]) -> bytes:
    """A `ConsumerProtocolSubscription` as a consumer writes it (non-flexible, every version):
    topics, user data (null), then v1's owned partitions (none), v2's generation, v3's rack."""
    written = struct.pack(">hi", version, len(topics))
    for topic in topics:
        written += struct.pack(">h", len(topic)) + topic.encode()
    written += struct.pack(">i", -1)
    if version >= 1:
        written += struct.pack(">i", 0)
    if version >= 2:
        written += struct.pack(">i", 7)
    if version >= 3:
        written += struct.pack(">h", 1) + b"r"
    return written


@pytest.mark.parametrize("version", [0, 1, 2, 3, 9])
def test_a_consumers_subscription_is_read_from_any_version(version: int) -> None:
    written = _subscription(min(version, 3), ("a", "b"))
    if version > 3:  # a later version: its own fields come after those known
        written = struct.pack(">h", version) + written[2:] + b"\x00\x01later"
    assert consumer_subscription(written) == frozenset({"a", "b"})


@pytest.mark.parametrize(
    "metadata", [b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x05ab", b"\x00\x01\x00"]
)
def test_what_is_not_a_subscription_is_unreadable(metadata: bytes) -> None:
    assert consumer_subscription(metadata) is None


def _member(member_id: str) -> DescribedMember:
    return DescribedMember(member_id, None, "c", "/h", b"", b"")


def _group(
    protocol_type: str = "consumer",
    members: int = 0,
    topics: frozenset[str] | None = frozenset(),
    group_type: GroupType = GroupType.CLASSIC,
) -> GroupDescription:
    state = "Stable" if members else "Empty"
    described = tuple(_member(f"m{i}") for i in range(members))
    return GroupDescription("g", group_type, state, protocol_type, "", described, topics)


def test_deletion_rules() -> None:
    assert delete_group_refusal(dead("g")) is WireError.group_id_not_found
    assert delete_group_refusal(_group(members=1)) is WireError.non_empty_group
    assert delete_group_refusal(_group()) is WireError.none
    assert delete_group_refusal(at_rest("g")) is WireError.none
    assert offset_delete_refusal(dead("g")) is WireError.group_id_not_found
    assert offset_delete_refusal(_group(members=1)) is WireError.none
    assert offset_delete_refusal(_group("connect", 1, None)) is WireError.non_empty_group
    assert offset_delete_refusal(_group("connect")) is WireError.none
    assert offset_delete_refusal(_group("", 1, None, GroupType.CONSUMER)) is WireError.none
    assert subscribed(_group(members=1, topics=frozenset({"t"})), "t")
    assert not subscribed(_group(members=1, topics=frozenset({"t"})), "u")
    assert not subscribed(_group("connect", 1, None), "t")  # unknown: not subscribed


def test_describe_groups_shows_classic_groups_only() -> None:
    assert describe_groups_answer(_group(members=1)) == _group(members=1)
    assert describe_groups_answer(_group(members=1, group_type=GroupType.CONSUMER)) == dead("g")


def test_a_consumer_protocol_group_is_described_as_kafkas_consumer_group() -> None:
    owner = GroupOwnership(0, 1, 0)
    group = OwnedGroup(GroupState("g", 0), owner, 1, None, 0.0)
    assert group.describe(None) == dead("g")  # never had an epoch: not a consumer group
    topics = {"t": 2, "u": 1, "v": 1}
    for request in (
        HeartbeatRequest(
            "m1", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",), client_id="c1"
        ),
        HeartbeatRequest("m2", 0, "i2", rebalance_timeout_ms=5_000, subscribed_topic_regex="u"),
    ):
        step = group.consumer.heartbeat(
            request, topics=topics, describable=set(topics), config=DEFAULT_CONFIG, now=0.0
        )
        assert step.answer is not None and step.answer.error is WireError.none
    described = group.describe(None)
    assert (described.group_type, described.protocol_type) == (GroupType.CONSUMER, "consumer")
    assert described.state in {"Assigning", "Reconciling", "Stable"}
    assert [(m.member_id, m.instance_id, m.client_id) for m in described.members] == [
        ("m1", None, "c1"),
        ("m2", "i2", ""),
    ]
    assert described.subscribed_topics == {"t", "u"}
    assert subscribed(described, "u") and not subscribed(described, "v")
    assert delete_group_refusal(described) is WireError.non_empty_group
    assert offset_delete_refusal(described) is WireError.none
    # The same group, read from its stored state by a broker that holds none of it.
    stored = encode_snapshot(group.consumer.snapshot())
    assert at_rest_description("g", GroupRecord(owner, False), stored) == described
    for member in ("m1", "m2"):
        group.consumer.heartbeat(
            HeartbeatRequest(member, -1),
            topics=topics,
            describable=set(),
            config=DEFAULT_CONFIG,
            now=0.0,
        )
    empty = group.describe(None)
    assert (empty.group_type, empty.state, empty.members) == (GroupType.CONSUMER, "Empty", ())
    assert delete_group_refusal(empty) is WireError.none
    assert at_rest_description("g", GroupRecord(owner, False), None) == dead("g")
    assert at_rest_description("g", GroupRecord(owner, True), None) == at_rest("g")


def test_a_group_exists_with_members_a_generation_or_offsets() -> None:
    assert not exists(at_rest("g"), 0, False)
    assert exists(at_rest("g"), 1, False)
    assert exists(at_rest("g"), 0, True)
    assert exists(_group(members=1), 0, False)
    assert dead("g").state == DEAD and dead("g").members == ()


def _join(state: GroupState, member_id: str, topics: tuple[str, ...]) -> None:
    state.join(
        member_id="",
        instance_id=None,
        protocol_type="consumer",
        protocols=[("range", _subscription(1, topics)), ("roundrobin", b"?")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        fresh_member_id=member_id,
        require_known_member_id=False,
        now=0.0,
        client_id=f"client-{member_id}",
        client_host="/10.0.0.1",
    )


def test_a_classic_group_shows_metadata_and_assignments_only_once_stable() -> None:
    state = GroupState("g", 0)
    assert state.describe() == GroupDescription(
        "g", GroupType.CLASSIC, "Empty", "", "", (), frozenset()
    )
    _join(state, "m1", ("a",))
    _join(state, "m2", ("b",))
    preparing = state.describe()
    assert preparing.state == "PreparingRebalance" and preparing.protocol == ""
    assert [(m.member_id, m.client_id, m.client_host) for m in preparing.members] == [
        ("m1", "client-m1", "/10.0.0.1"),
        ("m2", "client-m2", "/10.0.0.1"),
    ]
    assert all(m.metadata == m.assignment == b"" for m in preparing.members)
    # Before a protocol is chosen, every offered one is read; the unreadable one spoils it.
    assert preparing.subscribed_topics is None
    due = state.rebalance_due()
    assert due.store_generation == 1
    state.generation_stored(1)
    assert state.describe().state == "CompletingRebalance"
    state.sync(1, "m1", None, {"m1": b"A1", "m2": b"A2"}, now=0.0)
    stable = state.describe()
    assert (stable.state, stable.protocol_type, stable.protocol) == ("Stable", "consumer", "range")
    assert [(m.metadata, m.assignment) for m in stable.members] == [
        (_subscription(1, ("a",)), b"A1"),
        (_subscription(1, ("b",)), b"A2"),
    ]
    assert stable.subscribed_topics == frozenset({"a", "b"})  # from the chosen protocol's


async def test_a_broker_not_certainly_live_lists_no_groups_but_says_so() -> None:
    """Which groups a broker coordinates is not known while its registration is not live:
    ListGroups answers a retriable error there, never an empty list."""
    coordinator = InMemoryBatchCoordinator()
    view = ClusterView("test")  # broker 0 never joined it
    try:
        groups = GroupCoordinator(coordinator, view)
        me = GroupOwnership(0, 1, -1)
        assert await groups.listed(me) is WireError.coordinator_not_available
        view.join(BrokerAddress(0, "127.0.0.1", 9092, None))
        assert await groups.listed(me) == []
    finally:
        await coordinator.close()
