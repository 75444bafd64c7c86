"""Integration: librdkafka consumers of the consumer group protocol (KIP-848,
`group.protocol=consumer`) on an in-process cluster: a subscription by regular expression, which
takes topics created later and only those it matches whole, and a static member that leaves and
comes back within its session without a rebalance."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Final

import pytest
from confluent_kafka import Consumer, Producer

from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._coordination.consumer_group_state import Snapshot, decode_snapshot
from diskless.kafka_server._server.settings.config import ServerConfig
from testkit.cluster import FETCH_WAIT_MS_MAX, local_cluster

RECORDS: Final = 200
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
