"""Integration: the group admin APIs (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete)
through real admin clients, against real brokers.

- confluent-kafka's AdminClient lists groups with and without its state and type filters,
  describes a live group (members, client id, host, static instance id, assignment, KIP-430's
  operations) and an unknown one (Dead), and deletes an empty group with its offsets (a live
  one, or one whose static member closed within its session: NON_EMPTY_GROUP; an unknown one:
  GROUP_ID_NOT_FOUND).
- kafka-python's KafkaAdminClient does the same, and deletes offsets: refused with
  GROUP_SUBSCRIBED_TO_TOPIC for the topic a member consumes, done for another.
- aiokafka's admin client lists and describes.
- Over SASL with ACLs, a user sees only the groups it may describe, and is refused what it may
  not describe or delete.
- On the wire: only a group's owner answers DescribeGroups, DeleteGroups and OffsetDelete
  (NOT_COORDINATOR elsewhere); OffsetDelete's codes for an unknown topic and group.
- Two broker processes sharing a SQLite coordinator: each group is listed once, by the broker
  that coordinates it; once a broker process is killed, the other lists its groups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import kio.schema.delete_groups.v2.request as delete_groups_v2
import kio.schema.describe_groups.v5.request as describe_groups_v5
import kio.schema.offset_delete.v0.request as offset_delete_v0
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
)
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
)
from confluent_kafka.error import KafkaError
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPartition
from kafka.errors import GroupAuthorizationFailedError, GroupSubscribedToTopicError, NoError
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32

from testkit.cluster import local_cluster, server_config
from testkit.processes import BrokerProcess, bootstrap, broker_processes
from testkit.sasl import ADMIN, LISTENER, client_settings, sasl_server_config
from testkit.wire import ask
from tests.kafka_server._helpers import allow_alice

TIMEOUT_S: Final = 30
SESSION_TIMEOUT_MS: Final = 6_000
"""Kafka's default `group.min.session.timeout.ms`, the shortest session it allows: a static
member outlives its consumer's close by this long."""
AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _admin(servers: str, **settings: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": servers, "broker.address.family": "v4", **settings})


def _commit(servers: str, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    """Committed offsets of a group without members, as an admin tool commits them."""
    request = ConsumerGroupTopicPartitions(
        group_id, [ConfluentPartition(t, p, o) for (t, p), o in offsets.items()]
    )
    admin = _admin(servers)  # (kept alive until its futures are done)
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(TIMEOUT_S)


@contextmanager
def _member(
    servers: str, group_id: str, topic: str, client_id: str = "member", **settings: Any
) -> Iterator[Any]:
    """A librdkafka consumer in the group, subscribed to `topic`, until the block ends."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "broker.address.family": "v4",
            "group.id": group_id,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer never got an assignment"
        consumer.poll(0.2)
    try:
        yield consumer
    finally:
        consumer.close()


def _error(future: Any) -> KafkaError | None:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


def _confluent_session(servers: str) -> None:
    admin = _admin(servers)
    _commit(servers, "standalone", {("orders", 0): 3})
    static = {"group.instance.id": "reader-1", "session.timeout.ms": SESSION_TIMEOUT_MS}
    with _member(servers, "live", "orders", client_id="reader", **static) as consumer:
        consumer.commit(offsets=[ConfluentPartition("orders", 1, 2)], asynchronous=False)
        listed = admin.list_consumer_groups().result(TIMEOUT_S)
        assert listed.errors == []
        groups = {g.group_id: g for g in listed.valid}
        assert sorted(groups) == ["live", "standalone"]  # each once, from two brokers
        assert groups["live"].state is ConsumerGroupState.STABLE
        assert groups["live"].type is ConsumerGroupType.CLASSIC
        assert not groups["live"].is_simple_consumer_group
        assert groups["standalone"].state is ConsumerGroupState.EMPTY
        assert groups["standalone"].is_simple_consumer_group  # no protocol type
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(TIMEOUT_S)
        assert [g.group_id for g in empty.valid] == ["standalone"]
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC})
        assert sorted(g.group_id for g in classic.result(TIMEOUT_S).valid) == sorted(groups)
        consumer_type = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER})
        assert consumer_type.result(TIMEOUT_S).valid == []

        described = admin.describe_consumer_groups(
            ["live", "unknown"], include_authorized_operations=True
        )
        live = described["live"].result(TIMEOUT_S)
        assert live.state is ConsumerGroupState.STABLE
        assert live.partition_assignor == "range"
        assert not live.is_simple_consumer_group
        assert sorted(op.name for op in live.authorized_operations) == [
            "ALTER_CONFIGS",
            "DELETE",
            "DESCRIBE",
            "DESCRIBE_CONFIGS",
            "READ",
        ]
        (member,) = live.members
        assert member.client_id == "reader"
        assert member.group_instance_id == "reader-1"
        assert member.host == "/127.0.0.1"
        assigned = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
        assert assigned == [("orders", 0), ("orders", 1)]
        unknown = described["unknown"].result(TIMEOUT_S)
        assert unknown.state is ConsumerGroupState.DEAD
        assert unknown.members == []

        deleted = admin.delete_consumer_groups(["live", "unknown"])
        live_error = _error(deleted["live"])
        assert live_error is not None and live_error.code() == KafkaError.NON_EMPTY_GROUP
        unknown_error = _error(deleted["unknown"])
        assert unknown_error is not None
        assert unknown_error.code() == KafkaError.GROUP_ID_NOT_FOUND
    # A static member (KIP-345) does not leave when it closes: the group stays non-empty until
    # its session times out. Then it is empty, and goes with its offsets.
    (deletion,) = admin.delete_consumer_groups(["live"]).values()
    assert (e := _error(deletion)) is not None and e.code() == KafkaError.NON_EMPTY_GROUP
    _eventually(
        lambda: _error(admin.delete_consumer_groups(["live"])["live"]) is None,
        timeout_s=SESSION_TIMEOUT_MS / 1000 + TIMEOUT_S,
    )
    remaining = admin.list_consumer_groups().result(TIMEOUT_S).valid
    assert [g.group_id for g in remaining] == ["standalone"]
    gone = admin.describe_consumer_groups(["live"])["live"].result(TIMEOUT_S)
    assert gone.state is ConsumerGroupState.DEAD
    (error,) = admin.delete_consumer_groups(["live"]).values()
    assert (e := _error(error)) is not None and e.code() == KafkaError.GROUP_ID_NOT_FOUND


async def test_confluent_admin_client_lists_describes_and_deletes_groups() -> None:
    async with local_cluster(brokers=2, server_config=server_config()) as cluster:
        await cluster.create_topic("orders", 2)
        await asyncio.to_thread(_confluent_session, cluster.bootstrap())
        # The deleted group's offsets went with it.
        assert await cluster.coordinator.fetch_offsets("live") == {}


def _kafka_python_session(servers: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        _commit(servers, "quiet", {("orders", 0): 1})
        with _member(servers, "busy", "orders") as consumer:
            consumer.commit(
                offsets=[ConfluentPartition("orders", 0, 4), ConfluentPartition("other", 0, 2)],
                asynchronous=False,
            )
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert sorted(listed) == ["busy", "quiet"]
            assert listed["busy"]["protocol_type"] == "consumer"
            assert listed["busy"]["group_state"] == "Stable"
            assert listed["quiet"]["group_state"] == "Empty"
            assert [g["group_id"] for g in admin.list_groups(states_filter=["stable"])] == ["busy"]
            described = admin.describe_groups(["busy"])["busy"]
            assert described["group_state"] == "Stable"
            assert described["protocol_data"] == "range"
            assert [m["client_host"] for m in described["members"]] == ["/127.0.0.1"]
            # OffsetDelete: the topic the member consumes is refused, another is not.
            answers = admin.delete_group_offsets(
                "busy", [KafkaPartition("orders", 0), KafkaPartition("other", 0)]
            )
            assert answers[KafkaPartition("orders", 0)] is GroupSubscribedToTopicError
            assert answers[KafkaPartition("other", 0)] is NoError
            committed = admin.list_group_offsets("busy")["busy"]
            assert sorted((tp.topic, tp.partition) for tp in committed) == [("orders", 0)]
            assert admin.delete_groups(["busy"]) == {"busy": "NonEmptyGroupError"}
        assert admin.delete_groups(["busy", "quiet", "unknown"]) == {
            "busy": "OK",
            "quiet": "OK",
            "unknown": "GroupIdNotFoundError",
        }
        assert admin.list_groups() == []
    finally:
        admin.close()


async def test_kafka_python_admin_client_lists_describes_and_deletes_groups_and_offsets() -> None:
    async with local_cluster(brokers=2, server_config=server_config()) as cluster:
        await cluster.create_topic("orders", 1)
        await cluster.create_topic("other", 1)
        await asyncio.to_thread(_kafka_python_session, cluster.bootstrap())


async def test_aiokafka_admin_client_lists_and_describes_groups() -> None:
    async with local_cluster(brokers=2, server_config=server_config()) as cluster:
        await cluster.create_topic("orders", 1)
        servers = cluster.bootstrap()
        await asyncio.to_thread(_commit, servers, "quiet", {("orders", 0): 1})
        admin = AIOKafkaAdminClient(bootstrap_servers=servers)
        await admin.start()
        try:
            listed = await admin.list_consumer_groups()
            assert [tuple(g)[:2] for g in listed] == [("quiet", "")]
            responses = await admin.describe_consumer_groups(["quiet", "unknown"])
            # (error code, group id, state, ...), one response per coordinator asked
            states = {g[1]: g[2] for r in responses for g in r.groups}
            assert states == {"quiet": "Empty", "unknown": "Dead"}
        finally:
            await admin.close()


def _acl_session(servers: str) -> None:
    admin = _admin(servers, **ADMIN)
    for group_id in ("seen", "doomed", "hidden"):
        request_offsets = {("orders", 0): 1, ("secret", 0): 1}
        request = ConsumerGroupTopicPartitions(
            group_id, [ConfluentPartition(t, p, o) for (t, p), o in request_offsets.items()]
        )
        for future in admin.alter_consumer_group_offsets([request]).values():
            future.result(TIMEOUT_S)
    bindings = [
        allow_alice(ResourceType.GROUP, "seen", AclOperation.DESCRIBE),
        allow_alice(ResourceType.GROUP, "doomed", AclOperation.DELETE),
        allow_alice(ResourceType.TOPIC, "orders", AclOperation.READ),
    ]
    for future in admin.create_acls(bindings).values():
        assert future.result(TIMEOUT_S) is None
    alice = _admin(servers, **client_settings("PLAIN", "alice", "alice-secret"))
    listed = alice.list_consumer_groups().result(TIMEOUT_S)
    assert sorted(g.group_id for g in listed.valid) == ["doomed", "seen"]  # not "hidden"
    assert len(admin.list_consumer_groups().result(TIMEOUT_S).valid) == 3  # a super user's
    described = alice.describe_consumer_groups(
        ["seen", "hidden"], include_authorized_operations=True
    )
    seen = described["seen"].result(TIMEOUT_S)
    assert [op.name for op in seen.authorized_operations] == ["DESCRIBE"]
    hidden = _error(described["hidden"])
    assert hidden is not None and hidden.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    deleted = alice.delete_consumer_groups(["seen"])
    refused = _error(deleted["seen"])
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    host, port = servers.split(",")[0].rsplit(":", 1)
    python_alice = KafkaAdminClient(
        bootstrap_servers=f"{host}:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
        request_timeout_ms=TIMEOUT_S * 1000,
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            python_alice.delete_group_offsets("seen", [KafkaPartition("orders", 0)])
        answers = python_alice.delete_group_offsets(
            "doomed", [KafkaPartition("orders", 0), KafkaPartition("secret", 0)]
        )
        assert answers[KafkaPartition("orders", 0)] is NoError
        assert answers[KafkaPartition("secret", 0)].errno == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        python_alice.close()
    (doomed,) = alice.delete_consumer_groups(["doomed"]).values()
    assert _error(doomed) is None
    assert sorted(g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid) == [
        "hidden",
        "seen",
    ]


async def test_over_sasl_a_user_sees_and_deletes_only_the_groups_its_acls_allow() -> None:
    config = sasl_server_config(authorizer_class_name=AUTHORIZER, super_users="User:admin")
    async with local_cluster(brokers=1, server_config=config) as cluster:
        await cluster.create_topic("orders", 1)
        await cluster.create_topic("secret", 1)
        assert LISTENER in config.listeners
        await asyncio.to_thread(_acl_session, cluster.bootstrap())


def _listed_by(broker: BrokerProcess) -> list[str]:
    admin = KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=10_000)
    try:
        return sorted(g["group_id"] for g in admin.list_groups(broker_ids=[broker.broker_id]))
    finally:
        admin.close()


def _brokers_seen(broker: BrokerProcess) -> int:
    return len(_admin(broker.address).list_topics(timeout=10).brokers)


def _eventually(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def test_two_broker_processes_list_each_group_once(tmp_path: Path) -> None:
    options = [
        "--data-dir", str(tmp_path / "data"), "--topic", "orders:1", "--no-lifecycle",
        # Broker 1's groups move once its registration lapsed: keep that short.
        "--server-option", "broker_session_timeout_ms=3000",
    ]  # fmt: skip
    groups = [f"group-{i}" for i in range(8)]
    with broker_processes(2, tmp_path, options) as brokers:
        servers = bootstrap(brokers)
        for broker in brokers:  # each process sees the other (its cluster view is fed)
            _eventually(lambda b=broker: _brokers_seen(b) == 2, TIMEOUT_S)
        for group_id in groups:
            _commit(servers, group_id, {("orders", 0): 1})
        by_broker = [_listed_by(broker) for broker in brokers]
        assert sorted(by_broker[0] + by_broker[1]) == groups  # each group once...
        assert all(by_broker), by_broker  # ... by the broker that coordinates it
        admin = _admin(servers)
        listed = admin.list_consumer_groups().result(TIMEOUT_S)
        assert sorted(g.group_id for g in listed.valid) == groups
        python_admin = KafkaAdminClient(bootstrap_servers=servers)
        try:
            assert sorted(g["group_id"] for g in python_admin.list_groups()) == groups
        finally:
            python_admin.close()
        # Broker 1 dies: once its registration lapsed, broker 0 lists its groups too (the
        # broker FindCoordinator would give them to), still once.
        brokers[1].kill()
        _eventually(lambda: _listed_by(brokers[0]) == groups, timeout_s=60)


def _wire_answers(owner: str, other: str) -> None:
    """What DescribeGroups, DeleteGroups and OffsetDelete answer on the wire: NOT_COORDINATOR
    away from the group's owner; at the owner, OffsetDelete's GROUP_ID_NOT_FOUND for a group
    that does not exist and UNKNOWN_TOPIC_OR_PARTITION for a topic that does not."""
    describe = describe_groups_v5.DescribeGroupsRequest(
        groups=("g",), include_authorized_operations=False
    )
    (away,) = ask(other, describe, TIMEOUT_S).groups
    assert (away.error_code, away.group_state, away.members) == (WireError.not_coordinator, "", ())
    (here,) = ask(owner, describe, TIMEOUT_S).groups
    assert (here.error_code, here.group_state) == (WireError.none, "Empty")
    delete = delete_groups_v2.DeleteGroupsRequest(groups_names=("g",))
    (refused,) = ask(other, delete, TIMEOUT_S).results
    assert refused.error_code is WireError.not_coordinator

    def offset_delete(group_id: str, topic: str) -> Any:
        partition = offset_delete_v0.OffsetDeleteRequestPartition(partition_index=i32(0))
        named = offset_delete_v0.OffsetDeleteRequestTopic(name=topic, partitions=(partition,))
        return offset_delete_v0.OffsetDeleteRequest(group_id=group_id, topics=(named,))

    assert ask(other, offset_delete("g", "orders"), TIMEOUT_S).error_code is (
        WireError.not_coordinator
    )
    assert ask(owner, offset_delete("g", "gone"), TIMEOUT_S).topics[0].partitions[0].error_code is (
        WireError.unknown_topic_or_partition
    )
    assert ask(owner, offset_delete("g", "orders"), TIMEOUT_S).error_code is WireError.none
    # Its only offset deleted, the group (no members, no generation) no longer exists: Kafka
    # forgets such a group at its next cleanup, this coordinator at once.
    assert ask(owner, describe, TIMEOUT_S).groups[0].group_state == "Dead"
    assert ask(owner, offset_delete("g", "orders"), TIMEOUT_S).error_code is (
        WireError.group_id_not_found
    )


async def test_only_the_owner_answers_and_kafkas_codes_on_the_wire() -> None:
    async with local_cluster(brokers=2, server_config=server_config()) as cluster:
        await cluster.create_topic("orders", 1)
        await asyncio.to_thread(_commit, cluster.bootstrap(), "g", {("orders", 0): 5})
        owner = await cluster.coordinator.group_ownership("g")
        assert owner is not None
        addresses = {b.broker_id: f"{b.host}:{b.port}" for b in cluster.view.brokers()}
        (other,) = set(addresses) - {owner.broker_id}
        await asyncio.to_thread(_wire_answers, addresses[owner.broker_id], addresses[other])
