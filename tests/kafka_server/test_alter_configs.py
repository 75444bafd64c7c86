"""Integration: configs changed at run time through real admin clients, as operators' tools do.

- confluent-kafka's AdminClient: IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT,
  `validate_only`) and AlterConfigs on TOPIC, BROKER (one broker, and the cluster-wide default)
  and GROUP resources, read back with DescribeConfigs: each value's source and synonyms, and
  Kafka's refusals (an unknown config or a bad value INVALID_CONFIG, a broker config Kafka does
  not change at run time INVALID_REQUEST, an unknown topic UNKNOWN_TOPIC_OR_PARTITION).
- kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient: AlterConfigs and
  DescribeConfigs.
- ACLs, through SASL logins: ALTER_CONFIGS on the topic, the cluster (a broker) or the group,
  each refusal with its resource's code; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
- A dynamic default of the cluster is the default of topics created after it.
- The group coordinator's view of a group's configs (`group_configs`) is what was set.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import kio.schema.describe_configs.v4.request as describe_v4
import kio.schema.incremental_alter_configs.v1.request as incremental_v1
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._coordination.group_configs import GroupConfigs, group_configs
from testkit.cluster import local_cluster
from testkit.sasl import ADMIN, client_settings, sasl_server_config
from testkit.wire import ask
from tests.kafka_server._helpers import TIMEOUT_S, allow_alice, error_code_of

SET = AlterConfigOpType.SET
DELETE = AlterConfigOpType.DELETE
APPEND = AlterConfigOpType.APPEND
SUBTRACT = AlterConfigOpType.SUBTRACT
WEEK_MS = str(7 * 24 * 3_600_000)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def _op(name: str, operation: AlterConfigOpType, value: str | None = None) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=operation)


def _alter(admin: AdminClient, kind: str, name: str, *ops: ConfigEntry, dry: bool = False) -> int:
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(kind, name, incremental_configs=list(ops))], validate_only=dry
    ).values()
    return error_code_of(future)


def _described(admin: AdminClient, kind: str, name: str) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource(kind, name)]).values()
    return dict(future.result(TIMEOUT_S))


def _entry(entry: Any) -> tuple[Any, ...]:
    """(value, source, [(synonym, value, source)...]) of a described entry."""
    synonyms = [(s.name, s.value, int(s.source)) for s in entry.synonyms.values()]
    return entry.value, int(entry.source), synonyms


def _cluster_default(address: str, name: str, operation: int, value: str | None) -> WireError:
    """IncrementalAlterConfigs of the cluster-wide default broker resource (the empty name,
    which confluent-kafka's client does not send) on the wire."""
    config = incremental_v1.AlterableConfig(name=name, config_operation=i8(operation), value=value)
    resource = incremental_v1.AlterConfigsResource(
        resource_type=i8(4), resource_name="", configs=(config,)
    )
    body = incremental_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
    (answer,) = ask(address, body, TIMEOUT_S).responses
    return WireError(answer.error_code)


def _cluster_defaults(address: str) -> dict[str, tuple[str | None, int]]:
    resource = describe_v4.DescribeConfigsResource(
        resource_type=i8(4), resource_name="", configuration_keys=None
    )
    body = describe_v4.DescribeConfigsRequest(
        resources=(resource,), include_synonyms=True, include_documentation=False
    )
    (answer,) = ask(address, body, TIMEOUT_S).results
    assert answer.error_code is WireError.none
    return {c.name: (c.value, int(c.config_source)) for c in answer.configs}


def _topic_session(bootstrap: str) -> dict[str, Any]:
    admin = _admin(bootstrap)
    seen: dict[str, Any] = {}
    created = admin.create_topics([NewTopic("altered", num_partitions=1)])
    assert error_code_of(created["altered"]) == 0
    seen["set"] = _alter(
        admin,
        "topic",
        "altered",
        _op("retention.ms", SET, "60000"),
        _op("max.message.bytes", SET, "2048"),
        _op("segment.bytes", SET, "1000000"),
    )
    described = _described(admin, "topic", "altered")
    seen["retention"] = _entry(described["retention.ms"])
    seen["max"] = described["max.message.bytes"].value
    seen["segment"] = _entry(described["segment.bytes"])[:2]
    # SET again leaves the others as they are; DELETE goes back to the default.
    seen["delete"] = _alter(admin, "topic", "altered", _op("retention.ms", DELETE))
    described = _described(admin, "topic", "altered")
    seen["deleted"] = _entry(described["retention.ms"])[:2]
    seen["kept"] = described["max.message.bytes"].value
    # Lists: APPEND and SUBTRACT; not on a config that is no list.
    seen["append"] = _alter(
        admin, "topic", "altered", _op("leader.replication.throttled.replicas", APPEND, "0:1,1:2")
    )
    seen["subtract"] = _alter(
        admin, "topic", "altered", _op("leader.replication.throttled.replicas", SUBTRACT, "0:1")
    )
    described = _described(admin, "topic", "altered")
    seen["list"] = described["leader.replication.throttled.replicas"].value
    seen["append_long"] = _alter(admin, "topic", "altered", _op("retention.ms", APPEND, "1"))
    seen["unknown"] = _alter(admin, "topic", "altered", _op("no.such.config", SET, "1"))
    seen["bad"] = _alter(admin, "topic", "altered", _op("retention.ms", SET, "soon"))
    seen["compact"] = _alter(admin, "topic", "altered", _op("cleanup.policy", SET, "compact"))
    seen["both"] = _alter(admin, "topic", "altered", _op("cleanup.policy", APPEND, "delete"))
    seen["policy"] = _described(admin, "topic", "altered")["cleanup.policy"].value
    seen["no_policy"] = _alter(admin, "topic", "altered", _op("cleanup.policy", SET, "shrink"))
    seen["lag"] = _alter(admin, "topic", "altered", _op("max.compaction.lag.ms", SET, "0"))
    seen["lags"] = _alter(
        admin,
        "topic",
        "altered",
        _op("min.compaction.lag.ms", SET, "5000"),
        _op("max.compaction.lag.ms", SET, "4000"),
    )
    seen["ratio"] = _alter(admin, "topic", "altered", _op("min.cleanable.dirty.ratio", SET, "1.5"))
    seen["nowhere"] = _alter(admin, "topic", "nowhere", _op("retention.ms", SET, "1"))
    seen["dry"] = _alter(admin, "topic", "altered", _op("retention.ms", SET, "1"), dry=True)
    seen["after_dry"] = _described(admin, "topic", "altered")["retention.ms"].value
    # AlterConfigs replaces the whole set: max.message.bytes goes back to its default.
    with warnings.catch_warnings():  # AlterConfigs is deprecated for IncrementalAlterConfigs
        warnings.simplefilter("ignore", DeprecationWarning)
        (future,) = admin.alter_configs(
            [ConfigResource("topic", "altered", set_config={"retention.bytes": "4096"})]
        ).values()
    seen["replace"] = error_code_of(future)
    described = _described(admin, "topic", "altered")
    seen["replaced"] = (
        described["retention.bytes"].value,
        described["max.message.bytes"].value,
        int(described["max.message.bytes"].source),
        described["leader.replication.throttled.replicas"].value,
    )
    return seen


async def test_topic_configs_change_as_kafka_changes_them(cluster: KafkaCluster) -> None:
    seen = await asyncio.to_thread(_topic_session, cluster.bootstrap("rack-1"))
    assert seen["set"] == 0
    value, source, synonyms = seen["retention"]
    assert (value, source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert synonyms == [
        ("retention.ms", "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value),
    ]
    assert seen["max"] == "2048"
    assert seen["segment"] == ("1000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["delete"] == 0
    assert seen["deleted"] == (WEEK_MS, ConfigSource.DEFAULT_CONFIG.value)
    assert seen["kept"] == "2048"
    assert (seen["append"], seen["subtract"], seen["list"]) == (0, 0, "1:2")
    assert seen["append_long"] == KafkaError.INVALID_CONFIG
    assert seen["unknown"] == KafkaError.INVALID_CONFIG
    assert seen["bad"] == KafkaError.INVALID_CONFIG
    assert (seen["compact"], seen["both"], seen["policy"]) == (0, 0, "compact,delete")
    assert (
        seen["no_policy"]
        == seen["lag"]
        == seen["lags"]
        == seen["ratio"]
        == (KafkaError.INVALID_CONFIG)
    )
    assert seen["nowhere"] == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert (seen["dry"], seen["after_dry"]) == (0, WEEK_MS)
    assert seen["replace"] == 0
    assert seen["replaced"] == ("4096", "1048588", ConfigSource.DEFAULT_CONFIG.value, "")
    (description,) = await cluster.coordinator.describe_topics(["altered"])
    assert description.config.retention_bytes == 4096
    assert description.config.max_message_bytes == 1048588


def _broker_session(bootstrap: str, address: str) -> dict[str, Any]:
    admin = _admin(bootstrap)
    seen: dict[str, Any] = {}
    seen["cluster"] = _cluster_default(address, "log.retention.ms", 0, "3600000")
    seen["cluster_described"] = _cluster_defaults(address)
    described = _described(admin, "broker", "0")
    seen["broker_retention"] = _entry(described["log.retention.ms"])
    seen["rack"] = described["broker.rack"].value
    created = admin.create_topics([NewTopic("after", num_partitions=1)])
    assert error_code_of(created["after"]) == 0
    seen["topic"] = _entry(_described(admin, "topic", "after")["retention.ms"])
    seen["own"] = _alter(admin, "broker", "0", _op("log.retention.ms", SET, "7200000"))
    seen["own_described"] = _entry(_described(admin, "broker", "0")["log.retention.ms"])
    seen["static"] = _alter(admin, "broker", "0", _op("num.partitions", SET, "3"))
    seen["unknown"] = _cluster_default(address, "no.such.config", 0, "1")
    seen["bad"] = _cluster_default(address, "log.retention.bytes", 0, "lots")
    seen["undo"] = _cluster_default(address, "log.retention.ms", 1, None)
    seen["undone"] = _cluster_defaults(address)
    return seen


async def test_broker_configs_change_for_one_broker_or_the_cluster(cluster: KafkaCluster) -> None:
    bootstrap = cluster.bootstrap("rack-1")
    seen = await asyncio.to_thread(_broker_session, bootstrap, bootstrap.split(",")[0])
    dynamic_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert seen["cluster"] is WireError.none
    assert seen["cluster_described"] == {"log.retention.ms": ("3600000", dynamic_default)}
    value, source, synonyms = seen["broker_retention"]
    assert (value, source) == ("3600000", dynamic_default)
    assert synonyms[0] == ("log.retention.ms", "3600000", dynamic_default)
    assert seen["rack"] == "rack-0"
    value, source, synonyms = seen["topic"]
    assert (value, source) == ("3600000", dynamic_default)
    assert synonyms[:1] == [("log.retention.ms", "3600000", dynamic_default)]
    assert seen["own"] == 0
    value, source, synonyms = seen["own_described"]
    assert (value, source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # (The client keeps one synonym per name: the broker's own and the cluster's share it.)
    assert ("log.retention.ms", "3600000", dynamic_default) in synonyms
    assert seen["static"] == KafkaError.INVALID_REQUEST
    assert seen["unknown"] is WireError.invalid_config
    assert seen["bad"] is WireError.invalid_request
    assert seen["undo"] is WireError.none and seen["undone"] == {}


def _group_session(bootstrap: str) -> dict[str, Any]:
    admin = _admin(bootstrap)
    seen: dict[str, Any] = {}
    seen["set"] = _alter(
        admin,
        "group",
        "orders",
        _op("consumer.session.timeout.ms", SET, "50000"),
        _op("share.auto.offset.reset", SET, "earliest"),
    )
    described = _described(admin, "group", "orders")
    seen["session"] = _entry(described["consumer.session.timeout.ms"])
    seen["heartbeat"] = _entry(described["consumer.heartbeat.interval.ms"])
    seen["names"] = sorted(described)
    seen["low"] = _alter(admin, "group", "orders", _op("consumer.session.timeout.ms", SET, "1000"))
    seen["unknown"] = _alter(admin, "group", "orders", _op("session.timeout.ms", SET, "50000"))
    seen["choice"] = _alter(admin, "group", "orders", _op("share.isolation.level", SET, "dirty"))
    reset = "share.auto.offset.reset"
    seen["duration"] = _alter(admin, "group", "queue", _op(reset, SET, "by_duration:PT1H"))
    seen["bad_duration"] = _alter(admin, "group", "queue", _op(reset, SET, "by_duration:1h"))
    return seen


async def test_group_configs_are_kept_and_read_by_the_group_coordinator(
    cluster: KafkaCluster,
) -> None:
    seen = await asyncio.to_thread(_group_session, cluster.bootstrap("rack-1"))
    assert seen["set"] == 0
    assert seen["session"] == (
        "50000",
        ConfigSource.GROUP_CONFIG.value,
        [
            ("consumer.session.timeout.ms", "50000", ConfigSource.GROUP_CONFIG.value),
            ("group.consumer.session.timeout.ms", "45000", ConfigSource.DEFAULT_CONFIG.value),
        ],
    )
    assert seen["heartbeat"][:2] == ("5000", ConfigSource.DEFAULT_CONFIG.value)
    assert "share.record.lock.duration.ms" in seen["names"]
    assert seen["low"] == KafkaError.INVALID_CONFIG
    assert seen["unknown"] == KafkaError.INVALID_CONFIG
    assert seen["choice"] == KafkaError.INVALID_CONFIG
    assert (seen["duration"], seen["bad_duration"]) == (0, KafkaError.INVALID_CONFIG)
    queue = await group_configs(cluster.coordinator, "queue")
    assert queue.share_auto_offset_reset == "by_duration:PT1H"
    effective = await group_configs(cluster.coordinator, "orders")
    assert effective == GroupConfigs(
        consumer_session_timeout_ms=50_000, share_auto_offset_reset="earliest"
    )
    assert await group_configs(cluster.coordinator, "other") == GroupConfigs()


def _kafka_python_session(bootstrap: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        topic = KpConfigResourceType.TOPIC
        altered = admin.alter_configs([KpConfigResource(topic, "kp", {"retention.ms": "1234"})])
        described = admin.describe_configs([KpConfigResource(topic, "kp")])
        replaced = admin.alter_configs(
            [KpConfigResource(topic, "kp", {"retention.bytes": "4096"})], incremental=False
        )
        after = admin.describe_configs([KpConfigResource(topic, "kp")])
        broker = admin.alter_configs(
            [KpConfigResource(KpConfigResourceType.BROKER, "0", {"log.retention.bytes": "lots"})]
        )
    finally:
        admin.close()
    return {
        "altered": altered,
        "described": described,
        "replaced": replaced,
        "after": after,
        "broker": broker,
    }


async def test_kafka_python_alters_and_describes_configs(cluster: KafkaCluster) -> None:
    await cluster.create_topic("kp", 1)
    seen = await asyncio.to_thread(_kafka_python_session, cluster.bootstrap("rack-1"))
    assert seen["altered"] == {"topic": {"kp": "OK"}}
    (described,) = seen["described"]["topic"]["kp"].items()
    assert described[0] == "retention.ms"
    assert (described[1]["value"], described[1]["config_source"]) == (
        "1234",
        "DYNAMIC_TOPIC_CONFIG",
    )
    # AlterConfigs replaces the whole set; the client sends the modified ones it keeps.
    assert seen["replaced"] == {"topic": {"kp": "OK"}}
    after = seen["after"]["topic"]["kp"]
    assert {name: entry["value"] for name, entry in after.items()} == {
        "retention.ms": "1234",
        "retention.bytes": "4096",
    }
    refusal = seen["broker"]["broker"]["0"]
    assert str(refusal).startswith("[Error 42]") and "log.retention.bytes" in str(refusal)


# --- authorization -------------------------------------------------------------------------------
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE = client_settings("PLAIN", "alice", "alice-secret")


def _acl_session(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
    grants = [
        allow_alice(ResourceType.TOPIC, "open", AclOperation.ALTER_CONFIGS),
        allow_alice(ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
        allow_alice(ResourceType.GROUP, "mine", AclOperation.ALTER_CONFIGS),
    ]
    for future in admin.create_acls(grants).values():
        future.result(TIMEOUT_S)
    alice = AdminClient({"bootstrap.servers": bootstrap, **ALICE})
    retention = _op("retention.ms", SET, "60000")
    session = _op("consumer.session.timeout.ms", SET, "50000")
    seen = {
        "open": _alter(alice, "topic", "open", retention),
        "closed": _alter(alice, "topic", "closed", retention),
        "broker": _alter(alice, "broker", "0", _op("log.retention.ms", SET, "1")),
        "mine": _alter(alice, "group", "mine", session),
        "theirs": _alter(alice, "group", "theirs", session),
    }
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    (future,) = alice.describe_configs([ConfigResource("topic", "open")]).values()
    seen["described"] = future.result(TIMEOUT_S)["retention.ms"].value
    for kind, name in (("topic", "closed"), ("group", "theirs"), ("broker", "0")):
        (future,) = alice.describe_configs([ConfigResource(kind, name)]).values()
        seen[f"describe_{kind}"] = error_code_of(future)
    # The administrator (a super user) may do all of it.
    seen["admin_broker"] = _alter(admin, "broker", "0", _op("log.retention.ms", SET, "1"))
    return seen


async def test_each_resource_needs_its_acl() -> None:
    config = sasl_server_config(authorizer_class_name=AUTHORIZER, super_users="User:admin")
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(coordinator, brokers=1, racks=1, server_config=config) as running:
        await running.create_topic("open", 1)
        await running.create_topic("closed", 1)
        seen = await asyncio.to_thread(_acl_session, running.bootstrap())
    await coordinator.close()
    assert seen == {
        "open": 0,
        "closed": KafkaError.TOPIC_AUTHORIZATION_FAILED,
        "broker": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        "mine": 0,
        "theirs": KafkaError.GROUP_AUTHORIZATION_FAILED,
        "described": "60000",
        "describe_topic": KafkaError.TOPIC_AUTHORIZATION_FAILED,
        "describe_group": KafkaError.GROUP_AUTHORIZATION_FAILED,
        "describe_broker": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        "admin_broker": 0,
    }


# --- aiokafka ------------------------------------------------------------------------------------
async def test_aiokafka_alters_and_describes_configs(cluster: KafkaCluster) -> None:
    await cluster.create_topic("aio", 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap("rack-1"))
    await admin.start()
    try:
        await admin.alter_configs(
            [AioConfigResource(AioConfigResourceType.TOPIC, "aio", {"retention.ms": "4321"})]
        )
        (response,) = await admin.describe_configs(
            [AioConfigResource(AioConfigResourceType.TOPIC, "aio", {"retention.ms": None})]
        )
    finally:
        await admin.close()
    ((error, _, _, _, entries),) = response.resources
    assert error == 0
    assert [(e[0], e[1]) for e in entries] == [("retention.ms", "4321")]


# --- the produce path -----------------------------------------------------------------------------
def _produce_across_an_alteration(bootstrap: str) -> list[int]:
    """One producer's deliveries of 4 KiB records: before max.message.bytes is altered to 1 KiB,
    and after (the producer has no reason to ask for metadata in between, so no Metadata
    request refreshes the brokers' copies of the topic)."""
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0, "linger.ms": 0})
    codes: list[int] = []

    def send() -> None:
        producer.produce(
            "limited",
            value=b"x" * 4096,
            on_delivery=lambda e, _: codes.append(e.code() if e else 0),
        )
        assert producer.flush(TIMEOUT_S) == 0

    send()
    admin = _admin(bootstrap)
    assert _alter(admin, "topic", "limited", _op("max.message.bytes", SET, "1024")) == 0
    send()
    return codes


async def test_the_produce_path_applies_an_altered_config_at_once(cluster: KafkaCluster) -> None:
    """The broker a producer writes to has the topic cached from its first produce; the change
    feed names the altered topic, whichever broker altered it, so the next produce is checked
    against the new limit."""
    await cluster.create_topic("limited", 1)
    codes = await asyncio.to_thread(_produce_across_an_alteration, cluster.bootstrap("rack-1"))
    assert codes == [0, KafkaError.MSG_SIZE_TOO_LARGE]
