"""Reads in the consumer's rack (KIP-392) on a 6-broker, 3-rack cluster (two brokers per rack).

Each broker tells its rack (`broker.rack`) and the other settings it applies through
DescribeConfigs of its BROKER resource, as Kafka's brokers do: what rack-aware clients and their
tests read.

A consumer's Fetch names its `client.rack`; a broker of another rack answers each partition with
a `preferred_read_replica` in the consumer's rack (the rack's produce representative) and no
records, and the consumer reads from there on. Checked through a raw client (Kafka's rules for
when there is none) and with librdkafka's consumer, counting from the brokers' side whom its
fetches reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode as WireError

from diskless import TopicPartition
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.routing import BrokerNode, produce_broker
from testkit.clients import confluent_consume, confluent_produce
from testkit.cluster import local_cluster, server_config
from testkit.wire import WireClient, fetch_request

TOPIC = "zonal"
PARTITIONS = 6
RECORDS = 600
READER = "rack-reader"
IDLE_MS = 123_456
TIMEOUT_S = 30


@pytest.fixture
async def six() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(
        brokers=6,
        racks=3,
        server_config=ServerConfig(
            fetch_wait_ms_max=server_config().fetch_wait_ms_max,
            connections_idle_ms_max=IDLE_MS,
            ssl_key_password="kept-secret",
        ),
    ) as running:
        await running.create_topic(TOPIC, PARTITIONS)
        await asyncio.to_thread(
            confluent_produce, running.bootstrap(), TOPIC, "p", RECORDS, PARTITIONS
        )
        yield running


async def _fetch(cluster: KafkaCluster, broker_id: int, request: Any) -> dict[int, Any]:
    client = await WireClient.connect(cluster.servers[broker_id])
    try:
        response = await client.request(request)
    finally:
        await client.close()
    (topic,) = response.responses
    return {p.partition_index: p for p in topic.partitions}


async def test_a_broker_of_another_rack_names_the_representative_of_the_consumers_rack(
    six: KafkaCluster,
) -> None:
    assert six.servers[0].rack == "rack-0"
    answers = await _fetch(six, 0, fetch_request(TOPIC, PARTITIONS, rack="rack-2"))
    nodes = [BrokerNode(b.broker_id, b.rack) for b in six.view.brokers()]
    for partition, answer in answers.items():
        expected = produce_broker(TopicPartition(TOPIC, partition), "rack-2", nodes)
        assert six.view.get(expected).rack == "rack-2"  # type: ignore[union-attr]
        assert answer.error_code == WireError.none
        assert answer.preferred_read_replica == expected
        assert answer.records in (None, b"")  # read there instead
        assert answer.high_watermark == RECORDS // PARTITIONS


@pytest.mark.parametrize(
    ("broker_id", "rack", "replica_id"),
    [
        (2, "rack-2", -1),  # already in the consumer's rack
        (0, "rack-9", -1),  # no broker in the consumer's rack
        (0, "", -1),  # no rack given
        (0, "rack-2", 3),  # a follower's fetch, not a consumer's
    ],
)
async def test_no_preferred_read_replica_where_kafka_names_none(
    six: KafkaCluster, broker_id: int, rack: str, replica_id: int
) -> None:
    request = dataclasses.replace(
        fetch_request(TOPIC, PARTITIONS, rack=rack), replica_id=replica_id
    )
    answers = await _fetch(six, broker_id, request)
    for answer in answers.values():
        assert answer.error_code == WireError.none
        assert answer.preferred_read_replica == -1
        assert answer.records  # served here


async def test_an_unknown_partition_gets_its_error_and_no_preferred_read_replica(
    six: KafkaCluster,
) -> None:
    answers = await _fetch(six, 0, fetch_request(TOPIC, PARTITIONS + 1, rack="rack-2"))
    assert answers[PARTITIONS].error_code == WireError.unknown_topic_or_partition
    assert answers[PARTITIONS].preferred_read_replica == -1
    assert all(answers[p].preferred_read_replica >= 0 for p in range(PARTITIONS))


async def test_a_librdkafka_consumer_reads_everything_from_brokers_of_its_rack(
    six: KafkaCluster,
) -> None:
    """Bootstrapped from rack-0 only, so Metadata names rack-0's brokers as leaders: its first
    fetches go there, are redirected, and every later one is served in rack-1."""
    rack = "rack-1"
    audit = await asyncio.to_thread(
        confluent_consume,
        six.bootstrap("rack-0"),
        TOPIC,
        dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS),
        rack=rack,
        extra={"client.id": READER},
    )
    assert audit.count == RECORDS
    audit.check({"p": range(RECORDS)})  # every record, once, in order
    fetches = {b: s.received(ApiKey.FETCH)[READER] for b, s in six.servers.items()}
    in_rack = {b: n for b, n in fetches.items() if six.servers[b].rack == rack}
    elsewhere = {b: n for b, n in fetches.items() if six.servers[b].rack != rack}
    assert all(n > 0 for n in in_rack.values()), fetches  # each serves its partitions
    # Each redirection moves every partition the fetch named, so each broker elsewhere that
    # Metadata named a leader saw about one fetch, the brokers of the rack all the others.
    assert sum(elsewhere.values()) <= PARTITIONS, fetches
    assert sum(in_rack.values()) > sum(elsewhere.values()), fetches


def _broker_configs(cluster: KafkaCluster, broker_id: int) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "broker.address.family": "v4"})
    (future,) = admin.describe_configs([ConfigResource("broker", str(broker_id))]).values()
    return dict(future.result(TIMEOUT_S))


async def test_each_broker_describes_its_rack_and_settings_read_only_but_the_dynamic_ones(
    six: KafkaCluster,
) -> None:
    for broker_id, server in six.servers.items():
        configs = await asyncio.to_thread(_broker_configs, six, broker_id)
        rack = configs["broker.rack"]
        assert (rack.value, rack.source) == (server.rack, ConfigSource.STATIC_BROKER_CONFIG.value)
        assert configs["node.id"].value == configs["broker.id"].value == str(broker_id)
        idle = configs["connections.max.idle.ms"]
        assert (idle.value, idle.source) == (str(IDLE_MS), ConfigSource.STATIC_BROKER_CONFIG.value)
        limit = configs["socket.request.max.bytes"]
        assert (limit.value, limit.source) == ("104857600", ConfigSource.DEFAULT_CONFIG.value)
        secret = configs["ssl.key.password"]
        assert secret.is_sensitive and secret.value is None
        alterable = {name for name, entry in configs.items() if not entry.is_read_only}
        assert alterable == {"log.retention.ms", "log.retention.bytes", "message.max.bytes"}


@pytest.mark.parametrize(
    ("name", "error", "listed"),
    [
        ("0", WireError.none, True),
        ("", WireError.none, False),  # the cluster-wide dynamic defaults: none
        ("1", WireError.invalid_request, False),  # another broker's: ask that broker
        ("zero", WireError.invalid_request, False),
    ],
)
async def test_a_broker_resource_names_the_broker_asked(
    six: KafkaCluster, name: str, error: WireError, listed: bool
) -> None:
    client = await WireClient.connect(six.servers[0])
    try:
        response = await client.request(
            DescribeConfigsRequest(
                resources=(
                    DescribeConfigsResource(
                        resource_type=4, resource_name=name, configuration_keys=None
                    ),
                ),
                include_synonyms=False,
                include_documentation=False,
            )
        )
    finally:
        await client.close()
    (result,) = response.results
    assert result.error_code == error
    assert bool(result.configs) == listed
    if listed:
        assert {c.name: c.value for c in result.configs}["broker.rack"] == "rack-0"
