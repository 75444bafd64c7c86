"""Integration: the cluster and transaction admin APIs refuse as Kafka's do, through real admin
clients authenticated over SASL (PLAIN), with the authorizer on and nothing allowed by default.

`User:admin` is a super user: it grants `User:alice` DESCRIBE on the topic `orders` and, as the
test goes on, more; and it leaves a transaction open on `hidden`, a topic alice may not see.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import TransactionState
from kafka.errors import (
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.errors import ErrorCode as WireError

from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._protocol.fields import build
from testkit.cluster import local_cluster
from testkit.sasl import ADMIN, authenticate, client_settings, handshake, sasl_server_config
from testkit.wire import WireClient
from tests.kafka_server._helpers import TIMEOUT_S, allow_alice

AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE: Final = client_settings("PLAIN", "alice", "alice-secret")
TXN: Final = "txn-admin"


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    config = sasl_server_config(authorizer_class_name=AUTHORIZER, super_users="User:admin")
    async with local_cluster(brokers=1, racks=1, server_config=config) as running:
        await running.create_topic("orders", 2)
        await running.create_topic("hidden", 1)
        yield running


def _grant(admin: AdminClient, kind: ResourceType, name: str, operation: AclOperation) -> None:
    (created,) = admin.create_acls([allow_alice(kind, name, operation)]).values()
    assert created.result(TIMEOUT_S) is None


def _code(future: Any) -> int:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def _kafka_python(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )


def _refused(bootstrap: str) -> Producer:
    """Alice, allowed DESCRIBE on `orders` and DESCRIBE_CONFIGS on the cluster, while admin's
    transaction is open (returned: the producer)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
    _grant(admin, ResourceType.TOPIC, "orders", AclOperation.DESCRIBE)
    _grant(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN, **ADMIN})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("hidden", b"secret", partition=0)
    assert producer.flush(TIMEOUT_S) == 0

    alice = AdminClient({"bootstrap.servers": bootstrap, **ALICE})
    # DescribeCluster needs nothing, but KIP-430's operations need DESCRIBE on the cluster.
    described = alice.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert [n.id for n in described.nodes] == [0]
    assert not described.authorized_operations
    topics = alice.describe_topics(
        TopicCollection(["orders", "hidden"]), include_authorized_operations=True
    )
    assert set(topics["orders"].result(TIMEOUT_S).authorized_operations) == {AclOperation.DESCRIBE}
    assert _code(topics["hidden"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    elected = alice.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition("orders", 0)])
    assert _code(elected) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    client = _kafka_python(bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):  # DESCRIBE is not READ
            client.describe_producers([KpTopicPartition("orders", 0)])
        paged = client.describe_topic_partitions(["orders", "hidden"])
        assert [(t["name"], t["error_code"]) for t in paged["topics"]] == [
            ("orders", 0),
            ("hidden", KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ]
        assert [t for ts in client.list_transactions().values() for t in ts] == []
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            client.describe_transactions([TXN])
    finally:
        client.close()
    return producer


async def _log_dirs_as_alice(cluster: KafkaCluster) -> Any:
    """kafka-python's describe_log_dirs leaves the top-level error out: asked on the wire."""
    client = await WireClient.connect(cluster.servers[0])
    try:
        assert (await handshake(client, "PLAIN")).error_code == WireError.none
        login = await authenticate(client, b"\0alice\0alice-secret")
        assert login.error_code == WireError.none
        return await client.request(build(describe_log_dirs_v4.DescribeLogDirsRequest, topics=None))
    finally:
        await client.close()


def _allowed(bootstrap: str, producer: Producer) -> None:
    """Alice, granted ALTER on the cluster, READ on `orders`, DESCRIBE on admin's id."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
    alice = AdminClient({"bootstrap.servers": bootstrap, **ALICE})
    client = _kafka_python(bootstrap)
    try:
        _grant(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
        _grant(admin, ResourceType.TOPIC, "orders", AclOperation.READ)
        _grant(admin, ResourceType.TRANSACTIONAL_ID, TXN, AclOperation.DESCRIBE)
        assert client.describe_log_dirs() == [{"broker": 0, "log_dirs": []}]
        (state,) = client.describe_producers([KpTopicPartition("orders", 0)]).values()
        assert state.active_producers == []
        listed = [t for ts in client.list_transactions().values() for t in ts]
        assert [(t.transactional_id, t.state) for t in listed] == [(TXN, TransactionState.ONGOING)]
        # The transaction's partitions are of a topic alice may not describe: left out.
        described_txn = client.describe_transactions([TXN])[TXN]
        assert described_txn.state is TransactionState.ONGOING
        assert described_txn.topic_partitions == set()
    finally:
        client.close()
    # ALTER implies DESCRIBE: the cluster's operations are answered now.
    described = alice.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert set(described.authorized_operations) == {
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER,
    }
    elected = alice.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition("orders", 0)])
    (error,) = elected.result(TIMEOUT_S).values()
    assert error.code() == KafkaError.ELECTION_NOT_NEEDED
    producer.abort_transaction(TIMEOUT_S)


async def test_each_api_refuses_what_the_principal_may_not_do(cluster: KafkaCluster) -> None:
    bootstrap = cluster.servers[0].bootstrap
    producer = await asyncio.to_thread(_refused, bootstrap)
    refused = await _log_dirs_as_alice(cluster)
    assert (refused.error_code, refused.results) == (WireError.cluster_authorization_failed, ())
    await asyncio.to_thread(_allowed, bootstrap, producer)
    allowed = await _log_dirs_as_alice(cluster)
    assert (allowed.error_code, allowed.results) == (WireError.none, ())
