"""Integration: librdkafka consumers of the consumer group protocol (KIP-848,
`group.protocol=consumer`) on an in-process cluster: a subscription by regular expression, which
takes topics created later and only those it matches whole; a static member that leaves and
comes back within its session without a rebalance; consume-transform-produce exactly once
while transformers join and leave the group; and confluent-kafka's AdminClient listing,
describing and deleting a consumer-protocol group."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import kio.schema.consumer_group_describe.v1.request as describe_v1
import kio.schema.consumer_group_heartbeat.v0.request as heartbeat_v0
import kio.schema.find_coordinator.v4.request as find_coordinator_v4
import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8, i32, i32Timedelta

from diskless._types import CommittedOffset, TopicPartition
from diskless.coordinator import AclOperation
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._coordination.consumer_group_state import Snapshot, decode_snapshot
from diskless.kafka_server._server.settings.config import ServerConfig
from testkit.clients import confluent_consume
from testkit.cluster import FETCH_WAIT_MS_MAX, end_offsets, local_cluster
from testkit.wire import ask

RECORDS: Final = 200
EOS_INPUT: Final = "in"
EOS_OUTPUT: Final = "out"
EOS_PARTITIONS: Final = 4
CONFIG: Final = ServerConfig(
    fetch_wait_ms_max=FETCH_WAIT_MS_MAX,
    group_consumer_heartbeat_interval_ms=200,
    group_consumer_session_timeout_ms=10_000,
)


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=1, server_config=CONFIG) as running:
        yield running


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, value=f"{topic}:{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **config: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            **config,
        }
    )


def _read(consumer: Consumer, wanted: int, timeout_s: float = 30.0) -> list[bytes]:
    read: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(read) < wanted:
        assert time.monotonic() < deadline, f"read {len(read)} of {wanted}"
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        read.append(message.value() or b"")
    return read


async def _state(cluster: KafkaCluster, group: str) -> Snapshot:
    stored = await cluster.coordinator.group_state(group)
    assert stored is not None
    return decode_snapshot(stored)


async def test_a_regular_expression_takes_the_topics_it_matches_as_they_come(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    for topic in ("ev-a", "ev-b", "xev-a", "other"):
        await cluster.create_topic(topic, 2)
        await asyncio.to_thread(_produce, bootstrap, topic, 2)
    consumer = _consumer(bootstrap, "regex")
    try:
        consumer.subscribe(["^ev-.*"])
        read = await asyncio.to_thread(_read, consumer, 2 * RECORDS)
        assert {v.split(b":")[0] for v in read} == {b"ev-a", b"ev-b"}
        await cluster.create_topic("ev-c", 2)
        await asyncio.to_thread(_produce, bootstrap, "ev-c", 2)
        later = await asyncio.to_thread(_read, consumer, RECORDS)
        assert {v.split(b":")[0] for v in later} == {b"ev-c"}
        assert len(set(read + later)) == 3 * RECORDS
        (member,) = (await _state(cluster, "regex")).members
        assert member.subscribed_topic_regex == "(^ev-.*)"  # as librdkafka joins its patterns
        assert member.regex_topics == ("ev-a", "ev-b", "ev-c")
    finally:
        await asyncio.to_thread(consumer.close)


def _deletion_error(admin: AdminClient, group: str) -> KafkaError | None:
    try:
        admin.delete_consumer_groups([group])[group].result(30)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


GROUP_OPERATIONS: Final = sum(
    1 << int(op)
    for op in (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    )
)
"""KIP-430's bits of Kafka's operations on a group, all allowed without an authorizer."""


def _describe_on_the_wire(bootstrap: str) -> None:
    """ConsumerGroupDescribe's KIP-430 operations only when asked, and Kafka's answer for a
    group that does not exist and for one that is not a consumer group."""
    groups = ("admined", "missing", "standalone")
    find = find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=groups)
    found = ask(bootstrap, find, 30).coordinators
    assert {c.error_code for c in found} == {WireError.none}, "each group has its coordinator"
    asked = describe_v1.ConsumerGroupDescribeRequest(
        group_ids=groups, include_authorized_operations=True
    )
    admined, missing, standalone = ask(bootstrap, asked, 30).groups
    assert (admined.error_code, admined.group_state) == (WireError.none, "Stable")
    assert admined.authorized_operations == GROUP_OPERATIONS
    assert (missing.error_code, missing.error_message, missing.group_state) == (
        WireError.group_id_not_found,
        "Group missing not found.",
        "",
    )
    assert (standalone.error_code, standalone.error_message) == (
        WireError.group_id_not_found,
        "Group standalone is not a consumer group.",
    )
    unasked = describe_v1.ConsumerGroupDescribeRequest(
        group_ids=groups, include_authorized_operations=False
    )
    assert ask(bootstrap, unasked, 30).groups[0].authorized_operations == -(2**31)


def _admin_session(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    consumer = _consumer(bootstrap, "admined", **{"client.id": "reader"})
    try:
        consumer.subscribe(["admin"])
        assert len(_read(consumer, RECORDS)) == RECORDS
        consumer.commit(asynchronous=False)
        deadline = time.monotonic() + 30
        while True:  # stable once the member has acknowledged its assignment
            groups = {g.group_id: g for g in admin.list_consumer_groups().result(30).valid}
            assert sorted(groups) == ["admined", "standalone"]
            listed = groups["admined"]
            if listed.state is ConsumerGroupState.STABLE or time.monotonic() > deadline:
                break
            consumer.poll(0.2)
        assert (listed.group_id, listed.type) == ("admined", ConsumerGroupType.CONSUMER)
        assert listed.state is ConsumerGroupState.STABLE
        assert not listed.is_simple_consumer_group
        consumer_type = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER})
        assert [g.group_id for g in consumer_type.result(30).valid] == ["admined"]
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC})
        assert [g.group_id for g in classic.result(30).valid] == ["standalone"]
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE})
        assert [g.group_id for g in stable.result(30).valid] == ["admined"]
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY})
        assert [g.group_id for g in empty.result(30).valid] == ["standalone"]

        described = admin.describe_consumer_groups(["admined"], include_authorized_operations=True)
        group = described["admined"].result(30)
        assert (group.type, group.state) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)
        assert group.partition_assignor == "uniform"
        assert {"READ", "DESCRIBE", "DELETE"} <= {op.name for op in group.authorized_operations}
        (member,) = group.members
        assert member.client_id == "reader"
        assigned = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
        assert assigned == [("admin", 0), ("admin", 1)]

        _describe_on_the_wire(bootstrap)
        error = _deletion_error(admin, "admined")
        assert error is not None and error.code() == KafkaError.NON_EMPTY_GROUP
    finally:
        consumer.close()
    # Its member left: the group is empty, and goes with its offsets and its stored state.
    deadline = time.monotonic() + 30
    while (error := _deletion_error(admin, "admined")) is not None:
        assert error.code() == KafkaError.NON_EMPTY_GROUP, error
        assert time.monotonic() < deadline, "the group stayed non-empty"
        time.sleep(0.2)
    assert [g.group_id for g in admin.list_consumer_groups().result(30).valid] == ["standalone"]
    error = _deletion_error(admin, "admined")
    assert error is not None and error.code() == KafkaError.GROUP_ID_NOT_FOUND
    # A new member of the same group id starts from `auto.offset.reset`, not where it was.
    again = _consumer(bootstrap, "admined")
    try:
        again.subscribe(["admin"])
        assert len(_read(again, RECORDS)) == RECORDS
    finally:
        again.close()


async def test_the_admin_client_lists_describes_and_deletes_a_consumer_protocol_group(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic("admin", 2)
    await asyncio.to_thread(_produce, cluster.bootstrap(), "admin", 2)
    await cluster.coordinator.commit_offsets(
        "standalone", {TopicPartition("admin", 0): CommittedOffset(1, None)}
    )
    await asyncio.to_thread(_admin_session, cluster.bootstrap())
    anew = await _state(cluster, "admined")  # afresh: its member joined (epoch 1) and left (2)
    assert (anew.group_epoch, anew.members) == (2, ())


async def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    await cluster.create_topic("static", 4)
    await asyncio.to_thread(_produce, bootstrap, "static", 4)
    first = _consumer(bootstrap, "statics", **{"group.instance.id": "s1"})
    other = _consumer(bootstrap, "statics", **{"group.instance.id": "s2"})

    def stable(state: Snapshot | None) -> bool:
        return (
            state is not None
            and len(state.members) == 2
            and state.group_epoch == state.assignment_epoch
            and all(
                m.member_epoch == state.assignment_epoch and m.assigned and not m.revoking
                for m in state.members
            )
        )

    async def settled(consumers: list[Consumer]) -> Snapshot:
        """Poll the members (rebalances progress in their polls) until the group is stable."""
        deadline = time.monotonic() + 30
        while True:
            for consumer in consumers:
                await asyncio.to_thread(consumer.poll, 0.05)
            stored = await cluster.coordinator.group_state("statics")
            state = None if stored is None else decode_snapshot(stored)
            if stable(state):
                assert state is not None
                return state
            assert time.monotonic() < deadline, state

    try:
        first.subscribe(["static"])
        other.subscribe(["static"])
        before = await settled([first, other])
        held = {m.instance_id: m.assigned for m in before.members}
        await asyncio.to_thread(first.close)  # a static member leaves with epoch -2
        gone = await _state(cluster, "statics")
        assert {m.instance_id: m.member_epoch for m in gone.members}["s1"] == -2
        assert gone.group_epoch == before.group_epoch, "its partitions wait for it"

        first = _consumer(bootstrap, "statics", **{"group.instance.id": "s1"})
        first.subscribe(["static"])
        back = await settled([first, other])
        assert back.group_epoch == before.group_epoch, "no rebalance"
        assert {m.instance_id: m.assigned for m in back.members} == held
        assert {m.member_epoch for m in back.members} == {before.assignment_epoch}
    finally:
        await asyncio.to_thread(first.close)
        await asyncio.to_thread(other.close)


class _Transformer:
    """Consume-transform-produce in a thread of its own, exactly once: a subscriber of the
    consumer protocol whose input offsets commit in the transaction of its output (KIP-447,
    `send_offsets_to_transaction` with its member id and epoch). Every third transaction is
    aborted; the transformer then leaves the group and joins it again, to resume from the
    committed offsets. (Rewinding with `seek` instead had librdkafka read a partition from its
    start now and then, for a cause not found yet.)"""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name, self._bootstrap = name, bootstrap
        self.committed = self.aborted = 0
        self.failure: BaseException | None = None
        self.log: list[tuple[float, str, str]] = []
        """(when, this transformer, what it did): printed when the test fails."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        try:
            producer = Producer(
                {"bootstrap.servers": self._bootstrap, "transactional.id": f"tx-{self.name}"}
            )
            producer.init_transactions(30)
            while not self._stop.is_set():
                consumer = self._join()
                try:
                    while not self._stop.is_set() and self._once(producer, consumer):
                        pass
                finally:
                    consumer.close()
        except BaseException as e:
            self.failure = e

    def _join(self) -> Consumer:
        consumer = _consumer(
            self._bootstrap,
            "transformers",
            **{"enable.auto.commit": False, "isolation.level": "read_committed"},
        )
        consumer.subscribe(
            [EOS_INPUT],
            on_assign=lambda _, tps: self._note(f"assigned {[tp.partition for tp in tps]}"),
            on_revoke=lambda _, tps: self._note(f"revoked {[tp.partition for tp in tps]}"),
            on_lost=lambda _, tps: self._note(f"lost {[tp.partition for tp in tps]}"),
        )
        return consumer

    def _note(self, what: str) -> None:
        self.log.append((time.monotonic(), self.name, what))

    def _once(self, producer: Producer, consumer: Consumer) -> bool:
        """One transaction; False when it was aborted."""
        positions: dict[int, int] = {}
        outputs: list[tuple[int, bytes]] = []
        for message in consumer.consume(20, 0.2):  # revocations happen here, between txns
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            sequence = (message.value() or b"").decode().partition(":")[2]
            outputs.append((partition, f"out:{sequence}".encode()))
            positions[partition] = offset + 1
        if not outputs:
            return True
        self._note(f"read up to {positions} ({len(outputs)} records)")
        producer.begin_transaction()
        for partition, data in outputs:
            producer.produce(EOS_OUTPUT, value=data, partition=partition)
        try:
            offsets = [CkTopicPartition(EOS_INPUT, p, o) for p, o in sorted(positions.items())]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            if (self.committed + self.aborted) % 3 == 1:
                raise _Abort
            producer.commit_transaction(30)
        except (_Abort, KafkaException) as e:
            self._note(f"aborting: {e!r}")
            producer.abort_transaction(30)
            self.aborted += 1
            return False
        self.committed += 1
        self._note(f"committed {positions}")
        return True


class _Abort(Exception):
    pass


async def test_consume_transform_produce_is_exactly_once_while_members_come_and_go(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    await cluster.create_topic(EOS_INPUT, EOS_PARTITIONS)
    await cluster.create_topic(EOS_OUTPUT, EOS_PARTITIONS)
    await asyncio.to_thread(_produce, bootstrap, EOS_INPUT, EOS_PARTITIONS)
    inputs = await end_offsets(cluster, EOS_INPUT, EOS_PARTITIONS)

    async def committed() -> dict[int, int]:
        stored = await cluster.coordinator.fetch_offsets("transformers")
        return {tp.partition: c.offset for tp, c in stored.items()}

    async def until(done: Callable[[dict[int, int]], bool]) -> None:
        deadline = time.monotonic() + 60
        while not done(await committed()):
            assert time.monotonic() < deadline, await committed()
            await asyncio.sleep(0.05)

    first = _Transformer("t1", bootstrap)
    transformers = [first]
    try:
        await until(lambda offsets: sum(offsets.values()) > 0)
        transformers.append(_Transformer("t2", bootstrap))  # joins: the partitions are split
        await until(lambda offsets: sum(offsets.values()) > RECORDS // 2)
        await asyncio.to_thread(first.stop)  # leaves: the other takes its partitions
        await until(lambda offsets: offsets == inputs)
    finally:
        for transformer in transformers:
            await asyncio.to_thread(transformer.stop)
        start = min(at for t in transformers for at, _, _ in t.log)
        for at, name, what in sorted(entry for t in transformers for entry in t.log):
            print(f"{at - start:7.3f} {name} {what}")
    assert sum(t.aborted for t in transformers) >= 2
    assert all(t.committed for t in transformers), "both transformed some of the input"
    outputs = await end_offsets(cluster, EOS_OUTPUT, EOS_PARTITIONS)
    audit = await asyncio.to_thread(
        confluent_consume, bootstrap, EOS_OUTPUT, outputs, isolation="read_committed"
    )
    audit.check({"out": range(RECORDS)})
    assert audit.count == RECORDS, "each input record transformed exactly once"


def _heartbeat_interval_ms(bootstrap: str, group: str) -> int:
    """The heartbeat interval a new member of `group` is told, over the wire (it leaves again;
    the cluster has one broker: it coordinates every group, once FindCoordinator names it)."""
    find = find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
    assert ask(bootstrap, find, 30).coordinators[0].error_code is WireError.none
    join = heartbeat_v0.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id="",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=("tuned",),
        server_assignor=None,
        topic_partitions=(),
    )
    joined = ask(bootstrap, join, 30)
    assert joined.error_code is WireError.none, joined
    leave = dataclasses.replace(join, member_id=joined.member_id, member_epoch=i32(-1))
    assert ask(bootstrap, leave, 30).error_code is WireError.none
    return int(joined.heartbeat_interval.total_seconds() * 1000)


def _tune_a_group(bootstrap: str) -> dict[str, object]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, object] = {"before": _heartbeat_interval_ms(bootstrap, "tuned")}
    (described,) = admin.describe_configs([ConfigResource("group", "tuned")]).values()
    entry = described.result(30)["consumer.heartbeat.interval.ms"]
    seen["default"] = (entry.value, entry.source)
    change = ConfigEntry(
        "consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET
    )
    (altered,) = admin.incremental_alter_configs(
        [ConfigResource("group", "tuned", incremental_configs=[change])]
    ).values()
    altered.result(30)
    deadline = time.monotonic() + 30
    while (after := _heartbeat_interval_ms(bootstrap, "tuned")) != 6000:
        assert time.monotonic() < deadline, f"still {after} ms"
        time.sleep(0.2)
    seen["other"] = _heartbeat_interval_ms(bootstrap, "untuned")
    return seen


async def test_a_groups_own_configs_override_the_brokers_group_consumer_properties(
    cluster: KafkaCluster,
) -> None:
    """The broker's `group.consumer.heartbeat.interval.ms` (200 ms here) is every group's
    default, described as the broker's; a group's own `consumer.heartbeat.interval.ms`, set
    through IncrementalAlterConfigs, is what its members are told from then on, and only its."""
    await cluster.create_topic("tuned", 1)
    seen = await asyncio.to_thread(_tune_a_group, cluster.bootstrap())
    assert seen["before"] == 200
    assert seen["default"] == ("200", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert seen["other"] == 200
