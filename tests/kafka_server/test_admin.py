"""The admin APIs under real admin clients: confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient create, describe, grow, trim and delete topics of the 3-broker cluster."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import TopicAlreadyExistsError

from diskless import TimestampType
from diskless.kafka_server import KafkaCluster
from testkit.cluster import end_offsets
from tests.kafka_server._helpers import TIMEOUT_S, error_code_of

CONFIGS = {
    "retention.ms": "3600000",
    "retention.bytes": "1048576",
    "max.message.bytes": "65536",
    "message.timestamp.type": "LogAppendTime",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.after.max.ms": "60000",
}


def _confluent_admin_session(bootstrap: str) -> dict[str, object]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, object] = {}
    created = admin.create_topics(
        [
            NewTopic("configured", num_partitions=2, replication_factor=1, config=CONFIGS),
            NewTopic("odd", num_partitions=1, config={"cleanup.policy": "shrink"}),
            NewTopic("bad name!", num_partitions=1),
            NewTopic("dry", num_partitions=1),
        ],
        request_timeout=TIMEOUT_S,
    )
    seen["create"] = {name: error_code_of(f) for name, f in created.items()}
    try:
        created["odd"].result(TIMEOUT_S)
    except KafkaException as e:
        seen["odd_message"] = e.args[0].str()
    again = admin.create_topics([NewTopic("configured", num_partitions=2)])
    seen["again"] = error_code_of(again["configured"])
    dry = admin.create_topics([NewTopic("dry", num_partitions=1)], validate_only=True)
    seen["dry"] = error_code_of(dry["dry"])

    (described,) = admin.describe_configs([ConfigResource("topic", "configured")]).values()
    seen["configs"] = {name: entry.value for name, entry in described.result(TIMEOUT_S).items()}
    (unknown,) = admin.describe_configs([ConfigResource("topic", "nowhere")]).values()
    seen["describe_unknown"] = error_code_of(unknown)

    grown = admin.create_partitions([NewPartitions("configured", 4)])
    seen["grow"] = error_code_of(grown["configured"])
    shrunk = admin.create_partitions([NewPartitions("configured", 3)])
    seen["shrink"] = error_code_of(shrunk["configured"])

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce("configured", value=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    trimmed = admin.delete_records([CkTopicPartition("configured", 0, 6)])
    (future,) = trimmed.values()
    seen["low_watermark"] = future.result(TIMEOUT_S).low_watermark

    deleted = admin.delete_topics(["configured", "nowhere"], operation_timeout=TIMEOUT_S)
    seen["delete"] = {name: error_code_of(f) for name, f in deleted.items()}
    return seen


async def test_confluent_admin_client_manages_topics(cluster: KafkaCluster) -> None:
    seen = await asyncio.to_thread(_confluent_admin_session, cluster.bootstrap("rack-1"))
    assert seen["create"] == {
        "configured": 0,
        "odd": KafkaError.INVALID_CONFIG,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        "dry": 0,
    }
    assert "cleanup.policy" in str(seen["odd_message"])
    assert seen["again"] == KafkaError.TOPIC_ALREADY_EXISTS
    assert seen["dry"] == KafkaError.TOPIC_ALREADY_EXISTS
    configs = seen["configs"]
    assert isinstance(configs, dict)
    assert {name: configs[name] for name in CONFIGS} == CONFIGS
    assert configs["cleanup.policy"] == "delete"
    assert seen["describe_unknown"] == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert seen["grow"] == 0
    assert seen["shrink"] == KafkaError.INVALID_PARTITIONS
    assert seen["low_watermark"] == 6
    assert seen["delete"] == {"configured": 0, "nowhere": KafkaError.UNKNOWN_TOPIC_OR_PART}

    remaining = {d.name: d for d in await cluster.coordinator.describe_topics()}
    assert "configured" not in remaining and "odd" not in remaining
    assert remaining["dry"].partitions == 1


async def test_created_configs_reach_the_coordinator(cluster: KafkaCluster) -> None:
    admin = await asyncio.to_thread(AdminClient, {"bootstrap.servers": cluster.bootstrap()})
    futures = admin.create_topics([NewTopic("kept", num_partitions=3, config=CONFIGS)])
    assert await asyncio.to_thread(error_code_of, futures["kept"]) == 0
    (description,) = await cluster.coordinator.describe_topics(["kept"])
    assert description.partitions == 3
    assert description.config.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert description.config.retention_ms == 3_600_000
    assert description.config.retention_bytes == 1_048_576
    assert description.config.max_message_bytes == 65_536
    assert description.config.message_timestamp_before_max_ms == 86_400_000
    assert description.config.message_timestamp_after_max_ms == 60_000
    assert await end_offsets(cluster, "kept", 3) == {0: 0, 1: 0, 2: 0}


def _kafka_python_session(bootstrap: str) -> list[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic("kp", num_partitions=2, replication_factor=1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic("kp", num_partitions=2, replication_factor=1)])
        listed = sorted(admin.list_topics())
        admin.delete_topics(["kp"])
        return listed
    finally:
        admin.close()


async def test_kafka_python_admin_creates_and_deletes(cluster: KafkaCluster) -> None:
    listed = await asyncio.to_thread(_kafka_python_session, cluster.bootstrap())
    assert "kp" in listed
    assert await cluster.coordinator.describe_topics(["kp"]) == []


def _oversized_requests(bootstrap: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    huge = admin.create_topics([NewTopic("huge", num_partitions=100_000)])
    pair = admin.create_topics(
        [NewTopic("half-a", num_partitions=6_000), NewTopic("half-b", num_partitions=6_000)]
    )
    assert error_code_of(admin.create_topics([NewTopic("small", num_partitions=2)])["small"]) == 0
    grown = admin.create_partitions([NewPartitions("small", 100_000)])
    return {
        "huge": error_code_of(huge["huge"]),
        **{name: error_code_of(f) for name, f in pair.items()},
        "grow": error_code_of(grown["small"]),
    }


async def test_requests_for_too_many_partitions_are_refused_as_kafka_refuses_them(
    cluster: KafkaCluster,
) -> None:
    """Kafka caps the partitions one request may add at 10,000 (POLICY_VIOLATION), counted over
    all its topics; without the cap one request could exhaust the coordinator's memory."""
    seen = await asyncio.to_thread(_oversized_requests, cluster.bootstrap())
    assert seen == dict.fromkeys(("huge", "half-a", "half-b", "grow"), KafkaError.POLICY_VIOLATION)
    described = {d.name: d.partitions for d in await cluster.coordinator.describe_topics()}
    assert described == {"small": 2}


PROVISIONED = {
    "cleanup.policy": "delete",
    "retention.ms": "86400000",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "segment.bytes": "104857600",
    "segment.ms": "3600000",
    "flush.messages": "10000",
    "preallocate": "false",
    "diskless.enable": "true",
}
"""A topic as Terraform's Kafka provider or Strimzi's topic operator creates it: replicated,
with Kafka's replication and segment settings beside the ones that matter here."""


def _provisioning_session(bootstrap: str) -> dict[str, object]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [
            NewTopic("provisioned", num_partitions=3, replication_factor=3, config=PROVISIONED),
            NewTopic("plain", num_partitions=1, replication_factor=3),
            NewTopic("local", num_partitions=1, config={"diskless.enable": "false"}),
            NewTopic("wrong", num_partitions=1, config={"min.insync.replicas": "two"}),
        ],
        request_timeout=TIMEOUT_S,
    )
    seen: dict[str, object] = {"create": {name: error_code_of(f) for name, f in created.items()}}
    for refused in ("local", "wrong"):
        try:
            created[refused].result(TIMEOUT_S)
        except KafkaException as e:
            seen[refused] = e.args[0].str()
    described = admin.describe_configs(
        [ConfigResource("topic", "provisioned"), ConfigResource("topic", "plain")]
    )
    for resource, future in described.items():
        seen[resource.name] = {
            name: (entry.value, ConfigSource(entry.source), entry.is_read_only)
            for name, entry in future.result(TIMEOUT_S).items()
        }
    return seen


async def test_a_topic_provisioned_as_operators_do_is_created_and_described(
    cluster: KafkaCluster,
) -> None:
    """Kafka's replication and segment configs are accepted, kept and reported as given
    (read-only: not applied); KIP-1150's diskless.enable=true is accepted and false refused,
    saying why; what a diskless topic applies is applied, and a topic without its own retention
    has the broker's default (Kafka's 7 days)."""
    seen = await asyncio.to_thread(_provisioning_session, cluster.bootstrap())
    assert seen["create"] == {
        "provisioned": 0,
        "plain": 0,
        "local": KafkaError.INVALID_CONFIG,
        "wrong": KafkaError.INVALID_CONFIG,
    }
    assert "'diskless.enable' cannot be false: every topic of this cluster is diskless" in str(
        seen["local"]
    )
    assert "invalid value 'two' for config 'min.insync.replicas'" in str(seen["wrong"])
    provisioned, plain = seen["provisioned"], seen["plain"]
    assert isinstance(provisioned, dict) and isinstance(plain, dict)
    assert provisioned["retention.ms"] == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert plain["retention.ms"] == (str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG, False)
    for name in set(PROVISIONED) - {"retention.ms", "cleanup.policy"}:
        assert provisioned[name] == (PROVISIONED[name], ConfigSource.DYNAMIC_TOPIC_CONFIG, True)
        assert plain[name][1:] == (ConfigSource.DEFAULT_CONFIG, True), name
    assert plain["min.insync.replicas"][0] == "1" and plain["segment.bytes"][0] == "1073741824"
    (description,) = await cluster.coordinator.describe_topics(["provisioned"])
    assert description.partitions == 3 and description.config.retention_ms == 86_400_000
    assert {d.name for d in await cluster.coordinator.describe_topics()} == {"provisioned", "plain"}
