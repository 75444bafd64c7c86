"""Metadata sends each client's produce requests to its rack's produce representative.

Integration tests on a 6-broker, 3-rack cluster (two brokers per rack), through a raw client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as WireError
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from diskless import TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator, TopicDescription
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.routing import BrokerNode, produce_broker
from testkit.cluster import local_cluster, server_config
from testkit.wire import WireClient, fetch_request

TOPIC = "routed"
PARTITIONS = 24


@pytest.fixture
async def six() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=6, racks=3, server_config=server_config()) as running:
        await running.create_topic(TOPIC, PARTITIONS)
        yield running


def _metadata(*names: str, create: bool = False) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=create,
        include_topic_authorized_operations=False,
    )


def _leaders(response: Any) -> dict[int, tuple[int, int]]:
    (topic,) = response.topics
    assert topic.error_code == WireError.none
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in topic.partitions}


def _nodes(cluster: KafkaCluster) -> list[BrokerNode]:
    return [BrokerNode(b.broker_id, b.rack) for b in cluster.view.brokers()]


async def test_each_broker_names_the_representatives_of_its_own_rack(six: KafkaCluster) -> None:
    nodes = _nodes(six)
    racks = {b.broker_id: b.rack for b in six.view.brokers()}
    for server in six.servers.values():
        client = await WireClient.connect(server)
        try:
            response = await client.request(_metadata(TOPIC))
        finally:
            await client.close()
        assert {(b.node_id, b.rack) for b in response.brokers} == set(racks.items())
        leaders = _leaders(response)
        assert len(leaders) == PARTITIONS
        for partition, (leader, epoch) in leaders.items():
            expected = produce_broker(TopicPartition(TOPIC, partition), server.rack, nodes)
            assert leader == expected
            assert racks[leader] == server.rack
            assert epoch == six.view.generation
        # Both brokers of the rack represent some partitions (rendezvous spreads them).
        assert len({leader for leader, _ in leaders.values()}) == 2


async def test_a_consumer_rack_from_fetch_overrides_the_broker_rack(six: KafkaCluster) -> None:
    server = six.servers[0]
    assert server.rack == "rack-0"
    client = await WireClient.connect(server)
    try:
        fetched = await client.request(fetch_request(TOPIC, 1, rack="rack-2"))
        assert fetched.responses[0].partitions[0].error_code == WireError.none
        leaders = _leaders(await client.request(_metadata(TOPIC)))
    finally:
        await client.close()
    nodes = _nodes(six)
    for partition, (leader, _) in leaders.items():
        assert leader == produce_broker(TopicPartition(TOPIC, partition), "rack-2", nodes)
        assert six.view.get(leader) is not None
        assert six.view.get(leader).rack == "rack-2"  # type: ignore[union-attr]


async def test_leaders_move_off_a_dead_broker_with_a_higher_epoch(six: KafkaCluster) -> None:
    async def leaders_from(broker_id: int) -> dict[int, tuple[int, int]]:
        client = await WireClient.connect(six.servers[broker_id])
        try:
            return _leaders(await client.request(_metadata(TOPIC)))
        finally:
            await client.close()

    before = await leaders_from(0)
    assert {leader for leader, _ in before.values()} == {0, 3}
    await six.kill(3)
    after = await leaders_from(0)
    for partition, (leader, epoch) in after.items():
        assert leader == 0
        assert epoch > before[partition][1]
    # Other racks' views are unchanged but for the epoch.
    assert {p: leader for p, (leader, _) in (await leaders_from(1)).items()} == {
        p: produce_broker(TopicPartition(TOPIC, p), "rack-1", _nodes(six))
        for p in range(PARTITIONS)
    }


async def test_unknown_topics_are_reported_per_topic(six: KafkaCluster) -> None:
    client = await WireClient.connect(six.servers[1])
    try:
        response = await client.request(_metadata("nope", TOPIC))
    finally:
        await client.close()
    errors = {t.name: t.error_code for t in response.topics}
    assert errors == {"nope": WireError.unknown_topic_or_partition, TOPIC: WireError.none}


async def test_auto_creation_creates_legal_names_when_enabled() -> None:
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(
        coordinator,
        brokers=1,
        racks=1,
        server_config=ServerConfig(auto_create_topics_enable=True, num_partitions=4),
    ) as cluster:
        client = await WireClient.connect(cluster.servers[0])
        try:
            refused = await client.request(_metadata("new-topic"))
            response = await client.request(_metadata("new-topic", "bad/name", create=True))
        finally:
            await client.close()
        assert refused.topics[0].error_code == WireError.unknown_topic_or_partition
        topics = {t.name: t for t in response.topics}
        assert topics["new-topic"].error_code == WireError.none
        assert len(topics["new-topic"].partitions) == 4
        assert topics["bad/name"].error_code == WireError.invalid_topic_exception
        assert [d.name for d in await coordinator.describe_topics()] == ["new-topic"]


class _Unreachable(InMemoryBatchCoordinator):
    """Describing topics fails while `down` is set, as it does while the coordinator's server is
    unreachable."""

    down = False

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        if self.down:
            raise CoordinatorUnavailableError("the coordinator's server is down")
        return await super().describe_topics(names)


async def test_topics_stay_known_while_the_coordinator_is_unreachable() -> None:
    """Metadata cannot tell then whether a topic exists: it answers LEADER_NOT_AVAILABLE, which
    clients retry, not UNKNOWN_TOPIC_OR_PARTITION, after which a client gives up on the topic
    (librdkafka fails its queued messages)."""
    coordinator = _Unreachable()
    async with local_cluster(coordinator, brokers=1, racks=1) as cluster:
        await cluster.create_topic(TOPIC, 2)
        client = await WireClient.connect(cluster.servers[0])
        try:
            coordinator.down = True
            (topic,) = (await client.request(_metadata(TOPIC))).topics
            assert (topic.name, topic.error_code) == (TOPIC, WireError.leader_not_available)
            coordinator.down = False
            assert set(_leaders(await client.request(_metadata(TOPIC)))) == {0, 1}
        finally:
            await client.close()


async def test_a_described_topic_keeps_its_partitions_while_the_coordinator_is_unreachable() -> (
    None
):
    """As a Kafka broker answers Metadata from its own copy: a client told that a topic it writes
    has no partitions drops them (kafka-python, aiokafka) and stalls or fails its sends."""
    coordinator = _Unreachable()
    async with local_cluster(coordinator, brokers=1, racks=1) as cluster:
        await cluster.create_topic(TOPIC, 2)
        client = await WireClient.connect(cluster.servers[0])
        try:
            before = _leaders(await client.request(_metadata(TOPIC)))
            coordinator.down = True
            assert _leaders(await client.request(_metadata(TOPIC))) == before
            (topic,) = (await client.request(_metadata("never-described"))).topics
            assert topic.error_code == WireError.leader_not_available
        finally:
            await client.close()
