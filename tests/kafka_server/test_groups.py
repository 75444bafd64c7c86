"""Consumer groups: the minimal group coordinator, alone and under real clients.

Unit tests drive `GroupCoordinator` directly; integration tests subscribe librdkafka and
kafka-python consumers to a topic of the 3-broker cluster.
"""

from __future__ import annotations

import asyncio
import threading
import time

from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer
from kio.schema.errors import ErrorCode as WireError

from diskless import TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._groups import GroupCoordinator

PARTITIONS = 6
RECORDS = 3000


async def _join(groups: GroupCoordinator, member_id: str = "") -> object:
    return await groups.join(
        group_id="g",
        member_id=member_id,
        protocol_type="consumer",
        protocols=[("range", b"meta-" + member_id.encode())],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
    )


async def test_join_sync_heartbeat_leave() -> None:
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 1)
    groups = GroupCoordinator(coordinator)
    await groups.start()
    try:
        first = await _join(groups)
        assert first.error == WireError.none  # type: ignore[attr-defined]
        member, generation = first.member_id, first.generation  # type: ignore[attr-defined]
        assert first.leader == member  # type: ignore[attr-defined]
        error, assignment = await groups.sync("g", generation, member, {member: b"all"})
        assert (error, assignment) == (WireError.none, b"all")
        assert groups.heartbeat("g", generation, member) == WireError.none
        assert groups.heartbeat("g", generation + 1, member) == WireError.illegal_generation
        assert groups.heartbeat("g", generation, "stranger") == WireError.unknown_member_id

        # A second member triggers a rebalance; the first learns it from its heartbeat.
        second_join = asyncio.create_task(_join(groups))
        await asyncio.sleep(0)
        assert groups.heartbeat("g", generation, member) == WireError.rebalance_in_progress
        rejoin = await _join(groups, member)
        second = await second_join
        assert rejoin.generation == second.generation == generation + 1  # type: ignore[attr-defined]
        assert rejoin.leader == member and len(rejoin.members) == 2  # type: ignore[attr-defined]
        assert second.members == []  # type: ignore[attr-defined]
        follower = asyncio.create_task(
            groups.sync("g", generation + 1, second.member_id, {})  # type: ignore[attr-defined]
        )
        leader = await groups.sync(
            "g",
            generation + 1,
            member,
            {member: b"a", second.member_id: b"b"},  # type: ignore[attr-defined]
        )
        assert leader == (WireError.none, b"a")
        assert await follower == (WireError.none, b"b")

        offsets = {TopicPartition("t", 0): (42, None)}
        stale = await groups.commit_offsets("g", generation, member, offsets)
        assert stale == {TopicPartition("t", 0): WireError.illegal_generation}
        assert await groups.committed_offsets("g") == {}
        unknown = {TopicPartition("t", 1): (1, None)}
        answers = await groups.commit_offsets("g", generation + 1, member, {**offsets, **unknown})
        assert answers == {
            TopicPartition("t", 0): WireError.none,
            TopicPartition("t", 1): WireError.unknown_topic_or_partition,
        }
        assert await groups.committed_offsets("g") == offsets
        assert groups.leave("g", member) == WireError.none
        assert groups.leave("g", member) == WireError.unknown_member_id
    finally:
        await groups.close()


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("grouped", value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _librdkafka_group(bootstrap: str) -> tuple[dict[tuple[int, int], bytes], list[set[int]]]:
    """Two members read the topic; what was read, and the partitions each member read from."""
    read: dict[tuple[int, int], bytes] = {}
    read_by: list[set[int]] = [set(), set()]
    lock = threading.Lock()

    def member(index: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "librdkafka-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # Members learn of a rebalance from their heartbeat (3 s by default).
                "heartbeat.interval.ms": 100,
            }
        )
        consumer.subscribe(["grouped"])
        idle = 0
        deadline = time.monotonic() + 60
        while idle < 6 or len(read) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(read)} of {RECORDS}"
            message = consumer.poll(0.5)
            if message is None:
                idle += 1
                continue
            idle = 0
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            with lock:
                assert (partition, offset) not in read, "read twice"
                read[partition, offset] = message.value() or b""
                read_by[index].add(partition)
            consumer.commit(message=message, asynchronous=False)
        consumer.close()

    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            member(index)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return read, read_by


async def test_librdkafka_consumers_share_a_topic_through_a_group(cluster: KafkaCluster) -> None:
    await cluster.create_topic("grouped", PARTITIONS)
    bootstrap = cluster.bootstrap("rack-0")
    await asyncio.to_thread(_produce, bootstrap)
    read, read_by = await asyncio.to_thread(_librdkafka_group, bootstrap)
    assert sorted(int(v) for v in read.values()) == list(range(RECORDS))
    # Both members joined the first generation, which split the partitions between them; each
    # commits what it reads, so none is read twice even when the last one to leave takes over.
    assert read_by[0] and read_by[1]
    assert not read_by[0] & read_by[1]
    committed = await cluster.groups.committed_offsets("librdkafka-group")
    assert sum(offset for offset, _ in committed.values()) == RECORDS


def _kafka_python_group(bootstrap: str) -> int:
    consumer = KafkaConsumer(
        "grouped",
        bootstrap_servers=bootstrap,
        group_id="kafka-python-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=4000,
    )
    count = sum(1 for _ in consumer)
    consumer.commit()
    consumer.close()
    return count


async def test_kafka_python_subscribes_and_commits(cluster: KafkaCluster) -> None:
    await cluster.create_topic("grouped", PARTITIONS)
    await asyncio.to_thread(_produce, cluster.bootstrap("rack-2"))
    count = await asyncio.to_thread(_kafka_python_group, cluster.bootstrap("rack-2"))
    assert count == RECORDS
    committed = await cluster.groups.committed_offsets("kafka-python-group")
    assert sum(offset for offset, _ in committed.values()) == RECORDS


async def test_an_anonymous_join_from_v4_on_gets_member_id_required() -> None:
    groups = GroupCoordinator(InMemoryBatchCoordinator())
    try:
        arguments = {
            "group_id": "g",
            "protocol_type": "consumer",
            "protocols": [("range", b"")],
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "require_known_member_id": True,
        }
        first = await groups.join(member_id="", **arguments)  # type: ignore[arg-type]
        assert first.error == WireError.member_id_required and first.member_id
        again = await groups.join(member_id="", **arguments)  # type: ignore[arg-type]
        assert again.member_id != first.member_id
        joined = await groups.join(member_id=first.member_id, **arguments)  # type: ignore[arg-type]
        assert joined.error == WireError.none and joined.members == [(first.member_id, b"")]
    finally:
        await groups.close()
